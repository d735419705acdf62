#!/usr/bin/env bash
# Builds (release) everything bench/device/suite.sh runs on the device and
# copies it, stripped, into DEST (default .dev/all of this tree, emptied first):
#   tpcomm                 the command (bench --device gpu, bench forward, tune)
#   tp_allreduce           the library example (crates/tpcomm/examples)
#   libtpcomm_nccl.so      the drop-in NCCL (crates/tpcomm-nccl)
#   tpcomm-conformance     the drop-in's conformance suite (crates/tpcomm-conformance)
#   quant_bench            the quantized wire's bench (crates/tpcomm/examples)
#   gpu_* nccl_gpu         the GPU test executables of crates/tpcomm: one per
#                          crates/tpcomm/tests/gpu_*.rs and nccl_gpu.rs
#   gpu_*                  those of crates/tpcomm-cli (crates/tpcomm-cli/tests/gpu_*.rs;
#                          they run the `tpcomm` staged beside them)
#   nccl_lib               the drop-in's unit tests (crates/tpcomm-nccl --lib; its
#                          standalone test is an ignored GPU test)
#   dropin/*.py            bench/dropin/
#   torch_allreduce.py     the torch anchor (ANCHOR, else shared/anchors/ or ../shared/anchors/)
#   plan/ quant/           bench/plan and bench/quant
#   BUILD.txt              commit, dirty state, build time, sizes
# The lists of test executables come from the test files; staging fails when a
# test file of crates/*/tests marks tests #[ignore] (GPU tests) but no list has
# it. suite.sh itself runs from the tree the device call carries.
# The device call carries at most 64 MiB; this fails when DEST passes
# MAX_MIB (default 48) so there is room to spare.
#
#   bash bench/device/stage_all.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEST="${1:-$ROOT/.dev/all}"
MAX_MIB="${MAX_MIB:-48}"
case "$DEST" in
  "" | / | "$ROOT" | "$HOME") echo "stage_all: refusing to empty DEST=$DEST" >&2; exit 2 ;;
esac

names() { local f; for f in "$@"; do [ -f "$f" ] && basename "$f" .rs; done; }
mapfile -t TESTS_TPCOMM < <(names crates/tpcomm/tests/gpu_*.rs crates/tpcomm/tests/nccl_gpu.rs)
mapfile -t TESTS_CLI < <(names crates/tpcomm-cli/tests/gpu_*.rs)
unlisted=()
while read -r f; do
  n=$(basename "$f" .rs)
  [[ " ${TESTS_TPCOMM[*]} ${TESTS_CLI[*]} " == *" $n "* ]] || unlisted+=("$f")
