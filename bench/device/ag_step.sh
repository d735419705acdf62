#!/usr/bin/env bash
# (Its patches were removed after session 12: check them out from commit 8eff98c.)
# Issue 20 follow-up, one device call (about 5 minutes with the start): where
# the host-path all-gather slows fivefold (session 11: 866 us for 8 MiB per
# rank, 4748 us for 16 MiB, 2 ranks sharing GPU 0; bench/results/quantized.md)
# and variants of the one-shot quantized kernel. Runs staged binaries only:
#   D (default .dev/cur): tpcomm and quant_bench of this build (release, stripped)
#   bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-steps.patch .dev/qv2
#   DEFINES="Q_STEP=4" bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-steps.patch .dev/qv4
#   bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-split.patch .dev/qsp
#   bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-split-smem.patch .dev/qsm
# device: O=$OUT bash bench/device/ag_step.sh,
#   carry [".dev/cur", ".dev/qv2", ".dev/qv4", ".dev/qsp", ".dev/qsm"]
#   (V="dir ..." replaces the variant list)
# Steps, each bounded by `timeout`, output to $O/ag-step.txt:
# 1. which profilers the machine has (nsys, ncu);
# 2. the all-gather at 16, 20, 24, 28 and 32 MiB of output (8-16 MiB per rank),
#    one size per run (sizes of one run double), the broadcast at 8-32 MiB for
#    comparison, then 4 ranks at 16 and 32 MiB of output;
# 3. with nsys present: the all-gather at 16 and 32 MiB of output under
#    `nsys profile --stats=true` (kernel times, nothing else collected);
# 4. each variant's quant_bench over the host path at 4-64 MiB (Q_STEP chunks
#    per fence and wait; split: separate sending and summing blocks; split
#    with 16-byte chunk images in shared memory), then this build's, for the
#    ratios of one call.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/cur}
O=${O:-${OUT:-/tmp/ag-step}}
mkdir -p "$O"
LOG=$O/ag-step.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
B="bench --device gpu --launch threads --ranks 2 --transport host --algos one-shot --modes graph"

step "1. profilers"
{ command -v nsys || echo "no nsys"; command -v ncu || echo "no ncu"; } 2>&1 | tee -a "$LOG"

for mib in 16 20 24 28 32; do
  step "2. all-gather, $mib MiB of output"
  timeout 40 "$D/tpcomm" $B --coll all-gather --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|rror" | tee -a "$LOG"
done
for mib in 8 12 16 24 32; do
  step "2. broadcast, $mib MiB"
  timeout 40 "$D/tpcomm" $B --coll broadcast --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|rror" | tee -a "$LOG"
done
# 4 ranks: a 16 MiB output is 4 MiB per rank (64 MiB of output on the GPU),
# 32 MiB is 8 MiB per rank. Which of the per-rank block, the output per rank
# (= the pinned bytes written per call) or the GPU's whole output the step
# follows.
B4=${B/--ranks 2/--ranks 4}
for mib in 16 32; do
  step "2. all-gather, 4 ranks, $mib MiB of output"
  timeout 40 "$D/tpcomm" $B4 --coll all-gather --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|rror" | tee -a "$LOG"
done

if command -v nsys >/dev/null; then
  for mib in 16 32; do
    step "3. nsys, all-gather $mib MiB of output"
    timeout 90 nsys profile --stats=true -o "$O/ag-$mib" "$D/tpcomm" $B --coll all-gather --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|tpcomm_host_all_gather|Time \(%\)" | head -20 | tee -a "$LOG"
  done
fi

for v in ${V:-.dev/qv2 .dev/qv4 .dev/qsp .dev/qsm} "$D"; do
  [ -x "$v/quant_bench" ] || { step "4. $v: no quant_bench staged"; continue; }
  step "4. $v quant_bench, host path, one-shot"
  timeout 60 "$v/quant_bench" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 5 --algo one-shot 2>&1 | grep -E "^\| [0-9]+ MiB|quant_bench:" | tee -a "$LOG"
done
step "done"
