#!/usr/bin/env bash
# One device call after a kernel change (issue 15): the graph-replay test at
# every world size (and world 2 again), the P2P suite, the fused suite,
# processes under MPS at every world size and once without MPS, then the
# stress tests at 2 and 8 ranks, and the planner's H200 efficiency. Outputs
# packed into O/outputs.tgz (a call returns at most 8 files).
#   O=$OUT STEPS=x D=.dev/all bash bench/device/shared_verify.sh
export O=${O:-$OUT} STEPS=${STEPS:-x} D=${D:-.dev/all}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
export TPCOMM_GPU_TESTS=1
W=2,3,4,5,8
t() { local n=$1 w=$2 l=$3; shift 3; TPCOMM_TEST_WORLDS=$w run "$n" "$l" "$D/$1" --ignored --test-threads=1 --nocapture "${@:2}"; }
t graph-all $W 120 gpu_allreduce graph_replayed
t graph-2x3 2,2,2 60 gpu_allreduce graph_replayed
t p2p-suite $W 150 gpu_allreduce --skip stress --skip graph_replayed
t fused $W 40 gpu_fused
t host-auto $W 40 gpu_host_allreduce transport_auto
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog; nvidia-cuda-mps-control -d
for w in ${W//,/ }; do for tr in cuda host; do
  run "procs-mps-$tr-$w" 40 "$T" bench --device gpu --launch processes --ranks "$w" --transport "$tr" \
    --min-bytes 1KiB --max-bytes 1MiB --algos one-shot,two-shot,auto --reps 9 --json "$O/procs-mps-$tr-$w.json"
done; done
echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
run procs-nomps-cuda-2 40 "$T" bench --device gpu --launch processes --ranks 2 --transport cuda \
  --min-bytes 1KiB --max-bytes 16KiB --algos one-shot --modes graph --reps 3 --iters 5
t stress-p2p 2,8 100 gpu_allreduce stress
t stress-host 2,8 100 gpu_host_allreduce stress

pack
