#!/usr/bin/env bash
# Device calls of session 3 (nvidia-h200-x2): the host path's push kernel.
#   hb host bench, NCCL with NCCL_P2P_DISABLE=1 beside it: push (default) over
#      1 KiB-64 MiB with two-shot and NCCL rows; LL words (TPCOMM_HOST_SMALL=ll)
#      and push again up to 1 MiB; the torch anchor without P2P and the pinned
#      copy bandwidth, same call
#   hf forward bench over the host transport: push, then LL words
#   fw forward bench over P2P (prints the `vs none-pdl` column)
#   th the host-path GPU tests (push and LL, all-ones elements, 100k stress)
#   t  every other GPU test and the tp_allreduce example
# Binaries from D (bench/device/stage_all.sh fills .dev/all). Outputs to
# $OUT/<step>.txt|json, packed into outputs.tgz.
#   STEPS=hb,hf bash .dev/all/session3.sh
O=${OUT:-/tmp/s3-out}
STEPS=${STEPS:-hb,hf,fw,th}
# shellcheck source=bench/device/common.sh
source "$(dirname "$0")/common.sh"
G=(env TPCOMM_GPU_TESTS=1)
TT=(--test-threads=1 --nocapture)
H=(env NCCL_P2P_DISABLE=1)
HB=(bench --device gpu --launch procs --transport host --timeout-ms 10000)
FWD=$(cat "$D/gpu_forward.tpcomm-path" 2>/dev/null)
if [ -n "$FWD" ] && { [ ! -e "$FWD" ] || [ -L "$FWD" ]; }; then
  mkdir -p "$(dirname "$FWD")" && ln -sfn "$PWD/$T" "$FWD"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$O/machine.txt" 2>&1
if on hb; then
  run host-push 200 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl --min 1KiB --max 64MiB \
    --reps 11 --json "$O/host-push.json"
  run host-ll 90 "${H[@]}" TPCOMM_HOST_SMALL=ll "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
    --min 1KiB --max 1MiB --reps 11 --json "$O/host-ll.json"
  run host-push-again 90 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
    --min 1KiB --max 1MiB --reps 11 --json "$O/host-push-again.json"
  run anchor-nop2p 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on hf; then
  run forward-host 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-host.json"
  run forward-host-ll 120 "${H[@]}" TPCOMM_HOST_SMALL=ll "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-host-ll.json"
fi
if on fw; then
  run forward-p2p 150 "$T" bench forward --transport cuda --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl,two-shot,fused,fused-pdl --json "$O/forward-p2p.json"
fi
if on th; then
  run t-host 240 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_host_allreduce" "${TT[@]}"
fi
if on t; then
  run t-example 120 "$D/tp_allreduce"
  run t-fallback 90 "${G[@]}" "$D/gpu_fallback" "${TT[@]}"
  run t-p2p 200 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_allreduce" "${TT[@]}"
  run t-fused 60 "${G[@]}" "$D/gpu_fused" "${TT[@]}" --ignored
  run t-nccl 60 "${G[@]}" "$D/nccl_gpu" "${TT[@]}" --ignored
  run t-selftune 60 "${G[@]}" "$D/gpu_self_tune" "${TT[@]}"
  run t-forward 180 "${G[@]}" "$D/gpu_forward" "${TT[@]}" --ignored
fi
pack
