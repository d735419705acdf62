#!/usr/bin/env bash
# Builds a variant of the quantized kernels for device step A
# (bench/device/unrun.sh: QS=DEST, each build's gpu_quant, then quant_bench
# alternated with this tree's): applies PATCH (- for none: DEFINES only;
# A.patch,B.patch for several, in that order) to a temporary worktree of
# HEAD, optionally sets `#define NAME VALUE` lines in kernels/quant.cu
# (DEFINES="Q_STEP=4 ..."), builds quant_bench and gpu_quant in release with
# this checkout's target directory (only the tpcomm crate recompiles), and
# copies them, stripped, with BUILD.txt (commit, patch, defines) into DEST.
#
#   bash bench/quant/stage_variant.sh bench/quant/variants/NAME.patch .dev/qv
#   DEFINES="Q_LAG=2" bash bench/quant/stage_variant.sh - .dev/ql2
#   bash bench/quant/stage_variant.sh bench/quant/variants/A.patch,bench/quant/variants/B.patch .dev/qab
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
[ $# -eq 2 ] || { echo "usage: stage_variant.sh PATCH DEST" >&2; exit 2; }
PATCH=$1
IFS=, read -r -a PATCHES <<< "$PATCH"
[ "$PATCH" = - ] && PATCHES=()
for i in "${!PATCHES[@]}"; do
  [ -f "${PATCHES[$i]}" ] || { echo "stage_variant: no patch ${PATCHES[$i]}" >&2; exit 2; }
  PATCHES[i]=$(realpath "${PATCHES[$i]}")
done
DEST=$2
case "$DEST" in "" | / | . | "$ROOT") echo "stage_variant: refusing DEST=$DEST" >&2; exit 2 ;; esac
WT=$(mktemp -d /tmp/tpcomm-variant.XXXXXX)
trap 'git -C "$ROOT" worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"' EXIT
git worktree add -q --detach "$WT" HEAD
for p in "${PATCHES[@]}"; do git -C "$WT" apply "$p"; done
KERNEL=$WT/crates/tpcomm/src/cuda/kernels/quant.cu
for d in ${DEFINES:-}; do
  name=${d%%=*} value=${d#*=}
  grep -q "^#define $name " "$KERNEL" || { echo "stage_variant: no '#define $name' in quant.cu" >&2; exit 2; }
  sed -i "s/^#define $name .*/#define $name $value/" "$KERNEL"
done
export CARGO_TARGET_DIR=$ROOT/target
(cd "$WT" && cargo build --release -q -p tpcomm --example quant_bench)
test_exe=$(cd "$WT" && cargo test --release -q -p tpcomm --test gpu_quant --no-run --message-format=json 2>/dev/null |
  python3 "$ROOT/bench/device/test_exes.py" gpu_quant | cut -f2)
[ -x "$test_exe" ] || { echo "stage_variant: gpu_quant was not built" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$ROOT/target/release/examples/quant_bench" "$test_exe" "$DEST/"
[ "$(basename "$test_exe")" = gpu_quant ] || mv "$DEST/$(basename "$test_exe")" "$DEST/gpu_quant"
strip "$DEST/quant_bench" "$DEST/gpu_quant"
{
  names=-
  for p in "${PATCHES[@]}"; do names=$([ "$names" = - ] && echo "${p##*/}" || echo "$names + ${p##*/}"); done
  echo "commit $(git rev-parse HEAD) + $names ${DEFINES:+(defines: $DEFINES)}"
  echo "built $(date -u +%FT%TZ)"
  grep -E "^#define (Q_STEP|Q_LAG|Q_CHUNK|Q_MINB) |__launch_bounds__" "$KERNEL"
} > "$DEST/BUILD.txt"
# The next build of this checkout must see its own kernel source again.
touch "$ROOT/crates/tpcomm/src/cuda/kernels/quant.cu"
cat "$DEST/BUILD.txt"
ls -la "$DEST"
