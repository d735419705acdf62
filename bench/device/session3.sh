#!/usr/bin/env bash
# Device calls of session 3 (nvidia-h200-x2): the host path's push kernel.
#   hb host bench, NCCL with NCCL_P2P_DISABLE=1 beside it: push (default) over
#      1 KiB-64 MiB with two-shot and NCCL rows; LL words (TPCOMM_HOST_SMALL=ll)
#      and push again up to 1 MiB; the torch anchor without P2P and the pinned
#      copy bandwidth, same call
#   hf forward bench over the host transport: push, then LL words
#   fw forward bench over P2P (prints the `vs none-pdl` column)
#   hs one-pass launch shape: push graph 1 KiB-1 MiB with the default blocks,
#      TPCOMM_HOST_BLOCK=512 (one vector per thread in 512-thread blocks) and
#      256, the default again; the forward over the host transport with the
#      default and with 512
#   hu tpcomm tune on the host transport forced (NCCL with P2P disabled), with
#      the default blocks and with TPCOMM_HOST_BLOCK=512
#   ab push of the previous build (D/tpcomm-prev) against this one, graph
#      1 KiB-1 MiB, taking turns twice
#   ha the final host-path numbers: tune (host forced), then auto against
#      every fixed choice and NCCL with that table, the full bench with NCCL,
#      the forward over the host transport, the torch anchor without P2P
#      and the copy bandwidth, one call
#   hv the final host-path numbers with the committed host table: auto
#      against every fixed choice and NCCL, the full bench with NCCL, the
#      forward over the host transport, the torch anchor without P2P and the
#      copy bandwidth, one call
#   fr the forward bench repeated: over P2P three times, over the host
#      transport twice (run-to-run spread of the per-site costs)
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
if on hs; then
  for v in default 512 256 default2; do
    case $v in default*) B=() ;; *) B=(TPCOMM_HOST_BLOCK=$v) ;; esac
    run shape-$v 60 "${H[@]}" "${B[@]}" "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
      --min 1KiB --max 1MiB --reps 11 --json "$O/shape-$v.json"
  done
  run forward-shape-default 120 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-shape-default.json"
  run forward-shape-512 120 "${H[@]}" TPCOMM_HOST_BLOCK=512 "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-shape-512.json"
fi
if on hu; then
  for v in default 512; do
    case $v in default*) B=() ;; *) B=(TPCOMM_HOST_BLOCK=$v) ;; esac
    run tune-host-$v 120 "${H[@]}" "${B[@]}" "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
      --iters 5 --reps 5 --out "$O/tuning-host-$v.toml" --json "$O/tune-host-$v.json"
  done
fi
if on ab; then
  for v in prev new prev2 new2; do
    case $v in prev*) B=$D/tpcomm-prev ;; *) B=$T ;; esac
    run ab-$v 60 "${H[@]}" "$B" "${HB[@]}" --algos one-shot,nccl --modes graph \
      --min 1KiB --max 1MiB --reps 11 --json "$O/ab-$v.json"
  done
fi
if on ha; then
  run tune-host 120 "${H[@]}" "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
    --iters 5 --reps 5 --out "$O/tuning-host.toml" --json "$O/tune-host.json"
  run auto-host 240 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl,auto --midpoints \
    --min 1KiB --max 64MiB --reps 11 --table "$O/tuning-host.toml" --json "$O/auto-host.json"
  run forward-host 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-host.json"
  run anchor-nop2p 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on hv; then
  run auto-host 240 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl,auto --midpoints \
    --min 1KiB --max 64MiB --reps 11 --table tuning/h200x2-host-forced-v1-ad4f67d8cd1a3196.toml \
    --json "$O/auto-host.json"
  run forward-host 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-host.json"
  run anchor-nop2p 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on fr; then
  for k in 1 2 3; do
    run forward-p2p-$k 150 "$T" bench forward --transport cuda --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl,fused,fused-pdl --json "$O/forward-p2p-$k.json"
  done
  for k in 1 2; do
    run forward-host-$k 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl --json "$O/forward-host-$k.json"
  done
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
