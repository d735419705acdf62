#!/usr/bin/env bash
# Runs every test tpcomm has that needs no GPU, after installing what they need.
# This is the README's test command and what CI runs (.ci/run calls it).
#
# Each step's whole output goes to a log in target/test-logs/; the terminal
# gets one result line per test binary, the output of whatever failed, and,
# last, one verdict line (scripts/verdict.py sums the logs). The exit status is
# non-zero when any test or check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"
: >"$logs/steps"

# step NAME KIND CMD...: runs CMD with its output in $logs/NAME.log, its exit
# status in $logs/NAME.log.rc and its time in $logs/seconds; KIND tells
# verdict.py how to read the log (cargo, pytest, or check: the exit status).
step() {
    local name="$1" kind="$2" log="$logs/$1.log" rc t0=$SECONDS
    shift 2
    echo "$name $kind $log" >>"$logs/steps"
    "$@" >"$log" 2>&1
    rc=$?
    echo "$rc" >"$log.rc"
    echo "$name $((SECONDS - t0))" >>"$logs/seconds"
    return "$rc"
}

# The end of a failed step's log, so the reason shows without opening it.
show_tail() {
    echo "-- $1 failed (exit $(cat "$logs/$1.log.rc")); the end of $logs/$1.log:"
    tail -n 40 "$logs/$1.log" | sed 's/^/   /'
}

finish() {
    echo "logs: $logs/"
    python3 scripts/verdict.py final "$logs" "$((SECONDS - start))"
    exit $?
}

# The run's temporary files go to a directory of its own, removed at the end,
# so what the code under test leaves there is this run's and no other's:
# the temp-dir check below fails on any tpcomm-* entry left in it.
# XDG_RUNTIME_DIR is unset so the drop-in's standalone mode meets there too.
outer_tmp="${TMPDIR:-/tmp}"
run_tmp="$(mktemp -d "$outer_tmp/tpcomm-test-run.XXXXXX")" || exit 1
trap 'rm -rf "$run_tmp"' EXIT
export TMPDIR="$run_tmp"
unset XDG_RUNTIME_DIR

echo "== checks (logs in $logs/)"
step verdict-self-test check python3 -m unittest discover -s scripts -p 'test_verdict.py' ||
    show_tail verdict-self-test
# The torch.distributed pattern suite's own checks (its references, splits and
# supervision of hung or crashed workers, with fake workers): no torch needed.
step torch-patterns-self-test check python3 bench/dropin/torch_patterns.py --self-test ||
    show_tail torch-patterns-self-test
# The nccl-tests harness (bench/device/nccl_tests.sh) with fake nccl-tests binaries: no GPU needed.
step nccl-tests-self-test check bash bench/device/nccl_tests_selftest.sh ||
    show_tail nccl-tests-self-test
step fmt check cargo fmt --all -- --check || show_tail fmt
step clippy check cargo clippy --workspace --all-targets -- -D warnings || show_tail clippy

echo "== tests"
# NVRTC from PyPI into .venv/ (nothing outside the repository), so the kernel compile test
# (tests/nvrtc_compile.rs) runs and cannot skip.
if ! step install-nvrtc check ./scripts/install_nvrtc.sh; then
    show_tail install-nvrtc
    finish
fi
NVRTC_LIB_DIR="$(tail -n 1 "$logs/install-nvrtc.log")"
export LD_LIBRARY_PATH="${NVRTC_LIB_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TPCOMM_REQUIRE_NVRTC=1
# The drop-in tests load the built libtpcomm_nccl.so, which `cargo test` alone does not build.
if ! step build check cargo build --workspace --release; then
    show_tail build
    finish
fi
# --no-fail-fast: every binary runs, so the counts are the whole suite's.
step cargo-test cargo cargo test --workspace --release --no-fail-fast
python3 scripts/verdict.py report cargo "$logs/cargo-test.log"

echo "== python wheel"
# The wheel (drop-in, command, torch ops) built and tested in a fresh venv;
# no GPU or torch needed. docs/python.md says what this covers.
wheel_start=$SECONDS
if step wheel-build check ./scripts/build_wheel.sh; then
    wheel="$(tail -n 1 "$logs/wheel-build.log")"
    step wheel-tests pytest ./scripts/test_wheel.sh "$wheel"
    python3 scripts/verdict.py report pytest "$logs/wheel-tests.log"
    echo "  built and tested in $((SECONDS - wheel_start)) s"
else
    show_tail wheel-build
fi

# Nothing the tests made may stay in the temp directory.
left_behind() {
    local left
    left="$(cd "$run_tmp" && find . -maxdepth 1 -name 'tpcomm-*' | sed 's#^\./##' | sort)"
    if [ -n "$left" ]; then
        echo "left in the run's temp dir by the tests:"
        echo "$left"
        return 1
    fi
    echo "nothing named tpcomm-* left in the run's temp dir"
}
step temp-dir check left_behind || {
    echo "-- temp-dir failed: the tests left these behind:"
    sed -n '2,$s/^/   /p' "$logs/temp-dir.log"
}
finish
