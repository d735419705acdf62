#!/usr/bin/env bash
# Runs every test tpcomm has that needs no GPU, after installing what they need.
# This is the README's test command and what CI runs (.ci/run calls it).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== tests"
# NVRTC from PyPI into .venv/ (nothing outside the repository), so the kernel compile test
# (tests/nvrtc_compile.rs) runs and cannot skip.
NVRTC_LIB_DIR="$(./scripts/install_nvrtc.sh)"
export LD_LIBRARY_PATH="${NVRTC_LIB_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TPCOMM_REQUIRE_NVRTC=1
# The drop-in tests load the built libtpcomm_nccl.so, which `cargo test` alone does not build.
cargo build --workspace --release
cargo test --workspace --release

echo "== python wheel"
# The wheel (drop-in, command, torch ops) built and tested in a fresh venv;
# no GPU or torch needed. docs/python.md says what this covers.
wheel_start=$SECONDS
wheel="$(./scripts/build_wheel.sh | tail -n 1)"
./scripts/test_wheel.sh "$wheel"
echo "== python wheel: built and tested in $((SECONDS - wheel_start)) s"
