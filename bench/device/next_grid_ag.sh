#!/usr/bin/env bash
# Issue 20, prepared in session 12, run in session 13 (call 2, on an H100;
# bench/results/2026-12-02-h100-h200-plan-quant/call2-grid-ag-h100/). Two questions:
# 1. the one-shot at 8 MiB (0.62-0.64x the exact host path, the one size
#    over the 0.6x target): does keeping half the grid until every block has
#    4 steps (bench/quant/variants/oneshot-halfgrid.patch; 66 blocks at 4-8
#    MiB, 128 at 16 MiB, the cap above) beat this build? Session 12's one run
#    of 66 working blocks gave 0.50 / 0.60 at 4 / 8 MiB against 0.52 / 0.62.
#    Its gpu_quant first (2 and 4 ranks), then quant_bench at 4-16 MiB,
#    builds alternated, three rounds;
# 2. the host-path all-gather's step (fast to 20 MiB of output per rank,
#    about five times slower per byte from 24-32 MiB): at 32 MiB of output,
#    one rotating buffer instead of 4, 8 or 33 consumer blocks, eager
#    against graph.
# Staging:
#   bash bench/device/stage_all.sh                           (D=.dev/all)
#   bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-halfgrid.patch .dev/qhg
# device: O=$OUT bash bench/device/next_grid_ag.sh, carry [".dev/all", ".dev/qhg"]
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/all}
V=${V:-.dev/qhg}
O=${O:-${OUT:-/tmp/next-grid-ag}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }

step "1. gpu_quant at 2,4 ranks ($V)"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 200 "$V/gpu_quant" --ignored --test-threads=1 --nocapture > "$O/gpu_quant-2-4.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "test result" "$O/gpu_quant-2-4.txt" | tee -a "$LOG"
QB="--ranks 2 --gpus 1 --transport host --min 4MiB --max 16MiB --iters 10 --reps 5 --algo one-shot"
for round in 1 2 3; do
  for b in "$D" "$V"; do
    step "1. round $round: $b/quant_bench $QB"
    timeout 60 "$b/quant_bench" $QB > "$O/qb-${b##*/}-$round.txt" 2>&1
    echo "rc $?" | tee -a "$LOG"
    grep -E "^\| [0-9]+ MiB \| int8|quant_bench:" "$O/qb-${b##*/}-$round.txt" | tee -a "$LOG"
  done
done

B="bench --device gpu --launch threads --ranks 2 --transport host --algos one-shot --coll all-gather --min 32MiB --max 32MiB"
ag() {  # label, environment assignments (may be empty), extra flags
  step "2. all-gather 32 MiB of output: $1"
  # shellcheck disable=SC2086
  timeout 40 env $2 "$D/tpcomm" $B $3 2>&1 | grep -E "graph|eager|rror" | tee -a "$LOG"
}
ag "as shipped (graph)" "" "--modes graph"
ag "one rotating buffer" "" "--modes graph --rotate 1"
ag "8 consumer blocks" "TPCOMM_HOST_CONSUMERS=8" "--modes graph"
ag "33 consumer blocks" "TPCOMM_HOST_CONSUMERS=33" "--modes graph"
ag "eager and graph" "" "--modes eager,graph"
step "done"
