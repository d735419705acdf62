#!/usr/bin/env bash
# Builds what bench/device/tune.sh needs and copies it, stripped (the device
# call carries at most 64 MiB), into DEST (default /work/main/.dev/all):
# tpcomm (4 MB stripped), gpu_self_tune (2 MB) and tune.sh itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST="${1:-/work/main/.dev/all}"
mkdir -p "$DEST"
cargo build --release -p tpcomm-cli
test_bin=$(cargo test --release -p tpcomm --test gpu_self_tune --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu_self_tune":
        print(m["executable"])')
cp target/release/tpcomm "$DEST/tpcomm"
cp "$test_bin" "$DEST/gpu_self_tune"
strip "$DEST/tpcomm" "$DEST/gpu_self_tune"
cp bench/device/tune.sh "$DEST/tune.sh"
ls -la "$DEST"
