#!/usr/bin/env bash
# The wheel's GPU test on one machine, no network: unpacks the wheel from
# .whl/ in front of the system's Python packages (torch, and NVRTC from the
# nvidia-cuda-nvrtc torch depends on, come from there), starts MPS so that several ranks
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

# The wheel is unpacked into a folder of its own put in front of the
# system's site-packages (PYTHONPATH): a venv would hide a torch installed
# in the user's site-packages (venvs never see it), and pip may be absent.
# A wheel is a zip of the installed files, so unpacking it is installing
# it for this run.
venv="$(mktemp -d /tmp/tpcomm-wheel.XXXXXX)"
py=python3
python3 -m zipfile -e "$wheel" "$venv/site" || { echo "run_gpu: could not unpack $wheel"; exit 2; }
chmod +x "$venv"/site/tpcomm/_bin/* 2>/dev/null  # zip keeps no modes
export PYTHONPATH="$venv/site${PYTHONPATH:+:$PYTHONPATH}"
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
