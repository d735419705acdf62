#!/usr/bin/env bash
# Session 14, call 3: the quantized one-shot's shape over the host path at
# 4-16 MiB (2 ranks sharing GPU 0), after call 2 found fewer blocks than the
# rule's 66 slower (33: 0.70x exact at 8 MiB, 16: 0.96-1.0x). Alternated
# rounds of: this tree (.dev/qgrid) with the rule and TPCOMM_QUANT_BLOCKS
# 50, 80, 100; Q_STEP=2 (.dev/qs2: the rule then gives 4 steps a block, 128
# blocks at 8 MiB) with the rule and 66 blocks; Q_LAG=2 (.dev/ql2).
# Stage: the base as in next_s14_grid.sh; the variants with
#   DEFINES="Q_STEP=2" bash bench/quant/stage_variant.sh bench/quant/variants/step2.patch .dev/qs2
#   DEFINES="Q_LAG=2" bash bench/quant/stage_variant.sh - .dev/ql2
# device: O=$OUT bash bench/device/next_s14_shape.sh,
# carry [".dev/qgrid", ".dev/qs2", ".dev/ql2"].
O=${O:-${OUT:-/tmp/next-s14-shape}}
STEPS=${STEPS:-s}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
for d in .dev/qgrid .dev/qs2 .dev/ql2; do echo "$d: $(tr '\n' ' ' < $d/BUILD.txt)" >> "$O/log.txt"; done
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --transport host --algo one-shot --min 4MiB --max 16MiB"
# one NAME DIR BLOCKS: quant_bench of DIR with TPCOMM_QUANT_BLOCKS=BLOCKS (rule: unset).
one() {
  if [ "$3" = rule ]; then
    # shellcheck disable=SC2086
    run "$1" 60 "$2/quant_bench" $QB
  else
    # shellcheck disable=SC2086
    TPCOMM_QUANT_BLOCKS=$3 run "$1" 60 "$2/quant_bench" $QB
  fi
}
for r in 1 2; do
  one base-rule-$r .dev/qgrid rule
  for b in 50 80 100; do one base-$b-$r .dev/qgrid $b; done
  one step2-rule-$r .dev/qs2 rule
  one step2-66-$r .dev/qs2 66
  one lag2-rule-$r .dev/ql2 rule
done
grep -HE "MiB \| (exact|int8|fp8)" "$O"/*-[12].txt >> "$O/log.txt"
pack
