#!/usr/bin/env bash
# nccl_tests.sh's harness without a GPU: fake nccl-tests binaries (shell scripts printing what
# nccl-tests prints) stand in SRC/build-sm90, and the check is that each case's line says what
# happened: a clean run PASS with its bandwidth, wrong values FAIL with their count, a crash
# FAIL with its exit code, a hang FAIL at its timeout, a case past TOTAL skipped, a filtered
# case absent, and the exit status nonzero when any case failed.
#
#   bash bench/device/nccl_tests_selftest.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
t=$(mktemp -d "${TMPDIR:-/tmp}/nccl-tests-selftest.XXXXXX"); trap 'rm -rf "$t"' EXIT
mkdir -p "$t/src/build-sm90" "$t/bin"
# The preloads: any shared object will do (nothing here calls CUDA).
gcc -O2 -shared -fPIC -o "$t/bin/libtpcomm_nccl.so" bench/device/one_gpu_shim.c -ldl
fake() {  # fake NAME BODY: a stand-in nccl-tests binary
  printf '#!/bin/bash\n%s\n' "$2" > "$t/src/build-sm90/$1"; chmod +x "$t/src/build-sm90/$1"
}
ok='echo "#       8000000   2000000  float  sum  -1  1000  8.0  8.0  0  1000  8.0  8.0  0"; echo "# Out of bounds values : 0 OK"; echo "# Avg bus bandwidth    : 12.5 "'
fake all_reduce_perf "$ok"
fake all_gather_perf 'echo "# Out of bounds values : 3 FAILED"; echo "# Avg bus bandwidth    : 1.0 "; exit 1'
fake reduce_scatter_perf 'echo "tpcomm: ncclReduceScatter rank 1/4: refused"; exit 3'
fake broadcast_perf 'sleep 30'
out=$(OUT="$t/out" TOTAL=7 CASE_T=4 SHIM="$t/bin/libtpcomm_nccl.so" \
  bash bench/device/nccl_tests.sh "$t/src" "$t/bin" "$t/src" '^(ar\.g2|ar\.g3|ag\.g4|rs\.g4|bc\.g4|rd\.g4)$' 2>&1) && rc=0 || rc=$?
fail=0
want() { grep -qE "$1" <<< "$out" || { echo "selftest: missing /$1/ in:"; echo "$out"; fail=1; }; }
want '^PASS  ar\.g2 .*busbw avg 12\.5'
want '^PASS  ar\.g3 '
want '^FAIL  ag\.g4 .*rc=1 oob=3 FAILED'
want '^FAIL  rs\.g4 .*rc=3 oob=none'
want 'tpcomm: ncclReduceScatter rank 1/4: refused'
want '^FAIL  bc\.g4 .*rc=124'
want 'skipped \(TOTAL 7 s\): rd\.g4'
want '2 passed, 3 failed, 1 skipped'
if grep -qE '^(PASS|FAIL)  ar\.g4 ' <<< "$out"; then echo "selftest: a filtered-out case ran"; fail=1; fi
[ "$rc" -ne 0 ] || { echo "selftest: failures but exit status 0"; fail=1; }
[ -f "$t/out/ar.g2.txt" ] || { echo "selftest: no per-case output"; fail=1; }
[ "$fail" -eq 0 ] && echo "nccl_tests.sh harness: ok"
exit "$fail"
