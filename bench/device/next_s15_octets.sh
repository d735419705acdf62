#!/usr/bin/env bash
# Session 15, call 1: the gathered form's pack and unpack-sum kernels with
# QG_OCTETS neighbouring octets a thread (1, 2, 4; kernels/quant_gathered.cu)
# against the build before it, for issue 20's kernel-rate target at 4-8 MiB
# (42-59% of the copy rate in session 14, target 60%). Steps (STEPS):
#   g  gpu_quant at 2 ranks on the 2- and 4-octet builds (every algorithm,
#      the gathered form's tails at counts 1, 7, 9, 33, 4097, ...);
#   r  quant_bench --algo gathered at 4-64 MiB, the four builds alternated,
#      two rounds (ROUNDS);
#   c  the exact host all-reduce, 2 ranks sharing GPU 0, 1-16 MiB, with 8
#      and 16 consumer blocks a rank against the rule, two rounds (session
#      13 saw 8 a rank at 4 MiB take 349 us against 408-415: does a reader
#      cap like the all-gather's pay below 8 MiB?). .dev/cli/tpcomm (bfa49cd;
#      the host path unchanged since).
# Stage (the patches are the working tree's diff with QG_OCTETS and OCTETS
# set to 1, 2, 4):
#   bash bench/quant/stage_variant.sh - .dev/qbase
#   for k in 1 2 4; do bash bench/quant/stage_variant.sh /tmp/qv/oct$k.patch .dev/qo$k; done
# device: O=$OUT bash bench/device/next_s15_octets.sh,
# carry [".dev/qbase", ".dev/qo1", ".dev/qo2", ".dev/qo4", ".dev/cli"].
O=${O:-${OUT:-/tmp/next-s15-octets}}
STEPS=${STEPS:-g,r,c}
ROUNDS=${ROUNDS:-2}
BUILDS=${BUILDS:-qbase qo1 qo2 qo4}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
for b in $BUILDS; do echo ".dev/$b: $(head -1 .dev/$b/BUILD.txt)" >> "$O/log.txt"; done
if on g; then
  for b in ${GBUILDS:-qo2 qo4}; do
    TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=${WORLDS:-2} run gpu_quant-$b 150 .dev/$b/gpu_quant --ignored --test-threads=1 --nocapture
  done
fi
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --transport host --algo gathered --min 4MiB --max 64MiB"
if on r; then
  for r in $(seq 1 "$ROUNDS"); do
    for b in $BUILDS; do
      # shellcheck disable=SC2086
      run rates-$b-$r 70 .dev/$b/quant_bench $QB
    done
  done
  grep -HE "MiB \| (int8|fp8)/g64 \| (pack|unpack-sum)" "$O"/rates-*.txt >> "$O/log.txt"
fi
if on c; then
  AR="bench --device gpu --launch threads --ranks 2 --transport host --min 1MiB --max 16MiB --modes graph"
  for r in 1 2; do
    for c in rule 8 16; do
      if [ $c = rule ]; then env=""; else env="TPCOMM_HOST_CONSUMERS=$c"; fi
      # shellcheck disable=SC2086
      run ar-$c-$r 60 env $env .dev/cli/tpcomm $AR
    done
  done
  grep -HE "^ +[0-9]+ +[0-9]+ +bf16" "$O"/ar-*.txt >> "$O/log.txt"
fi
pack
