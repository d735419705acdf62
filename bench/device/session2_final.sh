#!/usr/bin/env bash
# The closing device call of session 2 (nvidia-h200-x2), after the merges:
#   tp the P2P tests only; fw the forward bench over P2P
#   t  every GPU test (100k-call stress on both transports included)
#   e  the drop-in library: ctypes client and torch comparison
#   p  P2P bench (procs and threads launch, PDL rows too), 1 KiB-64 MiB, torch anchor
#   a  auto against every fixed choice and NCCL with the committed table (P2P)
#   h  the same on the host transport forced, NCCL with NCCL_P2P_DISABLE=1,
#      with the host-forced table; then the torch anchor without P2P and the
#      pinned copy bandwidth, same call
# Binaries from D (bench/device/stage_all.sh fills .dev/all; copy this script
# there too). Outputs to $OUT/<step>.txt|json.
#   bash .dev/all/session2_final.sh
O=${OUT:-/tmp/final-out}
STEPS=${STEPS:-t,e,p,a,h}
# shellcheck source=bench/device/common.sh
source "$(dirname "$0")/common.sh"
G=(env TPCOMM_GPU_TESTS=1)
TT=(--test-threads=1 --nocapture)
# gpu_forward runs the tpcomm whose absolute path was compiled in
# (gpu_forward.tpcomm-path): link it to the staged one unless a real file is there.
FWD=$(cat "$D/gpu_forward.tpcomm-path" 2>/dev/null)
if [ -n "$FWD" ] && { [ ! -e "$FWD" ] || [ -L "$FWD" ]; }; then
  mkdir -p "$(dirname "$FWD")" && ln -sfn "$PWD/$T" "$FWD"
fi
if on f; then  # the forward test alone
  run t-forward 180 "${G[@]}" "$D/gpu_forward" "${TT[@]}" --ignored
fi
if on tp; then  # the P2P-kernel tests alone (after a launch-shape change)
  run t-p2p 200 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_allreduce" "${TT[@]}"
  run t-fused 60 "${G[@]}" "$D/gpu_fused" "${TT[@]}" --ignored
  run t-forward 180 "${G[@]}" "$D/gpu_forward" "${TT[@]}" --ignored
fi
if on fw; then
  run forward-p2p 200 "$T" bench forward --transport cuda --tokens 1,4,8,16 \
    --modes none,none-pdl,nccl,one-shot,one-shot-pdl,two-shot,fused,fused-pdl --json "$O/forward-p2p.json"
fi
if on t; then
  run t-example 120 "$D/tp_allreduce"
  run t-fallback 90 "${G[@]}" "$D/gpu_fallback" "${TT[@]}"
  run t-host 240 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_host_allreduce" "${TT[@]}"
  run t-p2p 200 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_allreduce" "${TT[@]}"
  run t-fused 60 "${G[@]}" "$D/gpu_fused" "${TT[@]}" --ignored
  run t-nccl 60 "${G[@]}" "$D/nccl_gpu" "${TT[@]}" --ignored
  run t-selftune 60 "${G[@]}" "$D/gpu_self_tune" "${TT[@]}"
  run t-forward 180 "${G[@]}" "$D/gpu_forward" "${TT[@]}" --ignored
fi
if on e; then
  run dropin-pynccl 60 env TPCOMM_LOG=info TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/pynccl_ctypes.py" \
    --lib "$D/libtpcomm_nccl.so" --out "$O/dropin-pynccl.json"
  run dropin-torch 150 env TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/torch_dropin.py" \
    --lib "$D/libtpcomm_nccl.so" --out "$O/dropin-torch.json"
fi
if on p; then
  for l in procs threads; do
    run p2p-$l 150 "$T" bench --device gpu --launch $l --transport cuda --min 1KiB --max 64MiB \
      --algos one-shot,one-shot-pdl,two-shot,two-shot-pdl,nccl --reps 15 --json "$O/p2p-$l.json"
  done
  run anchor-p2p 150 python3 "$D/torch_allreduce.py" --tag h200x2 --out "$O/anchor-p2p.json"
fi
if on a; then
  run auto-p2p 200 "$T" bench --device gpu --launch procs --transport cuda --algos one-shot,two-shot,nccl,auto \
    --midpoints --min 1KiB --max 64MiB --reps 15 --table tuning/h200x2-v1-ad4f67d8cd1a3196.toml --json "$O/auto-p2p.json"
fi
if on h; then
  run auto-host 240 env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch procs --transport host \
    --algos one-shot,two-shot,nccl,auto --midpoints --min 1KiB --max 64MiB --reps 11 --timeout-ms 10000 \
    --table tuning/h200x2-host-forced-v1-ad4f67d8cd1a3196.toml --json "$O/auto-host.json"
  # the chunk rule above 4 MiB (kept from session 1) against 128 KiB chunks there
  run chunk-mid 90 "$T" bench --device gpu --launch procs --transport host --modes graph --reps 9 --rotate 2 \
    --min 4MiB --max 16MiB --midpoints --algos two-shot --json "$O/chunk-mid.json"
  run chunk-mid-128k 90 env TPCOMM_HOST_CHUNK=128KiB "$T" bench --device gpu --launch procs --transport host \
    --modes graph --reps 9 --rotate 2 --min 4MiB --max 16MiB --midpoints --algos two-shot --json "$O/chunk-mid-128k.json"
  run anchor-nop2p 150 env NCCL_P2P_DISABLE=1 python3 "$D/torch_allreduce.py" --tag nop2p --out "$O/anchor-nop2p.json"
  run copy-bw 90 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
pack
