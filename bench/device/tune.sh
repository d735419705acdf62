#!/usr/bin/env bash
# Device script (issue 5): tune this machine, then measure auto against every
# fixed choice and NCCL in one GPU bench run, with the table just written.
#
#   bash bench/device/tune.sh [BIN_DIR] [OUT_DIR]
#
# BIN_DIR (default .dev/all) holds the `tpcomm` binary (and, if there, the test
# binary `gpu_self_tune`, which is then run too); OUT_DIR defaults to $OUT.
# Writes 4 files: tune.log (everything printed, explain included), tuning.toml
# (the table), tune.json (its raw measurement), auto.json (the comparison).
# Then, on the lead's machine:
#   python3 bench/device/summarize_auto.py auto.json tuning.toml
# writes bench/results/<date>-h200x2-auto-vs-best.{json,md}.
set -uo pipefail
BIN="${1:-.dev/all}"
O="${2:-${OUT:?set OUT or pass OUT_DIR}}"
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T="$BIN/tpcomm"
LOG="$O/tune.log"
# NVRTC and NCCL: keep what the caller set, else add the first found.
have() {
  ldconfig -p 2>/dev/null | grep -q "$1" && return 0
  local d; local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [ -n "$d" ] && [ -e "$d/$1" ] && return 0; done
  return 1
}
for lib in libnvrtc.so.13 libnccl.so.2; do
  if ! have "$lib"; then
    sp=$(timeout 10 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    f=$(timeout 20 find /usr/local/cuda*/lib64 /usr/lib/x86_64-linux-gnu $sp -name "$lib*" -print -quit 2>/dev/null)
    [ -n "$f" ] && export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
done
{
  echo "== $(date -u +%FT%TZ) LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  echo "== tune (threads, 1 KiB..64 MiB, powers of two and midpoints, eager+graph, 7 reps x 10 calls)"
  timeout 120 "$T" tune --launch threads --min 1KiB --max 64MiB --iters 10 --reps 7 \
    --out "$O/tuning.toml" --json "$O/tune.json"
  echo "tune rc=$?"
  # Without a table (tune failed) auto uses the built-in class defaults, and
  # the comparison still says how good those are.
  TABLE=(--table "$O/tuning.toml")
  [ -s "$O/tuning.toml" ] || { TABLE=(); echo "no table: auto uses the class defaults"; }
  echo "== auto vs every fixed choice and NCCL, one run, processes, with that table"
  timeout 150 "$T" bench --device gpu --launch procs --algos one-shot,two-shot,nccl,auto --midpoints \
    --min 1KiB --max 64MiB --iters 20 --reps 15 "${TABLE[@]}" --json "$O/auto.json"
  echo "bench (gpu) rc=$?"
  if [ -x "$BIN/gpu_self_tune" ]; then
    echo "== self-tune at communicator creation (GPU test)"
    TPCOMM_GPU_TESTS=1 timeout 90 "$BIN/gpu_self_tune" --nocapture --test-threads=1
    echo "gpu_self_tune rc=$?"
  fi
  echo "== explain with the table"
  for a in "--bytes 14KiB --graph" "--bytes 224KiB --graph" "--bytes 2MiB --graph" "--bytes 2MiB" "--bytes 5MiB --graph" "--bytes 64MiB"; do
    timeout 10 "$T" explain "${TABLE[@]}" $a; echo
  done
} 2>&1 | tee "$LOG"
