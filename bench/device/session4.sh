#!/usr/bin/env bash
# Device calls of session 4 (nvidia-h200-x2): the host path's delta kernel
# (no emptying pass) and one system fence per chunk in the chunked kernel.
#   hd host bench, NCCL with NCCL_P2P_DISABLE=1 beside it, graph mode:
#      one-shot with push (default) and with delta (TPCOMM_HOST_SMALL=delta)
#      over 1 KiB-1 MiB, taking turns twice; two-shot (chunked) with one fence
#      per thread (default) and one per chunk (TPCOMM_HOST_FENCE=block) over
#      64 KiB-64 MiB; the torch anchor without P2P and the copy bandwidth
#   hf forward bench over the host transport: push, then delta
#   pf the control-word prefetch (and the delta kernel's shadow prefetch):
#      the previous build (D/tpcomm-prev) against this one, taking turns, in
#      the forward over P2P and over the host transport (push and delta), and
#      delta over 1 KiB-1 MiB
#   pq the control-word prefetch by one thread per block: the build before
#      any prefetch (D/tpcomm-prev) against this one, taking turns, in the
#      forward over P2P
#   hv the final host-path numbers: tune on the host transport (NCCL with P2P
#      disabled), auto against every fixed choice and NCCL with that table,
#      the forward over the host transport, the torch anchor without P2P and
#      the copy bandwidth, one call
#   fr the forward bench repeated: over P2P twice, over the host transport
#      once
#   hk delta's launch shape: TPCOMM_HOST_BLOCK=64 and 32 (more, smaller
#      blocks) against the default rule, graph 16 KiB-1 MiB, taking turns
#   hm delta with 64-thread blocks against the default rule: graph 16 KiB-
#      512 KiB three times each, then the forward over the host transport
#      twice each, taking turns
#   hr the host-path numbers again with the committed table, twice, each
#      beside the torch anchor (run-to-run spread of the ratios)
#   hw (commit 975cd2d, reverted) delta with a pause between polls (TPCOMM_HOST_BACKOFF 0, 100, 300,
#      1000 ns), graph 1 KiB-1 MiB taking turns, the anchor, then the
#      forward over the host transport with 0 and the best guess (300)
#   hx delta up to 2 MiB: tune on the host transport, auto against every
#      fixed choice with that table, the anchor, one call
#   fs the fused kernel's stores spread over the grid (default) against each
#      row's block pushing it (TPCOMM_FUSED_SPREAD=0): the fused GPU test with
#      both, then the forward over P2P taking turns twice
#   th the host-path GPU tests (delta, push and LL; 100k stress with the
#      default kernel, delta, then 100k stress with push)
#   t  every other GPU test and the tp_allreduce example
# Binaries from D (bench/device/stage_all.sh fills .dev/all). Outputs to
# $OUT/<step>.txt|json, packed into outputs.tgz.
#   STEPS=hd,hf bash .dev/all/session4.sh
O=${OUT:-/tmp/s4-out}
STEPS=${STEPS:-hd,hf}
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
if on hd; then
  for v in push delta push2 delta2; do
    run small-$v 90 "${H[@]}" TPCOMM_HOST_SMALL="${v%2}" "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
      --min 1KiB --max 1MiB --reps 11 --json "$O/small-$v.json"
  done
  for v in thread block; do
    run chunked-$v 150 "${H[@]}" TPCOMM_HOST_FENCE=$v "$T" "${HB[@]}" --algos two-shot,nccl --modes graph \
      --min 64KiB --max 64MiB --reps 7 --json "$O/chunked-$v.json"
  done
  run anchor-nop2p 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on hf; then
  for v in push delta; do
    run forward-host-$v 150 "${H[@]}" TPCOMM_HOST_SMALL=$v "$T" bench forward --transport host --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl --json "$O/forward-host-$v.json"
  done
fi
if on pf; then
  for v in prev new prev2 new2; do
    case $v in prev*) B=$D/tpcomm-prev ;; *) B=$T ;; esac
    run pf-p2p-$v 150 "$B" bench forward --transport cuda --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl,fused-pdl --json "$O/pf-p2p-$v.json"
  done
  for v in prev new; do
    case $v in prev*) B=$D/tpcomm-prev ;; *) B=$T ;; esac
    for k in push delta; do
      run pf-host-$k-$v 150 "${H[@]}" TPCOMM_HOST_SMALL=$k "$B" bench forward --transport host --tokens 1,4,8,16 \
        --modes none,none-pdl,one-shot-pdl --json "$O/pf-host-$k-$v.json"
    done
  done
  run pf-delta 60 "${H[@]}" TPCOMM_HOST_SMALL=delta "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
    --min 1KiB --max 1MiB --reps 11 --json "$O/pf-delta.json"
