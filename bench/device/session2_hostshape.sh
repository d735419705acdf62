#!/usr/bin/env bash
# Host-path shape experiment (session 2, run 3): chunk size and producer
# blocks of the chunked kernel, and a 16-byte-aligned V16 in the host family.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=${D:-.dev/hx}; O=${OUT:-/tmp/out}; mkdir -p $O
B=(bench --device gpu --launch procs --transport host --modes graph --reps 9 --rotate 2 --timeout-ms 10000)
one() { # tag binary env... -- args
  local tag=$1 bin=$2; shift 2
  echo "== $tag" >> $O/sweep.txt
  timeout 60 env "$@" 2>&1 | grep -E "^ +[0-9]" >> $O/sweep.txt
}
# small range: every shape, both alignments at the default shape
for bin in tpcomm tpcomm-a16; do
  one "$bin default +nccl+ll" $D/$bin NCCL_P2P_DISABLE=1 $D/$bin "${B[@]}" --min 64KiB --max 4MiB --algos one-shot,two-shot,nccl
done
for c in 16KiB 32KiB 64KiB 128KiB; do
  for p in 4 8 16 32; do
    one "tpcomm chunk=$c producers=$p" $D/tpcomm TPCOMM_HOST_CHUNK=$c TPCOMM_HOST_PRODUCERS=$p $D/tpcomm "${B[@]}" --min 256KiB --max 4MiB --algos two-shot
  done
done
for c in 16KiB 32KiB 64KiB; do
  for p in 8 16; do
    one "tpcomm-a16 chunk=$c producers=$p" $D/tpcomm-a16 TPCOMM_HOST_CHUNK=$c TPCOMM_HOST_PRODUCERS=$p $D/tpcomm-a16 "${B[@]}" --min 256KiB --max 4MiB --algos two-shot
  done
done
# large range
for bin in tpcomm tpcomm-a16; do
  one "$bin default large +nccl" $D/$bin NCCL_P2P_DISABLE=1 $D/$bin "${B[@]}" --min 16MiB --max 64MiB --algos two-shot,nccl
  for s in "64KiB 16" "128KiB 16" "256KiB 32" "64KiB 32"; do
    set -- $s
    one "$bin large chunk=$1 producers=$2" $D/$bin TPCOMM_HOST_CHUNK=$1 TPCOMM_HOST_PRODUCERS=$2 $D/$bin "${B[@]}" --min 16MiB --max 64MiB --algos two-shot
  done
done
echo done >> $O/sweep.txt
