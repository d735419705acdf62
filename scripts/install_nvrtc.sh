#!/usr/bin/env bash
# Installs NVRTC 13.0 from PyPI (no GPU or CUDA toolkit needed) into .venv/ at
# the repository root, and prints the directory that holds libnvrtc.so.13, for
# LD_LIBRARY_PATH. The kernel compile test (crates/tpcomm/tests/nvrtc_compile.rs)
# needs it; scripts/test.sh calls this.
#
# Nothing goes into the system Python and nothing needs root. It needs only
# python3, and takes the first of these that works:
#   1. `python3 -m venv .venv`, then that environment's pip;
#   2. a venv without pip (Debian without python3-venv has no ensurepip),
#      filled by the system's pip through `pip --python .venv/bin/python`;
#   3. neither pip: the wheel downloaded from PyPI with Python's standard
#      library, its sha256 checked, unpacked into the venv's site-packages.
# A second run finds the library and downloads nothing. `rm -rf .venv` undoes it.
set -euo pipefail
cd "$(dirname "$0")/.."

SPEC='nvidia-cuda-nvrtc==13.0.*'
VENV=.venv

find_lib() {
    local d
    for d in "$VENV"/lib/python3*/site-packages/nvidia/cu13/lib \
        "$VENV"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
        if compgen -G "$d/libnvrtc.so*" >/dev/null; then
            (cd "$d" && pwd)
            return 0
        fi
    done
    return 1
}

if find_lib; then
    exit 0
fi

say() { echo "install_nvrtc.sh: $*" >&2; }

if ! [ -x "$VENV/bin/python" ]; then
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        say "python3 -m venv failed (no ensurepip?); making $VENV without pip"
        python3 -m venv --clear --without-pip "$VENV"
    fi
fi

if "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install --quiet "$SPEC" >&2
elif python3 -m pip --version >/dev/null 2>&1 &&
    python3 -m pip --python "$VENV/bin/python" --version >/dev/null 2>&1; then
    say "no pip in $VENV; installing with the system pip into $VENV"
    python3 -m pip --python "$VENV/bin/python" install --quiet "$SPEC" >&2
else
    say "no pip at all; downloading the wheel from PyPI with the standard library"
    "$VENV/bin/python" - "$SPEC" <<'PY'
import hashlib, json, platform, re, sys, sysconfig, tempfile, urllib.parse, urllib.request, zipfile

name, pin = sys.argv[1].split("==")
prefix = pin.rstrip("*").rstrip(".") + "."
index = f"https://pypi.org/pypi/{name}/json"
with urllib.request.urlopen(index, timeout=60) as r:
    releases = json.load(r)["releases"]
key = lambda v: [int(x) for x in re.findall(r"\d+", v)]
versions = sorted((v for v in releases if v.startswith(prefix)), key=key)
machine = platform.machine()
for version in reversed(versions):
    wheels = [f for f in releases[version]
              if f["filename"].endswith(f"_{machine}.whl") and "manylinux" in f["filename"]]
    if wheels:
        break
else:
    sys.exit(f"install_nvrtc.sh: no {name} {pin} wheel for linux {machine} on PyPI")
f = wheels[0]
site = sysconfig.get_paths()["purelib"]
with tempfile.TemporaryFile() as tmp:
    digest = hashlib.sha256()
    with urllib.request.urlopen(urllib.parse.urljoin(index, f["url"]), timeout=600) as r:
        while chunk := r.read(1 << 20):
            digest.update(chunk)
            tmp.write(chunk)
    if digest.hexdigest() != f["digests"]["sha256"]:
        sys.exit(f"install_nvrtc.sh: {f['filename']}: sha256 does not match PyPI's")
    tmp.seek(0)
    zipfile.ZipFile(tmp).extractall(site)
print(f"install_nvrtc.sh: unpacked {f['filename']} into {site}", file=sys.stderr)
PY
fi

if ! find_lib; then
    say "$SPEC installed but libnvrtc.so not found under $VENV/lib/python3*/site-packages/nvidia"
    exit 1
fi
