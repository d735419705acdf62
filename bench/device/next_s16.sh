#!/usr/bin/env bash
# Prepared in sessions 15 and 16 for the next device call (not yet run;
# about 15 minutes with the start): two kernel variants of
# bench/quant/variants and both together, against the build they apply to
# (.dev/qbase):
#   qmagic  int8-magic.patch: int8 coded and decoded without conversion
#           instructions (the 12 int8 kernels' machine code changes);
#   qvec    oneshot-vec-scales.patch: the one-shot's scales leave and arrive
#           in 16-byte vectors through shared memory (its 6 kernels change);
#   qboth   both patches (ready to merge, with its own gpu_quant, if both
#           win).
# Steps (STEPS, default all, in this order):
#   g  gpu_quant at 2 and 4 ranks on qboth (every algorithm, type, group and
#      format bit for bit against the CPU model; about 2 minutes);
#   r  the gathered kernels' rates at 4-64 MiB, qbase and qmagic alternated,
#      two rounds (int8 unpack-sum at 8 MiB: 59-60% of the copy rate before);
#   o  the one-shot over the host path at 4-64 MiB, all four builds
#      alternated, three rounds (8 MiB: 0.59-0.62x the exact call before);
#   p  the one-shot over P2P once each;
#   G  gpu_quant at 2 and 4 ranks on the other variants (last: the timings
#      come back even if the call is cut short here).
# ROUNDS (default "1 2 3") names step o's rounds, so the rounds can be split
# between calls of at most 600 s.
# Stage (VARIANTS, default "qmagic qvec qboth", names a subset):
#   bash bench/quant/stage_variant.sh - .dev/qbase
#   bash bench/quant/stage_variant.sh bench/quant/variants/int8-magic.patch .dev/qmagic
#   bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-vec-scales.patch .dev/qvec
#   bash bench/quant/stage_variant.sh bench/quant/variants/int8-magic.patch,bench/quant/variants/oneshot-vec-scales.patch .dev/qboth
# device: O=$OUT bash bench/device/next_s16.sh,
#   carry [".dev/qbase", ".dev/qmagic", ".dev/qvec", ".dev/qboth"]
O=${O:-${OUT:-/tmp/next-s16}}
STEPS=${STEPS:-g,r,o,p,G}
ROUNDS=${ROUNDS:-1 2 3}
VARIANTS=${VARIANTS:-qmagic qvec qboth}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
for b in qbase $VARIANTS; do echo ".dev/$b: $(head -1 .dev/$b/BUILD.txt)" >> "$O/log.txt"; done
gpu_quant() {
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 run gpu_quant-$1 200 .dev/$1/gpu_quant --ignored --test-threads=1 --nocapture
}
if on g && [[ " $VARIANTS " == *" qboth "* ]]; then
  gpu_quant qboth
fi
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --min 4MiB --max 64MiB"
if on r && [[ " $VARIANTS " == *" qmagic "* ]]; then
  for r in 1 2; do
    for b in qbase qmagic; do
      # shellcheck disable=SC2086
      run rates-$b-$r 70 .dev/$b/quant_bench $QB --transport host --algo gathered
    done
  done
  grep -HE "MiB \| int8/g64 \| (pack|unpack-sum)" "$O"/rates-*.txt >> "$O/log.txt"
fi
if on o; then
  for r in $ROUNDS; do
    for b in qbase $VARIANTS; do
      # shellcheck disable=SC2086
      run host-$b-$r 60 .dev/$b/quant_bench $QB --transport host --algo one-shot
    done
  done
fi
if on p; then
  for b in qbase $VARIANTS; do
    # shellcheck disable=SC2086
    run p2p-$b 60 .dev/$b/quant_bench $QB --transport cuda --algo one-shot
  done
fi
grep -HE "MiB \| (exact|int8)" "$O"/host-*.txt "$O"/p2p-*.txt >> "$O/log.txt" 2>/dev/null
if on G; then
  for b in $VARIANTS; do
    [ "$b" = qboth ] || gpu_quant "$b"
  done
fi
pack
