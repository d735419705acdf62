#!/usr/bin/env bash
# Session 17's device calls (after next_s16.sh's steps o, g and p):
#   c  `tpcomm bench --device gpu --algos one-shot,int8,fp8/128` over the host
#      path, 2 ranks sharing GPU 0: the quantized rows the front end refused
#      before 9de459d, run end to end (the command docs/quantized.md gives);
#   d  one-shot-pdl and two-shot-pdl back to back with 2 and 4 ranks sharing
#      GPU 0 over P2P (call 2: a peer timeout after ~150,000 calls before
#      d05df33; since then ordinary launches there, so every row must come);
#   q  gpu_quant at 2 and 4 ranks on the merged build (.dev/q17: HEAD with
#      the one-shot's vector scales; every algorithm, type, group and format
#      bit for bit against the CPU model);
#   h  the one-shot over the host path at 4-64 MiB, .dev/q17 and .dev/qbase
#      alternated, two rounds;
#   r  the gathered form's kernel rates at 4-64 MiB, .dev/qbase and
#      .dev/qmagic (int8-magic.patch) alternated, one round each.
# Stage: cargo build --release -p tpcomm-cli, strip target/release/tpcomm
# into .dev/cli17; bash bench/quant/stage_variant.sh - .dev/q17.
# device: O=$OUT STEPS=... bash bench/device/next_s17.sh, carry
#   [".dev/cli17", ".dev/q17", ".dev/qbase", ".dev/qmagic"]
O=${O:-${OUT:-/tmp/next-s17}}
STEPS=${STEPS:-c,d}
. "$(dirname "$0")/common.sh"
C=.dev/cli17/tpcomm
for b in cli17 q17 qbase qmagic; do
  [ -f .dev/$b/BUILD.txt ] && echo ".dev/$b: $(head -1 .dev/$b/BUILD.txt)" >> "$O/log.txt"
done
if on c; then
  run cli-quant 120 $C bench --device gpu --launch threads --ranks 2 --transport host \
    --algos one-shot,int8,fp8/128 --min 1MiB --max 16MiB --modes graph
fi
if on q; then
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 run gpu_quant-q17 200 .dev/q17/gpu_quant --ignored --test-threads=1 --nocapture
fi
if on d; then
  for r in 2 4; do
    run pdl-$r 150 $C bench --device gpu --launch threads --ranks $r --transport cuda \
      --algos one-shot,one-shot-pdl,two-shot,two-shot-pdl --min 4KiB --max 4MiB
    grep -E "^# -pdl|^# shared" "$O/pdl-$r.txt" | tee -a "$O/log.txt"
  done
fi
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --min 4MiB --max 64MiB"
if on h; then
  for r in 1 2; do
    for b in q17 qbase; do
      # shellcheck disable=SC2086
      run host-$b-$r 60 .dev/$b/quant_bench $QB --transport host --algo one-shot
    done
  done
fi
if on r; then
  for b in qbase qmagic; do
    # shellcheck disable=SC2086
    run rates-$b-1 70 .dev/$b/quant_bench $QB --transport host --algo gathered
  done
  grep -HE "MiB \| int8/g64 \| (pack|unpack-sum)" "$O"/rates-*.txt >> "$O/log.txt"
fi
pack
