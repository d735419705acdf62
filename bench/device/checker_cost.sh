#!/bin/bash
# The mismatch check's cost through the drop-in, and the GPU suites that run the checker.
# 2 processes under MPS on GPU 0 (a shared-GPU figure, never a 2-GPU one), 1 KiB bf16 in
# place, 100 calls in a CUDA graph, 5 rounds (bench/dropin/percall.py): the drop-in staged
# in BIN (this build) with TPCOMM_CHECK_CALLS=1 and =0, beside the one in OLD (a build
# before the change, when given) the same two ways, all in turns in one run. Then
# suite.sh's tests/allreduce, tests/collectives, tests/mismatch, tests/fused and tests/host at worlds
# 2, 3 and 8 (ranks as threads on GPU 0).
#
#   OUT=... bash bench/device/checker_cost.sh [BIN] [OLD]
#   bash bench/device/checker_cost.sh .dev/all .dev/old    (OLD: a folder with libtpcomm_nccl.so)
#
# Outputs in $OUT: percall-check.{txt,json}, suite/ (suite.sh's log, summary and tgz).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$(realpath "${1:-.dev/all}"); OLD=${2:-}
OUT=${OUT:-/tmp/checker-cost}; mkdir -p "$OUT"
[ -f "$B/libtpcomm_nccl.so" ] || { echo "checker_cost: no $B/libtpcomm_nccl.so (bench/device/stage_all.sh stages it)" >&2; exit 2; }
head -2 "$B/BUILD.txt" 2>/dev/null; nvidia-smi --query-gpu=name --format=csv,noheader
T0=$SECONDS
libs=(--lib "new-on=$B/libtpcomm_nccl.so" --lib "new-off=$B/libtpcomm_nccl.so"
      --env new-on:TPCOMM_CHECK_CALLS=1 --env new-off:TPCOMM_CHECK_CALLS=0)
if [ -n "$OLD" ]; then
  O=$(realpath "$OLD")/libtpcomm_nccl.so
  [ -f "$O" ] || { echo "checker_cost: no $O" >&2; exit 2; }
  libs=(--lib "old-on=$O" --lib "old-off=$O" --env old-on:TPCOMM_CHECK_CALLS=1 --env old-off:TPCOMM_CHECK_CALLS=0 "${libs[@]}")
fi
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
( cd bench/dropin && timeout 240 stdbuf -oL python3 percall.py "${libs[@]}" \
    --world 2 --bytes 1024 --rounds 5 --json "$OUT/percall-check.json" ) > "$OUT/percall-check.txt" 2>&1
rc=$?
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "== percall rc=$rc at $((SECONDS - T0)) s"; tail -12 "$OUT/percall-check.txt"
stdbuf -oL bash bench/device/suite.sh --only tests --worlds 2,3,8 --budget "${SUITE_BUDGET:-320}" --bin "$B" --out "$OUT/suite" \
  --steps 'tests/allreduce,tests/collectives,tests/mismatch,tests/fused,tests/host' 2>&1 | tail -15
echo "== end at $((SECONDS - T0)) s"
