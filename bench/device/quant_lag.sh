#!/usr/bin/env bash
# (Its patches were removed after session 12: check them out from commit 8eff98c.)
# Issue 20, session 12, the last call (about 6 minutes with the start): Q_LAG 1
# (sums one step behind the sends instead of two), which measured 0.51-0.62x
# in call 3, checked bit for bit and measured again beside this build; and
# one-shot grids of 66 and 33 working blocks (more steps per block, so a
# block's sends and sums overlap; oneshot-grid.patch).
#   DEFINES="Q_LAG=1" bash bench/quant/stage_variant.sh - .dev/ql1
#   DEFINES="Q_LAG=1 Q_GRID=66u" bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-grid.patch .dev/qg66
#   DEFINES="Q_LAG=1 Q_GRID=33u" ... .dev/qg33
#   D (default .dev/all): this build (425c1f8 or later with the same kernel)
# device: O=$OUT bash bench/device/quant_lag.sh, carry [".dev/all", ".dev/ql1", ".dev/qg66", ".dev/qg33"]
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/all}
O=${O:-${OUT:-/tmp/quant-lag}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
QB="--ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 5 --algo one-shot"

step "1. gpu_quant at 2,4 ranks (.dev/ql1)"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 200 .dev/ql1/gpu_quant --ignored --test-threads=1 --nocapture > "$O/gpu_quant-ql1-2-4.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "test result" "$O/gpu_quant-ql1-2-4.txt" | tee -a "$LOG"
for v in "$D" .dev/ql1 .dev/qg66 .dev/qg33; do
  step "2. $v/quant_bench $QB"
  timeout 75 "$v/quant_bench" $QB > "$O/qb-${v##*/}.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
  grep -E "^\| [0-9]+ MiB \| int8|quant_bench:" "$O/qb-${v##*/}.txt" | tee -a "$LOG"
done
step "done"
