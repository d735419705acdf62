#!/bin/bash
# Issue 39: send/recv pair by pair (new): conformance procs (MPS) and threads, torch at 3 ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu
D=$PWD/.dev/all; L=$D/libtpcomm_nccl.so; C=$D/tpcomm-conformance
head -2 $D/BUILD.txt; nvidia-smi --query-gpu=name --format=csv,noheader
T0=$SECONDS
sum() { grep -E "^(FAIL|HANG|CRASH)" $1 | cut -c1-400 | head -8; grep -A8 "^pattern" $1 | head -9; tail -1 $1; }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
export TPCOMM_STANDALONE=1
timeout 50 stdbuf -oL $C --lib $L --modes procs --worlds 3,4,8 --only 'sendrecv.*' --case-timeout 25 --budget 40 --json $OUT/p-sendrecv.json > $OUT/p-sendrecv.txt 2>&1
echo "== procs sendrecv rc=$? at $((SECONDS-T0)) s"; sum $OUT/p-sendrecv.txt
echo quit | nvidia-cuda-mps-control; sleep 1
timeout 35 stdbuf -oL $C --lib $L --modes threads --worlds 2,3,8 --only 'sendrecv.*' --case-timeout 15 --budget 25 --json $OUT/t-sendrecv.json > $OUT/t-sendrecv.txt 2>&1
echo "== threads sendrecv rc=$? at $((SECONDS-T0)) s"; sum $OUT/t-sendrecv.txt
unset TPCOMM_STANDALONE
WORLDS=3 T3=60 D=.dev/all OUT=$OUT/torch stdbuf -oL bash bench/device/torch_patterns.sh 2>&1 | grep -E "^(ERROR|FAIL|HANG|summary|world)" | cut -c1-300 | head -12
echo "== torch at $((SECONDS-T0)) s"
