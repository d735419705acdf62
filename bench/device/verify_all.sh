#!/usr/bin/env bash
# One device call (nvidia-h200-x2) that checks what was built but never run on
# a GPU, most important first, within a time budget:
#   a  GPU tests: gpu_fallback, gpu_host_allreduce (incl. the 100k stress),
#      gpu_allreduce, gpu_fused, nccl_gpu, gpu_self_tune
#   b  P2P `tpcomm bench --device gpu` (procs) with PyTorch's NCCL, NCCL rows again with the
#      system NCCL, and the torch anchor: is the NCCL gap the build or the measuring?
#   c  host transport GPU bench and torch anchor, both with NCCL_P2P_DISABLE=1
#   d  gpu_forward test, `tpcomm bench forward` (P2P; host transport too if it has --transport)
#   e  drop-in: pynccl_ctypes.py and torch_dropin.py with libtpcomm_nccl.so
#   f  tune in two halves, merged, then auto against every fixed choice and NCCL;
#      then (f6, f7) the same with the host transport forced, NCCL_P2P_DISABLE=1
# Binaries come from D (default .dev/all; bench/device/stage_all.sh fills it).
# Run from the repository root:
#   bash .dev/all/verify_all.sh
# Settings (environment):
#   BUDGET=480   seconds for everything; a step whose usual time no longer fits is
#                skipped (and listed for the next call), every step's timeout is
#                cut to what is left
#   STEPS=a,b,c,d,e,f   groups or step ids (a1, b3, ...) to run; they always
#                run in the order above (b1, b2 bring the probe b0; the tune
#                chain f1..f5 starts only when its ~117 s still fit, the
#                host chain f6, f7 when its ~125 s do)
#   TAG=verify   names of the outputs; DRY_RUN=1 prints the commands only
#                (advancing a virtual clock by each step's usual time)
# Writes 3 files to $OUT: $TAG-log.txt (every command, exit status, time and
# the last lines of its output), $TAG-summary.txt (what passed, failed, was
# skipped; key rows) and $TAG.tgz (every output, in folders tests p2p host
# forward dropin tune).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TPCOMM_CACHE_DIR=/tmp/tpcomm-cache

D=${D:-.dev/all}
BUDGET=${BUDGET:-480}
STEPS=${STEPS:-a,b,c,d,e,f}
TAG=${TAG:-verify}
DRY_RUN=${DRY_RUN:-0}
TAIL=${TAIL:-6}
FINAL=${OUT:-/tmp/verify-out}
mkdir -p "$FINAL"
FINAL=$(cd "$FINAL" && pwd)
W=$FINAL/$TAG
LOG=$FINAL/$TAG-log.txt
SUM=$FINAL/$TAG-summary.txt
T=$D/tpcomm
rm -rf "$W"
mkdir -p "$W"/tests "$W"/p2p "$W"/host "$W"/forward "$W"/dropin "$W"/tune
: > "$LOG"

VIRT=0
now() { echo $((SECONDS + VIRT)); }
log() { echo "$*" | tee -a "$LOG"; }
RAN=() FAILED=() SKIPPED=()

# True when step ID (e.g. "b2") or its group ("b") is in STEPS.
selected() {
  local s x
  IFS=, read -ra s <<< "$STEPS"
  for x in "${s[@]}"; do
    if [ "$x" = "$1" ] || [ "$x" = "${1:0:1}" ]; then return 0; fi
  done
  return 1
}

# step ID EST LIMIT OUTFILE CMD...
# Runs CMD under `timeout` (LIMIT seconds, cut to what is left of the budget)
# when ID is selected and at least EST seconds (its usual time) are left.
# stdout and stderr go to $W/OUTFILE (appended when OUTFILE starts with +).
step() {
  local id=$1 est=$2 limit=$3 out=$4 rc t0 left
  shift 4
  selected "$id" || return 0
  left=$((BUDGET - $(now)))
  if [ "$left" -lt "$est" ]; then
    SKIPPED+=("$id")
    log "-- [$(now) s] $id SKIPPED: ${left} s of the budget left, it needs ~${est} s: $*"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local append=0
  if [ "${out:0:1}" = + ]; then append=1; out=${out:1}; fi
  log "== [$(now) s] $id (timeout ${limit} s) $* $([ "$append" = 1 ] && echo '>>' || echo '>') ${out}"
  if [ "$DRY_RUN" = 1 ]; then
    VIRT=$((VIRT + est))
    RAN+=("$id")
    return 0
  fi
  t0=$SECONDS
  if [ "$append" = 1 ]; then
    timeout -k 5 "$limit" "$@" >> "$W/$out" 2>&1
  else
    timeout -k 5 "$limit" "$@" > "$W/$out" 2>&1
  fi
  rc=$?
  log "   $id exit $rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
  tail -n "$TAIL" "$W/$out" | sed 's/^/   | /' | tee -a "$LOG"
  if [ "$rc" = 0 ]; then RAN+=("$id"); else FAILED+=("$id:exit$rc"); fi
  return 0
}

