#!/bin/bash
# Where do ranks that are threads of one process on one GPU wait when a conformance case
# stalls? Runs each PATTERN of tpcomm-conformance at WORLD (default 2) thread ranks (standalone mode,
# TPCOMM_TIMEOUT_S=12) and, while it runs, takes every thread's stack of the case process
# with gdb (or cuda-gdb) at the given seconds, plus each thread's kernel wait channel.
#
#   bash bench/device/stall_stacks.sh [BIN_DIR] [PATTERN@SECONDS,SECONDS ...]
#   bash bench/device/stall_stacks.sh .dev/all allgather@6,10 syncwork.sweep@10,25
#
# BIN_DIR holds tpcomm-conformance and libtpcomm_nccl.so (stage_all.sh's folder). Output:
# $OUT/PATTERN.txt (the case, time-stamped), $OUT/stacks-PATTERN.txt. CASE_T (default 50): the
# case's limit in seconds (stacks taken later than that find no process). WORLD: the ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=${1:-.dev/all}; shift || true
[ $# -gt 0 ] || set -- allgather@6,10 syncwork.sweep@10,25
OUT=${OUT:-/tmp/stall_stacks}; mkdir -p "$OUT"
GDB=$(command -v gdb || command -v cuda-gdb) || { echo "no gdb or cuda-gdb here" >&2; exit 2; }
export TPCOMM_STANDALONE=1 TPCOMM_TIMEOUT_S=12 TPCOMM_LOG=info
CT=${CASE_T:-50}
WORLD=${WORLD:-2}
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N | cut -c7-14)" "$l"; done; }
stacks() {
  for p in $(pgrep -f "tpcomm-conformance"); do
    echo "== $1 pid $p: $(tr '\0' ' ' < /proc/"$p"/cmdline | cut -c1-160)"
    for t in /proc/"$p"/task/*; do echo "$(basename "$t") $(cat "$t"/comm) state=$(cut -d' ' -f3 "$t"/stat) wchan=$(cat "$t"/wchan 2>/dev/null)"; done
    timeout 60 "$GDB" -p "$p" -batch -ex "set pagination off" -ex "thread apply all bt 25" 2>&1 | grep -E "^Thread|^#" | head -300
  done
}
for spec in "$@"; do
  name=${spec%@*}; times=${spec#*@}
  ( timeout $((CT + 10)) stdbuf -oL "$B"/tpcomm-conformance --lib "$B"/libtpcomm_nccl.so --modes threads --worlds "$WORLD" --only "$name" --case-timeout "$CT" --verbose 2>&1 | stamp > "$OUT/$name.txt" ) &
  t0=$SECONDS
  for t in ${times//,/ }; do sleep $((t - (SECONDS - t0))); stacks "$name@${t}s" >> "$OUT/stacks-$name.txt" 2>&1; done
  wait
  echo "== $name: $(grep -E " (PASS|FAIL|HANG|CRASH) " "$OUT/$name.txt" | cut -c1-700)"
done
