#!/bin/bash
# Builds what bench/device/hostgpu.sh needs and puts it, stripped (the device
# call carries at most 64 MiB), into .dev/all/ of this checkout:
#   tpcomm, gpu_host_allreduce (test binary), torch_allreduce.py (if found).
# Run from the repository root on the build machine, then pass carry [".dev/all"].
set -euo pipefail
cargo build --release -p tpcomm-cli
cargo test --release -p tpcomm --test gpu_host_allreduce --no-run
mkdir -p .dev/all
install -m 755 target/release/tpcomm .dev/all/tpcomm
t=$(find target/release/deps -maxdepth 1 -type f -executable -name 'gpu_host_allreduce-*' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)
install -m 755 "$t" .dev/all/gpu_host_allreduce
strip .dev/all/tpcomm .dev/all/gpu_host_allreduce
for a in shared/anchors/torch_allreduce.py ../shared/anchors/torch_allreduce.py; do
  [ -f "$a" ] && [ ! -f .dev/all/torch_allreduce.py ] && cp "$a" .dev/all/ || true
done
ls -la .dev/all
