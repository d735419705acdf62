#!/usr/bin/env bash
# Puts what bench/device/nccl_tests.sh needs under .dev/ (git-ignored, carried to the device):
#   .dev/nccl-tests-src   the nccl-tests source tree at GIT's HEAD (its commit in COMMIT)
#   .dev/nccl-home        include/nccl.h of NCCL 2.28 (the device's NCCL), from PyPI's
#                         nvidia-nccl-cu12 wheel (downloaded into a temporary folder)
#   .dev/shim             libonegpu.so, built from one_gpu_shim.c with gcc
# GIT is a clone of github.com/NVIDIA/nccl-tests (a bare mirror will do).
#
#   bash bench/device/prepare_nccl_tests.sh GIT [NCCL_VERSION]   (default 2.28.9)
set -euo pipefail
cd "$(dirname "$0")/../.."
GIT=${1:?"a clone of github.com/NVIDIA/nccl-tests"}
VER=${2:-2.28.9}
git -C "$GIT" rev-parse HEAD > /dev/null || { echo "prepare_nccl_tests: $GIT is not a git repository" >&2; exit 2; }
rm -rf .dev/nccl-tests-src && mkdir -p .dev/nccl-tests-src
git -C "$GIT" archive HEAD | tar -x -C .dev/nccl-tests-src
git -C "$GIT" log -1 --format='%H %cd' > .dev/nccl-tests-src/COMMIT
echo "nccl-tests $(cat .dev/nccl-tests-src/COMMIT)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" download --no-deps -q "nvidia-nccl-cu12==$VER" -d "$tmp/whl"
mkdir -p .dev/nccl-home/include
python3 - "$tmp"/whl/*.whl <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(".dev/nccl-home/include/nccl.h", "wb") as out:
    out.write(z.read("nvidia/nccl/include/nccl.h"))
PY
grep -m1 'define NCCL_VERSION_CODE' .dev/nccl-home/include/nccl.h
mkdir -p .dev/shim
gcc -O2 -Wall -Wextra -shared -fPIC -o .dev/shim/libonegpu.so bench/device/one_gpu_shim.c -ldl
du -sh .dev/nccl-tests-src .dev/nccl-home .dev/shim
