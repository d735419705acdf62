#!/usr/bin/env bash
# Session 14, call 4: the balanced one-shot grid (as few blocks as give the
# same most steps a block: 64 blocks at 4 and 8 MiB instead of 66, 128 at
# 16-64 MiB instead of 132) against the build before it (.dev/qgrid), over
# the host path (2 ranks sharing GPU 0) at 4-64 MiB, three alternated rounds,
# and over P2P once each; gpu_quant at 2 and 4 ranks on the new build first.
# Stage: .dev/qgrid as in next_s14_grid.sh; .dev/qbal the same with the
# change (quant_bench, and gpu_quant from cargo test --release --no-run).
# device: O=$OUT bash bench/device/next_s14_bal.sh, carry [".dev/qgrid", ".dev/qbal"].
O=${O:-${OUT:-/tmp/next-s14-bal}}
STEPS=${STEPS:-g,h,p}
. "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$O/log.txt"
for d in .dev/qgrid .dev/qbal; do echo "$d: $(tr '\n' ' ' < $d/BUILD.txt)" >> "$O/log.txt"; done
if on g; then
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 run gpu_quant 200 .dev/qbal/gpu_quant --ignored --test-threads=1 --nocapture
fi
QB="--ranks 2 --gpus 1 --iters 10 --reps 5 --algo one-shot --min 4MiB --max 64MiB"
if on h; then
  for r in 1 2 3; do
    for b in qgrid qbal; do
      # shellcheck disable=SC2086
      run host-$b-$r 60 .dev/$b/quant_bench $QB --transport host
    done
  done
fi
if on p; then
  for b in qgrid qbal; do
    # shellcheck disable=SC2086
    run p2p-$b 60 .dev/$b/quant_bench $QB --transport cuda
  done
fi
grep -HE "MiB \| (exact|int8|fp8)" "$O"/host-*.txt "$O"/p2p-*.txt >> "$O/log.txt"
pack
