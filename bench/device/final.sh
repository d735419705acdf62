#!/usr/bin/env bash
# One device call (nvidia-h200-x2) for the host-memory GPU path (issue 4) and
# selection (issue 5) when little device time is left: the benchmarks that the
# targets are judged on, each under `timeout`, about 3.5 minutes in all.
# Binaries come from .dev/all (bench/device/stage_hostgpu.sh puts them there).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=.dev/all
T=$D/tpcomm
O=${OUT:?set OUT}
{
  echo "== [$SECONDS s] host transport, processes, 1 KiB..1 MiB, NCCL with NCCL_P2P_DISABLE=1"
  NCCL_P2P_DISABLE=1 timeout 45 "$T" bench --device gpu --launch procs --transport host --dtype bf16 --modes eager,graph \
    --iters 20 --reps 11 --min 1KiB --max 1MiB --algos one-shot,two-shot,nccl --timeout-ms 10000 --json "$O/host-small.json"
  echo "exit $?"
  echo "== [$SECONDS s] host transport, processes, 2 MiB..64 MiB"
  NCCL_P2P_DISABLE=1 timeout 50 "$T" bench --device gpu --launch procs --transport host --dtype bf16 --modes graph \
    --rotate 2 --iters 10 --reps 7 --min 2MiB --max 64MiB --algos two-shot,nccl --timeout-ms 10000 --json "$O/host-large.json"
  echo "exit $?"
  echo "== [$SECONDS s] pinned host <-> device copy bandwidth"
  timeout 20 python3 bench/device/copy_bw.py --out "$O/copy-bw.json"
  echo "exit $?"
  echo "== [$SECONDS s] tune (P2P, threads)"
  timeout 45 "$T" tune --launch threads --min 1KiB --max 64MiB --iters 10 --reps 5 --out "$O/tuning.toml" --json "$O/tune.json"
  echo "exit $?"
  TABLE=(--table "$O/tuning.toml"); [ -s "$O/tuning.toml" ] || TABLE=()
  echo "== [$SECONDS s] auto against every fixed choice and NCCL, processes"
  timeout 50 "$T" bench --device gpu --launch procs --algos one-shot,two-shot,nccl,auto --midpoints --min 1KiB --max 64MiB \
    --iters 20 --reps 9 "${TABLE[@]}" --json "$O/auto.json"
  echo "exit $?"
  echo "== [$SECONDS s] done"
} 2>&1 | tee "$O/final-log.txt"
