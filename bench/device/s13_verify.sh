#!/usr/bin/env bash
# Session 13, the last device call (about 7 minutes with the start): the
# shipped build (D, bench/device/stage_all.sh) against the build before the
# all-gather's reader cap (OLD: that build's tpcomm alone), one GPU, ranks as
# threads sharing it:
# 1. gpu_collectives and gpu_quant at 2 and 4 ranks (bit-for-bit checks of
#    the capped all-gather, and of the quantized kernels with both session 13
#    changes together: the e4m3 decode by one multiply and the half grid);
# 2. the host-path all-gather, 256 KiB-64 MiB of output, OLD and D
#    alternated: 2 ranks two rounds, 4 ranks one;
# 3. quant_bench over the host path, one-shot, 4-64 MiB (the issue-20 ratios);
# 4. the exact host all-reduce at 4-64 MiB with 8 consumer blocks a rank
#    against its rule (is the all-reduce reader-bound too? not changed).
# Staging: bash bench/device/stage_all.sh; .dev/old/tpcomm from before.
# device: O=$OUT bash bench/device/s13_verify.sh, carry [".dev/all", ".dev/old"]
# At most 8 files come back from $OUT: everything goes into six.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/all}
OLD=${OLD:-.dev/old}
O=${O:-${OUT:-/tmp/s13-verify}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
cat "$D/BUILD.txt" "$OLD/BUILD.txt" >> "$LOG"

step "1. gpu_collectives at 2,4 ranks"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 150 "$D/gpu_collectives" --ignored --test-threads=1 --nocapture > "$O/gpu_collectives.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "test result|calls checked" "$O/gpu_collectives.txt" | tee -a "$LOG"
step "1. gpu_quant at 2,4 ranks"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 170 "$D/gpu_quant" --ignored --test-threads=1 --nocapture > "$O/gpu_quant.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "test result" "$O/gpu_quant.txt" | tee -a "$LOG"

ag() {  # build dir, ranks, round
  step "2. all-gather $1 ranks $2 round $3" >> "$O/ag.txt"
  echo "== all-gather $1 ranks $2 round $3" >> "$LOG"
  timeout 60 "$1/tpcomm" bench --device gpu --launch threads --ranks "$2" --transport host --algos one-shot \
    --coll all-gather --min 256KiB --max 64MiB --modes graph >> "$O/ag.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
}
for round in 1 2; do ag "$OLD" 2 $round; ag "$D" 2 $round; done
ag "$OLD" 4 1; ag "$D" 4 1
grep -E "^== |graph" "$O/ag.txt" | tail -80 >> "$LOG"

step "3. quant_bench host one-shot 4-64 MiB"
timeout 60 "$D/quant_bench" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 5 --algo one-shot > "$O/qb.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "^\| [0-9]+ MiB \| (int8|fp8)" "$O/qb.txt" | tee -a "$LOG"

for c in rule 8; do
  step "4. exact host all-reduce 4-64 MiB, consumers $c" >> "$O/ar.txt"
  if [ $c = rule ]; then env=""; else env="TPCOMM_HOST_CONSUMERS=$c"; fi
  # shellcheck disable=SC2086
  timeout 60 env $env "$D/tpcomm" bench --device gpu --launch threads --ranks 2 --transport host \
    --min 4MiB --max 64MiB --modes graph >> "$O/ar.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
done
grep -E "^== |graph" "$O/ar.txt" >> "$LOG"
step "done"
