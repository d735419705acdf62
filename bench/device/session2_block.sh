#!/usr/bin/env bash
# P2P block-size experiment (session 2): threads per block of the one-shot and
# two-shot kernels (TPCOMM_P2P_BLOCK) at 1 KiB-1 MiB, graph mode, processes.
#   D=.dev/blk bash bench/device/session2_block.sh   (D holds a stripped tpcomm)
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=${D:-.dev/blk}; O=${OUT:-/tmp/out}; mkdir -p "$O"
B=(bench --device gpu --launch procs --transport cuda --modes graph --reps 15 --min 1KiB --max 1MiB)
for b in 512 256 128 64; do
  echo "== TPCOMM_P2P_BLOCK=$b" >> "$O/block.txt"
  algos=one-shot,one-shot-pdl,two-shot
  [ "$b" = 512 ] && algos=$algos,nccl
  TPCOMM_P2P_BLOCK=$b timeout 90 "$D/tpcomm" "${B[@]}" --algos $algos --json "$O/block-$b.json" 2>&1 | grep -E "^ +[0-9]|wrong" >> "$O/block.txt"
done
