#!/bin/bash
# Issue 20, the quantized wire, for the lead: one device call on one H200
# (about 4 minutes). Builds nothing: it runs binaries built beforehand with
#   cargo build --release -p tpcomm --example quant_bench
#   cargo test --release -p tpcomm --test gpu_quant --no-run
#   cargo build --release -p tpcomm-cli
# and copied (or carried) to $BIN (default target/release).
#
# Steps, each bounded by `timeout`, output to $OUT/quant-log.txt:
# 1. 2 ranks sharing GPU 0 over the host path: exact bf16 vs int8 and fp8
#    (group 64) at 4-64 MiB, graph mode; rows print time, ratio to exact
#    ("x exact"; target for int8 <= 0.6 at 4-64 MiB), rel-RMS, max-rel, and
#    whether the output equals the CPU model bit for bit on every rank. The
#    run also measures the GPU's device-to-device copy bandwidth. Then the
#    same with the gathered form (QuantAlgo::Gathered), which also times its
#    pack and unpack-sum kernels alone against that bandwidth.
# 2. The quantized kernels' rate against that copy bandwidth: 2 ranks on GPU 0
#    over P2P (all traffic in device memory), 4-64 MiB ("GPU 0 GB/s vs copy").
# 3. Errors measured on the GPU at 2, 4 and 8 ranks (sharing GPU 0, host
#    path), 16 MiB.
# 4. tpcomm bench (threads, 2 ranks sharing GPU 0, host path): the exact
#    kernels and int8 / fp8 rows side by side, with the quantized rows'
#    error table and #wrong against the CPU model.
# 5. The GPU tests (tests/gpu_quant.rs) at 2 and 4 ranks on GPU 0.
#   bash bench/quant/run.sh
set -u -o pipefail
export TPCOMM_CACHE_DIR=${TPCOMM_CACHE_DIR:-/tmp/tpcomm-cache}
BIN=${BIN:-target/release}
OUTDIR=${OUT:-/tmp/quant-out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/quant-log.txt
step() { echo "== [$SECONDS s] $*" | tee -a "$LOG"; }
QB=$BIN/examples/quant_bench
TEST=$(ls $BIN/deps/gpu_quant-* 2>/dev/null | grep -v '\.d$' | head -1)

step "machine"
{ timeout 10 nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv; echo "bench: $QB test: ${TEST:-MISSING}"; } 2>&1 | tee -a "$LOG"

step "1. host path, 2 ranks sharing GPU 0: exact bf16 vs int8 / fp8, 4-64 MiB"
timeout 150 "$QB" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 15 2>&1 | tee -a "$LOG"

step "1b. the same with the gathered form (--algo gathered), and its pack and unpack-sum kernels' rate vs copy bandwidth"
timeout 150 "$QB" --ranks 2 --gpus 1 --transport host --min 4MiB --max 64MiB --iters 10 --reps 15 --algo gathered 2>&1 | tee -a "$LOG"

step "2. P2P on one GPU (device memory only): quantized kernel rate vs copy bandwidth"
timeout 90 "$QB" --ranks 2 --gpus 1 --transport cuda --min 4MiB --max 64MiB --iters 10 --reps 10 2>&1 | tee -a "$LOG"

for w in 2 4 8; do
  step "3. errors on the GPU at $w ranks (sharing GPU 0, host path), 16 MiB"
  timeout 60 "$QB" --ranks $w --gpus 1 --transport host --min 16MiB --max 16MiB --iters 2 --reps 3 2>&1 | tee -a "$LOG"
done

step "4. tpcomm bench, 2 ranks sharing GPU 0, host path: exact vs int8 / fp8"
CUDA_VISIBLE_DEVICES=0 timeout 150 "$BIN/tpcomm" bench --device gpu --launch threads --ranks 2 --transport host \
  --algos one-shot,two-shot,int8,fp8 --modes graph --min 4MiB --max 64MiB --reps 10 2>&1 | tee -a "$LOG"

if [ -n "${TEST:-}" ]; then
  step "5. GPU tests, worlds 2 and 4 on GPU 0"
  TPCOMM_GPU_TESTS=1 TPCOMM_TEST_WORLDS=2,4 CUDA_VISIBLE_DEVICES=0 timeout 400 "$TEST" --ignored --test-threads=1 2>&1 | tail -30 | tee -a "$LOG"
fi
step "done"
