#!/bin/bash
# NVIDIA's nccl-tests (a program nobody here wrote) run unchanged under the drop-in, on one GPU
# whose ranks all share it: one thread driving every rank (-g N, nccl-tests' default start),
# a thread per rank (-t N) and both at once, every collective the suite has, all types and
# ops, CUDA graphs (-G), registered buffers (-R), blocking (-z) and aggregated (-a) modes.
# nccl-tests checks every result itself (-c 1, its default) and prints "Out of bounds values";
# a case passes when it exits 0 with 0 wrong values. Timings of these runs are of ranks
# sharing one GPU, never an N-GPU result.
#
# nccl-tests gives rank i device i and refuses more ranks than GPUs, so the run preloads
# one_gpu_shim.c (built here with gcc when SHIM is not given), which shows the program 8 GPUs
# that are all the one there is; the drop-in and the driver see the real GPU.
#
#   OUT=DIR [TOTAL=S] [SHIM=libonegpu.so] bash bench/device/nccl_tests.sh SRC BIN [NCCL_HOME] [CASES]
#     SRC        an nccl-tests source tree (github.com/NVIDIA/nccl-tests), built here into
#                $OUT/nt unless SRC/build-sm90 already holds the binaries (then those run:
#                copy a call's returned $OUT/nt there to skip the build next time)
#     BIN        stage_all.sh's folder (libtpcomm_nccl.so)
#     NCCL_HOME  has include/nccl.h of the NCCL the device runs (2.28); lib/ is made here,
#                pointing at the device's libnccl.so.2. Default: SRC/../nccl-home
#     CASES      a regex: only cases whose name matches run (default: all)
# Each case runs under its own timeout (60 to 120 s; CASE_T=S sets every one; TPCOMM_TIMEOUT_S=20),
# and only when it still ends within TOTAL seconds (default 560). The harness itself is tested
# without a GPU by bench/device/nccl_tests_selftest.sh (fake nccl-tests binaries).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The CUDA toolkit: CUDA_HOME, else the one whose nvcc is on PATH, else the device's 13.0.
CUDA=${CUDA_HOME:-}
if [ -z "$CUDA" ]; then
  if command -v nvcc > /dev/null; then CUDA=$(dirname "$(dirname "$(realpath "$(command -v nvcc)")")")
  elif [ -x /usr/local/cuda-13.0/bin/nvcc ]; then CUDA=/usr/local/cuda-13.0
  else CUDA=/usr/local/cuda; fi
fi
export LD_LIBRARY_PATH=$CUDA/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SRC=$(realpath "${1:?nccl-tests source}"); D=$(realpath "${2:-.dev/all}"); L=$D/libtpcomm_nccl.so
H=${3:-$SRC/../nccl-home}; ONLY=${4:-.}
OUT=${OUT:-/tmp/nccl-tests}; mkdir -p "$OUT"; OUT=$(realpath "$OUT")
TOTAL=${TOTAL:-560}; T0=$SECONDS
[ -f "$L" ] || { echo "nccl_tests: no $L (bench/device/stage_all.sh)" >&2; exit 2; }
head -2 "$D/BUILD.txt" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi here)"
fits() { [ $((SECONDS - T0 + $1)) -le "$TOTAL" ] && return 0; echo "== skipped (TOTAL $TOTAL s): $2"; return 1; }

