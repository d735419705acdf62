#!/bin/bash
# The drop-in on one GPU: its ignored standalone GPU tests (rooted, send/recv, fp8 and
# pre-multiplied sums, the shared-GPU collectives), the conformance suite as threads and as
# processes under MPS (its own daemon), a verbose all-gather run as threads, and
# bench/device/mps_contexts.sh. Results under $OUT. About 8 minutes.
# Usage: D=DIR OUT=DIR bash bench/device/dropin_conformance.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=${D:?D=folder with libtpcomm_nccl.so, tpcomm-conformance and nccl-libtests (the tpcomm-nccl lib test binary)}; C=$D/tpcomm-conformance; OUT=${OUT:-$(mktemp -d)}; cat $D/BUILD.txt 2>/dev/null
(timeout 130 stdbuf -oL $D/nccl-libtests --ignored --test-threads 1 > $OUT/libtests.txt 2>&1; echo "libtests rc=$?" >> $OUT/libtests.txt)
grep -E "^test |test result|panicked" $OUT/libtests.txt | head -12
export TPCOMM_STANDALONE=1
timeout 150 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2,4,8,3 --only 'create.*,calls.*,allgather,broadcast,sendrecv.*,alltoall,gather,scatter,bad.*,memory,queries,allreduce.fp32,allreduce.int32,allreduce.fp8e4m3,reduce.bf16,reducescatter.fp16' --case-timeout 20 --budget 135 --json $OUT/conf-threads.json > $OUT/conf-threads.txt 2>&1
echo "== threads rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/conf-threads.txt | cut -c1-300 | head -30; tail -3 $OUT/conf-threads.txt
timeout 30 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes threads --worlds 2 --only 'allgather' --case-timeout 25 --verbose > $OUT/ag-verbose.txt 2>&1; tail -30 $OUT/ag-verbose.txt | cut -c1-300
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
timeout 100 stdbuf -oL $C --lib $D/libtpcomm_nccl.so --modes procs --worlds 2,4,3 --only 'allgather,broadcast,sendrecv.*,alltoall,gather,scatter,bad.*,reduce*' --case-timeout 60 --budget 85 --json $OUT/conf-procs.json > $OUT/conf-procs.txt 2>&1
echo "== procs rc=$?"; grep -E "^(FAIL|HANG|CRASH)" $OUT/conf-procs.txt | grep -v PreMulSum | cut -c1-300 | head -20; tail -3 $OUT/conf-procs.txt
echo quit | nvidia-cuda-mps-control; sleep 1
OUT=$OUT bash bench/device/mps_contexts.sh

