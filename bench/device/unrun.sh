#!/usr/bin/env bash
# One device call for what was built but never run on a GPU, most important
# first, every step bounded (`timeout`) and skipped when its usual time no
# longer fits in BUDGET seconds. Ranks share GPU 0 (one GPU is enough).
# Staged binaries come from bench/device/stage_all.sh (D, default .dev/all);
# outputs go to O (default $OUT), packed into O/outputs.tgz.
# Steps (STEPS, comma list, run in the order given; default all, in this order):
#   g  the three 10,000-replay tests at world 2 (the graph-replay hang of
#      issue 15; a timeout prints the slot it waited on, both ranks' call
#      times and the slot read atomically), first with the binary
#      gpu_allreduce_pageable when staged (the test as it was: copies from
#      pageable memory), then gpu_allreduce (pinned copies)
#   c  gpu_collectives, gpu_coll_fallback, gpu_p2p_check at WORLDS
#   f  gpu_fallback (NCCL by size) and the host suite without stress at WORLDS
#   n  the drop-in's standalone GPU test (tpcomm-nccl served/tests/gpu.rs)
#   b  under MPS (ranks are processes): `tpcomm bench --device gpu --ranks 2`
#      and `tpcomm bench forward --launch processes --ranks 2 --layers 8`
#   s  bench/torch/collectives_check.py at WORLDS, every rank on GPU 0 under
#      MPS, the drop-in in standalone mode (torch.distributed + NCCL API)
#   l  bench/torch/hf_tp_check.py: a transformers tensor-parallel Llama (random
#      weights, no download) at TP 1 and at every world of WORLDS, float32 and
#      bfloat16, every rank on GPU 0 under MPS, the drop-in in standalone mode,
#      checked against TP 1; then once at TP 2 without the drop-in (plain NCCL:
#      expected to refuse the shared GPU, "Duplicate GPU detected")
#   w  the wheel's GPU test (bench/python/run_gpu.sh; needs .whl/ carried)
#   a  the 10,000-replay tests at every world size in WORLDS_ALL
#   p  the P2P suite without stress at every world size in WORLDS_ALL
#   k  hardware queues: the 10,000-replay tests at WORLDS_ALL with
#      CUDA_DEVICE_MAX_CONNECTIONS=32, and the eager one at 2 ranks with
#      CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream in one queue)
#   x  the 100,000-call stress tests (P2P, host) at WORLDS_STRESS (default 2,8), with
#      CUDA_DEVICE_MAX_CONNECTIONS=32
#   e  the planner's H200 efficiency measurement (bench/plan)
#   q  the quantized wire's GPU tests (gpu_quant) at WORLDS
#   h  `tpcomm bench --device gpu --launch threads --ranks 4` (threads sharing
#      GPU 0; the command sets CUDA_DEVICE_MAX_CONNECTIONS itself)
#   u  gpu_fused and gpu_plan_layout at WORLDS
#   v  the call words' cost: OLD's tpcomm against this one, bench under MPS
#   r  the forward bench's ranks as threads (gpu_forward forward_ranks_as_threads),
#      then its quantized modes (forward_quantized_modes_..., host path, threads)
#   R  only step r's quantized modes
#   m  mismatched calls at WORLDS (gpu_mismatch, ranks as threads, both
#      transports)
#   z  a rank killed or stopped during set-up, calls and end of `tpcomm bench
#      --device gpu --launch processes` at WORLDS, without MPS
#      (gpu_supervision, which runs $D/tpcomm)
#   Q  the quantized wire's speed and error (issue 20; quant_bench, ranks as
#      threads on GPU 0): exact bf16 against int8 and fp8 over the host path at
#      2 ranks, 4-64 MiB (the 0.6x target), the kernels' rate over P2P against
#      the copy bandwidth of the same run, then GPU-measured errors at 2, 4, 8
#      (Gaussian inputs, then Gaussian with 100x outliers)
#   P  under MPS: `tpcomm bench --device gpu --launch processes` at every world
#      of WORLDS_ALL, P2P then the host path (every row checked, #wrong)
#   A  other builds of the quantized kernels (QS: a directory or a comma list,
#      default .dev/qs; each with gpu_quant and quant_bench, built by hand and
#      carried too) against this build: each one's gpu_quant at WORLDS first,
#      then every quant_bench build alternated twice, P2P and host path, 2 ranks
#      on GPU 0 (QAB_REPS: --reps, default 10)
#   S  the drop-in choosing standalone mode by itself (TPCOMM_STANDALONE unset),
#      every rank on GPU 0 under MPS: collectives_check.py --quick at 2 and 4
#      ranks, then hf_tp_check.py at TP 2, float32
#   W  the planner's per-layer cost at two more widths (bench/plan/h200_efficiency.py
#      at hidden 2048 / MLP 6144 and hidden 8192 / MLP 28672, beside step e's 4096):
#      whether the cost beyond streaming is fixed per layer or grows with its bytes
# QUICK=1 passes --quick to collectives_check.py (step s); WORLDS_TORCH (spaces
# or commas) its worlds instead of WORLDS, TORCH_LIMIT its seconds per world
# (default 150). Step z: Z_FILTER picks supervision tests by name (e.g. set_up),
# Z_LIMIT its seconds (default 300).
#
#   BUDGET=520 STEPS=g,c,f,n,b WORLDS=2,4 bash bench/device/unrun.sh
set -u -o pipefail
O=${O:-${OUT:-/tmp/unrun-out}}
STEPS=${STEPS:-g,c,f,n,b,s,l,w,a,p,k,x,e,q,h,u,m,z,Q,P}
WORLDS=${WORLDS:-2,4}
WORLDS_ALL=${WORLDS_ALL:-2,3,4,5,8}
WORLDS_STRESS=${WORLDS_STRESS:-2,8}
BUDGET=${BUDGET:-520}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=common.sh
source "$here/common.sh"
export TPCOMM_GPU_TESTS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$O/gpus.csv" 2>&1
cat "$D/BUILD.txt" > "$O/build.txt" 2>/dev/null

