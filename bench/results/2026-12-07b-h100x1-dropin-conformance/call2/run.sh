#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=.dev/after; C=$D/tpcomm-conformance; cat $D/BUILD.txt
export TPCOMM_STANDALONE=1
timeout 150 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2,3,4 --only 'fault.*,syncwork.sweep,allgather' --case-timeout 45 --budget 120 --json $OUT/t3.json > $OUT/t3.txt 2>&1
echo "== t3 rc=$?"; grep -E "^(PASS|FAIL|HANG|CRASH)" $OUT/t3.txt | cut -c1-420 | head -20; tail -6 $OUT/t3.txt
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
timeout 130 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes procs --worlds 2,3,4 --only 'fault.*,syncwork.sweep,allreduce.bf16' --case-timeout 40 --budget 100 --big-mib 16 --json $OUT/p2.json > $OUT/p2.txt 2>&1
echo "== procs rc=$?"; grep -E "^(PASS|FAIL|HANG|CRASH)" $OUT/p2.txt | cut -c1-420 | head -20; tail -6 $OUT/p2.txt
echo quit | nvidia-cuda-mps-control; sleep 1
