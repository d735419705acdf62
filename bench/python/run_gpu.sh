#!/usr/bin/env bash
# The wheel's GPU test on one machine, no network: installs the wheel from
# .whl/ into a venv that sees the system's torch (--system-site-packages,
# --no-deps --no-index: NVRTC comes from the system site-packages too, e.g.
# the nvidia-cuda-nvrtc torch depends on), starts MPS so that several ranks
# share one GPU, and runs bench/python/test_torch_gpu.py at 2 and 4 ranks.
# Everything it prints and writes goes to $OUT (default ./gpu-out).
#
#   bash bench/python/run_gpu.sh [--worlds 2 4 8] [--replays 1000] [--timeout-s 240]
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
log="$out/run_gpu.log"
exec > >(tee "$log") 2>&1

wheel="$(ls "$root"/.whl/tpcomm-*.whl 2>/dev/null | head -n 1)"
if [ -z "$wheel" ]; then
    echo "run_gpu: no wheel in .whl/ (build it with scripts/build_wheel.sh and carry .whl/)"
    exit 2
fi
echo "run_gpu: $(date -u +%FT%TZ) wheel $wheel"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true

venv="$(mktemp -d /tmp/tpcomm-venv.XXXXXX)"
py="$venv/bin/python"
if python3 -m venv --system-site-packages "$venv" && "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m pip install --quiet --no-deps --no-index "$wheel" || { echo "run_gpu: pip install failed"; exit 2; }
else
    # No ensurepip here (Debian's python3-venv missing): install into a
    # folder of its own instead, in front of the system's site-packages.
    echo "run_gpu: python3 -m venv unusable; installing with pip --target"
    rm -rf "$venv"; mkdir -p "$venv"
    python3 -m pip install --quiet --no-deps --no-index --target "$venv/site" "$wheel" || { echo "run_gpu: pip install failed"; exit 2; }
    py=python3
    export PYTHONPATH="$venv/site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" -c 'import torch, tpcomm; print("run_gpu: torch", torch.__version__, "CUDA", torch.version.cuda, "| tpcomm", tpcomm.__version__, "from", tpcomm.__file__, "| NVRTC", tpcomm.find_nvrtc())'

export TPCOMM_CACHE_DIR=/tmp/tpcomm-kernel-cache

export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
started_mps=0
if nvidia-cuda-mps-control -d; then
    started_mps=1
    echo "run_gpu: MPS started"
else
    echo "run_gpu: could not start MPS (already running?); going on"
fi
stop_mps() {
    if [ "$started_mps" = 1 ]; then
        echo quit | nvidia-cuda-mps-control
        echo "run_gpu: MPS stopped"
    fi
    cp -r "$CUDA_MPS_LOG_DIRECTORY" "$out/mpslog" 2>/dev/null || true
    rm -rf "$venv"
}
trap stop_mps EXIT

args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--worlds 2 4 --replays 1000 --timeout-s 240)
start=$(date +%s)
"$py" bench/python/test_torch_gpu.py "${args[@]}" --json "$out/test_torch_gpu.json"
rc=$?
echo "run_gpu: test_torch_gpu.py exit $rc after $(( $(date +%s) - start )) s"
exit $rc
