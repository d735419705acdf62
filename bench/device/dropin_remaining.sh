#!/bin/bash
# The drop-in checks on one GPU that had not run (2026-12-07): standalone
# send/recv pair by pair and a fresh communicator's first calls captured in one graph
# (conformance sendrecv.* and graph.* as processes under MPS at 3, 4 and 8 ranks and as
# threads at 2, 3 and 8), torch.distributed's patterns at 3 ranks
# (torch_patterns.sh), and syncwork.sweep as threads: 3 runs at 3 ranks (it failed once
# there at 64 MiB) and one at each of 4 to 7. About 7 minutes. Results under $OUT.
#
#   OUT=DIR bash bench/device/dropin_remaining.sh [BIN]     (BIN: stage_all.sh's folder)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=$(realpath "${1:-.dev/all}"); L=$D/libtpcomm_nccl.so; C=$D/tpcomm-conformance
OUT=${OUT:-/tmp/dropin-remaining}; mkdir -p "$OUT"
[ -x "$C" ] && [ -f "$L" ] || { echo "dropin_remaining: $D lacks tpcomm-conformance or libtpcomm_nccl.so (bench/device/stage_all.sh)" >&2; exit 2; }
head -2 "$D/BUILD.txt" 2>/dev/null; nvidia-smi --query-gpu=name --format=csv,noheader
T0=$SECONDS
sum() { grep -E "^(FAIL|HANG|CRASH)" "$1" | cut -c1-600 | head -8; grep -A8 "^pattern" "$1" | head -9; tail -1 "$1"; }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
export TPCOMM_STANDALONE=1
timeout 55 stdbuf -oL "$C" --lib "$L" --modes procs --worlds 3,4,8 --only 'sendrecv.*,graph.*' --case-timeout 25 --budget 45 --json "$OUT/p-sendrecv.json" > "$OUT/p-sendrecv.txt" 2>&1
echo "== procs sendrecv rc=$? at $((SECONDS - T0)) s"; sum "$OUT/p-sendrecv.txt"
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
timeout 40 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 2,3,8 --only 'sendrecv.*,graph.*' --case-timeout 15 --budget 30 --json "$OUT/t-sendrecv.json" > "$OUT/t-sendrecv.txt" 2>&1
echo "== threads sendrecv rc=$? at $((SECONDS - T0)) s"; sum "$OUT/t-sendrecv.txt"
unset TPCOMM_STANDALONE
WORLDS=3 T3=60 D="$D" OUT="$OUT/torch" stdbuf -oL bash bench/device/torch_patterns.sh 2>&1 | grep -E "^(ERROR|FAIL|HANG|summary|world)" | cut -c1-300 | head -12
echo "== torch at $((SECONDS - T0)) s"
export TPCOMM_STANDALONE=1
for i in 1 2 3; do
  timeout 60 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 3 --only 'syncwork.sweep' --case-timeout 50 --budget 55 --json "$OUT/t-sync3-$i.json" > "$OUT/t-sync3-$i.txt" 2>&1
  echo "== syncwork 3 thread ranks, run $i: rc=$? at $((SECONDS - T0)) s"; grep -E "^(PASS|FAIL|HANG|CRASH)" "$OUT/t-sync3-$i.txt" | cut -c1-900
done
timeout 150 stdbuf -oL "$C" --lib "$L" --modes threads --worlds 4,5,6,7 --only 'syncwork.sweep' --case-timeout 45 --budget 140 --json "$OUT/t-sync47.json" > "$OUT/t-sync47.txt" 2>&1
echo "== syncwork 4-7 thread ranks: rc=$? at $((SECONDS - T0)) s"; grep -E "^(PASS|FAIL|HANG|CRASH)" "$OUT/t-sync47.txt" | cut -c1-900
