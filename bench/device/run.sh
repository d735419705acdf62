#!/usr/bin/env bash
# Runs one measurement and keeps it as a run folder: the output, the exact
# command, the commit and the machine, so the numbers can be traced and
# repeated. What to run is the arguments; repeat it with REPEAT=n (each
# repetition writes rep-<i>.txt, and rep-<i>.json when the command takes
# --json, so bench/summarize.py can give medians and spread).
#
#   bash bench/device/run.sh WHAT -- COMMAND [ARGS...]
#
#   REPEAT=3 bash bench/device/run.sh p2p-bench -- \
#       target/release/tpcomm bench --device gpu --min 1KiB --max 64MiB --json @JSON
#
# WHAT names the run: the folder is bench/results/<UTC date>-<machine>-<WHAT>/
# (machine: h200x2 style from nvidia-smi, else cpu<cores>; RUNS overrides the
# parent folder). @JSON in the command becomes that repetition's JSON path.
# Every device call gets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NVSHMEM_DISABLE_NVLS=1 (NVLink multicast stays off on lent machines), which
# the README of the run records. The run's exit status is the worst of the
# repetitions'. Summarise with: python3 bench/summarize.py <folder>
set -uo pipefail

if [ $# -lt 3 ] || [ "$2" != "--" ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
WHAT=$1
shift 2
case "$WHAT" in
    *[!A-Za-z0-9._-]* | "") echo "run.sh: WHAT must be letters, digits, '.', '_' or '-'" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

machine() {
    local gpus name
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$gpus" -gt 0 ]; then
        name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
            sed 's/^NVIDIA //; s/ .*//' | tr 'A-Z' 'a-z')
        echo "${name:-gpu}x$gpus"
    else
        echo "cpu$(nproc)"
    fi
}

MACHINE=$(machine)
DATE=$(date -u +%F)
DIR="${RUNS:-$ROOT/bench/results}/$DATE-$MACHINE-$WHAT"
if [ -e "$DIR" ]; then
    echo "run.sh: $DIR exists; pick another WHAT" >&2
    exit 2
fi
mkdir -p "$DIR"

COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -srm), $(nproc) cores"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null
    nvidia-smi topo -m 2>/dev/null
} >"$DIR/machine.txt"

REPEAT=${REPEAT:-1}
worst=0
for i in $(seq 1 "$REPEAT"); do
    cmd=()
    for a in "$@"; do cmd+=("${a//@JSON/$DIR/rep-$i.json}"); done
    echo "== rep $i of $REPEAT ($(date -u +%T)): ${cmd[*]}" >&2
    "${cmd[@]}" >"$DIR/rep-$i.txt" 2>&1
    rc=$?
    echo "   exit status $rc" >&2
    [ "$rc" -gt "$worst" ] && worst=$rc
done

{
    echo "# $WHAT on $MACHINE, $DATE"
    echo
    echo "Command, run $REPEAT time(s) by \`bench/device/run.sh\` (repetition i wrote \`rep-i.txt\`"
    echo "and, where it took \`--json\`, \`rep-i.json\`):"
    echo
    echo '```'
    printf '%q ' "$@" | sed 's/ $//'
    echo
    echo '```'
    echo
    echo "Commit \`$COMMIT\`$([ "$DIRTY" -gt 0 ] && echo " with $DIRTY uncommitted change(s) to tracked files")."
    echo "Environment: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1."
    echo "Machine: \`machine.txt\`. Worst exit status: $worst."
    echo
    echo "Summary: \`python3 bench/summarize.py ${DIR#"$ROOT"/}\` (add what the numbers show here)."
} >"$DIR/README.md"
echo "$DIR"
exit "$worst"