done < <(grep -l '#\[ignore' crates/*/tests/*.rs)
[ "${#unlisted[@]}" -eq 0 ] ||
  { echo "stage_all: FAILED: GPU tests that no list stages (add them here and to suite.sh): ${unlisted[*]}" >&2; exit 1; }

anchor=""
for a in "${ANCHOR:-}" shared/anchors/torch_allreduce.py ../shared/anchors/torch_allreduce.py; do
  [ -n "$a" ] && [ -f "$a" ] && { anchor=$a; break; }
done
[ -n "$anchor" ] || { echo "stage_all: torch_allreduce.py not found (ANCHOR, shared/anchors/, ../shared/anchors/)" >&2; exit 1; }

echo "== build (release): tpcomm, libtpcomm_nccl.so"
cargo build --release -p tpcomm-cli -p tpcomm-nccl -p tpcomm-conformance
cargo build --release -p tpcomm --example tp_allreduce --example quant_bench

# Prints "name<TAB>path" for each test executable cargo reports.
test_exes() { python3 bench/device/test_exes.py "$@"; }
args_for() { local a=() t; for t in "$@"; do a+=(--test "$t"); done; echo "${a[@]}"; }

echo "== build (release): test executables"
list=$(mktemp)
trap 'rm -f "$list"' EXIT
# shellcheck disable=SC2046 # word splitting of --test NAME pairs is wanted
cargo test --release --no-run --message-format=json -p tpcomm $(args_for "${TESTS_TPCOMM[@]}") |
  test_exes "${TESTS_TPCOMM[@]}" >> "$list"
# shellcheck disable=SC2046
cargo test --release --no-run --message-format=json -p tpcomm-cli $(args_for "${TESTS_CLI[@]}") |
  test_exes "${TESTS_CLI[@]}" >> "$list"
# The drop-in's own unit tests (a lib test: kind "cdylib"/"rlib", not "test").
cargo test --release --no-run --message-format=json -p tpcomm-nccl --lib |
  python3 -c 'import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("target", {}).get("name") == "tpcomm_nccl":
        print("nccl_lib\t" + m["executable"])' >> "$list"

echo "== stage into $DEST"
rm -rf "$DEST"
mkdir -p "$DEST/dropin"
cp target/release/tpcomm "$DEST/tpcomm"
cp target/release/examples/tp_allreduce "$DEST/tp_allreduce"
cp target/release/examples/quant_bench "$DEST/quant_bench"
cp target/release/libtpcomm_nccl.so "$DEST/libtpcomm_nccl.so"
cp target/release/tpcomm-conformance "$DEST/tpcomm-conformance"
missing=()
for t in "${TESTS_TPCOMM[@]}" "${TESTS_CLI[@]}" nccl_lib; do
  exe=$(awk -F'\t' -v n="$t" '$1 == n { print $2; exit }' "$list")
  if [ -z "$exe" ] || [ ! -x "$exe" ]; then missing+=("$t"); continue; fi
  cp "$exe" "$DEST/$t"
done
[ "${#missing[@]}" -eq 0 ] || { echo "stage_all: FAILED: no test executable for: ${missing[*]}" >&2; exit 1; }
# gpu_forward and gpu_supervision run the `tpcomm` staged beside them (DEST/tpcomm).

strip "$DEST/tpcomm" "$DEST/tpcomm-conformance" "$DEST/tp_allreduce" "$DEST/quant_bench" "${TESTS_TPCOMM[@]/#/$DEST/}" "${TESTS_CLI[@]/#/$DEST/}" "$DEST/nccl_lib"
# Keep the dynamic symbol table: it is the NCCL API the drop-in exports.
strip --strip-unneeded "$DEST/libtpcomm_nccl.so"
nm -D --defined-only "$DEST/libtpcomm_nccl.so" | grep -q ' ncclAllReduce$' ||
  { echo "stage_all: FAILED: stripped libtpcomm_nccl.so lost ncclAllReduce" >&2; exit 1; }

cp bench/dropin/*.py "$DEST/dropin/"
cp "$anchor" "$DEST/torch_allreduce.py"
[ -d bench/plan ] && cp -r bench/plan "$DEST/plan"
[ -d bench/quant ] && cp -r bench/quant "$DEST/quant"

{
  echo "commit $(git rev-parse HEAD) ($(git rev-parse --abbrev-ref HEAD))"
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then echo "tracked files modified: yes"; else echo "tracked files modified: no"; fi
  echo "built $(date -u +%FT%TZ) in $ROOT"
  echo "anchor $anchor"
} > "$DEST/BUILD.txt"

echo "== sizes"
(cd "$DEST" && find . -type f -printf '%s\t%p\n' | sort -k2) |
  awk -F'\t' '{ printf "%10.2f MiB  %s\n", $1 / 1048576, $2 }'
total=$(du -sb "$DEST" | cut -f1)
awk -v t="$total" -v m="$MAX_MIB" 'BEGIN { printf "total %.2f MiB (%d bytes; limit here %s MiB, the device call carries at most 64 MiB)\n", t / 1048576, t, m }' |
  tee -a "$DEST/BUILD.txt"
if [ "$total" -gt $((MAX_MIB * 1024 * 1024)) ]; then
  echo "stage_all: FAILED: $DEST is $total bytes, over $MAX_MIB MiB; the carry would not fit" >&2
  exit 1
fi
echo "staged: carry [\"${DEST#"$ROOT"/}\"]"
