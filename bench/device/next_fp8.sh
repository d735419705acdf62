#!/usr/bin/env bash
# Issue 20, prepared in session 12, run in session 13 (call 3, on an H100, with
# an all-gather consumer sweep appended inline; bench/results/2026-12-02-h100-h200-plan-quant/): the fp8 decode by one multiply
# (bench/quant/variants/fp8-decode-mul.patch; the same bits for every code,
# a CPU test in the patch proves it) against this build, where fp8 costs
# more than int8 only in the kernels: the gathered form's pack and
# unpack-sum kernels (fp8 43-47% of the copy rate against int8's 65-73%,
# session 11) and the one-shot over P2P (fp8 about 1.4x int8).
# Staging:
#   bash bench/device/stage_all.sh                           (D=.dev/all)
#   bash bench/quant/stage_variant.sh bench/quant/variants/fp8-decode-mul.patch .dev/qf8
# device: O=$OUT bash bench/device/next_fp8.sh, carry [".dev/all", ".dev/qf8"]
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/all}
V=${V:-.dev/qf8}
O=${O:-${OUT:-/tmp/next-fp8}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }

step "1. gpu_quant at 2,4 ranks ($V): bit for bit against the CPU model"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 200 "$V/gpu_quant" --ignored --test-threads=1 --nocapture > "$O/gpu_quant-2-4.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "test result" "$O/gpu_quant-2-4.txt" | tee -a "$LOG"
for round in 1 2; do
  for b in "$D" "$V"; do
    step "2. round $round: $b gathered form (kernel rates), host path"
    timeout 60 "$b/quant_bench" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 5 --algo gathered > "$O/qb-gathered-${b##*/}-$round.txt" 2>&1
    echo "rc $?" | tee -a "$LOG"
    grep -E "^\| [0-9]+ MiB \| fp8.*(pack|unpack)|quant_bench:" "$O/qb-gathered-${b##*/}-$round.txt" | tee -a "$LOG"
    step "2. round $round: $b one-shot over P2P"
    timeout 60 "$b/quant_bench" --ranks 2 --gpus 1 --transport cuda --min 4MiB --max 64MiB --iters 10 --reps 5 --algo one-shot > "$O/qb-p2p-${b##*/}-$round.txt" 2>&1
    echo "rc $?" | tee -a "$LOG"
    grep -E "^\| [0-9]+ MiB \| (int8|fp8)|quant_bench:" "$O/qb-p2p-${b##*/}-$round.txt" | tee -a "$LOG"
  done
done
step "done"
