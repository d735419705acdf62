#!/usr/bin/env bash
# shellcheck disable=SC2317 # the part_* functions are called by name
usage() {
  cat <<'EOF'
Runs tpcomm's GPU checks and measurements on the machine it is on, one GPU or several.

  bash bench/device/suite.sh [--only PARTS] [--worlds LIST] [--budget S] [--dry-run] ...

Build and stage first, on the build machine:

  bash bench/device/stage_all.sh .dev/all     # release binaries, GPU test executables, scripts

then, on the GPU machine, from the repository root (the staged folder carried beside it):

  bash bench/device/suite.sh                            # every part
  bash bench/device/suite.sh --only tests,stress --worlds 2,3,4,5,8
  bash bench/device/suite.sh --only quant --budget 200 --dry-run   # show what would run

Parts, in the order they run (--only takes a comma list of them):
  tests    every GPU test executable (crates/*/tests/gpu_*.rs, nccl_gpu, the drop-in's
           standalone test) with ranks as threads at every world of --worlds; on one GPU
           all ranks share it, and nccl_gpu and gpu_forward's two NCCL comparisons (2 GPUs
           or more) are listed as not run here. gpu_supervision kills and stops rank
           processes (no MPS).
  stress   the 100,000-call stress tests (P2P, pinned host) at --stress-worlds
  shared   ranks as processes: under MPS, `tpcomm bench --launch processes` at every
           world (both transports, every result checked) and `bench forward` at 2 and 4
           ranks; once without MPS (the warning, the cost)
  bench    the timing runs: one GPU: `tpcomm bench --launch threads` (2 ranks sharing it)
           and `tpcomm explain`; several GPUs: probe, P2P against NCCL and the torch
           anchor, the host transport against NCCL without P2P, copy bandwidth, tune
           (P2P in two halves, merged; host), auto against every fixed choice, the
           tp_allreduce example
  dropin   the drop-in NCCL. One GPU: torch.distributed collectives (standalone mode,
           MPS) at every world, transformers tensor parallelism, the drop-in choosing
           standalone by itself. Several: pynccl and torch clients, collectives one rank
           per GPU with the drop-in and with plain NCCL
  conformance  the drop-in driven by its C API as an NCCL program would (tpcomm-conformance,
           docs/conformance.md): every pattern at every world of --worlds, ranks as threads
           (standalone), then as processes under MPS; every output element checked
  quant    the quantized wire, 2 ranks on GPU 0: quant_bench speed against the exact
           bf16 call over the host path (one-shot/two-shot, then the gathered form with
           its kernels' rates against the copy bandwidth) and over P2P; errors at 2, 4,
           8 ranks (Gaussian, then with 100x outliers); `tpcomm bench` with int8 and fp8
           rows beside the exact ones (the GPU tests are in part tests)
  forward  `tpcomm bench forward`: ranks as threads on one GPU (exact and quantized
           modes), and one rank per GPU over P2P and host memory on several
  plan     the planner's per-layer cost (bench/plan/h200_efficiency.sh, three widths)
  wheel    the Python wheel's GPU test (bench/python/run_gpu.sh; needs .whl/ carried:
           without it the default run notes it, --only wheel fails)

Options:
  --only PARTS        comma list of parts (default: all of them)
  --steps LIST        only these steps of the selected parts, as PART/NAME shell patterns
                      (comma list, e.g. tests/quant,stress/*-8); the log names every step
  --worlds LIST       world sizes for ranks sharing GPUs (default 2,3,4,5,8)
  --stress-worlds L   world sizes of the stress tests (default 2,8)
  --stress-calls N    calls per stress test (default 100000)
  --budget S          seconds for everything (default 540). A step whose usual time no
                      longer fits is skipped and listed with a command for the next call;
                      each step's timeout is cut to what is left
  --bin DIR           the staged binaries (default .dev/all, from stage_all.sh)
  --out DIR           where outputs go (default $OUT, else /tmp/suite-out)
  --tag NAME          names the outputs (default suite)
  --dry-run           print each step's command, advance a virtual clock by its usual
                      time, run nothing (without nvidia-smi it plans for DRY_GPUS GPUs,
                      default 1)
  -h, --help          this text

Outputs (a device call returns few files): OUT/TAG-log.txt (every command, exit status,
time and the last lines of its output), OUT/TAG-summary.txt, OUT/TAG.tgz (every output,
one folder per part). The last line printed is the summary:
  suite: P passed, F failed, S skipped (budget) in T s; failed: ...
Exit status: 0 when every selected step passed, 1 when any failed, 2 when none failed
but some were skipped for the budget, 64 on a bad option.

Every command runs with NVLink multicast off (NCCL_NVLS_ENABLE=0
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1). Ranks sharing a GPU as
threads need CUDA_DEVICE_MAX_CONNECTIONS=32 (the tests and commands set it); ranks sharing
a GPU as processes need the MPS daemon, which the parts that use it start and stop.
To keep one measurement as a cited run folder, use bench/device/run.sh.
EOF
}
set -u -o pipefail

PARTS_ALL=tests,stress,shared,bench,dropin,conformance,quant,forward,plan,wheel
PARTS=$PARTS_ALL
PARTS_GIVEN=0
STEPS=
WORLDS=2,3,4,5,8
STRESS_WORLDS=2,8
STRESS_CALLS=100000
BUDGET=540
D=.dev/all
FINAL=${OUT:-/tmp/suite-out}
TAG=suite
DRY_RUN=0
bad() { echo "suite.sh: $*; see --help" >&2; exit 64; }
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --only) PARTS=${2:?} PARTS_GIVEN=1; shift ;;
    --steps) STEPS=${2:?}; shift ;;
    --worlds) WORLDS=${2:?}; shift ;;
    --stress-worlds) STRESS_WORLDS=${2:?}; shift ;;
    --stress-calls) STRESS_CALLS=${2:?}; shift ;;
    --budget) BUDGET=${2:?}; shift ;;
    --bin) D=${2:?}; shift ;;
    --out) FINAL=${2:?}; shift ;;
    --tag) TAG=${2:?}; shift ;;
    --dry-run) DRY_RUN=1 ;;
    *) bad "unknown argument $1" ;;
  esac
  shift
done
for p in ${PARTS//,/ }; do
  [[ ",$PARTS_ALL," == *",$p,"* ]] || bad "unknown part $p (parts: $PARTS_ALL)"
done
for l in "$WORLDS" "$STRESS_WORLDS"; do
  [[ $l =~ ^[0-9]+(,[0-9]+)*$ ]] || bad "world list '$l' is not like 2,4,8"
done
[[ $BUDGET =~ ^[0-9]+$ ]] || bad "--budget takes whole seconds"
[[ $STRESS_CALLS =~ ^[0-9]+$ ]] || bad "--stress-calls takes a count"
[[ $TAG =~ ^[A-Za-z0-9._-]+$ ]] || bad "--tag takes letters, digits, '.', '_', '-'"

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache TPCOMM_GPU_TESTS=1
T=$D/tpcomm
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$DRY_RUN" = 1 ] && [ "$NGPU" = 0 ] && NGPU=${DRY_GPUS:-1}
mkdir -p "$FINAL"
FINAL=$(cd "$FINAL" && pwd)
W=$FINAL/$TAG
LOG=$FINAL/$TAG-log.txt
SUM=$FINAL/$TAG-summary.txt
rm -rf "$W"
mkdir -p "$W"
: > "$LOG"

VIRT=0
now() { echo $((SECONDS + VIRT)); }
log() { echo "$*" | tee -a "$LOG"; }
PASSED=() FAILED=() SKIPPED=() SKIPPED_PARTS=() NOT_HERE=()
PART=none

# selected NAME: whether --steps (when given) selects PART/NAME.
selected() {
  local pat
  [ -z "$STEPS" ] && return 0
  for pat in ${STEPS//,/ }; do
    # shellcheck disable=SC2053 # the pattern is meant to match as a glob
    [[ $PART/$1 == $pat ]] && return 0
  done
  return 1
}

# not_here NAME WHY: the step NAME (when selected) cannot run on this machine; listed in the
# summary as not run here, neither passed nor failed.
not_here() {
  selected "$1" || return 0
  NOT_HERE+=("$PART/$1")
  log "-- $PART/$1 not run here: $2"
}

# step NAME EST LIMIT CMD...: CMD under `timeout LIMIT` (cut to what is left of the
# budget) when at least EST seconds (its usual time) are left, output in
# PART/NAME.txt. Environment for one step: put `env VAR=VALUE` in front of CMD.
step() {
  local n=$1 est=$2 limit=$3 left rc t0 out
  shift 3
  selected "$n" || return 0
  out=$W/$PART/$n.txt
  left=$((BUDGET - $(now)))
  if [ "$left" -lt "$est" ]; then
    SKIPPED+=("$PART/$n")
    [[ " ${SKIPPED_PARTS[*]} " == *" $PART "* ]] || SKIPPED_PARTS+=("$PART")
    log "-- [$(now) s] $PART/$n SKIPPED: $left s left, needs ~$est s: $*"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "== [$(now) s] $PART/$n (timeout $limit s): $*"
  if [ "$DRY_RUN" = 1 ]; then
    VIRT=$((VIRT + est))
    PASSED+=("$PART/$n")
    return 0
  fi
  t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$out" 2>&1
  rc=$?
  log "   exit $rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
  grep -E "test result|#wrong|wrong elements|FAILED|panicked|error" "$out" | tail -6 | sed 's/^/   | /' | tee -a "$LOG"
  # A test filter that matches nothing (a renamed test) must not pass as a run.
  if [ "$rc" = 0 ] && grep -q "^running 0 tests" "$out" && ! grep -q "^running [1-9]" "$out"; then rc=no-tests; fi
  if [ "$rc" = 0 ]; then PASSED+=("$PART/$n"); elif [[ $rc =~ ^[0-9]+$ ]]; then FAILED+=("$PART/$n:exit$rc"); else FAILED+=("$PART/$n:$rc"); fi
  return 0
}
# gtest NAME EST LIMIT WORLDS EXE [test args...]: a GPU test executable, ranks as
# threads. EST and LIMIT are for two worlds (EST from the step logs of earlier runs on
# one H200, rounded up); they grow with the number of worlds.
gtest() {
  local n=$1 est=$2 limit=$3 w=$4 exe=$5 nw
  shift 5
  nw=$(tr ',' '\n' <<< "$w" | wc -l)
  [ "$nw" -gt 2 ] && est=$((est * nw / 2)) limit=$((limit * nw / 2))
  [ "$limit" -gt 590 ] && limit=590
  step "$n" "$est" "$limit" env TPCOMM_TEST_WORLDS="$w" "$D/$exe" --ignored --test-threads=1 --nocapture "$@"
}
# A fact found on the machine (a file a step wrote) or, in a dry run, a placeholder.
found() { if [ "$DRY_RUN" = 1 ]; then echo "<$1>"; else sed -n "$2" "$3" 2>/dev/null | head -1; fi; }
MPS=0
mps_on() {
  [ "$DRY_RUN" = 1 ] && { log "   (MPS daemon on)"; return 0; }
  MPS=1
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
  mkdir -p /tmp/mps /tmp/mpslog
  nvidia-cuda-mps-control -d && log "   MPS daemon started"
}
mps_off() {
  [ "$DRY_RUN" = 1 ] && { log "   (MPS daemon off)"; return 0; }
  echo quit | nvidia-cuda-mps-control
  sleep 1
  MPS=0
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
LIB=$D/libtpcomm_nccl.so
[ -e "$LIB" ] && LIB=$(realpath "$LIB")

part_tests() {
  local w=$WORLDS
  gtest allreduce 40 200 "$w" gpu_allreduce --skip stress
  gtest host 25 150 "$w" gpu_host_allreduce --skip stress
  gtest fused 5 60 "$w" gpu_fused
  gtest fallback 5 60 "$w" gpu_fallback
  gtest self-tune 10 60 "$w" gpu_self_tune
  gtest plan-layout 3 60 "$w" gpu_plan_layout
  gtest collectives 15 150 "$w" gpu_collectives
  gtest coll-fallback 5 90 "$w" gpu_coll_fallback
  gtest p2p-check 5 60 "$w" gpu_p2p_check
  gtest mismatch 15 150 "$w" gpu_mismatch
  gtest quant 120 300 "$w" gpu_quant
  if [ "$NGPU" -ge 2 ]; then
    gtest nccl 10 60 "$w" nccl_gpu
  else
    not_here nccl "nccl_gpu runs NCCL on 2 GPUs (NCCL refuses ranks sharing one)"
  fi
  gtest standalone 10 90 2 nccl_lib standalone_ranks_sharing
  if [ "$NGPU" -ge 2 ]; then
    gtest forward 60 240 2 gpu_forward
  else
    # Two of its tests compare with NCCL, one rank per GPU; the others run ranks as threads.
    selected forward && log "-- tests/forward: the two tests that compare with NCCL need 2 GPUs, not run here"
    gtest forward 40 240 2 gpu_forward --skip forward_outputs_are_identical_across_ranks_and_match_nccl \
      --skip forward_over_the_host_transport_matches_nccl_without_p2p
  fi
  gtest supervision 100 300 "$w" gpu_supervision
  # Every GPU test executable staged (stage_all.sh takes them from the test files) runs above.
  local exe known=" gpu_allreduce gpu_host_allreduce gpu_fused gpu_fallback gpu_self_tune gpu_plan_layout"
  known+=" gpu_collectives gpu_coll_fallback gpu_p2p_check gpu_mismatch gpu_quant nccl_gpu gpu_forward gpu_supervision "
  for exe in "$D"/gpu_* "$D"/nccl_gpu; do
    [ -x "$exe" ] || continue
    [[ $known == *" ${exe##*/} "* ]] && continue
    FAILED+=("tests/${exe##*/}:not-in-suite")
    log "-- $exe is staged but suite.sh does not run it: add it to part_tests"
  done
}
part_stress() {
  local w
  export TPCOMM_STRESS_CALLS=$STRESS_CALLS
  for w in ${STRESS_WORLDS//,/ }; do
    gtest "p2p-$w" 45 200 "$w" gpu_allreduce stress
    gtest "host-$w" 45 200 "$w" gpu_host_allreduce stress
  done
}

part_shared() {
  local w tr
  mps_on
  for w in ${WORLDS//,/ }; do
    for tr in cuda host; do
      step "bench-$tr-$w" 15 120 "$T" bench --device gpu --launch processes --ranks "$w" --transport "$tr" \
        --min-bytes 1KiB --max-bytes 4MiB --algos one-shot,two-shot,auto --reps 5 --json "$W/shared/bench-$tr-$w.json"
    done
  done
  for w in 2 4; do
    for tr in cuda host; do
      step "forward-$tr-$w" 30 150 "$T" bench forward --launch processes --ranks "$w" --transport "$tr" --layers 8 --reps 5
    done
  done
  mps_off
  step nomps-cuda-2 15 90 "$T" bench --device gpu --launch processes --ranks 2 --transport cuda \
    --min-bytes 1KiB --max-bytes 64KiB --algos one-shot --modes graph --reps 3 --iters 5
}

part_bench() {
  local B=$W/bench tr fp class a
  step probe 20 120 "$T" probe --json "$B/probe.json"
  if [ "$NGPU" -lt 2 ]; then
    for tr in cuda host; do
      step "threads-$tr-2" 30 120 "$T" bench --device gpu --launch threads --ranks 2 --transport "$tr" \
        --min-bytes 1KiB --max-bytes 64MiB --algos one-shot,two-shot,auto --reps 5 --json "$B/threads-$tr-2.json"
    done
    step explain 5 30 bash -c "for a in '--bytes 14KiB --graph' '--bytes 2MiB' '--bytes 64MiB'; do $T explain \$a || r=1; done; exit \${r:-0}"
    return 0
  fi
  step example 20 120 "$D/tp_allreduce"
  step p2p 45 300 "$T" bench --device gpu --launch processes --transport cuda --modes eager,graph --min-bytes 1KiB --max-bytes 64MiB \
    --iters 20 --reps 11 --algos one-shot,two-shot,nccl,auto --json "$B/p2p.json"
  step anchor-p2p 45 300 python3 "$D/torch_allreduce.py" --tag "gpus$NGPU" --out "$B/anchor-p2p.json"
  step host 45 400 env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch processes --transport host --modes eager,graph \
    --min-bytes 1KiB --max-bytes 64MiB --iters 20 --reps 9 --timeout-ms 20000 --algos one-shot,two-shot,nccl \
    --json "$B/host.json"
  step anchor-nop2p 45 300 env NCCL_P2P_DISABLE=1 python3 "$D/torch_allreduce.py" --tag "gpus$NGPU-nop2p" \
    --out "$B/anchor-nop2p.json"
  step copy-bw 20 120 python3 bench/device/copy_bw.py --out "$B/copy-bw.json"
  # Tune in two halves (one 1 KiB..64 MiB tune does not fit a step), merged, then
  # auto with that table against every fixed choice; the same on the host transport.
  step tune-small 15 300 "$T" tune --launch threads --min 1KiB --max 4MiB --iters 10 --reps 7 \
    --out "$B/tuning-small.toml" --json "$B/tune-small.json"
  step tune-large 45 300 "$T" tune --launch threads --min 4MiB --max 64MiB --iters 5 --reps 5 \
    --out "$B/tuning-large.toml" --json "$B/tune-large.json"
  fp=$(found fingerprint 's/^fingerprint = "\(.*\)"$/\1/p' "$B/tuning-small.toml")
  class=$(found class 's/^machine_class = "\(.*\)"$/\1/p' "$B/tuning-small.toml")
  if [ -n "$fp" ]; then
    step tune-merge 2 30 "$T" tune --from-bench "$B/tune-small.json" "$B/tune-large.json" \
      --class "${class:-nvlink}" --fingerprint "$fp" --out "$B/tuning.toml"
  fi
  a=()
  { [ "$DRY_RUN" = 1 ] || [ -s "$B/tuning.toml" ]; } && a=(--table "$B/tuning.toml")
  step auto-p2p 55 400 "$T" bench --device gpu --launch processes --transport cuda --algos one-shot,two-shot,nccl,auto \
    --midpoints --min-bytes 1KiB --max-bytes 64MiB --iters 20 --reps 9 "${a[@]}" --json "$B/auto-p2p.json"
  step explain 5 30 bash -c "for a in '--bytes 14KiB --graph' '--bytes 224KiB --graph' '--bytes 2MiB' '--bytes 64MiB'; do $T explain ${a[*]} \$a || r=1; done; exit \${r:-0}"
  step tune-host 45 400 env NCCL_P2P_DISABLE=1 "$T" tune --transport host --launch threads --min 1KiB --max 64MiB \
    --iters 5 --reps 5 --out "$B/tuning-host.toml" --json "$B/tune-host.json"
  a=()
  { [ "$DRY_RUN" = 1 ] || [ -s "$B/tuning-host.toml" ]; } && a=(--table "$B/tuning-host.toml")
  step auto-host 80 500 env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch processes --transport host \
    --algos one-shot,two-shot,nccl,auto --midpoints --min-bytes 1KiB --max-bytes 64MiB --iters 20 --reps 9 --timeout-ms 20000 \
    "${a[@]}" --json "$B/auto-host.json"
}

part_dropin() {
  local w X=$W/dropin
  if [ "$NGPU" -ge 2 ]; then
    step pynccl 25 60 env TPCOMM_LOG=info TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/pynccl_ctypes.py" \
      --lib "$LIB" --out "$X/pynccl.json"
    step torch 60 150 env TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/torch_dropin.py" --lib "$LIB" --out "$X/torch.json"
    step "spread-$NGPU-dropin" 60 300 python3 bench/torch/collectives_check.py --ranks "$NGPU" --placement spread \
      --lib "$LIB" --out "$X/spread-$NGPU-dropin.json" --timeout 280
    step "spread-$NGPU-nccl" 60 300 python3 bench/torch/collectives_check.py --ranks "$NGPU" --placement spread \
      --out "$X/spread-$NGPU-nccl.json" --timeout 280
  fi
  # Every rank on GPU 0 under MPS: real NCCL refuses shared GPUs, so the drop-in serves
  # the communicator itself (TPCOMM_STANDALONE=1); TPCOMM_MAX_BYTES=64MiB is the
  # largest block the scripts send.
  mps_on
  for w in ${WORLDS//,/ }; do
    step "shared-$w" 40 150 env TPCOMM_STANDALONE=1 TPCOMM_MAX_BYTES=64MiB python3 bench/torch/collectives_check.py \
      --ranks "$w" --placement shared --lib "$LIB" --out "$X/shared-$w.json" --timeout 140
  done
  # shellcheck disable=SC2086 # one --tp argument per world
  step hf-tp 150 420 env TPCOMM_STANDALONE=1 TPCOMM_MAX_BYTES=64MiB python3 bench/torch/hf_tp_check.py --lib "$LIB" \
    --tp ${WORLDS//,/ } --dtype float32 bfloat16 --out "$X/hf-tp.json" --timeout 400
  # Without the drop-in, plain NCCL is expected to refuse the shared GPU; the script checks that.
  step hf-tp-plain 60 150 python3 bench/torch/hf_tp_check.py --tp 2 --out "$X/hf-tp-plain.json" --timeout 140
  # TPCOMM_STANDALONE unset: the drop-in finds the shared GPU itself.
  for w in 2 4; do
    step "auto-$w" 40 150 env -u TPCOMM_STANDALONE TPCOMM_MAX_BYTES=64MiB python3 bench/torch/collectives_check.py \
      --ranks "$w" --placement shared --lib "$LIB" --out "$X/auto-$w.json" --timeout 140 --quick
  done
  step hf-tp-auto 90 200 env -u TPCOMM_STANDALONE TPCOMM_MAX_BYTES=64MiB python3 bench/torch/hf_tp_check.py \
    --lib "$LIB" --standalone env --tp 2 --dtype float32 --out "$X/hf-tp-auto.json" --timeout 180
  mps_off
}

part_conformance() {
  local X=$W/conformance w1
  # Worlds of --worlds plus 1; each mode's step stops starting cases at its share of
  # what is left (--budget), so a run short of time still reports every case it began.
  w1=1,$WORLDS
  step threads 120 590 env TPCOMM_STANDALONE=1 "$D/tpcomm-conformance" --lib "$LIB" --modes threads \
    --worlds "$w1" --case-timeout 30 --budget "${CONF_BUDGET_THREADS:-300}" --json "$X/threads.json"
  mps_on
  step procs 120 590 env TPCOMM_STANDALONE=1 "$D/tpcomm-conformance" --lib "$LIB" --modes procs \
    --worlds "$w1" --case-timeout 30 --budget "${CONF_BUDGET_PROCS:-200}" --json "$X/procs.json"
  mps_off
}
part_quant() {
  local w Q=(env CUDA_DEVICE_MAX_CONNECTIONS=32 "$D/quant_bench" --gpus 1)
  step speed-host 50 150 "${Q[@]}" --ranks 2 --transport host --min 4MiB --max 64MiB --iters 10 --reps 15
  step gathered-host 50 150 "${Q[@]}" --ranks 2 --transport host --min 4MiB --max 64MiB --iters 10 --reps 15 \
    --algo gathered
  step speed-p2p 40 90 "${Q[@]}" --ranks 2 --transport cuda --min 4MiB --max 64MiB --iters 10 --reps 10
  for w in 2 4 8; do
    step "error-$w" 20 60 "${Q[@]}" --ranks "$w" --transport host --min 16MiB --max 16MiB --iters 2 --reps 3
  done
  for w in 2 4 8; do
    step "outliers-$w" 20 60 "${Q[@]}" --ranks "$w" --transport host --min 16MiB --max 16MiB --iters 2 --reps 3 \
      --dist outliers
  done
  step bench-host-2 40 150 env CUDA_VISIBLE_DEVICES=0 "$T" bench --device gpu --launch threads --ranks 2 \
    --transport host --algos one-shot,two-shot,int8,fp8 --modes graph --min-bytes 4MiB --max-bytes 64MiB --reps 10 \
    --json "$W/quant/bench-host-2.json"
}

part_forward() {
  local tr F=$W/forward
  for tr in cuda host; do
    step "threads-$tr-2" 60 200 "$T" bench forward --launch threads --ranks 2 --transport "$tr" --tokens 1,4,8,16 \
      --json "$F/threads-$tr-2.json"
  done
  step quant-host-2 60 200 "$T" bench forward --launch threads --ranks 2 --transport host \
    --modes one-shot,int8,fp8 --json "$F/quant-host-2.json"
  if [ "$NGPU" -ge 2 ]; then
    step p2p 70 300 "$T" bench forward --transport cuda --tokens 1,4,8,16 --json "$F/p2p.json"
    step host 70 300 env NCCL_P2P_DISABLE=1 "$T" bench forward --transport host --tokens 1,4,8,16 --json "$F/host.json"
  fi
}

part_plan() {
  local hm h m
  step efficiency 60 150 env OUT="$W/plan" bash bench/plan/h200_efficiency.sh
  for hm in 2048:6144 8192:28672; do
    h=${hm%:*} m=${hm#*:}
    step "width-$h" 30 120 env OUT="$W/plan" bash bench/plan/h200_efficiency.sh --hidden "$h" --mlp "$m" \
      --heads $((h / 128)) --kv-heads 8
  done
}

part_wheel() {
  if [ "$DRY_RUN" = 1 ] || ls .whl/*.whl > /dev/null 2>&1; then
    step wheel 60 200 env OUT="$W/wheel" bash bench/python/run_gpu.sh --worlds 2 4 --replays 1000 --timeout-s 180
  elif [ "$PARTS_GIVEN" = 1 ]; then
    FAILED+=("wheel/wheel:no-.whl")
    log "-- wheel: no .whl/*.whl here (build it with scripts/build_wheel.sh and carry .whl)"
  else
    log "-- wheel: not run, no .whl/*.whl carried (--only wheel makes that a failure)"
  fi
}

finish() {
  local used line
  [ "$MPS" = 1 ] && mps_off
  used=$(now)
  line="suite: ${#PASSED[@]} $([ "$DRY_RUN" = 1 ] && echo planned || echo passed), ${#FAILED[@]} failed, ${#SKIPPED[@]} skipped (budget)$([ "${#NOT_HERE[@]}" -gt 0 ] && echo ", ${#NOT_HERE[@]} not run here (needs more GPUs)") in $used s$([ "$DRY_RUN" = 1 ] && echo ' (dry run)')"
  [ "${#FAILED[@]}" -gt 0 ] && line+="; failed: $(IFS=,; echo "${FAILED[*]}")"
  {
    echo "# $TAG: $NGPU GPU(s), budget $BUDGET s, parts $PARTS, worlds $WORLDS, bin $D"
    echo "passed:  ${PASSED[*]}"
    echo "failed:  ${FAILED[*]}"
    echo "skipped: ${SKIPPED[*]}"
    [ "${#NOT_HERE[@]}" -gt 0 ] && echo "not run here (needs more GPUs): ${NOT_HERE[*]}"
    [ "${#SKIPPED[@]}" -gt 0 ] &&
      echo "next call: bash bench/device/suite.sh --only $(IFS=,; echo "${SKIPPED_PARTS[*]}") --steps $(IFS=,; echo "${SKIPPED[*]}") --worlds $WORLDS --tag ${TAG}2"
    echo
    grep -hE "^test .*\.\.\. (FAILED|ignored)|test result:|panicked|#wrong.*[1-9]|wrong elements: [1-9]" \
      "$W"/*/*.txt 2>/dev/null | head -60
    echo
    echo "$line"
  } > "$SUM"
  cat "$SUM" >> "$LOG"
  if [ "$DRY_RUN" != 1 ]; then
    timeout 60 tar czf "$FINAL/$TAG.tgz" -C "$FINAL" "$TAG" && rm -rf "$W"
  else
    rm -rf "$W"
  fi
  echo "$line"
  if [ "${#FAILED[@]}" -gt 0 ]; then exit 1; fi
  if [ "${#SKIPPED[@]}" -gt 0 ]; then exit 2; fi
  exit 0
}
trap 'FAILED+=("interrupted"); finish' INT TERM

log "== $TAG $(date -u +%FT%TZ): $NGPU GPU(s), budget $BUDGET s, parts $PARTS, worlds $WORLDS, bin $D$([ "$DRY_RUN" = 1 ] && echo ', DRY RUN')"
if [ "$DRY_RUN" != 1 ]; then
  { nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; nvidia-smi topo -m
    cat "$D/BUILD.txt"; } > "$W/machine.txt" 2>&1
  [ -x "$T" ] || { FAILED+=("setup:no-$T"); log "-- no $T: stage with bash bench/device/stage_all.sh $D and carry it"; finish; }
  [ "$NGPU" -gt 0 ] || { FAILED+=("setup:no-gpu"); log "-- nvidia-smi lists no GPU"; finish; }
fi
for PART in ${PARTS_ALL//,/ }; do
  [[ ",$PARTS," == *",$PART,"* ]] || continue
  mkdir -p "$W/$PART"
  log "## $PART"
  "part_$PART"
done
finish
