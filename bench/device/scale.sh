#!/usr/bin/env bash
# Issue 8: every tpcomm path on all the GPUs of a 4- or 8-GPU machine
# (nvidia-h200-x4 / -x8), written while only 2-GPU machines were lent; it runs
# unchanged on 2. Binaries from D (bench/device/stage_all.sh fills .dev/all and
# copies this script there). Steps by STEPS (comma list), two device calls:
#   STEPS=m,t,p,h   probe; GPU tests with the 100k stress on both transports;
#                   P2P bench + torch anchor; host transport forced + NCCL with
#                   NCCL_P2P_DISABLE=1 (delta words) +
#                   anchor + copy bandwidth
#   STEPS=u,f       tune (P2P in two halves, merged; host forced), auto against
#                   every fixed choice with those tables on both transports;
#                   forward bench over P2P and over host memory
# Everything but log.txt lands in $OUT/outputs.tgz (a call returns 8 files).
#   bash .dev/all/scale.sh
O=${OUT:-/tmp/scale-out}
STEPS=${STEPS:-m,t,p,h}
# shellcheck source=bench/device/common.sh
source "$(dirname "$0")/common.sh"
N=$(nvidia-smi -L 2>/dev/null | wc -l)
TAG=h200x$N
G=(env TPCOMM_GPU_TESTS=1)
TT=(--test-threads=1 --nocapture)
echo "== $TAG, STEPS=$STEPS" | tee -a "$O/log.txt"
if on m; then
  run machine 30 bash -c "nvidia-smi; nvidia-smi topo -m; cat $D/BUILD.txt"
  run probe 120 "$T" probe --json "$O/probe.json"
fi
if on t; then
  run t-example 120 "$D/tp_allreduce"
  run t-p2p 400 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_allreduce" "${TT[@]}"
  run t-host 400 "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_host_allreduce" "${TT[@]}"
fi
if on p; then
  run p2p-procs 300 "$T" bench --device gpu --launch procs --transport cuda --min 1KiB --max 64MiB \
    --algos one-shot,one-shot-pdl,two-shot,two-shot-pdl,nccl --reps 11 --json "$O/p2p-procs.json"
  run anchor-p2p 300 python3 "$D/torch_allreduce.py" --tag "$TAG" --out "$O/anchor-p2p.json"
fi
if on h; then
  run host-procs 400 env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch procs --transport host \
    --min 1KiB --max 64MiB --algos one-shot,two-shot,nccl --reps 9 --timeout-ms 20000 --json "$O/host-procs.json"
  run anchor-nop2p 300 env NCCL_P2P_DISABLE=1 python3 "$D/torch_allreduce.py" --tag "$TAG-nop2p" \
    --out "$O/anchor-nop2p.json"
  run copy-bw 120 python3 "$D/copy_bw.py" --out "$O/copy-bw.json"
fi
if on u; then
  run tune-small 300 "$T" tune --launch threads --min 1KiB --max 4MiB --iters 10 --reps 7 \
    --out "$O/tuning-small.toml" --json "$O/tune-small.json"
  run tune-large 300 "$T" tune --launch threads --min 4MiB --max 64MiB --iters 5 --reps 5 \
    --out "$O/tuning-large.toml" --json "$O/tune-large.json"
  FP=$(sed -n 's/^fingerprint = "\(.*\)"$/\1/p' "$O/tuning-small.toml" 2>/dev/null)
  CLASS=$(sed -n 's/^machine_class = "\(.*\)"$/\1/p' "$O/tuning-small.toml" 2>/dev/null)
  if [ -n "$FP" ]; then
    run tune-merge 60 "$T" tune --from-bench "$O/tune-small.json" "$O/tune-large.json" \
      --class "${CLASS:-nvlink}" --fingerprint "$FP" --out "$O/tuning.toml"
    run auto-p2p 400 "$T" bench --device gpu --launch procs --transport cuda --algos one-shot,two-shot,nccl,auto \
      --midpoints --min 1KiB --max 64MiB --reps 11 --table "$O/tuning.toml" --json "$O/auto-p2p.json"
  fi
  run tune-host 400 env NCCL_P2P_DISABLE=1 "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
    --iters 5 --reps 5 --out "$O/tuning-host.toml" --json "$O/tune-host.json"
  [ -s "$O/tuning-host.toml" ] && run auto-host 500 env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch procs \
    --transport host --algos one-shot,two-shot,nccl,auto --midpoints --min 1KiB --max 64MiB --reps 9 \
    --timeout-ms 20000 --table "$O/tuning-host.toml" --json "$O/auto-host.json"
fi
if on f; then
  run forward-p2p 300 "$T" bench forward --transport cuda --tokens 1,4,8,16 --json "$O/forward-p2p.json"
  run forward-host 300 env NCCL_P2P_DISABLE=1 "$T" bench forward --transport host --tokens 1,4,8,16 \
    --json "$O/forward-host.json"
fi
pack