join() { local IFS=,; echo "$*"; }
# True when step ID ran (in a dry run: would have run).
did() { local x; for x in "${RAN[@]}" "${FAILED[@]}"; do [ "${x%%:*}" = "$1" ] && return 0; done; return 1; }
# The STEPS for a next call: the skipped steps, with what they need first
# (b1, b2 need the probe b0; f is one chain: tune, merge, auto).
next_steps() {
  local x n=()
  for x in "${SKIPPED[@]}"; do
    case $x in
      f6 | f7) n+=(f6 f7) ;;
      f*) n+=(f) ;;
      b1 | b2) n+=(b0 "$x") ;;
      *) n+=("$x") ;;
    esac
  done
  printf '%s\n' "${n[@]}" | awk '!seen[$0]++' | paste -sd,
}

finish() {
  {
    echo "# $TAG: budget ${BUDGET} s, used $(now) s$([ "$DRY_RUN" = 1 ] && echo ' (DRY RUN: virtual clock)'), STEPS=$STEPS"
    echo "passed:  $(join "${RAN[@]}")"
    echo "failed:  $(join "${FAILED[@]}")"
    echo "skipped: $(join "${SKIPPED[@]}")"
    [ "${#SKIPPED[@]}" -gt 0 ] && echo "next call: STEPS=$(next_steps) TAG=${TAG}2 bash $D/verify_all.sh"
    echo
    echo "## tests"
    grep -hE "^test .*\.\.\. |test result:|stress: |panicked|SKIPPED" "$W"/tests/*.txt "$W"/host/tests.txt "$W"/forward/*.txt 2>/dev/null | grep -v "^test .*\.\.\. ok$" | head -60
    grep -hcE "^test .*\.\.\. ok$" "$W"/tests/*.txt "$W"/host/tests.txt 2>/dev/null | paste -sd+ | sed 's/^/tests ok (count per file): /'
    echo
    echo "## NCCL: which library, and tpcomm's NCCL rows against torch's (P2P, 1 KiB / 64 KiB / 1 MiB)"
    grep "=" "$W"/p2p/nccl-libs.txt 2>/dev/null
    for f in "$W"/p2p/gpu-bench-*.txt; do
      [ -f "$f" ] || continue
      echo "${f##*/}: $(grep -m1 '^# tpcomm bench' "$f" | grep -o 'NCCL [0-9.]*')"
      grep -E "^ +(1024|65536|1048576) " "$f"
    done
    for f in "$W"/p2p/torch-anchor.txt "$W"/host/torch-nop2p.txt; do
      [ -f "$f" ] || continue
      echo "${f#"$W"/}:"
      grep -E "^# |^ +bytes|^ +(1024|65536|1048576) " "$f"
    done
    echo
    echo "## host transport (NCCL_P2P_DISABLE=1), graph rows"
    grep -hE "^ +(1024|65536|1048576|16777216|67108864) .* graph " "$W"/host/bench-procs-*.txt 2>/dev/null
    echo
    echo "## forward, drop-in, tune: last lines"
    for f in "$W"/forward/*.txt "$W"/dropin/*.txt "$W"/tune/*.txt; do
      [ -f "$f" ] || continue
      echo "-- ${f#"$W"/}"
      tail -n 4 "$f"
    done
  } > "$SUM" 2>&1
  cat "$SUM"
  timeout 60 tar czf "$FINAL/$TAG.tgz" -C "$FINAL" "$TAG" && rm -rf "$W"
  ls -la "$FINAL"
}
trap finish EXIT

log "== $TAG $(date -u +%FT%TZ) budget ${BUDGET} s, STEPS=$STEPS, D=$D, DRY_RUN=$DRY_RUN"
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# m: the machine and what was staged (always; a few seconds).
STEPS_SAVED=$STEPS
STEPS=m
TAIL=60 step m1 3 20 machine.txt bash -c "nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,temperature.gpu,power.draw,memory.used --format=csv; nvidia-smi topo -m; df -h /dev/shm; echo \"ulimit -l: \$(ulimit -l)\"; cat $D/BUILD.txt; ls -la $D"
STEPS=$STEPS_SAVED

# a: GPU tests, threads, one test at a time.
G=(env TPCOMM_GPU_TESTS=1)
TT=(--test-threads=1 --nocapture)
step a1 20 60 tests/gpu_fallback.txt "${G[@]}" "$D/gpu_fallback" "${TT[@]}"
step a2 30 90 host/tests.txt "${G[@]}" "$D/gpu_host_allreduce" "${TT[@]}" --skip gpu_host_stress
step a3 70 150 +host/tests.txt "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_host_allreduce" "${TT[@]}" gpu_host_stress
step a4 70 150 tests/gpu_allreduce.txt "${G[@]}" TPCOMM_STRESS_CALLS=100000 "$D/gpu_allreduce" "${TT[@]}"
step a5 15 60 tests/gpu_fused.txt "${G[@]}" "$D/gpu_fused" "${TT[@]}" --ignored
step a6 10 60 tests/nccl_gpu.txt "${G[@]}" "$D/nccl_gpu" "${TT[@]}" --ignored
step a7 15 60 tests/gpu_self_tune.txt "${G[@]}" "$D/gpu_self_tune" "${TT[@]}"

# b: which NCCL torch loads (with this LD_LIBRARY_PATH), PyTorch's pip NCCL,
# and the system one; then tpcomm's bench with each and the torch anchor.
PROBE='import glob, os, site
import torch
print("torch=" + torch.__version__)
print("torch_nccl_version=" + ".".join(map(str, torch.cuda.nccl.version())))
loaded = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l})
print("torch_nccl_loaded=" + ",".join(loaded))
c = []
try:
    import nvidia.nccl
    c += [os.path.join(p, "lib", "libnccl.so.2") for p in nvidia.nccl.__path__]
except Exception as e:
    print("nvidia.nccl: " + repr(e))
for sp in site.getsitepackages():
    c += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libnccl.so.2")))
c = [p for p in c if os.path.isfile(p)]
print("wheel_nccl=" + (os.path.realpath(c[0]) if c else ""))'
# shellcheck disable=SC2016 # expanded by the bash that runs it
SYSPROBE='f=$(ldconfig -p | awk "/libnccl\\.so\\.2 .*x86-64/ { print \$NF; exit }"); [ -n "$f" ] || f=/usr/lib/x86_64-linux-gnu/libnccl.so.2; if [ -e "$f" ]; then echo "system_nccl=$(readlink -f "$f")"; else echo "system_nccl="; fi'
if selected b0 || selected b1 || selected b2; then
  STEPS_SAVED=$STEPS
  STEPS=b0
  echo "$PROBE" > "$W/p2p/probe.py"
  TAIL=12 step b0 10 60 p2p/nccl-libs.txt bash -c "python3 $W/p2p/probe.py; r=\$?; $SYSPROBE; exit \$r"
  STEPS=$STEPS_SAVED
fi
kv() { sed -n "s/^$1=//p" "$W/p2p/nccl-libs.txt" 2>/dev/null | head -1; }
WHEEL_NCCL=$(kv wheel_nccl)
[ -n "$WHEEL_NCCL" ] || WHEEL_NCCL=$(kv torch_nccl_loaded | cut -d, -f1)
SYS_NCCL=$(kv system_nccl)
if [ "$DRY_RUN" = 1 ]; then
  WHEEL_NCCL=${WHEEL_NCCL:-"<wheel_nccl from b0>"}
  SYS_NCCL=${SYS_NCCL:-"<system_nccl from b0>"}
fi
P2P=(--launch procs --transport cuda --modes "eager,graph" --min 1KiB --max 64MiB --iters 20 --reps 15)
if [ -n "$WHEEL_NCCL" ]; then
  step b1 45 100 p2p/gpu-bench-torchnccl.txt env TPCOMM_NCCL_LIBRARY="$WHEEL_NCCL" "$T" bench --device gpu "${P2P[@]}" \
    --algos one-shot,two-shot,nccl --json "$W/p2p/gpu-bench-torchnccl.json"
else
  selected b1 && { FAILED+=("b1:no-torch-nccl"); log "-- b1 not run: no PyTorch NCCL found (see p2p/nccl-libs.txt)"; }
fi
if [ -n "$SYS_NCCL" ]; then
  step b2 25 60 p2p/gpu-bench-sysnccl.txt env TPCOMM_NCCL_LIBRARY="$SYS_NCCL" "$T" bench --device gpu "${P2P[@]}" \
    --algos nccl --json "$W/p2p/gpu-bench-sysnccl.json"
else
  selected b2 && { FAILED+=("b2:no-system-nccl"); log "-- b2 not run: no system libnccl.so.2 found"; }
fi
step b3 45 100 p2p/torch-anchor.txt python3 "$D/torch_allreduce.py" --tag h200x2 --out "$W/p2p/torch-anchor.json"

# c: the host transport against NCCL without P2P (one bench JSON per command, as bench/summarize.py reads them).
H=(--launch procs --transport host --dtype bf16 --modes "eager,graph" --iters 20 --timeout-ms 10000)
step c1 20 50 host/bench-procs-small.txt env NCCL_P2P_DISABLE=1 "$T" bench --device gpu "${H[@]}" --reps 15 \
  --min 1KiB --max 1MiB --algos one-shot,two-shot,nccl --json "$W/host/bench-procs-small.json"
step c2 25 70 host/bench-procs-large.txt env NCCL_P2P_DISABLE=1 "$T" bench --device gpu "${H[@]}" --rotate 2 --reps 10 \
  --min 2MiB --max 64MiB --algos two-shot,nccl --json "$W/host/bench-procs-large.json"
step c3 45 100 host/torch-nop2p.txt env NCCL_P2P_DISABLE=1 python3 "$D/torch_allreduce.py" --tag nop2p \
  --out "$W/host/torch-nop2p.json"

# d: forward. gpu_forward runs the tpcomm staged beside it ($D/tpcomm).
step d1 60 240 forward/gpu_forward-test.txt "${G[@]}" "$D/gpu_forward" "${TT[@]}" --ignored
step d2 70 180 forward/forward-p2p.txt "$T" bench forward --tokens 1,4,8,16 --json "$W/forward/forward-p2p.json"
if timeout 10 "$T" bench forward --help 2>/dev/null | grep -q -- "--transport"; then
  step d3 70 180 forward/forward-host.txt env NCCL_P2P_DISABLE=1 "$T" bench forward --transport host \
    --tokens 1,4,8,16 --json "$W/forward/forward-host.json"
else
  selected d3 && log "-- d3 not run: this tpcomm's bench forward has no --transport option"
fi

# e: the drop-in (the real NCCL behind it is the one PyTorch loads).
step e1 25 60 dropin/pynccl.txt env TPCOMM_LOG=info TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/pynccl_ctypes.py" \
  --lib "$D/libtpcomm_nccl.so" --out "$W/dropin/pynccl.json"
step e2 60 150 dropin/torch-dropin.txt env TPCOMM_TIMEOUT_S=20 python3 "$D/dropin/torch_dropin.py" \
  --lib "$D/libtpcomm_nccl.so" --out "$W/dropin/dropin.json"

# f: tune (threads) in two halves (one 1 KiB..64 MiB tune did not fit in 45 s),
# merged into one table, then auto against every fixed choice, processes.
# The chain needs all of its usual ~117 s: a table from one half is not worth
# the time, so when it does not fit, every f step waits for the next call.
if selected f1 && [ $((BUDGET - $(now))) -lt 117 ]; then
  for x in f1 f2 f3 f4 f5; do
    if selected "$x"; then SKIPPED+=("$x"); fi
  done
  log "-- [$(now) s] f1..f5 SKIPPED: $((BUDGET - $(now))) s of the budget left, the tune chain needs ~117 s"
  STEPS_SAVED=$STEPS
  STEPS=none
fi
step f1 10 40 tune/tune-small.txt "$T" tune --launch threads --min 1KiB --max 4MiB --iters 10 --reps 7 \
  --out "$W/tune/tuning-small.toml" --json "$W/tune/tune-small.json"
step f2 45 90 tune/tune-large.txt "$T" tune --launch threads --min 4MiB --max 64MiB --iters 5 --reps 5 \
  --out "$W/tune/tuning-large.toml" --json "$W/tune/tune-large.json"
FP=$(sed -n 's/^fingerprint = "\(.*\)"$/\1/p' "$W/tune/tuning-small.toml" 2>/dev/null)
[ "$DRY_RUN" = 1 ] && FP=${FP:-"<fingerprint of tuning-small.toml>"}
HALVES=()
for h in small large; do
  if { [ "$DRY_RUN" = 1 ] && did "$([ "$h" = small ] && echo f1 || echo f2)"; } || [ -s "$W/tune/tune-$h.json" ]; then
    HALVES+=("$W/tune/tune-$h.json")
  fi
done
if [ "${#HALVES[@]}" -gt 0 ] && [ -n "$FP" ]; then
  step f3 2 20 tune/merge.txt "$T" tune --from-bench "${HALVES[@]}" --class nvlink --fingerprint "$FP" \
    --out "$W/tune/tuning.toml"
else
  selected f3 && log "-- f3 not run: no tune measurement to merge"
fi
TABLE=()
if { [ "$DRY_RUN" = 1 ] && did f3; } || [ -s "$W/tune/tuning.toml" ]; then TABLE=(--table "$W/tune/tuning.toml"); fi
[ "${#TABLE[@]}" -gt 0 ] || { selected f4 && log "-- f4: no merged table; auto uses the class defaults"; }
step f4 55 110 tune/auto.txt "$T" bench --device gpu --launch procs --algos one-shot,two-shot,nccl,auto --midpoints \
  --min 1KiB --max 64MiB --iters 20 --reps 9 "${TABLE[@]}" --json "$W/tune/auto.json"
step f5 5 20 tune/explain.txt bash -c "for a in '--bytes 14KiB --graph' '--bytes 224KiB --graph' '--bytes 2MiB --graph' '--bytes 2MiB' '--bytes 5MiB --graph' '--bytes 64MiB'; do $T explain ${TABLE[*]} \$a || r=1; echo; done; exit \${r:-0}"

STEPS=${STEPS_SAVED:-$STEPS}
STEPS_SAVED=

# f6, f7: the host transport forced (NCCL without P2P too): one tune of host:*
# and nccl rows (a table of its own; docs/tuning.md says how it is used), then
# auto against every fixed choice and NCCL on that transport, procs, with it.
# bench/summarize.py reads auto-host.json as it reads auto.json.
if selected f6 && [ $((BUDGET - $(now))) -lt 125 ]; then
  for x in f6 f7; do
    if selected "$x"; then SKIPPED+=("$x"); fi
  done
  log "-- [$(now) s] f6, f7 SKIPPED: $((BUDGET - $(now))) s of the budget left, the host tune chain needs ~125 s"
  STEPS_SAVED=$STEPS
  STEPS=none
fi
step f6 45 120 tune/tune-host.txt env NCCL_P2P_DISABLE=1 "$T" tune --transport host --launch threads \
  --min 1KiB --max 64MiB --iters 5 --reps 5 --out "$W/tune/tuning-host.toml" --json "$W/tune/tune-host.json"
HTABLE=()
if { [ "$DRY_RUN" = 1 ] && did f6; } || [ -s "$W/tune/tuning-host.toml" ]; then HTABLE=(--table "$W/tune/tuning-host.toml"); fi
[ "${#HTABLE[@]}" -gt 0 ] || { selected f7 && log "-- f7: no host table; auto on the host transport uses the pcie-nop2p rules"; }
step f7 80 180 tune/auto-host.txt env NCCL_P2P_DISABLE=1 "$T" bench --device gpu --launch procs --transport host \
  --algos one-shot,two-shot,nccl,auto --midpoints --min 1KiB --max 64MiB --iters 20 --reps 9 --timeout-ms 10000 \
  "${HTABLE[@]}" --json "$W/tune/auto-host.json"

STEPS=${STEPS_SAVED:-$STEPS}
log "== [$(now) s] done"
