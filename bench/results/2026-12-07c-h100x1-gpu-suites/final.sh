#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
T0=$SECONDS
stdbuf -oL bash bench/device/suite.sh --only tests --steps 'tests/nccl,tests/standalone,tests/forward,tests/supervision' --budget 580 --out $OUT --tag s2 2>&1 | tee $OUT/s2-stdout.txt | grep -E "^==|test result|FAIL|panic|suite:" | tail -30
echo "s2 rc=${PIPESTATUS[0]} after $((SECONDS-T0)) s"
stdbuf -oL bash bench/device/suite.sh --only tests --steps 'tests/quant' --budget $((580-(SECONDS-T0))) --out $OUT --tag s3 2>&1 | tee $OUT/s3-stdout.txt | grep -E "^==|test result|FAIL|panic|suite:" | tail -30
echo "s3 rc=${PIPESTATUS[0]} after $((SECONDS-T0)) s"
