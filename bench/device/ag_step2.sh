#!/usr/bin/env bash
# (Its patches were removed after session 12: check them out from commit 8eff98c.)
# Issue 20, second device call of session 12 (about 5 minutes with the start),
# after bench/device/ag_step.sh found: the host-path all-gather steps between
# 20 and 24 MiB of output per rank (4 ranks too), the split one-shot variants
# lose twice over, Q_STEP=4 gains. Tests whether flag polling is the cost:
# - the all-gather with a pause between polls (hostcoll-backoff.patch, D2)
#   against this build (D), alternately, at 16, 24 and 32 MiB of output, and
#   at 4 ranks;
# - one-shot variants (quant_bench, host path, 4-64 MiB): Q_STEP=4 waiting on
#   one flag per step (qw4), the same with a 500 ns pause between polls
#   (qw4b), Q_STEP=8 at one block per SM (qw8), split senders and summers
#   with the pause (qspb), then this build.
# Staging (each directory's BUILD.txt says what it holds):
#   D=.dev/cur   tpcomm and quant_bench of this build
#   D2=.dev/agb  tpcomm with bench/quant/variants/hostcoll-backoff.patch
#   DEFINES="Q_STEP=4" bash bench/quant/stage_variant.sh bench/quant/variants/oneshot-steps-lastflag.patch .dev/qw4
#   DEFINES="Q_STEP=4 Q_BACKOFF_NS=500" ... oneshot-steps-lastflag.patch .dev/qw4b
#   DEFINES="Q_STEP=8 Q_MINB=1" ... oneshot-steps-lastflag.patch .dev/qw8
#   DEFINES="Q_BACKOFF_NS=500" ... oneshot-split.patch .dev/qspb
# device: O=$OUT bash bench/device/ag_step2.sh, carry the six directories.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/cur}
D2=${D2:-.dev/agb}
O=${O:-${OUT:-/tmp/ag-step2}}
mkdir -p "$O"
LOG=$O/ag-step2.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
B="bench --device gpu --launch threads --ranks 2 --transport host --algos one-shot --modes graph --coll all-gather"

for mib in 16 24 32; do
  for d in "$D" "$D2"; do
    step "1. all-gather, $mib MiB of output, $d"
    timeout 40 "$d/tpcomm" $B --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|rror" | tee -a "$LOG"
  done
done
for mib in 16 32; do
  step "1. all-gather, 4 ranks, $mib MiB of output, $D2"
  timeout 40 "$D2/tpcomm" ${B/--ranks 2/--ranks 4} --min ${mib}MiB --max ${mib}MiB 2>&1 | grep -E "graph|rror" | tee -a "$LOG"
done

for v in ${V:-.dev/qw4 .dev/qw4b .dev/qw8 .dev/qspb} "$D"; do
  [ -x "$v/quant_bench" ] || { step "2. $v: no quant_bench staged"; continue; }
  step "2. $v quant_bench, host path, one-shot"
  timeout 60 "$v/quant_bench" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 5 --algo one-shot 2>&1 | grep -E "^\| [0-9]+ MiB|quant_bench:" | tee -a "$LOG"
done
step "done"
