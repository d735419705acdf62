#!/usr/bin/env bash
# Issue 22: what an MoE decoder layer costs on the lent GPU, beside the
# dense layer the catalog's [gpu.measured] holds (about 3 minutes with the
# start; PyTorch only, nothing to stage or carry):
# 1. bench/plan/h200_efficiency.py on Qwen3-30B-A3B's layer shape (attention
#    32/4 heads of 128, 128 experts, top 8, 768 wide) and on the default
#    dense shape, alternated, three rounds each (the spread between runs);
# 2. bench/plan/moe_layer.py: the expert block alone at 1-60 tokens (distinct
#    experts hit, CUDA-graph grouped GEMMs, transformers' eager block).
# device: O=$OUT bash bench/device/next_plan.sh
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${O:-${OUT:-/tmp/next-plan}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$LOG"
A3B="--hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --top-k 8 --mlp 768 --layers 16"
for round in 1 2 3; do
  step "1. round $round: h200_efficiency.py $A3B"
  timeout 120 python3 bench/plan/h200_efficiency.py $A3B > "$O/eff-a3b-$round.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
  grep -E '"(bandwidth_gb_s|per_layer_us|streaming_us_per_layer|layer_us)"' "$O/eff-a3b-$round.txt" | tee -a "$LOG"
  step "1. round $round: h200_efficiency.py (dense default)"
  timeout 120 python3 bench/plan/h200_efficiency.py > "$O/eff-dense-$round.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
  grep -E '"(bandwidth_gb_s|per_layer_us|streaming_us_per_layer|layer_us)"' "$O/eff-dense-$round.txt" | tee -a "$LOG"
done
step "2. moe_layer.py"
timeout 240 python3 bench/plan/moe_layer.py > "$O/moe.txt" 2> "$O/moe.err"
echo "rc $?" | tee -a "$LOG"
tail -12 "$O/moe.txt" | tee -a "$LOG"
tail -5 "$O/moe.err" | tee -a "$LOG"
step "done"
