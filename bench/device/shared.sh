#!/usr/bin/env bash
# Ranks sharing one GPU (issue 15): the GPU suites at several world sizes as
# threads of one process, then `tpcomm bench` with ranks as processes under
# MPS, on however many GPUs the machine has (one is enough). Staged binaries
# come from bench/device/stage_all.sh (D, default .dev/all); outputs go to O
# (default $OUT). Steps (STEPS, comma list):
#   t  thread suites without the stress tests (P2P, host, fused, fallback,
#      self-tune, plan layout) at WORLDS
#   s  the 100,000-call stress tests (P2P and host) at WORLDS
#   p  processes under MPS: tpcomm bench --launch procs --ranks N, both
#      transports, at WORLDS (every result checked)
#   n  processes without MPS: one small run, to show the warning and the cost
#   f  forward bench under MPS at 2 and 4 ranks, both transports
#   e  the planner's H200 efficiency measurement (bench/plan)
#
#   STEPS=t,p WORLDS=2,3,4,5,8 bash bench/device/shared.sh
set -u -o pipefail
O=${O:-${OUT:-/tmp/shared-out}}
STEPS=${STEPS:-t,p}
WORLDS=${WORLDS:-2,3,4,5,8}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
export TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=$WORLDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$O/gpus.csv" 2>&1
cat "$D/BUILD.txt" > "$O/build.txt" 2>/dev/null

suite() { # suite NAME LIMIT [test args...]
  local n=$1 l=$2; shift 2
  run "$n" "$l" "$D/$n" --ignored --test-threads=1 --nocapture "$@"
}

if on t; then
  suite gpu_allreduce 170 --skip stress
  suite gpu_host_allreduce 200 --skip stress
  suite gpu_fused 60
  suite gpu_fallback 60
  suite gpu_self_tune 60
  suite gpu_plan_layout 60
fi
if on s; then
  suite gpu_allreduce 280 stress
  mv "$O/gpu_allreduce.txt" "$O/gpu_allreduce-stress.txt"
  suite gpu_host_allreduce 280 stress
  mv "$O/gpu_host_allreduce.txt" "$O/gpu_host_allreduce-stress.txt"
fi
if on p; then
  mps_on
  for w in ${WORLDS//,/ }; do
    for t in cuda host; do
      run "procs-mps-$t-$w" 90 "$T" bench --device gpu --launch processes --ranks "$w" --transport "$t" \
        --min-bytes 1KiB --max-bytes 4MiB --algos one-shot,two-shot,auto --reps 9 --json "$O/procs-mps-$t-$w.json"
    done
  done
  mps_off
fi
if on n; then
  run procs-nomps-cuda-2 90 "$T" bench --device gpu --launch processes --ranks 2 --transport cuda \
    --min-bytes 1KiB --max-bytes 64KiB --algos one-shot --modes graph --reps 3 --iters 5
fi
if on f; then
  mps_on
  for w in 2 4; do
    for t in cuda host; do
      run "forward-mps-$t-$w" 150 "$T" bench forward --launch processes --ranks "$w" --transport "$t" --layers 8 --reps 5
    done
  done
  mps_off
fi
if on e; then
  OUT=$O run plan-efficiency 120 bash "$D/plan/h200_efficiency.sh"
fi
echo "== done $(date -u +%T)" | tee -a "$O/log.txt"
