"""CPU-only tests of the installed tpcomm wheel (scripts/test_wheel.sh runs
them in a fresh venv). None needs a GPU or torch."""

import os
import subprocess
import sys
import threading

import pytest

import tpcomm
from tpcomm import _setup, _tpcomm

ELF_MAGIC = b"\x7fELF"


def run(args, env=None):
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


def test_import_does_not_import_torch():
    r = run([sys.executable, "-c", "import sys, tpcomm, tpcomm.torch; print('torch' in sys.modules)"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_dropin_path_is_a_loadable_elf_with_nccls_api():
    import ctypes

    path = tpcomm.dropin_path()
    assert os.path.isabs(path) and os.path.isfile(path)
    with open(path, "rb") as f:
        assert f.read(4) == ELF_MAGIC
    lib = ctypes.CDLL(path)
    # Symbols pynccl binds by name.
    for name in ("ncclAllReduce", "ncclCommInitRank", "ncclGetVersion", "ncclGetUniqueId"):
        assert hasattr(lib, name), name


def test_python_m_tpcomm_run_preloads_the_dropin():
    env = dict(os.environ)
    env.pop("VLLM_NCCL_SO_PATH", None)
    env.pop("SGLANG_NCCL_SO_PATH", None)
    env["LD_PRELOAD"] = ""
    # The drop-in is really preloaded: `env` runs with it and prints the variables.
    r = run([sys.executable, "-m", "tpcomm", "run", "--", "env"], env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
    assert lines["LD_PRELOAD"].split()[0] == tpcomm.dropin_path()
    assert lines["VLLM_NCCL_SO_PATH"] == tpcomm.dropin_path()
    assert lines["SGLANG_NCCL_SO_PATH"] == tpcomm.dropin_path()


def test_run_keeps_an_existing_preload_after_the_dropin_and_can_skip_pynccl():
    env = dict(os.environ, LD_PRELOAD="/nonexistent/libother.so")
    env.pop("VLLM_NCCL_SO_PATH", None)
    r = run([sys.executable, "-m", "tpcomm", "run", "--no-pynccl", "--", "env"], env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
    assert lines["LD_PRELOAD"].split() == [tpcomm.dropin_path(), "/nonexistent/libother.so"]
    assert "VLLM_NCCL_SO_PATH" not in lines


def test_run_without_a_command_or_with_an_unknown_one_fails_clearly():
    r = run([sys.executable, "-m", "tpcomm", "run", "--"])
    assert r.returncode == 2 and "run needs a command" in r.stderr
    r = run([sys.executable, "-m", "tpcomm", "run", "--", "no-such-command-tpcomm"])
    assert r.returncode == 127 and "command not found" in r.stderr


def test_python_m_tpcomm_help_lists_run_and_the_bundled_commands():
    r = run([sys.executable, "-m", "tpcomm", "--help"])
    assert r.returncode == 0
    assert "run" in r.stdout and "dropin-path" in r.stdout
    # The bundled command's own help follows.
    assert "Usage: tpcomm <COMMAND>" in r.stdout


def test_env_prints_the_exports_run_sets():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = run([sys.executable, "-m", "tpcomm", "env"], env=env)
    assert r.returncode == 0, r.stderr
    assert f"export LD_PRELOAD={tpcomm.dropin_path()}" in r.stdout.splitlines()
    assert f"export {tpcomm.NVRTC_LIBRARY_ENV}=" in r.stdout


def test_env_keeps_a_preload_already_set_after_the_dropin():
    env = dict(os.environ, LD_PRELOAD="/some/other/libpreload.so")
    r = run([sys.executable, "-m", "tpcomm", "env"], env=env)
    assert r.returncode == 0, r.stderr
    want = f"export LD_PRELOAD='{tpcomm.dropin_path()} /some/other/libpreload.so'"
    assert want in r.stdout.splitlines(), r.stdout


def test_dropin_path_command_prints_the_path():
    r = run([sys.executable, "-m", "tpcomm", "dropin-path"])
    assert r.returncode == 0 and r.stdout.strip() == tpcomm.dropin_path()


def test_bundled_tpcomm_command_runs():
    path = tpcomm.cli_path()
    assert os.access(path, os.X_OK), "the bundled tpcomm lost its executable bit"
    r = run([path, "--help"])
    assert r.returncode == 0, r.stderr
    for sub in ("bench", "probe", "plan"):
        assert sub in r.stdout
    # Through python -m tpcomm, and through the script pip installed.
    r = run([sys.executable, "-m", "tpcomm", "plan", "--help"])
    assert r.returncode == 0, r.stderr
    assert "Usage: tpcomm plan" in r.stdout
    script = os.path.join(os.path.dirname(sys.executable), "tpcomm")
    r = run([script, "plan", "--help"])
    assert r.returncode == 0 and "Usage: tpcomm plan" in r.stdout, r.stderr


def test_nvrtc_from_the_dependency_is_found_and_exported():
    found = tpcomm.find_nvrtc()
    assert found is not None, "nvidia-cuda-nvrtc==13.0.* is a dependency: its libnvrtc.so.13 must be found"
    assert found.endswith(os.path.join("nvidia", "cu13", "lib", "libnvrtc.so.13"))
    env = dict(os.environ)
    env.pop(tpcomm.NVRTC_LIBRARY_ENV, None)
    r = run([sys.executable, "-c", f"import os, tpcomm; print(os.environ['{tpcomm.NVRTC_LIBRARY_ENV}'])"], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == found
    # A value the user set wins.
    env[tpcomm.NVRTC_LIBRARY_ENV] = "/opt/mine/libnvrtc.so.13"
    r = run([sys.executable, "-c", f"import os, tpcomm; print(os.environ['{tpcomm.NVRTC_LIBRARY_ENV}'])"], env=env)
    assert r.stdout.strip() == "/opt/mine/libnvrtc.so.13"


def test_errors_form_one_hierarchy():
    for cls in (
        tpcomm.InvalidArgumentError,
        tpcomm.PeerTimeoutError,
        tpcomm.MismatchError,
        tpcomm.AbortedError,
        tpcomm.OutOfMemoryError,
        tpcomm.LibraryError,
        tpcomm.CudaError,
        tpcomm.DeviceError,
        tpcomm.UnsupportedError,
        tpcomm.SystemCallError,
    ):
        assert issubclass(cls, tpcomm.TpcommError)
    assert issubclass(tpcomm.TpcommError, RuntimeError)


def _threads(world, body):
    """Runs body(rank, gather) on `world` threads sharing an all-gather;
    returns each rank's result or exception."""
    barrier = threading.Barrier(world, timeout=60)
    slots = [None] * world
    out = [None] * world

    def gather_for(rank):
        def gather(obj):
            slots[rank] = obj
            barrier.wait()
            got = list(slots)
            barrier.wait()
            return got

        return gather

    def main(rank):
        try:
            out[rank] = body(rank, gather_for(rank))
        except BaseException as e:  # noqa: BLE001
            out[rank] = e

    ts = [threading.Thread(target=main, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
        assert not t.is_alive(), "a rank hung in the set-up"
    return out


def _has_cuda_driver():
    import ctypes.util

    return ctypes.util.find_library("cuda") is not None


@pytest.mark.skipif(_has_cuda_driver(), reason="a CUDA driver is installed here (the test is for machines without one)")
def test_creation_without_a_gpu_raises_the_typed_error_on_every_rank():
    # CI has no GPU (and no libcuda): each rank fails in the set-up, and every
    # rank raises its own LibraryError naming the driver.
    out = _threads(2, lambda rank, gather: _setup.create(rank, 2, 0, gather, timeout_s=30.0))
    for e in out:
        assert isinstance(e, tpcomm.LibraryError), repr(e)
        assert isinstance(e, tpcomm.TpcommError)
        assert "CUDA driver" in str(e) or "cuInit" in str(e), str(e)


def test_invalid_options_raise_invalid_argument():
    # A world of 9 is refused before any GPU is touched.
    out = _threads(1, lambda rank, gather: _setup.create(0, 9, 0, _rendezvous_of(gather, 9), transport="cuda"))
    assert isinstance(out[0], tpcomm.InvalidArgumentError), repr(out[0])
    assert "world size" in str(out[0])
    with pytest.raises(tpcomm.InvalidArgumentError, match="timeout"):
        _tpcomm.Communicator(0, 2, 0, lambda *a: None, timeout_s=-1.0)
    with pytest.raises(tpcomm.InvalidArgumentError, match="transport"):
        _tpcomm.Communicator(0, 2, 0, lambda *a: None, transport="nvlink")


def _rendezvous_of(gather, world):
    """A gather that answers for `world` ranks from one (the others echo)."""
    return lambda obj: [obj] * world


def test_a_rank_that_leaves_the_set_up_makes_its_peers_leave_with_its_error():
    # Rank 1 fails before its first exchange; rank 0 is at an exchange. Both
    # finish in the same all-gathers and learn the same outcome.
    def body(rank, gather):
        ex = _setup.GatherExchange(gather, rank, 2)
        if rank == 0:
            with pytest.raises(_setup.PeerLeft, match="rank 1 left the set-up: LibraryError: no driver"):
                ex("transport-devices", b"\x00")
            return ex.finish("InvalidArgumentError: rendezvous failed")
        return ex.finish("LibraryError: no driver")

    out = _threads(2, body)
    assert out[0] == [(1, "LibraryError: no driver")], out
    assert out[1] == out[0]


def test_exchanges_return_every_ranks_bytes_and_catch_out_of_order_steps():
    def body(rank, gather):
        ex = _setup.GatherExchange(gather, rank, 2)
        got = ex("k", bytes([rank]) * 3)
        try:
            ex("a" if rank == 0 else "b", b"")
        except RuntimeError as e:
            return got, str(e)
        return got, None

    out = _threads(2, body)
    for got, err in out:
        assert got == [b"\x00\x00\x00", b"\x01\x01\x01"]
        assert err is not None and "same order" in err


def test_version_matches_the_rust_crates():
    assert tpcomm.__version__ == _tpcomm.version()
    assert tpcomm.__version__.count(".") == 2


STAND_IN_TORCH = r'''
import sys, threading, types

# A stand-in for torch and torch.distributed (CI has no torch): two ranks as
# threads of this process, all_gather_object over a barrier; no GPU.
barrier = threading.Barrier(2, timeout=60)
slots = [None, None]
local = threading.local()
dist = types.ModuleType("torch.distributed")
dist.is_available = lambda: True
dist.is_initialized = lambda: True
dist.get_rank = lambda group=None: local.rank
dist.get_world_size = lambda group=None: 2
def all_gather_object(out, obj, group=None):
    slots[local.rank] = obj
    barrier.wait()
    out[:] = list(slots)
    barrier.wait()
dist.all_gather_object = all_gather_object
torch = types.ModuleType("torch")
torch.distributed = dist
torch.cuda = types.SimpleNamespace(is_available=lambda: False)
sys.modules["torch"] = torch
sys.modules["torch.distributed"] = dist

import tpcomm, tpcomm.torch
errors = [None, None]
def rank(r):
    local.rank = r
    try:
        tpcomm.torch.Communicator(timeout_s=30)
    except Exception as e:
        errors[r] = e
threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
for t in threads: t.start()
for t in threads: t.join(120)
for e in errors:
    print(type(e).__name__, isinstance(e, tpcomm.TpcommError), e)
'''


@pytest.mark.skipif(_has_cuda_driver(), reason="a CUDA driver is installed here (the test is for machines without one)")
def test_torch_communicator_without_a_gpu_raises_the_typed_error_on_every_rank():
    r = run([sys.executable, "-c", STAND_IN_TORCH])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    for line in lines:
        assert line.startswith("LibraryError True "), line
        assert "CUDA driver" in line and "install the NVIDIA driver" in line, line


def _close_after_one_line(args, tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert p.stdout.readline()
    p.stdout.close()
    try:
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    err = p.stderr.read().decode()
    p.stderr.close()
    return code, err, sorted(os.listdir(tmp_path))


def test_a_closed_stdout_ends_python_m_tpcomm_quietly(tmp_path):
    # The bundled bench (a minute if it ran on) and the wrapper's own help.
    for args in (["bench", "--device", "cpu"], ["--help"]):
        code, err, left = _close_after_one_line([sys.executable, "-m", "tpcomm"] + args, tmp_path)
        assert code == 0, (args, err)
        for bad in ("Traceback", "panicked", "Broken pipe"):
            assert bad not in err, (args, err)
        assert left == [], (args, left)
