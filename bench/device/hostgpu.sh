#!/bin/bash
# One device call for the host-memory GPU transport (issue 4), about 4 minutes:
# copy bandwidth, tpcomm bench --device gpu --transport host (procs) with NCCL rows
# under NCCL_P2P_DISABLE=1, the GPU tests of the host path (incl. the 100k
# stress), then, time permitting, threads and the torch anchor without P2P.
# Binaries come from .dev/all/ (tpcomm, gpu_host_allreduce test binary).
# Results go to $OUT/hostgpu.tgz (one file, read by summarize_hostgpu.py) and
# the log to $OUT/hostgpu-log.txt. Every command is bounded by `timeout`, and
# the whole run by a 230 s budget (optional steps are skipped past it).
#   bash bench/device/hostgpu.sh
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache
D=.dev/all
FINAL=${OUT:-/tmp/hostgpu-out}
OUT=$FINAL/hostgpu
mkdir -p "$OUT"
LOG=$FINAL/hostgpu-log.txt
# Whatever happens, the results leave as one archive (the device call returns
# only a few files).
finish() { tar czf "$FINAL/hostgpu.tgz" -C "$FINAL" hostgpu && rm -rf "$OUT"; }
trap finish EXIT
BUDGET=230
# Seconds for a step: its own limit, or what is left of the budget if less,
# never below 1 (`timeout 0` would mean no limit).
lim() { local left=$((BUDGET - SECONDS)); [ "$left" -lt "$1" ] && left=$left || left=$1; [ "$left" -lt 1 ] && left=1; echo "$left"; }
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }

TPC=$D/tpcomm
TEST=$(ls $D/gpu_host_allreduce* 2>/dev/null | grep -v '\.d$' | head -1)
step "machine"
{
  timeout 10 nvidia-smi --query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,clocks.sm,temperature.gpu,power.draw --format=csv
  timeout 10 nvidia-smi topo -p2p r
  timeout 5 df -h /dev/shm
  echo "ulimit -l: $(ulimit -l)"
  echo "tpcomm: $TPC  test binary: ${TEST:-MISSING}"
  timeout 5 ls -la $D
} 2>&1 | tee -a "$LOG"

step "copy bandwidth (pinned host <-> device, 64 MiB)"
timeout "$(lim 25)" python3 bench/device/copy_bw.py --out "$OUT/copy-bw.json" 2>&1 | tail -12 | tee -a "$LOG"

export TPCOMM_GPU_TESTS=1
# Correctness first (about 15 s): its failures say more than a failed bench.
if [ -n "${TEST:-}" ]; then
  step "test gpu_host_sums_are_right"
  timeout "$(lim 45)" "$TEST" --test-threads=1 --nocapture gpu_host_sums_are_right 2>&1 | grep -v "^\s*[0-9]*: \|^\s*at " | tail -25 | tee -a "$OUT/tests.txt"
fi

# Bench: small sizes with both host kernels (one-shot = LL words, two-shot =
# chunked), large ones chunked only (LL stops at 1 MiB); NCCL rows without P2P.
B="--launch procs --transport host --dtype bf16 --modes eager,graph --iters 20 --timeout-ms 10000"
step "bench (gpu) host procs 1KiB..1MiB (NCCL_P2P_DISABLE=1)"
NCCL_P2P_DISABLE=1 timeout "$(lim 50)" $TPC bench --device gpu $B --reps 15 --min 1KiB --max 1MiB --algos one-shot,two-shot,nccl \
  --json "$OUT/bench-procs-small.json" > "$OUT/bench-procs-small.txt" 2>&1
echo "exit $?" | tee -a "$LOG"; tail -4 "$OUT/bench-procs-small.txt" | tee -a "$LOG"
step "bench (gpu) host procs 2MiB..64MiB (NCCL_P2P_DISABLE=1)"
# Two rotating buffers and 10 reps: checking 64 MiB outputs in float64 on the host
# is what takes the time here, not the GPUs.
NCCL_P2P_DISABLE=1 timeout "$(lim 70)" $TPC bench --device gpu $B --rotate 2 --reps 10 --min 2MiB --max 64MiB --algos two-shot,nccl \
  --json "$OUT/bench-procs-large.json" > "$OUT/bench-procs-large.txt" 2>&1
echo "exit $?" | tee -a "$LOG"; tail -4 "$OUT/bench-procs-large.txt" | tee -a "$LOG"

if [ -n "${TEST:-}" ]; then
  for t in gpu_host_peer_that_never gpu_host_memory_report gpu_transport_auto; do
    [ "$((BUDGET - SECONDS))" -gt 10 ] || break
    step "test $t"
    timeout "$(lim 40)" "$TEST" --test-threads=1 --nocapture "$t" 2>&1 | grep -v "^\s*[0-9]*: \|^\s*at " | tail -25 | tee -a "$OUT/tests.txt"
  done
  if [ "$((BUDGET - SECONDS))" -gt 30 ]; then
    step "test stress 100k"
    TPCOMM_STRESS_CALLS=100000 timeout "$(lim 80)" "$TEST" --test-threads=1 --nocapture gpu_host_stress 2>&1 | grep -v "^\s*[0-9]*: \|^\s*at " | tail -15 | tee -a "$OUT/tests.txt"
  fi
else
  echo "no gpu_host_allreduce test binary in $D" | tee -a "$OUT/tests.txt"
fi

if [ "$((BUDGET - SECONDS))" -gt 25 ]; then
  step "bench (gpu) host threads 1KiB..64MiB (auto, NCCL_P2P_DISABLE=1)"
  NCCL_P2P_DISABLE=1 timeout "$(lim 40)" $TPC bench --device gpu --launch threads --transport host --dtype bf16 --modes graph \
    --reps 9 --iters 20 --min 1KiB --max 64MiB --algos auto,nccl --timeout-ms 10000 \
    --json "$OUT/bench-threads.json" > "$OUT/bench-threads.txt" 2>&1
  echo "exit $?" | tee -a "$LOG"; tail -3 "$OUT/bench-threads.txt" | tee -a "$LOG"
fi
TORCH=$D/torch_allreduce.py
[ -f "$TORCH" ] || TORCH=shared/anchors/torch_allreduce.py
if [ "$((BUDGET - SECONDS))" -gt 25 ] && [ -f "$TORCH" ]; then
  step "torch anchor, NCCL_P2P_DISABLE=1"
  NCCL_P2P_DISABLE=1 timeout "$(lim 45)" python3 "$TORCH" --tag nop2p --out "$OUT/torch-nop2p.json" 2>&1 | tail -25 > "$OUT/torch-nop2p.txt"
  echo "exit $?" | tee -a "$LOG"
fi
step "summary rows"
grep -hE "^ +(1024|65536|262144|1048576|16777216|67108864) " "$OUT"/bench-procs-*.txt 2>/dev/null | tee -a "$LOG"
step "done"