# fits EST: true when EST seconds are still left of BUDGET (else logs a skip).
fits() {
  if [ $((BUDGET - SECONDS)) -lt "$1" ]; then
    echo "-- skipped ($((BUDGET - SECONDS)) s left, needs ~$1 s): ${*:2}" | tee -a "$O/log.txt"
    return 1
  fi
}
# t NAME WORLDS LIMIT EST BINARY [test args...]: a GPU test binary, ranks as threads.
t() {
  local n=$1 w=$2 l=$3 e=$4 b=$5
  shift 5
  fits "$e" "$n" || return 0
  local left=$((BUDGET - SECONDS))
  [ "$l" -gt "$left" ] && l=$left
  TPCOMM_TEST_WORLDS=$w run "$n" "$l" "$D/$b" --ignored --test-threads=1 --nocapture "$@"
}

step_g() {
  [ -x "$D/gpu_allreduce_pageable" ] && t graph-2-pageable 2 150 40 gpu_allreduce_pageable 10000_times
  t graph-2 2 150 40 gpu_allreduce 10000_times
}
step_c() {
  t collectives "$WORLDS" 150 40 gpu_collectives
  t coll-fallback "$WORLDS" 90 20 gpu_coll_fallback
  t p2p-check "$WORLDS" 60 10 gpu_p2p_check
}
step_f() {
  t fallback "$WORLDS" 90 20 gpu_fallback
  t host-suite "$WORLDS" 150 40 gpu_host_allreduce --skip stress
}
step_n() {
  t served 2 90 20 nccl_lib standalone_ranks_sharing
}
step_b() {
  mps_on
  if fits 30 bench-procs; then
    run bench-procs-mps 90 "$T" bench --device gpu --ranks 2 --min-bytes 1KiB --max-bytes 4MiB \
      --reps 5 --json "$O/bench-procs-mps.json"
  fi
  if fits 40 forward; then
    run forward-mps-2 120 "$T" bench forward --launch processes --ranks 2 --layers 8 --reps 5
  fi
  mps_off
}
# What the call words cost: the previous build's `tpcomm` (OLD, default
# .dev/old/tpcomm: carry it too) and this one, alternated three times, the
# same bench under MPS (2 processes sharing GPU 0: shared-GPU timings, only
# the ratio of the two builds in one call means anything).
step_v() {
  local old=${OLD:-.dev/old/tpcomm}
  [ -x "$old" ] || { echo "-- step v: no $old" | tee -a "$O/log.txt"; return 0; }
  mps_on
  # new-on / new-off: this build with TPCOMM_CHECK_CALLS=1 / 0 (the same
  # binary: tells the words' work apart from code generation).
  for i in 1 2 3; do
    for b in old new-off new-on; do
      fits 25 "cost-$b-$i" || continue
      local bin=$T check=1
      [ "$b" = old ] && bin=$old
      [ "$b" = new-off ] && check=0
      TPCOMM_CHECK_CALLS=$check run "cost-$b-$i" 60 "$bin" bench --device gpu --launch processes \
        --ranks 2 --algos one-shot --min-bytes 1KiB --max-bytes 1MiB --reps 5 --json "$O/cost-$b-$i.json"
    done
  done
  mps_off
}
step_s() {
  mps_on
  w_list=${WORLDS_TORCH:-$WORLDS}
  for w in ${w_list//,/ }; do
    fits 40 "torch-shared-$w" || continue
    local lim=${TORCH_LIMIT:-150}
    TPCOMM_STANDALONE=1 TPCOMM_MAX_BYTES=64MiB run "torch-shared-$w" "$lim" python3 \
      bench/torch/collectives_check.py --ranks "$w" --placement shared \
      --lib "$(realpath "$D/libtpcomm_nccl.so")" --out "$O/torch-shared-$w.json" \
      --timeout $((lim - 10)) ${QUICK:+--quick}
  done
  mps_off
}
# TPCOMM_MAX_BYTES for step m: standalone mode serves all-reduces of any size in
# pieces but refuses all-gather blocks above it. The model's largest messages are
# the forward's lm_head all-gather (batch x seq x vocab / TP: 256 KiB a rank in
# float32 at TP 2) and its 64 KiB all-reduces, so the default 16 MiB would do; 64MiB
# is the setting step s runs the collectives with (one configuration for both) and
# leaves room for a larger --batch/--seq/--vocab.
step_l() {
  mps_on
  if fits 150 hf-tp; then
    TPCOMM_STANDALONE=1 TPCOMM_MAX_BYTES=64MiB run hf-tp 420 python3 bench/torch/hf_tp_check.py \
      --lib "$(realpath "$D/libtpcomm_nccl.so")" --tp ${WORLDS//,/ } --dtype float32 bfloat16 \
      --out "$O/hf-tp.json" --timeout 400
  fi
  if fits 60 hf-tp-plain; then
    run hf-tp-plain 150 python3 bench/torch/hf_tp_check.py --tp 2 --out "$O/hf-tp-plain.json" \
      --timeout 140
  fi
  mps_off
  # The per-rank logs, as one file (a device call returns few files).
  for n in hf-tp hf-tp-plain; do
    [ -d "$O/$n-logs" ] && tar czf "$O/$n-logs.tgz" -C "$O" "$n-logs" && rm -rf "${O:?}/$n-logs"
  done
}
step_w() {
  if fits 60 wheel; then
    OUT=$O/wheel run wheel 200 bash bench/python/run_gpu.sh --worlds 2 4 --replays 1000 --timeout-s 180
  fi
}
step_a() {
  t graph-all "$WORLDS_ALL" 200 60 gpu_allreduce 10000_times
}
step_p() {
  t p2p-suite "$WORLDS_ALL" 200 60 gpu_allreduce --skip stress --skip 10000_times
}
step_k() {
  CUDA_DEVICE_MAX_CONNECTIONS=32 t graph-all-conn32 "$WORLDS_ALL" 200 60 gpu_allreduce 10000_times
  CUDA_DEVICE_MAX_CONNECTIONS=1 t graph-2-conn1 2 60 30 gpu_allreduce same_two_calls
}
step_x() {
  # One run per world and transport, so a cut run loses only itself.
  local w
  for w in ${WORLDS_STRESS//,/ }; do
    CUDA_DEVICE_MAX_CONNECTIONS=32 t "stress-p2p-$w" "$w" 150 40 gpu_allreduce stress
    CUDA_DEVICE_MAX_CONNECTIONS=32 t "stress-host-$w" "$w" 150 40 gpu_host_allreduce stress
  done
}
step_e() {
  if fits 60 plan-efficiency; then
    OUT=$O/plan run plan-efficiency 150 bash bench/plan/h200_efficiency.sh
  fi
}
step_q() {
  # ~70-90 s at worlds 2,4 with inputs shared by the six calls of a case (was
  # ~300 s: the CPU model of 990 cases per world and transport, one thread).
  t quant "$WORLDS" 240 100 gpu_quant
}
step_h() {
  if fits 30 bench-threads-4; then
    run bench-threads-4 90 "$T" bench --device gpu --launch threads --ranks 4 --min-bytes 1KiB \
      --max-bytes 1MiB --reps 5 --json "$O/bench-threads-4.json"
  fi
}
step_u() {
  t fused "$WORLDS" 120 30 gpu_fused
  t plan-layout "$WORLDS" 60 10 gpu_plan_layout
}
# The forward bench with ranks as threads (2 ranks on GPU 0; new in session 8).
step_r() {
  t forward-threads 2 150 40 gpu_forward forward_ranks_as_threads
  t forward-quant 2 150 40 gpu_forward forward_quantized_modes
}
# Only the forward bench's quantized modes (step r's second half).
step_R() {
  t forward-quant 2 150 40 gpu_forward forward_quantized_modes
}
step_m() {
  t mismatch "$WORLDS" 240 60 gpu_mismatch
}
step_z() {
  # Without MPS: the test does not need the ranks to run at once, and under
  # MPS a killed or stopped client left the server refusing the next
  # clients (cuDevicePrimaryCtxRetain: out of memory / unknown error,
  # session 8, call 1).
  t supervision "$WORLDS" "${Z_LIMIT:-300}" 90 gpu_supervision ${Z_FILTER:-}
}
step_W() {
  local h m hm
  for hm in 2048:6144 8192:28672; do
    h=${hm%:*} m=${hm#*:}
    fits 30 "plan-width-$h" || continue
    OUT=$O/plan run "plan-width-$h" 120 bash bench/plan/h200_efficiency.sh --hidden "$h" \
      --mlp "$m" --heads $((h / 128)) --kv-heads 8
  done
}
step_Q() {
  export CUDA_DEVICE_MAX_CONNECTIONS=32
  if fits 100 quant-speed-host; then
    run quant-speed-host 150 "$D/quant_bench" --ranks 2 --gpus 1 --transport host \
      --min 4MiB --max 64MiB --iters 10 --reps 15
  fi
  if fits 60 quant-speed-p2p; then
    run quant-speed-p2p 90 "$D/quant_bench" --ranks 2 --gpus 1 --transport cuda \
      --min 4MiB --max 64MiB --iters 10 --reps 10
  fi
  for w in 2 4 8; do
    fits 40 "quant-error-$w" || continue
    run "quant-error-$w" 60 "$D/quant_bench" --ranks "$w" --gpus 1 --transport host \
      --min 16MiB --max 16MiB --iters 2 --reps 3
  done
  for w in 2 4 8; do
    fits 40 "quant-outliers-$w" || continue
    run "quant-outliers-$w" 60 "$D/quant_bench" --ranks "$w" --gpus 1 --transport host \
      --min 16MiB --max 16MiB --iters 2 --reps 3 --dist outliers
  done
  unset CUDA_DEVICE_MAX_CONNECTIONS
}
step_P() {
  mps_on
  for w in ${WORLDS_ALL//,/ }; do
    for tr in cuda host; do
      fits 30 "bench-procs-$tr-$w" || continue
      run "bench-procs-$tr-$w" 120 "$T" bench --device gpu --launch processes --ranks "$w" \
        --transport "$tr" --min-bytes 1KiB --max-bytes 4MiB --reps 5 --json "$O/bench-procs-$tr-$w.json"
    done
  done
  mps_off
}
step_A() {
  # QS: one build directory or a comma list of them (each with gpu_quant and
  # quant_bench); QAB_REPS: quant_bench's --reps (default 10).
  local qs_list=${QS:-.dev/qs} qs
  export CUDA_DEVICE_MAX_CONNECTIONS=32
  for qs in ${qs_list//,/ }; do
    [ -x "$qs/quant_bench" ] || { echo "-- step A: no $qs/quant_bench" | tee -a "$O/log.txt"; continue; }
    cat "$qs/BUILD.txt" >> "$O/build.txt" 2>/dev/null
    if fits 100 "qs-quant-${qs##*/}"; then
      TPCOMM_TEST_WORLDS=$WORLDS run "qs-quant-${qs##*/}" 240 "$qs/gpu_quant" --ignored --test-threads=1 --nocapture
    fi
  done
  local i b tr bin
  for i in 1 2; do
    for b in main ${qs_list//,/ }; do
      bin=$D/quant_bench
      [ "$b" = main ] || bin=$b/quant_bench
      [ -x "$bin" ] || continue
      for tr in cuda host; do
        fits 40 "qab-${b##*/}-$tr-$i" || continue
        run "qab-${b##*/}-$tr-$i" 90 "$bin" --ranks 2 --gpus 1 --transport "$tr" \
          --min 4MiB --max 64MiB --iters 10 --reps "${QAB_REPS:-10}"
      done
    done
  done
  unset CUDA_DEVICE_MAX_CONNECTIONS
}
step_S() {
  mps_on
  local w lib
  lib=$(realpath "$D/libtpcomm_nccl.so")
  for w in 2 4; do
    fits 40 "torch-auto-$w" || continue
    (
      unset TPCOMM_STANDALONE
      export TPCOMM_MAX_BYTES=64MiB
      run "torch-auto-$w" 150 python3 bench/torch/collectives_check.py --ranks "$w" --placement shared \
        --lib "$lib" --out "$O/torch-auto-$w.json" --timeout 140 --quick
    )
  done
  if fits 90 hf-tp-auto; then
    (
      unset TPCOMM_STANDALONE
      export TPCOMM_MAX_BYTES=64MiB
      run hf-tp-auto 200 python3 bench/torch/hf_tp_check.py --lib "$lib" --standalone env --tp 2 \
        --dtype float32 --out "$O/hf-tp-auto.json" --timeout 180
    )
    [ -d "$O/hf-tp-auto-logs" ] && tar czf "$O/hf-tp-auto-logs.tgz" -C "$O" hf-tp-auto-logs && rm -rf "${O:?}/hf-tp-auto-logs"
  fi
  mps_off
}
# The steps run in the order STEPS names them.
for s in ${STEPS//,/ }; do
  if declare -F "step_$s" > /dev/null; then
    "step_$s"
  else
    echo "-- unknown step $s" | tee -a "$O/log.txt"
  fi
done
pack
