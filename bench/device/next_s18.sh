#!/usr/bin/env bash
# Prepared in session 17 for the next device call (not yet run; about 10
# minutes with the start): the quantized two-shot with its scales moved as
# 16-byte vectors (bench/quant/variants/twoshot-vec-scales.patch, the change
# that took the one-shot from 0.55-0.60x to 0.45-0.50x the exact host call in
# session 17), against the build it applies to. The two-shot is what `Auto`
# runs above 2 ranks.
# Steps (STEPS, default all, in this order):
#   g  gpu_quant at 2 and 4 ranks on the variant (every algorithm, type,
#      group and format bit for bit against the CPU model; about 2.5 minutes);
#   t  the two-shot over the host path at 4-64 MiB with 4 ranks sharing GPU 0,
#      base and variant alternated, two rounds;
#   e  the same at 8 ranks, one round each.
# Stage (both builds from this checkout's HEAD):
#   bash bench/quant/stage_variant.sh - .dev/qbase18
#   bash bench/quant/stage_variant.sh bench/quant/variants/twoshot-vec-scales.patch .dev/q2v
# device: O=$OUT bash bench/device/next_s18.sh, carry [".dev/qbase18", ".dev/q2v"]
# Ratios: python3 bench/quant/ratios.py FOLDER/ts4-*.txt
O=${O:-${OUT:-/tmp/next-s18}}
STEPS=${STEPS:-g,t,e}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
for b in qbase18 q2v; do echo ".dev/$b: $(head -1 .dev/$b/BUILD.txt)" >> "$O/log.txt"; done
if on g; then
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 run gpu_quant-q2v 240 .dev/q2v/gpu_quant --ignored --test-threads=1 --nocapture
fi
QB="--gpus 1 --iters 10 --reps 5 --min 4MiB --max 64MiB --transport host --algo two-shot"
if on t; then
  for r in 1 2; do
    for b in qbase18 q2v; do
      # shellcheck disable=SC2086
      run ts4-$b-$r 120 .dev/$b/quant_bench --ranks 4 $QB
    done
  done
fi
if on e; then
  for b in qbase18 q2v; do
    # shellcheck disable=SC2086
    run ts8-$b-1 150 .dev/$b/quant_bench --ranks 8 $QB
  done
fi
grep -HE "MiB \| (exact|int8)" "$O"/ts*-*.txt >> "$O/log.txt" 2>/dev/null
pack
