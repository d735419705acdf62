#!/bin/bash
# device call 1: per-call before/after, conformance threads + procs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_STANDALONE=1
C=.dev/conf/tpcomm-conformance
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
timeout 150 stdbuf -oL python3 bench/dropin/percall.py --lib before=.dev/before/libtpcomm_nccl.so --lib after=.dev/after/libtpcomm_nccl.so --world 2 --bytes 1024 --rounds 9 --json $OUT/percall.json > $OUT/percall.txt 2>&1
echo "== percall rc=$?"; tail -6 $OUT/percall.txt
timeout 130 stdbuf -oL $C --lib .dev/after/libtpcomm_nccl.so --modes procs --worlds 2,4 --case-timeout 20 --budget 110 --json $OUT/conf-procs.json > $OUT/conf-procs.txt 2>&1
echo "== procs rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/conf-procs.txt | cut -c1-220 | head -30; tail -4 $OUT/conf-procs.txt
echo quit | nvidia-cuda-mps-control; sleep 1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
timeout 290 stdbuf -oL $C --lib .dev/after/libtpcomm_nccl.so --modes threads --worlds 2,4,8,3 --case-timeout 20 --budget 260 --json $OUT/conf-threads.json > $OUT/conf-threads.txt 2>&1
echo "== threads rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/conf-threads.txt | cut -c1-220 | head -40; tail -6 $OUT/conf-threads.txt
