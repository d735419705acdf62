"""GPU test of tpcomm.torch: all-reduce and the fused all-reduce + residual
add + RMSNorm through the wheel, on a torch.distributed group.

    python bench/python/test_torch_gpu.py --worlds 2 4 [--replays 1000] [--json OUT.json]

For each world size it starts that many rank processes (spawn), each on GPU
``rank % device_count`` (so on one GPU every rank shares it: run under MPS,
see run_gpu.sh), with a gloo process group for the set-up (NCCL refuses
ranks that share a GPU). Every rank then checks:

1. all_reduce, eager, bf16/f16/f32, sizes from 1 element to 8 MiB (odd
   counts included), in place and into ``out``, fresh random inputs each
   time: every element within the type's tolerance of a float64 sum of all
   ranks' inputs (each rank regenerates its peers' inputs from their seeds),
   and nothing written past ``count`` in ``out``;
2. fused_add_rmsnorm_all_reduce, eager, the Rust test's shapes: bit for bit
   equal to the unfused sequence (all_reduce one-shot, then the add +
   RMSNorm kernel, ``Communicator.add_rmsnorm``), and within tolerance of a
   float64 reference; ``x`` left unchanged;
3. all_reduce captured in a CUDA graph, replayed ``--replays`` times with
   fresh inputs copied in before each replay, each result checked as in 1;
4. the fused op captured in a CUDA graph, replayed ``--replays`` times with
   fresh inputs, each result bit for bit equal to the unfused sequence run
   eagerly on the same inputs.

It prints one line per check and failure, a PASS/FAIL summary per world
size, and exits 1 on any failure (2 when a world could not run at all).
"""

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

EPS = 1e-6
SIZES = [1, 7, 8, 1000, 4096, 65536 + 3, 1 << 20, 4 << 20]  # elements; 4 Mi bf16 = 8 MiB
FUSED_CASES = [("bf16", 1, 7168), ("bf16", 16, 7168), ("bf16", 200, 4104), ("f16", 5, 2048), ("f32", 3, 5000)]
GRAPH_ALL_REDUCE = ("bf16", 7168 * 4)
GRAPH_FUSED = ("bf16", 4, 7168)
MAX_BYTES = 16 << 20


def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def unit_roundoff(name):
    # One rounding of the type (relative), as tpcomm's DType::tolerance.
    return {"bf16": 2.0**-7, "f16": 2.0**-10, "f32": 2.0**-23}[name]


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.passed = 0
        self.failed = []

    def ok(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"[rank {self.rank}] FAIL {what}", flush=True)
        return cond


