#!/usr/bin/env bash
# Measures the H200's [gpu.measured] figures for `tpcomm plan` on
# one GPU and keeps the output under $OUT (or a run folder
# bench/results/<date>-h200-plan-efficiency/ when unset).
# Usage: bench/plan/h200_efficiency.sh   (needs python3 with torch + CUDA)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../runs/$(date -u +%F)-h200-plan-efficiency}"
mkdir -p "$out"
stamp="$(date -u +%Y-%m-%dT%H%M%SZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/plan-efficiency-$stamp.nvidia-smi.csv"
python3 "$here/h200_efficiency.py" "$@" | tee "$out/plan-efficiency-$stamp.txt"
