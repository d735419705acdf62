#!/usr/bin/env bash
# Issue 19 on a device: the collective kernels' GPU test, then
# bench/torch/collectives_check.py (torch.distributed, NCCL backend, the
# drop-in preloaded) at 2, 4 and 8 ranks. Staged binaries come from
# bench/device/stage_all.sh (D, default .dev/all; it must hold gpu_collectives
# and libtpcomm_nccl.so); outputs go to O (default $OUT). Steps (STEPS):
#   g  the GPU tests of the all-gather / reduce-scatter / broadcast kernels
#      on both transports (crates/tpcomm/tests/gpu_collectives.rs) and of
#      Communicator's NCCL fallback for them (gpu_coll_fallback.rs) at WORLDS,
#      ranks as threads
#   s  collectives_check.py with every rank on cuda:0 under MPS, with the
#      drop-in in standalone mode (TPCOMM_STANDALONE=1: real NCCL refuses
#      shared GPUs, so tpcomm serves the communicator alone) and
#      TPCOMM_MAX_BYTES=64MiB (the largest block the script sends; standalone
#      mode has no NCCL to send larger all-gather/reduce-scatter blocks to)
#   p  collectives_check.py with one rank per GPU (needs RANKS GPUs), with
#      the drop-in and without it (plain NCCL)
#
#   STEPS=g,s WORLDS=2,4,8 bash bench/device/collectives.sh
set -u -o pipefail
O=${O:-${OUT:-/tmp/collectives-out}}
STEPS=${STEPS:-g,s}
WORLDS=${WORLDS:-2,4,8}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
export TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=$WORLDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$O/gpus.csv" 2>&1
LIB=$(realpath "$D/libtpcomm_nccl.so")
PY=${PY:-python3}


if on g; then
  run gpu_collectives 300 "$D/gpu_collectives" --ignored --test-threads=1 --nocapture
  # Its NCCL half skips world sizes above the GPU count (NCCL needs a GPU per rank).
  run gpu_coll_fallback 120 "$D/gpu_coll_fallback" --ignored --test-threads=1 --nocapture
fi
if on s; then
  mps_on
  for w in ${WORLDS//,/ }; do
    TPCOMM_STANDALONE=1 TPCOMM_MAX_BYTES=${SHARED_MAX_BYTES:-64MiB} \
      run "torch-shared-$w" 300 "$PY" "$here/../torch/collectives_check.py" --ranks "$w" \
      --placement shared --lib "$LIB" --out "$O/torch-shared-$w.json" --timeout 280
  done
  mps_off
fi
if on p; then
  for w in ${WORLDS//,/ }; do
    run "torch-spread-$w-dropin" 300 "$PY" "$here/../torch/collectives_check.py" --ranks "$w" \
      --placement spread --lib "$LIB" --out "$O/torch-spread-$w-dropin.json" --timeout 280
    run "torch-spread-$w-nccl" 300 "$PY" "$here/../torch/collectives_check.py" --ranks "$w" \
      --placement spread --out "$O/torch-spread-$w-nccl.json" --timeout 280
  done
fi
pack
