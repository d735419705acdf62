#!/usr/bin/env python3
"""Per-call cost of an all-reduce through NCCL-compatible libraries, captured in a CUDA graph.

Each library named by --lib LABEL=PATH is loaded with ctypes (as vLLM's and SGLang's pynccl do)
by WORLD processes placed round-robin on the visible GPUs; every process captures CALLS in-place
all-reduces of --bytes bf16 in one CUDA graph and replays it; the time per call is the replay's
device time over CALLS. The libraries are measured in turns, ROUNDS times, so a before/after
pair comes from one run on one machine. Every round first checks one call's result against a
float64 reference on every rank (the run fails if any element is off).

    python3 percall.py --lib before=A/libtpcomm_nccl.so --lib after=B/libtpcomm_nccl.so \\
        --world 2 --bytes 1024 --rounds 5 [--json out.json]

The same library twice with different settings (the mismatch check's cost):

    python3 percall.py --lib on=A/libtpcomm_nccl.so --lib off=A/libtpcomm_nccl.so \\
        --env on:TPCOMM_CHECK_CALLS=1 --env off:TPCOMM_CHECK_CALLS=0 ...

With fewer GPUs than ranks, start the MPS daemon first (ranks then share a GPU: label the
figures "shared GPU"). Prints one line per library and round, then per library the median
per-call time over rounds with the lowest and highest, and each library over the first.
"""
import argparse, ctypes, json, os, statistics, sys, time
import torch
import torch.multiprocessing as mp

# The ctypes bindings and the return-code check are pynccl_ctypes.py's (beside this file).
from pynccl_ctypes import bind, ck, ncclUniqueId as UniqueId

NCCL_BF16, NCCL_SUM = 9, 0


def worker(rank, world, path, uid_bytes, n, calls, reps, seed, barrier, results):
    try:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        lib = bind(path)
        uid = UniqueId()
        ctypes.memmove(ctypes.addressof(uid.internal), uid_bytes, 128)
        comm = ctypes.c_void_p()
        ck(lib, lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank), "ncclCommInitRank")
        g = torch.Generator(device="cpu")
        xs = []
        for p in range(world):
            g.manual_seed(seed * 100 + p)
            xs.append(torch.randn(n, generator=g).to(torch.bfloat16))
        ref = sum(x.double() for x in xs)
        x = xs[rank].cuda()
        s = torch.cuda.current_stream()
        ck(lib, lib.ncclAllReduce(x.data_ptr(), x.data_ptr(), n, NCCL_BF16, NCCL_SUM, comm, s.cuda_stream), "ncclAllReduce")
        torch.cuda.synchronize()
        got = x.double().cpu()
        # bf16 result of a float sum: within one bf16 rounding of the exact sum, and the inputs' rounding.
        wrong = int(((got - ref).abs() > 2 ** -7 * ref.abs() + 2 ** -7 * world).sum())
        z = torch.randn(n, device="cuda").to(torch.bfloat16)
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            cs = torch.cuda.current_stream().cuda_stream
            for _ in range(calls):
                ck(lib, lib.ncclAllReduce(z.data_ptr(), z.data_ptr(), n, NCCL_BF16, NCCL_SUM, comm, cs), "ncclAllReduce (capture)")
        barrier.wait(timeout=120)
        gr.replay()
        torch.cuda.synchronize()
        ts = []
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(reps):
            barrier.wait(timeout=120)
            e0.record(); gr.replay(); e1.record(); e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1000.0 / calls)
        del gr
        ck(lib, lib.ncclCommDestroy(comm), "ncclCommDestroy")
        results.put((rank, {"wrong": wrong, "us": ts}))
    except Exception as e:  # reported by the parent, which fails the run
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))
        try:
            barrier.abort()
        except Exception:
            pass


