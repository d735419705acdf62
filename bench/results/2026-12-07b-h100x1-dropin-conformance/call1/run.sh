#!/bin/bash
# Session 2026-12-07b device call 1: is the thread-rank stall gone (cuFuncLoad + at_load)?
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=.dev/after; C=$D/tpcomm-conformance; cat $D/BUILD.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export TPCOMM_STANDALONE=1
timeout 150 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2,3,4,8 --only 'allreduce.fp32,allreduce.int32,allgather,syncwork.sweep,fault.*' --case-timeout 40 --budget 120 --json $OUT/t1.json > $OUT/t1.txt 2>&1
echo "== t1 rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/t1.txt | cut -c1-400 | head -20; tail -4 $OUT/t1.txt
# one hang, verbose, if any
if grep -q "^HANG" $OUT/t1.txt; then
  P=$(grep -m1 "^HANG" $OUT/t1.txt | awk '{print $2}')
  TPCOMM_LOG=info timeout 45 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2 --only "$P" --case-timeout 30 --verbose > $OUT/verbose.txt 2>&1; tail -40 $OUT/verbose.txt | cut -c1-300
fi
(timeout 100 stdbuf -oL $D/nccl-libtests --ignored --test-threads 1 > $OUT/libtests.txt 2>&1; echo "libtests rc=$?" >> $OUT/libtests.txt)
grep -E "^test |test result|panicked" $OUT/libtests.txt | head -12
timeout 120 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2,4,3,8 --only 'reduce.fp32,reduce.int8,reducescatter.bf16,reducescatter.fp16,broadcast,sendrecv.*,alltoall,gather,scatter,bad.*,memory,queries,allreduce.bf16,allreduce.fp8e4m3' --case-timeout 30 --budget 100 --json $OUT/t2.json > $OUT/t2.txt 2>&1
echo "== t2 rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/t2.txt | cut -c1-400 | head -20; tail -4 $OUT/t2.txt
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
timeout 90 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes procs --worlds 2,4,3 --only 'fault.*,allgather,broadcast,sendrecv.*,alltoall,gather,scatter,bad.*,allreduce.fp32,queries,memory' --case-timeout 60 --budget 70 --big-mib 16 --json $OUT/p1.json > $OUT/p1.txt 2>&1
echo "== procs rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/p1.txt | cut -c1-300 | head -20; tail -3 $OUT/p1.txt
unset TPCOMM_STANDALONE
echo "== percall (shared GPU, MPS, 2 ranks, 1 KiB bf16 in a CUDA graph)"
TPCOMM_STANDALONE=1 timeout 80 stdbuf -oL python3 -u bench/dropin/percall.py --lib before=.dev/before/libtpcomm_nccl.so --lib after=$D/libtpcomm_nccl.so --world 2 --bytes 1024 --rounds 5 --json $OUT/percall.json > $OUT/percall.txt 2>&1; echo "percall rc=$?" >> $OUT/percall.txt; tail -8 $OUT/percall.txt
echo quit | nvidia-cuda-mps-control; sleep 1
