#!/usr/bin/env bash
# Builds the tpcomm wheel (abi3: CPython 3.9+, Linux x86_64) into .whl/ and
# prints its path on the last line of stdout.
#
# 1. a project-local venv, .venv-wheel/, with maturin (from PyPI, once);
# 2. the release drop-in (libtpcomm_nccl.so) and tpcomm command, copied
#    (without debug info) into python/tpcomm/_bin/, which the wheel bundles;
# 3. maturin build --release of crates/tpcomm-py with python/tpcomm.
#
# Environment: PYTHON (default python3) makes the venv; TPCOMM_WHEEL_DIR
# (default .whl) is where the wheel goes.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
venv="$root/.venv-wheel"
out="${TPCOMM_WHEEL_DIR:-$root/.whl}"

if [ ! -x "$venv/bin/maturin" ]; then
    echo "build_wheel: creating $venv with maturin" >&2
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet 'maturin>=1.8,<2' >&2
fi

echo "build_wheel: cargo build --workspace --release (drop-in and command)" >&2
# The whole workspace, as scripts/test.sh builds it: the same feature set, so
# nothing is compiled twice when both run.
cargo build --workspace --release >&2
bin="$root/python/tpcomm/_bin"
rm -rf "$bin"
mkdir -p "$bin"
for f in libtpcomm_nccl.so tpcomm; do
    # The release profile keeps line tables (debug = 1); the wheel does not need them.
    objcopy --strip-debug "target/release/$f" "$bin/$f"
done
chmod 755 "$bin/tpcomm"

echo "build_wheel: maturin build --release" >&2
mkdir -p "$out"
rm -f "$out"/tpcomm-*.whl
"$venv/bin/maturin" build --release --strip --out "$out" \
    --interpreter "$venv/bin/python" >&2
wheel="$(ls "$out"/tpcomm-*.whl)"
echo "$wheel"
