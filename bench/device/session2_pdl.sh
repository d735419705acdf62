#!/usr/bin/env bash
# PDL experiment + interleaved P2P bench with the anchor (session 2, run 2).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=${D:-.dev/pdl}; T=$D/tpcomm; O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $O/machine.txt 2>&1
echo "== forward p2p"; date
timeout 200 $T bench forward --transport cuda --tokens 1,4,8,16 --modes none,none-pdl,nccl,one-shot,one-shot-pdl,two-shot,two-shot-pdl,fused,fused-pdl --json $O/forward-p2p.json 2>&1 | tee $O/forward-p2p.txt | tail -40
echo "== forward host (NCCL_P2P_DISABLE=1)"; date
NCCL_P2P_DISABLE=1 timeout 200 $T bench forward --transport host --tokens 1,4,8,16 --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json $O/forward-host.json 2>&1 | tee $O/forward-host.txt | tail -25
echo "== gpu bench p2p procs (interleaved, iters 100/20)"; date
timeout 150 $T bench --device gpu --launch procs --transport cuda --min 1KiB --max 64MiB --algos one-shot,two-shot,nccl --reps 15 --json $O/bench-p2p.json 2>&1 | tee $O/bench-p2p.txt | tail -5
echo "== torch anchor"; date
timeout 150 python3 $D/torch_allreduce.py --tag h200x2 --out $O/anchor.json 2>&1 | tee $O/anchor.txt | tail -20
date
