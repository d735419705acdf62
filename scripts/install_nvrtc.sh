#!/usr/bin/env bash
# Installs NVRTC 13.0 from PyPI (no GPU or CUDA toolkit needed) and prints the
# directory that holds libnvrtc.so.13, for LD_LIBRARY_PATH. The kernel compile
# test (crates/tpcomm/tests/nvrtc_compile.rs) needs it in CI.
set -euo pipefail
python3 -m pip install --quiet 'nvidia-cuda-nvrtc==13.0.*' >&2 || python3 -m pip install --quiet --user 'nvidia-cuda-nvrtc==13.0.*' >&2
python3 - <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for lib in glob.glob(os.path.join(root, "nvidia", "cu13", "lib", "libnvrtc.so*")) + glob.glob(os.path.join(root, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")):
        print(os.path.dirname(lib))
        sys.exit(0)
sys.exit("install_nvrtc.sh: nvidia-cuda-nvrtc installed but libnvrtc.so not found under " + ", ".join(roots))
PY