fi
if on pq; then
  for v in prev new prev2 new2; do
    case $v in prev*) B=$D/tpcomm-prev ;; *) B=$T ;; esac
    run pq-p2p-$v 150 "$B" bench forward --transport cuda --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl,fused-pdl --json "$O/pq-p2p-$v.json"
  done
fi
if on hv; then
  run tune-host 150 "${H[@]}" "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
    --iters 5 --reps 5 --out "$O/tuning-host.toml" --json "$O/tune-host.json"
  run auto-host 240 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl,auto --midpoints \
    --min 1KiB --max 64MiB --reps 11 --table "$O/tuning-host.toml" --json "$O/auto-host.json"
  run forward-host 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl --json "$O/forward-host.json"
  run anchor-nop2p 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on fr; then
  for k in 1 2; do
    run forward-p2p-$k 150 "$T" bench forward --transport cuda --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl,fused,fused-pdl --json "$O/forward-p2p-$k.json"
  done
  run forward-host-1 150 "${H[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot-pdl --json "$O/forward-host-1.json"
fi
if on hk; then
  for v in default 64 32 default2; do
    case $v in default*) B=() ;; *) B=(TPCOMM_HOST_BLOCK=$v) ;; esac
    run shape-$v 60 "${H[@]}" "${B[@]}" "$T" "${HB[@]}" --algos one-shot,nccl --modes graph \
      --min 16KiB --max 1MiB --reps 11 --json "$O/shape-$v.json"
  done
fi
if on hm; then
  for v in default 64 default2 64b default3 64c; do
    case $v in default*) B=() ;; *) B=(TPCOMM_HOST_BLOCK=64) ;; esac
    run hm-$v 60 "${H[@]}" "${B[@]}" "$T" "${HB[@]}" --algos one-shot --modes graph \
      --min 16KiB --max 512KiB --reps 11 --json "$O/hm-$v.json"
  done
  for v in default 64 default2 64b; do
    case $v in default*) B=() ;; *) B=(TPCOMM_HOST_BLOCK=64) ;; esac
    run hm-forward-$v 150 "${H[@]}" "${B[@]}" "$T" bench forward --transport host --tokens 1,4,8,16 \
      --modes none,one-shot-pdl --json "$O/hm-forward-$v.json"
  done
fi
if on hr; then
  for k in 1 2; do
    run hr-auto-$k 240 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl,auto --modes graph \
      --min 1KiB --max 64MiB --reps 11 --table tuning/h200x2-host-forced-v1-ad4f67d8cd1a3196.toml \
      --json "$O/hr-auto-$k.json"
    run hr-anchor-$k 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/hr-anchor-$k.json"
  done
  run hr-copy-bw 90 python3 "$D/copy_bw.py" --out "$O/hr-copy-bw.json"
fi
if on hw; then
  for v in 0 100 300 1000 0b 300b; do
    run hw-$v 60 "${H[@]}" TPCOMM_HOST_BACKOFF="${v%b}" "$T" "${HB[@]}" --algos one-shot --modes graph \
      --min 1KiB --max 1MiB --reps 11 --json "$O/hw-$v.json"
  done
  run hw-anchor 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/hw-anchor.json"
  for v in 0 300; do
    run hw-forward-$v 150 "${H[@]}" TPCOMM_HOST_BACKOFF=$v "$T" bench forward --transport host --tokens 1,4,8,16 \
      --modes none,one-shot-pdl --json "$O/hw-forward-$v.json"
  done
fi
if on hx; then
  run hx-tune-host 150 "${H[@]}" "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
    --iters 5 --reps 5 --out "$O/tuning-host.toml" --json "$O/hx-tune-host.json"
  run hx-auto-host 240 "${H[@]}" "$T" "${HB[@]}" --algos one-shot,two-shot,nccl,auto --midpoints \
    --min 1KiB --max 64MiB --reps 11 --table "$O/tuning-host.toml" --json "$O/hx-auto-host.json"
  run hx-anchor 150 "${H[@]}" python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/hx-anchor.json"
fi
if on fs; then
  for v in 1 0; do
    run fs-t-fused-$v 60 "${G[@]}" TPCOMM_FUSED_SPREAD=$v "$D/gpu_fused" "${TT[@]}" --ignored
  done
  for v in 1 0 1b 0b; do
    run fs-forward-$v 150 env TPCOMM_FUSED_SPREAD="${v%b}" "$T" bench forward --transport cuda --tokens 1,4,8,16 \
      --modes none,none-pdl,nccl,one-shot-pdl,fused-pdl --json "$O/fs-forward-$v.json"
  done
fi
if on th; then
  run t-host 300 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_host_allreduce" "${TT[@]}"
  run t-host-push-stress 120 "${G[@]}" TPCOMM_STRESS_CALLS=100000 TPCOMM_HOST_SMALL=push "$D/gpu_host_allreduce" \
    "${TT[@]}" gpu_host_stress
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
