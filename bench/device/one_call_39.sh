#!/bin/bash
# The drop-in's remaining one-GPU checks in one device call of at most ~9.5 minutes, for when
# machines are scarce: each part under its own timeout, in order of what it decides.
#   1. the mismatch check's cost (percall.py: 2 MPS processes, 1 KiB bf16, 100 calls a graph,
#      5 rounds in turns): this build with TPCOMM_CHECK_CALLS=1 and =0, and OLD (a build
#      before the spare-thread checker) the same two ways;
#   2. conformance sendrecv.* and graph.* as processes under MPS (3, 8) and as threads (2, 3, 8);
#   3. conformance syncwork.sweep as threads: twice at 3 ranks, once at 4 to 7;
#   4. with the time left, the GPU tests of the kernels the checker changed (suite.sh
#      tests/allreduce, mismatch, host, collectives, fused at worlds 2, 3, 8; thread ranks).
# A part starts only when its timeout still ends within TOTAL seconds (default 560).
#
#   OUT=DIR [TOTAL=S] bash bench/device/one_call_39.sh [BIN] [OLD]   (stage_all.sh's folder; OLD holds
#     libtpcomm_nccl.so; the GPU suites get what is left of TOTAL seconds, default 560)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=$(realpath "${1:-.dev/all}"); L=$D/libtpcomm_nccl.so; C=$D/tpcomm-conformance; OLD=${2:-}
OUT=${OUT:-/tmp/one-call-39}; mkdir -p "$OUT"
[ -x "$C" ] && [ -f "$L" ] || { echo "one_call_39: $D lacks tpcomm-conformance or libtpcomm_nccl.so (bench/device/stage_all.sh)" >&2; exit 2; }
head -2 "$D/BUILD.txt" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
bad() { [ -f "$1" ] || return 0; grep -E "^(FAIL|HANG|CRASH)" "$1" | cut -c1-700 | head -8; tail -2 "$1"; }
mps_on() { export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog; mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d; }
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }
TOTAL=${TOTAL:-560}
# fits N WHAT: whether a part of at most N seconds still ends within TOTAL (else says so).
fits() { [ $((SECONDS - T0 + $1)) -le "$TOTAL" ] && return 0; echo "== skipped (TOTAL $TOTAL s): $2"; return 1; }

libs=(--lib "new-on=$L" --lib "new-off=$L" --env new-on:TPCOMM_CHECK_CALLS=1 --env new-off:TPCOMM_CHECK_CALLS=0)
if [ -n "$OLD" ] && [ -f "$OLD/libtpcomm_nccl.so" ]; then
  O=$(realpath "$OLD")/libtpcomm_nccl.so
  libs=(--lib "old-on=$O" --lib "old-off=$O" --env old-on:TPCOMM_CHECK_CALLS=1 --env old-off:TPCOMM_CHECK_CALLS=0 "${libs[@]}")
fi
mps_on
( cd bench/dropin && timeout 150 stdbuf -oL python3 percall.py "${libs[@]}" \
    --world 2 --bytes 1024 --rounds 5 --json "$OUT/percall-check.json" ) > "$OUT/percall-check.txt" 2>&1
echo "== 1 percall rc=$? at $((SECONDS - T0)) s"; grep -vE '^tpcomm:' "$OUT/percall-check.txt" | tail -12
export TPCOMM_STANDALONE=1
fits 55 "procs sendrecv/graph" && timeout 55 stdbuf -oL "$C" --lib "$L" --modes procs --worlds 3,8 --only 'sendrecv.*,graph.*' --case-timeout 25 --budget 45 --json "$OUT/p-sendrecv.json" > "$OUT/p-sendrecv.txt" 2>&1
echo "== 3a procs sendrecv/graph rc=$? at $((SECONDS - T0)) s"; bad "$OUT/p-sendrecv.txt"
mps_off
fits 40 "threads sendrecv/graph" && timeout 40 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 2,3,8 --only 'sendrecv.*,graph.*' --case-timeout 15 --budget 30 --json "$OUT/t-sendrecv.json" > "$OUT/t-sendrecv.txt" 2>&1
echo "== 3b threads sendrecv/graph rc=$? at $((SECONDS - T0)) s"; bad "$OUT/t-sendrecv.txt"
for i in 1 2; do
  fits 45 "syncwork at 3, run $i" || continue
  timeout 45 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 3 --only 'syncwork.sweep' --case-timeout 40 --budget 40 --json "$OUT/t-sync3-$i.json" > "$OUT/t-sync3-$i.txt" 2>&1
  echo "== 4 syncwork 3 thread ranks, run $i: rc=$? at $((SECONDS - T0)) s"; grep -E "^(PASS|FAIL|HANG|CRASH)" "$OUT/t-sync3-$i.txt" | cut -c1-900
done
fits 100 "syncwork at 4-7" && timeout 100 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 4,5,6,7 --only 'syncwork.sweep' --case-timeout 40 --budget 90 --json "$OUT/t-sync47.json" > "$OUT/t-sync47.txt" 2>&1
echo "== 4 syncwork 4-7 thread ranks: rc=$? at $((SECONDS - T0)) s"; grep -E "^(PASS|FAIL|HANG|CRASH)" "$OUT/t-sync47.txt" | cut -c1-600
unset TPCOMM_STANDALONE
left=$((TOTAL - (SECONDS - T0)))
[ "$left" -gt 40 ] && stdbuf -oL bash bench/device/suite.sh --only tests --worlds 2,3,8 --budget "$left" --bin "$D" --out "$OUT/suite" \
  --steps 'tests/allreduce,tests/mismatch,tests/host,tests/collectives,tests/fused' 2>&1 | tail -14
echo "== end at $((SECONDS - T0)) s"