B=$SRC/build-sm90
if [ ! -x "$B/all_reduce_perf" ]; then
  real=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null || ldconfig -p | awk '/libnccl.so.2 /{print $NF; exit}')
  [ -f "$H/include/nccl.h" ] && [ -n "$real" ] || { echo "nccl_tests: need $H/include/nccl.h and a libnccl.so.2 (found: '$real')" >&2; exit 2; }
  HOME_RW=$OUT/nccl-home; mkdir -p "$HOME_RW/include" "$HOME_RW/lib"
  cp "$H/include/nccl.h" "$HOME_RW/include/"; ln -sf "$real" "$HOME_RW/lib/libnccl.so"
  B=$OUT/nt
  echo "== build nccl-tests ($(git -C "$SRC" log -1 --format=%h 2>/dev/null || cat "$SRC/COMMIT" 2>/dev/null)) for sm_90 with $($CUDA/bin/nvcc --version | grep release), nccl.h $(grep -m1 'define NCCL_VERSION_CODE' "$HOME_RW/include/nccl.h")"
  ( cd "$SRC/src" && timeout 300 make -j16 DSO=1 CUDA_HOME="$CUDA" NCCL_HOME="$HOME_RW" BUILDDIR="$B" \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ) > "$OUT/build.log" 2>&1
  echo "== build rc=$? at $((SECONDS - T0)) s"; tail -3 "$OUT/build.log"
  [ -x "$B/all_reduce_perf" ] || { grep -m5 -i error "$OUT/build.log"; exit 1; }
  rm -f "$B"/*.o "$B"/os/*.o "$B"/verifiable/*.o
fi
export LD_LIBRARY_PATH=$B/verifiable:$LD_LIBRARY_PATH
# The shim reaches the CUDA runtime only when the program links it dynamically (nccl-tests'
# default, CUDARTLIB=cudart).
if command -v ldd > /dev/null && ! ldd "$B/all_reduce_perf" 2>/dev/null | grep -q libcudart; then
  echo "nccl_tests: $B/all_reduce_perf does not link libcudart dynamically; the one-GPU shim cannot show it more GPUs, so -g/-t above 1 will be refused" >&2
fi
HERE=$(dirname "$(realpath "$0")")
SHIM=${SHIM:-}
if [ -z "$SHIM" ]; then
  SHIM=$OUT/libonegpu.so; gcc -O2 -shared -fPIC -o "$SHIM" "$HERE/one_gpu_shim.c" -ldl || exit 1
fi
SHIM=$(realpath "$SHIM")

pass=0; fail=0; skipped=0
# run NAME TIMEOUT ENV... -- PROGRAM ARGS...: one case, its output in $OUT/NAME.txt.
run() {
  local name=$1 t=${CASE_T:-$2}; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  [[ "$name" =~ $ONLY ]] || return 0
  fits "$t" "$name" || { skipped=$((skipped + 1)); return 0; }
  local f=$OUT/$name.txt s=$SECONDS
  timeout "$t" env TPCOMM_TIMEOUT_S=20 "${envs[@]}" LD_PRELOAD="$SHIM:$L" "$B/$1" "${@:2}" > "$f" 2>&1
  local rc=$? oob; oob=$(grep -m1 'Out of bounds values' "$f" | sed 's/.*: *//')
  if [ $rc -eq 0 ] && [[ "$oob" == "0 OK" ]]; then
    pass=$((pass + 1)); printf 'PASS  %-28s %3d s  %s\n' "$name" $((SECONDS - s)) "$(grep -m1 'Avg bus bandwidth' "$f" | sed 's/.*: */busbw avg /')"
  else
    fail=$((fail + 1)); printf 'FAIL  %-28s %3d s  rc=%d oob=%s\n' "$name" $((SECONDS - s)) $rc "${oob:-none}"
    # Its lines that say why (else its last three).
    local why; why=$(grep -vE '^#  *[0-9]|^# *$' "$f" | grep -iE 'error|fail|tpcomm:|refus|timeout|abort|wrong|invalid|no such' | head -6 | cut -c1-400)
    if [ -n "$why" ]; then echo "$why"; else tail -3 "$f" | cut -c1-300; fi
  fi
}
S="-b 8 -e 32M -f 8 -n 5 -w 2 -c 1"
# The issue's first failure: one thread creates every rank in a group (auto mode, default).
run ar.g4.auto 60 -- all_reduce_perf -g 4 $S
run ar.g4.standalone 60 TPCOMM_STANDALONE=1 -- all_reduce_perf -g 4 $S
run ar.g2 60 -- all_reduce_perf -g 2 $S
run ar.g3 60 -- all_reduce_perf -g 3 $S
run ar.g8 90 -- all_reduce_perf -g 8 $S
run ar.g4.graph 60 -- all_reduce_perf -g 4 $S -G 3
run ar.t4 60 -- all_reduce_perf -t 4 -g 1 $S
run ar.t4.pinit 60 -- all_reduce_perf -t 4 -g 1 -p 1 $S
run ar.t2g2 60 -- all_reduce_perf -t 2 -g 2 $S
run ar.g4.alltypes 120 -- all_reduce_perf -g 4 -b 8 -e 1M -f 32 -n 2 -w 1 -d all -o all
run ag.g4 60 -- all_gather_perf -g 4 $S
run rs.g4 60 -- reduce_scatter_perf -g 4 $S
run bc.g4 60 -- broadcast_perf -g 4 $S
run rd.g4 60 -- reduce_perf -g 4 $S
run a2a.g4 60 -- alltoall_perf -g 4 $S
run sr.g4 60 -- sendrecv_perf -g 4 $S
run ga.g4 60 -- gather_perf -g 4 $S
run sc.g4 60 -- scatter_perf -g 4 $S
run hc.g4 60 -- hypercube_perf -g 4 $S
run a2av.g4 60 -- alltoallv_perf -g 4 $S
run ag.g3.graph 60 -- all_gather_perf -g 3 $S -G 2
run rs.g3.graph 60 -- reduce_scatter_perf -g 3 $S -G 2
run sr.g3.graph 60 -- sendrecv_perf -g 3 $S -G 2
run ar.g4.reg 60 -- all_reduce_perf -g 4 $S -R 1
run ar.g4.win 60 -- all_reduce_perf -g 4 $S -R 2
run ar.g4.blocking 60 -- all_reduce_perf -g 4 $S -z 1
run ar.g4.agg 60 -- all_reduce_perf -g 4 $S -a 4
run ar.t3 60 -- all_reduce_perf -t 3 -g 1 $S
run rs.t4.alltypes 120 -- reduce_scatter_perf -t 4 -g 1 -b 8 -e 1M -f 32 -n 2 -w 1 -d all -o all
echo "== nccl-tests: $pass passed, $fail failed, $skipped skipped (TOTAL) at $((SECONDS - T0)) s"
[ "$fail" -eq 0 ]
