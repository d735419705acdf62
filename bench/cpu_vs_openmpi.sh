#!/usr/bin/env bash
# tpcomm's host all-reduce against OpenMPI's MPI_Allreduce, 2 ranks, same
# sizes, same machine, in one go. Installs OpenMPI (Debian's openmpi-bin) if
# it is missing, runs both ROUNDS times alternately (per size, the median of
# the rounds' medians counts, with the rounds' spread beside it), and
# writes bench/results/<date>-<machine>-cpu-vs-openmpi/cpu-vs-openmpi.{json,md}.
#
# Environment: MIN_BYTES (1024), MAX_BYTES (67108864), ROUNDS (5), DTYPE f32 only.
set -euo pipefail
cd "$(dirname "$0")/.."

MIN_BYTES=${MIN_BYTES:-1024}
MAX_BYTES=${MAX_BYTES:-67108864}
ROUNDS=${ROUNDS:-5}

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "== installing OpenMPI (openmpi-bin, libopenmpi-dev)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q openmpi-bin libopenmpi-dev
fi

echo "== building"
cargo build --release -q -p tpcomm-cli
mkdir -p target/openmpi
mpicc -O2 -o target/openmpi/allreduce_bench bench/openmpi/allreduce_bench.c -lm

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Root in containers; --oversubscribe so 2 ranks start even where MPI counts
# fewer slots than cores.
MPIRUN=(mpirun -np 2 --allow-run-as-root --oversubscribe)
# Load from other work skews both sides; the results record it.
cut -d' ' -f1-3 /proc/loadavg >"$work/load-before"
for round in $(seq 1 "$ROUNDS"); do
    echo "== round $round/$ROUNDS: OpenMPI"
    "${MPIRUN[@]}" target/openmpi/allreduce_bench "$MIN_BYTES" "$MAX_BYTES" >"$work/openmpi-$round.jsonl"
    echo "== round $round/$ROUNDS: tpcomm"
    target/release/tpcomm bench --device cpu --ranks 2 --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" \
        --dtype f32 --op sum --algo auto --json "$work/tpcomm-$round.json" >"$work/tpcomm-$round.txt"
done

cut -d' ' -f1-3 /proc/loadavg >"$work/load-after"
machine="$(nproc)core-$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | tr -s ' ' | sed 's/^ //; s/[^A-Za-z0-9]\+/-/g; s/-$//' | tr 'A-Z' 'a-z')"
out="bench/results/$(date -u +%Y-%m-%d)-${machine}-cpu-vs-openmpi/cpu-vs-openmpi"
mkdir -p "$(dirname "$out")"
python3 bench/openmpi/compare.py "$work" "$ROUNDS" "$(mpirun --version 2>&1 | head -1)" "$out"
echo "wrote $out.json and $out.md"