def one(path, world, n, calls, reps, seed, env):
    # The library's environment (--env) holds for its ranks only: the spawned
    # processes copy os.environ when they start.
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return one_run(path, world, n, calls, reps, seed)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def one_run(path, world, n, calls, reps, seed):
    lib = bind(path)
    uid = UniqueId()
    ck(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, path, bytes(uid.internal), n, calls, reps, seed, barrier, results))
             for r in range(world)]
    for p in procs:
        p.start()
    out = {}
    deadline = time.time() + 300
    while len(out) < world and time.time() < deadline:
        try:
            r, v = results.get(timeout=5)
            out[r] = v
        except Exception:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    missing = [r for r in range(world) if r not in out]
    errors = {r: v["error"] for r, v in out.items() if "error" in v}
    if missing or errors:
        raise RuntimeError(f"ranks without a result: {missing}; errors: {errors}")
    # The call's time is the slowest rank's: ranks wait for each other.
    per_rep = [max(out[r]["us"][i] for r in range(world)) for i in range(reps)]
    return statistics.median(per_rep), sum(out[r]["wrong"] for r in range(world))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", action="append", required=True, help="LABEL=PATH, measured in the order given")
    ap.add_argument("--env", action="append", default=[],
                    help="LABEL:NAME=VALUE, set for that library's ranks only (e.g. off:TPCOMM_CHECK_CALLS=0)")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=100, help="all-reduces captured in the graph")
    ap.add_argument("--reps", type=int, default=21, help="timed replays per round (median taken)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    libs = []
    for spec in a.lib:
        label, sep, path = spec.partition("=")
        if not sep or not os.path.isfile(path):
            sys.exit(f"--lib wants LABEL=PATH of an existing file, got {spec!r}")
        libs.append((label, os.path.abspath(path)))
    envs = {label: {} for label, _ in libs}
    for spec in a.env:
        label, sep, kv = spec.partition(":")
        name, eq, value = kv.partition("=")
        if not sep or not eq or not name or label not in envs:
            sys.exit(f"--env wants LABEL:NAME=VALUE with a LABEL of --lib, got {spec!r}")
        envs[label][name] = value
    if a.bytes <= 0 or a.bytes % 2:
        sys.exit("--bytes must be a positive whole number of bf16 elements (even)")
    n = a.bytes // 2
    times = {label: [] for label, _ in libs}
    wrong_total = 0
    print(f"world {a.world} on {torch.cuda.device_count()} GPU(s) ({torch.cuda.get_device_name(0)}), "
          f"{a.bytes} B bf16, {a.calls} calls a graph, median of {a.reps} replays a round", flush=True)
    for rnd in range(a.rounds):
        for label, path in libs:
            us, wrong = one(path, a.world, n, a.calls, a.reps, seed=rnd + 1, env=envs[label])
            wrong_total += wrong
            times[label].append(us)
            print(f"round {rnd + 1} {label}: {us:.3f} us/call, {wrong} wrong", flush=True)
    base = statistics.median(times[libs[0][0]])
    summary = {}
    for label, _ in libs:
        t = times[label]
        med = statistics.median(t)
        summary[label] = {"median_us": med, "min_us": min(t), "max_us": max(t), "rounds_us": t}
        ratios = [x / y for x, y in zip(t, times[libs[0][0]])]
        print(f"{label}: {med:.3f} us/call ({min(t):.3f}-{max(t):.3f}); over {libs[0][0]}: "
              f"{med / base:.3f} (per round {min(ratios):.3f}-{max(ratios):.3f})", flush=True)
    print(f"wrong elements: {wrong_total}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"world": a.world, "bytes": a.bytes, "calls": a.calls, "reps": a.reps,
                       "gpus": torch.cuda.device_count(), "gpu": torch.cuda.get_device_name(0),
                       "libs": dict(libs), "summary": summary, "wrong": wrong_total}, f, indent=1)
    sys.exit(1 if wrong_total else 0)


if __name__ == "__main__":
    main()
