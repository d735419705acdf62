#!/bin/bash
# Issue 39 on one GPU: mismatch-check cost (MPS procs), conformance procs (MPS), then threads.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu
D=$PWD/.dev/all; L=$D/libtpcomm_nccl.so; C=$D/tpcomm-conformance
cat $D/BUILD.txt | head -3
T0=$SECONDS
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
( cd bench/dropin && timeout 150 stdbuf -oL python3 percall.py --lib on=$L --lib off=$L --env on:TPCOMM_CHECK_CALLS=1 --env off:TPCOMM_CHECK_CALLS=0 --world 2 --bytes 1024 --rounds 5 --json $OUT/percall-check.json ) > $OUT/percall-check.txt 2>&1
echo "== percall rc=$? at $((SECONDS-T0)) s"; tail -6 $OUT/percall-check.txt
TPCOMM_STANDALONE=1 timeout 175 stdbuf -oL $C --lib $L --modes procs --worlds 2,3,8 --only 'sendrecv.*,alltoall,gather,scatter,bad.*,fault.*,create.*,allreduce.bf16,allreduce.fp8e4m3,reduce.int64,reducescatter.fp16,allgather,broadcast,syncwork.sweep,memory,queries' --case-timeout 40 --budget 150 --json $OUT/procs.json > $OUT/procs.txt 2>&1
echo "== procs rc=$? at $((SECONDS-T0)) s"; grep -E "^(FAIL|HANG|CRASH)" $OUT/procs.txt | cut -c1-300 | head -20; tail -3 $OUT/procs.txt
echo quit | nvidia-cuda-mps-control; sleep 1
TPCOMM_STANDALONE=1 timeout 130 stdbuf -oL $C --lib $L --modes threads --worlds 2,3,8 --only 'allgather,allreduce.*,broadcast,sendrecv.*,alltoall,gather,scatter,bad.*,fault.*,create.*,calls.*' --case-timeout 30 --budget 115 --json $OUT/threads.json > $OUT/threads.txt 2>&1
echo "== threads rc=$? at $((SECONDS-T0)) s"; grep -E "^(FAIL|HANG|CRASH)" $OUT/threads.txt | cut -c1-300 | head -20; tail -3 $OUT/threads.txt
TPCOMM_STANDALONE=1 timeout 110 stdbuf -oL $C --lib $L --modes threads --worlds 2,3,8 --only 'syncwork.sweep' --case-timeout 90 --budget 100 --json $OUT/syncwork-threads.json > $OUT/syncwork-threads.txt 2>&1
echo "== syncwork threads rc=$? at $((SECONDS-T0)) s"; grep -E "(PASS|FAIL|HANG|CRASH)" $OUT/syncwork-threads.txt | cut -c1-300 | head; tail -3 $OUT/syncwork-threads.txt