def gen(torch, seed, n, dtype, device):
    """The same values on every rank for one seed (a rank regenerates its peers' inputs)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)


def seed_of(*parts):
    s = 0
    for p in parts:
        s = (s * 1000003 + p) % (1 << 62)
    return s


def all_reduce_ok(torch, got, inputs, name, world):
    """Every element within the rounding of the type plus f32 accumulation,
    relative to the sum of magnitudes, of the float64 sum."""
    stack = torch.stack([x.double() for x in inputs])
    ref = stack.sum(0)
    scale = stack.abs().sum(0)
    tol = (unit_roundoff(name) + 2.0**-23 * world) * scale + 1e-30
    err = (got.double() - ref).abs()
    bad = int((err > tol).sum())
    return bad == 0, bad, float((err / (scale + 1e-30)).max()) if got.numel() else 0.0


def rmsnorm_ref(torch, partials, residual, weight):
    res = torch.stack([p.double() for p in partials]).sum(0) + residual.double()
    var = (res * res).mean(-1, keepdim=True)
    normed = res / torch.sqrt(var + EPS) * weight.double()
    return res, normed


def bits(torch, t):
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def rank_main(rank, world, init_file, replays, results):
    import torch
    import torch.distributed as dist

    import tpcomm
    from tpcomm.torch import Communicator

    checks = Checks(rank)
    info = {}
    try:
        ndev = torch.cuda.device_count()
        dev = rank % ndev
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        t0 = time.time()
        comm = Communicator(device=dev, max_bytes=MAX_BYTES, timeout_s=120.0)
        info["create_s"] = round(time.time() - t0, 3)
        info["transport"] = comm.transport
        info["nvrtc"] = os.environ.get(tpcomm.NVRTC_LIBRARY_ENV)
        report = comm.memory_report()
        checks.ok(isinstance(report, dict) and report.get("lines"), "memory_report() lists buffers")
        if rank == 0:
            print(f"[world {world}] {comm!r}, created in {info['create_s']} s", flush=True)
            print(comm.memory_report_text(), flush=True)

        # 1. Eager all-reduce.
        for it in range(2):
            for name in ("bf16", "f16", "f32"):
                dt = torch_dtype(torch, name)
                for n in SIZES:
                    if n * torch.tensor([], dtype=dt).element_size() > MAX_BYTES:
                        continue
                    for out_of_place in (False, True):
                        seeds = [seed_of(1, it, n, len(name), out_of_place, r) for r in range(world)]
                        inputs = [gen(torch, s, n, dt, device) for s in seeds]
                        x = inputs[rank].clone()
                        what = f"all_reduce {name} n={n} {'out' if out_of_place else 'in place'} iter {it}"
                        if out_of_place:
                            pad = 16
                            buf = torch.full((n + pad,), 7.0, dtype=dt, device=device)
                            out = buf[:n]
                            res = comm.all_reduce(x, out=out)
                            torch.cuda.synchronize()
                            checks.ok(res.data_ptr() == out.data_ptr(), what + ": returns out")
                            checks.ok(torch.equal(x, inputs[rank]), what + ": input unchanged")
                            checks.ok(bool((buf[n:] == 7.0).all()), what + ": nothing written past count")
                        else:
                            out = comm.all_reduce(x)
                            torch.cuda.synchronize()
                        comm.check()
                        good, bad, rel = all_reduce_ok(torch, out, inputs, name, world)
                        checks.ok(good, f"{what}: {bad} elements off the float64 sum (max rel {rel:.2e})")
        if rank == 0:
            print(f"[world {world}] eager all_reduce: {checks.passed} checks, {len(checks.failed)} failed", flush=True)

        # 2. Eager fused vs unfused, and vs float64.
        for it in range(2):
            for name, rows, hidden in FUSED_CASES:
                dt = torch_dtype(torch, name)
                n = rows * hidden
                partials = [gen(torch, seed_of(2, it, rows, hidden, r), n, dt, device).view(rows, hidden) for r in range(world)]
                residual0 = gen(torch, seed_of(3, it, rows, hidden), n, dt, device).view(rows, hidden)
                weight = gen(torch, seed_of(4, it, hidden), hidden, dt, device)
                x = partials[rank].clone()
                # Unfused: one-shot all-reduce, then add + RMSNorm.
                reduced = torch.empty_like(x)
                comm.all_reduce(x, out=reduced, algo="one-shot")
                res_u = residual0.clone()
                norm_u, _ = comm.add_rmsnorm(res_u, weight, EPS, addend=reduced)
                # Fused, ordinary and overlapped launch.
                res_f = residual0.clone()
                norm_f, res_f_ret = comm.fused_add_rmsnorm_all_reduce(x, res_f, weight, EPS)
                res_o = residual0.clone()
                norm_o, _ = comm.fused_add_rmsnorm_all_reduce(x, res_o, weight, EPS, overlapped=True)
                torch.cuda.synchronize()
                comm.check()
                what = f"fused {name} {rows}x{hidden} iter {it}"
                checks.ok(res_f_ret is res_f, what + ": returns the residual it updated")
                checks.ok(torch.equal(x, partials[rank]), what + ": x unchanged")
                checks.ok(torch.equal(bits(torch, res_f), bits(torch, res_u)), what + ": residual bit-identical to unfused")
                checks.ok(torch.equal(bits(torch, norm_f), bits(torch, norm_u)), what + ": normed bit-identical to unfused")
                checks.ok(torch.equal(bits(torch, norm_o), bits(torch, norm_u)), what + ": overlapped normed bit-identical to unfused")
                checks.ok(torch.equal(bits(torch, res_o), bits(torch, res_u)), what + ": overlapped residual bit-identical to unfused")
                ref_res, ref_norm = rmsnorm_ref(torch, partials, residual0, weight)
                u = unit_roundoff(name)
                scale = torch.stack([p.double().abs() for p in partials]).sum(0) + residual0.double().abs()
                checks.ok(bool(((res_f.double() - ref_res).abs() <= 4 * u * scale + 1e-30).all()), what + ": residual within 4 roundings of float64")
                wabs = weight.double().abs()
                checks.ok(bool(((norm_f.double() - ref_norm).abs() <= 8 * u * (ref_norm.abs() + wabs) + 1e-30).all()), what + ": normed within 8 roundings of float64")
        if rank == 0:
            print(f"[world {world}] eager fused: {checks.passed} checks so far, {len(checks.failed)} failed", flush=True)

        # 3. All-reduce in a CUDA graph, replayed with fresh inputs.
        name, n = GRAPH_ALL_REDUCE
        dt = torch_dtype(torch, name)
        static = torch.zeros(n, dtype=dt, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            comm.all_reduce(static)  # warm-up outside the capture (zeros)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize()
        dist.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(static)
        dist.barrier()
        bad_replays = 0
        t0 = time.time()
        for k in range(replays):
            inputs = [gen(torch, seed_of(5, k, r), n, dt, device) for r in range(world)]
            static.copy_(inputs[rank])
            graph.replay()
            torch.cuda.synchronize()
            good, bad, rel = all_reduce_ok(torch, static, inputs, name, world)
            if not good:
                bad_replays += 1
                if bad_replays <= 3:
                    print(f"[rank {rank}] graph all_reduce replay {k}: {bad} elements off (max rel {rel:.2e})", flush=True)
        comm.check()
        info["graph_all_reduce_s"] = round(time.time() - t0, 2)
        checks.ok(bad_replays == 0, f"graph all_reduce {name} n={n}: {bad_replays} of {replays} replays wrong")

        # 4. The fused op in a CUDA graph vs the unfused sequence, eagerly.
        name, rows, hidden = GRAPH_FUSED
        dt = torch_dtype(torch, name)
        x_s = torch.zeros(rows, hidden, dtype=dt, device=device)
        res_s = torch.zeros_like(x_s)
        w_s = torch.ones(hidden, dtype=dt, device=device)
        norm_s = torch.empty_like(x_s)
        with torch.cuda.stream(side):
            comm.fused_add_rmsnorm_all_reduce(x_s, res_s, w_s, EPS, out=norm_s)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize()
        dist.barrier()
        fgraph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(fgraph):
            comm.fused_add_rmsnorm_all_reduce(x_s, res_s, w_s, EPS, out=norm_s)
        dist.barrier()
        reduced = torch.empty_like(x_s)
        bad_replays = 0
        t0 = time.time()
        for k in range(replays):
            x = gen(torch, seed_of(6, k, rank), rows * hidden, dt, device).view(rows, hidden)
            r0 = gen(torch, seed_of(7, k), rows * hidden, dt, device).view(rows, hidden)
            w = gen(torch, seed_of(8, k), hidden, dt, device)
            x_s.copy_(x)
            res_s.copy_(r0)
            w_s.copy_(w)
            fgraph.replay()
            comm.all_reduce(x, out=reduced, algo="one-shot")
            res_u = r0.clone()
            norm_u, _ = comm.add_rmsnorm(res_u, w, EPS, addend=reduced)
            torch.cuda.synchronize()
            same = torch.equal(bits(torch, norm_s), bits(torch, norm_u)) and torch.equal(bits(torch, res_s), bits(torch, res_u))
            if not same:
                bad_replays += 1
                if bad_replays <= 3:
                    diff = int((bits(torch, norm_s) != bits(torch, norm_u)).sum())
                    print(f"[rank {rank}] graph fused replay {k}: {diff} normed elements differ from unfused", flush=True)
        comm.check()
        info["graph_fused_s"] = round(time.time() - t0, 2)
        checks.ok(bad_replays == 0, f"graph fused {name} {rows}x{hidden}: {bad_replays} of {replays} replays not bit-identical to unfused")

        # 5. All-gather, reduce-scatter and broadcast, eager, against references
        # computed here from every rank's (seeded) inputs.
        for name in ("bf16", "f16", "f32"):
            dt = torch_dtype(torch, name)
            esize = torch.tensor([], dtype=dt).element_size()
            for n in (1, 7, 8, 4093, 65521):
                if world * n * esize > MAX_BYTES:
                    continue
                ins = [gen(torch, seed_of(5, 0, n, len(name), False, r), n, dt, device) for r in range(world)]
                got = comm.all_gather(ins[rank].clone())
                torch.cuda.synchronize()
                comm.check()
                checks.ok(torch.equal(got, torch.cat(ins)), f"all_gather {name} n={n}: every block equals its rank's input")
                full = [gen(torch, seed_of(6, 0, n, len(name), False, r), world * n, dt, device) for r in range(world)]
                part = comm.reduce_scatter(full[rank].clone())
                torch.cuda.synchronize()
                comm.check()
                block = slice(rank * n, (rank + 1) * n)
                stacked = torch.stack([f.double() for f in full])
                ref = stacked.sum(0)[block]
                # Summation's bound: a few units in the last place of the
                # type, relative to the sum of the magnitudes.
                scale = stacked.abs().sum(0)[block]
                tol = {"f32": 1e-6, "f16": 2e-3, "bf16": 1e-2}[name]
                err = (part.double() - ref).abs()
                worst = (err / scale.clamp_min(1e-30)).max().item()
                checks.ok(bool((err <= tol * scale).all()), f"reduce_scatter {name} n={n}: worst error {worst:.2e} of the magnitudes' sum (bound {tol})")
                root = n % world
                b = ins[rank].clone() if rank == root else torch.full((n,), 3.0, dtype=dt, device=device)
                comm.broadcast(b, src=root)
                torch.cuda.synchronize()
                comm.check()
                checks.ok(torch.equal(b, ins[root]), f"broadcast {name} n={n} from {root}: equals the root's input")
        if rank == 0:
            print(f"[world {world}] eager collectives: {checks.passed} checks so far, {len(checks.failed)} failed", flush=True)

        # The typed errors, on a live communicator.
        try:
            comm.all_reduce(torch.zeros(8, dtype=torch.float64, device=device))
            checks.ok(False, "float64 raises InvalidArgumentError")
        except tpcomm.InvalidArgumentError as e:
            checks.ok("element type" in str(e), f"float64 raises InvalidArgumentError ({e})")
        try:
            big = torch.zeros(MAX_BYTES // 2 + 8, dtype=torch.bfloat16, device=device)
            comm.all_reduce(big)
            checks.ok(False, "a message above max_bytes raises InvalidArgumentError")
        except tpcomm.InvalidArgumentError as e:
            checks.ok("max_bytes" in str(e), f"a message above max_bytes raises InvalidArgumentError ({e})")
        torch.cuda.synchronize()
        dist.barrier()
        del graph, fgraph
        del comm
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported to the parent
        checks.failed.append(f"exception: {type(e).__name__}: {e}")
        traceback.print_exc()
    results.put({"rank": rank, "passed": checks.passed, "failed": checks.failed, "info": info})


def run_world(world, replays, timeout_s):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init_file = tempfile.mktemp(prefix=f"tpcomm-gloo-{world}-")
    procs = [ctx.Process(target=rank_main, args=(r, world, init_file, replays, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.time() + timeout_s
    while len(got) < world and time.time() < deadline:
        try:
            r = results.get(timeout=5)
            got[r["rank"]] = r
        except Exception:  # noqa: BLE001 - queue.Empty
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
    try:
        os.unlink(init_file)
    except OSError:
        pass
    missing = [r for r in range(world) if r not in got]
    return got, missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--replays", type=int, default=1000)
    ap.add_argument("--timeout-s", type=float, default=480.0, help="per world size")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    import tpcomm

    print(f"tpcomm {tpcomm.__version__} from {os.path.dirname(tpcomm.__file__)}; drop-in {tpcomm.dropin_path()}", flush=True)
    summary = []
    worst = 0
    for world in args.worlds:
        t0 = time.time()
        got, missing = run_world(world, args.replays, args.timeout_s)
        passed = sum(r["passed"] for r in got.values())
        failed = [f"rank {r}: {f}" for r, v in sorted(got.items()) for f in v["failed"]]
        failed += [f"rank {r}: no result (crashed or hung past {args.timeout_s} s)" for r in missing]
        verdict = "PASS" if not failed else "FAIL"
        if failed:
            worst = max(worst, 2 if len(missing) == world else 1)
        row = {
            "world": world,
            "verdict": verdict,
            "checks_passed": passed,
            "failures": failed,
            "seconds": round(time.time() - t0, 1),
            "info": {r: v["info"] for r, v in sorted(got.items())},
        }
        summary.append(row)
        print(f"== world {world}: {verdict} ({passed} checks passed, {len(failed)} failed, {row['seconds']} s)", flush=True)
        for f in failed[:20]:
            print(f"   {f}", flush=True)
    print("== SUMMARY: " + ", ".join(f"world {r['world']} {r['verdict']}" for r in summary), flush=True)
    print("PASS" if worst == 0 else "FAIL", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    sys.exit(worst)


if __name__ == "__main__":
    main()
