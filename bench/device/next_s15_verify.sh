#!/usr/bin/env bash
# Session 15, call 2: the shipped build (.dev/all, commit 4885158 or later)
# after call 1 (next_s15_octets.sh). Steps (STEPS):
#   g  gpu_quant at 2 and 4 ranks (the gathered pack of two octets a thread
#      with the unpack-sum of one, together for the first time);
#   h  gpu_host_allreduce at 2 ranks (the chunked all-reduce's consumer cap
#      of 16 up to 4 MiB);
#   r  quant_bench --algo gathered at 4-64 MiB, this build against .dev/qbase
#      (the kernels before), one round each;
#   c  the exact host all-reduce, 1-8 MiB, this build against .dev/cli/tpcomm
#      (bfa49cd: the rule before the cap), 2 ranks two rounds and 4 ranks
#      (threads sharing GPU 0) one round.
# Stage: bash bench/device/stage_all.sh; .dev/qbase and .dev/cli as in
# next_s15_octets.sh.
# device: O=$OUT bash bench/device/next_s15_verify.sh,
# carry [".dev/all", ".dev/qbase", ".dev/cli"].
O=${O:-${OUT:-/tmp/next-s15-verify}}
STEPS=${STEPS:-g,h,r,c}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
head -3 "$D/BUILD.txt" >> "$O/log.txt"
if on g; then
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 run gpu_quant 200 "$D/gpu_quant" --ignored --test-threads=1 --nocapture
fi
if on h; then
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2 TPCOMM_STRESS_CALLS=5000 run gpu_host_allreduce 150 "$D/gpu_host_allreduce" --ignored --test-threads=1
fi
if on r; then
  QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --transport host --algo gathered --min 4MiB --max 64MiB"
  # shellcheck disable=SC2086
  run rates-new 70 "$D/quant_bench" $QB
  # shellcheck disable=SC2086
  run rates-qbase 70 .dev/qbase/quant_bench $QB
  grep -HE "MiB \| (int8|fp8)/g64 \| (pack|unpack-sum)" "$O"/rates-*.txt >> "$O/log.txt"
fi
if on c; then
  AR="bench --device gpu --launch threads --transport host --min 1MiB --max 8MiB --modes graph"
  for r in 1 2; do
    # shellcheck disable=SC2086
    run ar2-new-$r 60 "$T" $AR --ranks 2
    # shellcheck disable=SC2086
    run ar2-old-$r 60 .dev/cli/tpcomm $AR --ranks 2
  done
  # shellcheck disable=SC2086
  run ar4-new 90 "$T" $AR --ranks 4
  # shellcheck disable=SC2086
  run ar4-old 90 .dev/cli/tpcomm $AR --ranks 4
  grep -HE "^ +[0-9]+ +[0-9]+ +bf16" "$O"/ar*.txt >> "$O/log.txt"
fi
pack
