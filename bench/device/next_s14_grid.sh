#!/usr/bin/env bash
# Session 14, call 2: the quantized one-shot's grid over the host path (2
# ranks sharing GPU 0). Hypothesis: at 4-16 MiB most of the 70 us the call
# spends beyond the link's rate is the pipeline's start, every block's first
# two steps written before any is read, so fewer blocks start reading sooner.
# TPCOMM_QUANT_BLOCKS sweeps the grid (unset: the rule, 66 blocks at 4-8 MiB),
# alternated rounds.
# Stage: cargo build --release -p tpcomm --example quant_bench, stripped copy
# in .dev/qgrid; device: O=$OUT D=.dev/qgrid bash bench/device/next_s14_grid.sh,
# carry [".dev/qgrid"].
O=${O:-${OUT:-/tmp/next-s14-grid}}
STEPS=${STEPS:-s,l}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
cat "$D/BUILD.txt" >> "$O/log.txt"
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --transport host --algo one-shot"
if on s; then
  for r in 1 2; do
    for b in rule 8 16 24 33; do
      if [ "$b" = rule ]; then
        # shellcheck disable=SC2086
        run small-$b-$r 60 "$D/quant_bench" $QB --min 4MiB --max 16MiB
      else
        # shellcheck disable=SC2086
        TPCOMM_QUANT_BLOCKS=$b run small-$b-$r 60 "$D/quant_bench" $QB --min 4MiB --max 16MiB
      fi
    done
  done
fi
if on l; then
  for b in rule 16 33; do
    if [ "$b" = rule ]; then
      # shellcheck disable=SC2086
      run large-$b 60 "$D/quant_bench" $QB --min 32MiB --max 64MiB
    else
      # shellcheck disable=SC2086
      TPCOMM_QUANT_BLOCKS=$b run large-$b 60 "$D/quant_bench" $QB --min 32MiB --max 64MiB
    fi
  done
fi
grep -HE "MiB \| (exact|int8|fp8)" "$O"/small-*.txt "$O"/large-*.txt >> "$O/log.txt"
pack
