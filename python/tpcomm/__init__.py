"""tpcomm: fast all-reduce for tensor-parallel inference on one multi-GPU machine.

What the wheel holds:

- the NCCL drop-in, ``libtpcomm_nccl.so`` (:func:`dropin_path`; ``python -m
  tpcomm run -- CMD`` starts a command with it preloaded);
- the ``tpcomm`` command (bench, probe, tune, explain, plan);
- :mod:`tpcomm.torch`: a communicator on a ``torch.distributed`` process group
  with ``all_reduce`` and the fused all-reduce + residual add + RMSNorm.

Importing tpcomm needs neither torch nor a GPU. At import, when the
environment variable ``TPCOMM_NVRTC_LIBRARY`` is unset and the NVRTC wheel
(``nvidia-cuda-nvrtc``, a dependency) is installed, it is set to that
library's path, so the kernels compile with it in this process and in the
commands ``python -m tpcomm`` starts.
"""

import glob
import os
import site
import sys

from ._tpcomm import (
    AbortedError,
    CudaError,
    DeviceError,
    InvalidArgumentError,
    LibraryError,
    MismatchError,
    OutOfMemoryError,
    PeerTimeoutError,
    SystemCallError,
    TpcommError,
    UnsupportedError,
    nvrtc_library_env,
)
from ._tpcomm import version as _rust_version

__version__ = _rust_version()

__all__ = [
    "AbortedError",
    "CudaError",
    "DeviceError",
    "InvalidArgumentError",
    "LibraryError",
    "MismatchError",
    "OutOfMemoryError",
    "PeerTimeoutError",
    "SystemCallError",
    "TpcommError",
    "UnsupportedError",
    "NVRTC_LIBRARY_ENV",
    "cli_path",
    "dropin_path",
    "find_nvrtc",
    "preload_env",
]

#: The variable the Rust NVRTC loader reads first (a path to libnvrtc.so.*).
NVRTC_LIBRARY_ENV = nvrtc_library_env()

_HERE = os.path.dirname(os.path.abspath(__file__))
_BIN = os.path.join(_HERE, "_bin")


def _bundled(name, what):
    path = os.path.join(_BIN, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{what} is not in this tpcomm install ({path} is missing): install "
            "tpcomm from a wheel built by scripts/build_wheel.sh, which bundles it"
        )
    return path


def dropin_path():
    """Absolute path of the bundled ``libtpcomm_nccl.so`` (NCCL's C API,
    tpcomm's all-reduce where it is faster): for ``LD_PRELOAD``,
    ``VLLM_NCCL_SO_PATH`` or ``SGLANG_NCCL_SO_PATH``."""
    return _bundled("libtpcomm_nccl.so", "the NCCL drop-in (libtpcomm_nccl.so)")


def cli_path():
    """Absolute path of the bundled ``tpcomm`` command."""
    return _bundled("tpcomm", "the tpcomm command")


def _site_dirs():
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv layouts lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    seen = []
    for d in dirs:
        if d and os.path.isdir(d) and d not in seen:
            seen.append(d)
    return seen


def find_nvrtc():
    """Path of an NVRTC installed from PyPI in this environment, or None.

    Looks in every site-packages directory for, in order, CUDA 13's layout
    (``nvidia/cu13/lib/libnvrtc.so.13``, the ``nvidia-cuda-nvrtc==13.0.*``
    wheel tpcomm depends on) and CUDA 12's (``nvidia/cuda_nvrtc/lib/
    libnvrtc.so.12``)."""
    patterns = [
        os.path.join("nvidia", "cu13", "lib", "libnvrtc.so.13"),
        os.path.join("nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.13"),
        os.path.join("nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12"),
    ]
    for pattern in patterns:
        for d in _site_dirs():
            hits = sorted(glob.glob(os.path.join(d, pattern)))
            if hits:
                return os.path.abspath(hits[0])
    return None


def _setup_nvrtc(env):
    """Sets ``TPCOMM_NVRTC_LIBRARY`` in ``env`` to :func:`find_nvrtc`'s answer
    unless it is set already; returns the value in effect (or None)."""
    current = env.get(NVRTC_LIBRARY_ENV)
    if current:
        return current
    found = find_nvrtc()
    if found:
        env[NVRTC_LIBRARY_ENV] = found
    return found


def preload_env(env=None, pynccl=True):
    """A copy of ``env`` (default: this process's) that preloads the drop-in:
    ``LD_PRELOAD`` starts with :func:`dropin_path`, ``TPCOMM_NVRTC_LIBRARY``
    names the NVRTC found here (unless set), and with ``pynccl`` the
    variables vLLM (``VLLM_NCCL_SO_PATH``) and SGLang
    (``SGLANG_NCCL_SO_PATH``) read to open NCCL by path point at the drop-in
    too (unless set)."""
    env = dict(os.environ if env is None else env)
    lib = dropin_path()
    parts = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != lib]
    env["LD_PRELOAD"] = " ".join([lib] + parts)
    if pynccl:
        for var in ("VLLM_NCCL_SO_PATH", "SGLANG_NCCL_SO_PATH"):
            env.setdefault(var, lib)
    _setup_nvrtc(env)
    return env


_setup_nvrtc(os.environ)
