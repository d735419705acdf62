#!/usr/bin/env bash
# Issue 20, session 12, the call that checks the one-shot in steps (425c1f8)
# and measures it (about 7 minutes with the start). Staged binaries only:
#   bash bench/device/stage_all.sh                     (D, default .dev/all)
#   DEFINES="Q_LAG=1" bash bench/quant/stage_variant.sh - .dev/ql1
#   DEFINES="Q_LAG=3" bash bench/quant/stage_variant.sh - .dev/ql3
#   OLD (default .dev/cur): quant_bench of d5040da, the chunk-at-a-time kernel
# device: O=$OUT bash bench/device/quant_steps.sh,
#   carry [".dev/all", ".dev/ql1", ".dev/ql3", ".dev/cur"]
# Steps, output under $O:
# 1. gpu_quant at 2 and 4 ranks (bit for bit against the CPU model, both
#    transports, every algorithm, graphs, missing peer, memory report);
# 2. quant_bench over the host path, one-shot, 4-64 MiB, 15 reps: this build,
#    then over P2P this build and OLD, then the host path again (two runs of
#    the figures quoted, a P2P check that nothing got slower there);
# 3. Q_LAG 1 and 3 over the host path (5 reps), against the runs of step 2;
# 4. bench/probe/sysmem_l2.cu (nvcc on the machine): whether the GPU's L2
#    serves reads of pinned host memory the same GPU just wrote (the shared
#    GPU's host-path figures would then be partly L2 hits, not PCIe reads).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D=${D:-.dev/all}
OLD=${OLD:-.dev/cur}
O=${O:-${OUT:-/tmp/quant-steps}}
mkdir -p "$O"
LOG=$O/log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
QB="--ranks 2 --gpus 1 --min 4MiB --max 64MiB --iters 10 --algo one-shot"

step "1. gpu_quant at 2,4 ranks ($D)"
TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 timeout 240 "$D/gpu_quant" --ignored --test-threads=1 --nocapture > "$O/gpu_quant-2-4.txt" 2>&1
echo "rc $?" | tee -a "$LOG"
grep -E "^test |test result" "$O/gpu_quant-2-4.txt" | tee -a "$LOG"

run_qb() {  # name dir transport reps
  step "2. $1: $2/quant_bench --transport $3 --reps $4"
  timeout 90 "$2/quant_bench" $QB --transport "$3" --reps "$4" > "$O/qb-$1.txt" 2>&1
  echo "rc $?" | tee -a "$LOG"
  grep -E "^\| [0-9]+ MiB \| int8|quant_bench:" "$O/qb-$1.txt" | tee -a "$LOG"
}
run_qb host-1 "$D" host 15
run_qb p2p-new "$D" cuda 15
run_qb p2p-old "$OLD" cuda 15
run_qb host-2 "$D" host 15
for v in .dev/ql1 .dev/ql3; do
  [ -x "$v/quant_bench" ] && run_qb "host-${v##*/}" "$v" host 5
done
step "4. probe: GPU reads of pinned host memory after a CPU and after a GPU write (bench/probe/sysmem_l2.cu)"
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  timeout 120 "$NVCC" -O2 -arch=sm_90 -o /tmp/sysmem_l2 bench/probe/sysmem_l2.cu 2>&1 | tail -5 | tee -a "$LOG"
  timeout 120 /tmp/sysmem_l2 2>&1 | tee "$O/sysmem_l2.txt" | tee -a "$LOG"
else
  echo "no nvcc" | tee -a "$LOG"
fi
step "done"
