#!/usr/bin/env bash
# Runs every test tpcomm has that needs no GPU, after installing what they need.
# This is the README's test command and what CI runs (.ci/run calls it).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== tests"
cargo test --workspace --release
