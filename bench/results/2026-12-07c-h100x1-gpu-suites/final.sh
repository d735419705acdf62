#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 290 stdbuf -oL bash bench/device/suite.sh --only tests --steps 'tests/nccl,tests/standalone,tests/forward,tests/supervision,tests/quant' --budget 700 --tag s2 2>&1 | tee $OUT/s2-stdout.txt | grep -E "^==|exit|test result|FAIL|fail|panic|suite:|skip" | tail -40
echo "suite rc=${PIPESTATUS[0]}"
cp -r s2* $OUT/ 2>/dev/null; ls $OUT
