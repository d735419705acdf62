#!/usr/bin/env bash
# Installs a tpcomm wheel into a fresh venv (with its dependencies, from
# PyPI) and runs the CPU-only Python tests (python/tests) against it.
#
# Usage: scripts/test_wheel.sh [WHEEL]   (default: the one in .whl/)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
wheel="${1:-$(ls "$root"/.whl/tpcomm-*.whl 2>/dev/null | head -n 1)}"
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
    echo "test_wheel: no wheel given and none in .whl/; run scripts/build_wheel.sh first" >&2
    exit 1
fi
venv="$root/.venv-wheel-test"
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "$wheel" pytest
# Run from outside the source tree so `import tpcomm` is the installed wheel,
# not python/tpcomm.
cd "$venv"
"$venv/bin/python" -c 'import tpcomm, sys; assert tpcomm.__file__.startswith(sys.prefix), tpcomm.__file__; print("test_wheel: tpcomm", tpcomm.__version__, "from", tpcomm.__file__)'
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
