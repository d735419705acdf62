#!/usr/bin/env python3
"""torch.distributed (NCCL process group, one process per GPU) with libtpcomm_nccl.so
preloaded and without it, in one call: results compared bit for bit, times side by side.

    python3 torch_dropin.py --lib path/to/libtpcomm_nccl.so --out result.json [--quick]

Run 1 ("nccl"): plain PyTorch. Run 2 ("dropin"): the same workers with
LD_PRELOAD=libtpcomm_nccl.so (and TPCOMM_LOG=info, so stderr shows every routing
decision). Each run checks every all-reduce against a float64 reference, records a
checksum of every output, and times eager calls and calls captured in a CUDA graph.
The parent writes rows of bytes, dtype, mode, nccl_us, dropin_us, identical.
Keep NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 set.
"""
import argparse, json, os, sys, tempfile, time
import torch, torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FULL_SIZES = [1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [1024, 65536, 1 << 20]
# Relative tolerance of one rounding of each type (the reference is float64);
# the same rule as bench/torch/collectives_check.py (see check below).
TOL = {"bf16": 2 ** -8, "fp16": 2 ** -11, "fp32": 2 ** -23}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def make_input(seed, rank, n, dtype):
    """Fresh random values, never zero (tpcomm's sentinel is -0.0; a zero would hide nothing)."""
    g = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)
    x = torch.randn(n, generator=g, device="cuda", dtype=torch.float32)
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)
    return x.to(dtype)


def checksum(t):
    """Two integer sums over the raw bits: any bit that differs changes them."""
    bits = t.contiguous().view(-1).view(torch.int16 if t.element_size() == 2 else torch.int32).to(torch.int64)
    w = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
    return [int(bits.sum()), int((bits * w).sum())]


def check(out, ref64, abs64, world, name):
    """Elements off the float64 sum by more than rounding allows, and the
    largest error: the final rounding to the type, plus world - 1 additions
    each rounding at most half an ulp of a partial sum, which is at most the
    sum of the magnitudes (abs64). The final rounding alone is too tight: a
    correct rank-order float32 sum of 4 randn inputs fails it about 39 times
    in 64M elements. The rule of bench/torch/collectives_check.py."""
    err = (out.double() - ref64).abs()
    bound = TOL[name] * 2 * ((ref64.abs() + 1.0) + (world - 1) * abs64)
    bad = int((err > bound).sum())
    return bad, float(err.max()) if err.numel() else 0.0


def time_eager(fn, iters, reps=9, warm=10):
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s.record()
        for i in range(iters):
            fn(i)
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1000 / iters)
    return median(out)


def capture(fn, n_calls):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n_calls):
            fn(i)
    torch.cuda.synchronize()
    return g


def time_graph(g, iters, reps=9):
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1000 / iters)
    return median(out)


def all_reduce_cases(rank, world, sizes):
    rows, failures = [], []
    nbuf = 4
    for name, dt in DTYPES.items():
        esize = torch.tensor([], dtype=dt).element_size()
        # 1 element, an odd count (tails), then the byte sizes.
        counts = [1, 1000 + 3] + [b // esize for b in sizes]
        for seed_i, n in enumerate(counts):
            # Deterministic across ranks and runs (Python's str hash is not).
            seed = 100 * list(DTYPES).index(name) + 10 * seed_i
            inputs = [make_input(seed + b, rank, n, dt) for b in range(nbuf)]
            refs, mags = [], []
            for b in range(nbuf):
                r = torch.zeros(n, dtype=torch.float64, device="cuda")
                m = torch.zeros(n, dtype=torch.float64, device="cuda")
                for p in range(world):
                    x = make_input(seed + b, p, n, dt).double()
                    r += x
                    m += x.abs()
                refs.append(r)
                mags.append(m)
            bufs = [x.clone() for x in inputs]
            # Eager: every buffer reduced once, every element checked.
            for b in range(nbuf):
                dist.all_reduce(bufs[b])
            torch.cuda.synchronize()
            eager_sum = [checksum(x) for x in bufs]
            for b in range(nbuf):
                bad, mx = check(bufs[b], refs[b], mags[b], world, name)
                if bad:
                    failures.append(f"eager {name} n={n} buf {b}: {bad} wrong (max err {mx})")
            # Graph: one captured all-reduce per buffer, replayed on fresh copies of the inputs.
            g = capture(lambda i: dist.all_reduce(bufs[i % nbuf]), nbuf)
            for b in range(nbuf):
                bufs[b].copy_(inputs[b])
            g.replay()
            torch.cuda.synchronize()
            graph_sum = [checksum(x) for x in bufs]
            for b in range(nbuf):
                bad, mx = check(bufs[b], refs[b], mags[b], world, name)
                if bad:
                    failures.append(f"graph {name} n={n} buf {b}: {bad} wrong (max err {mx})")
            if graph_sum != eager_sum:
                failures.append(f"{name} n={n}: graph result differs from eager")
            del g
            # Timing (values grow across calls; timing does not depend on them).
            nbytes = n * esize
            iters = 50 if nbytes < (4 << 20) else 20
            t_eager = time_eager(lambda i: dist.all_reduce(bufs[i % nbuf]), iters)
            g = capture(lambda i: dist.all_reduce(bufs[i % nbuf]), iters)
            t_graph = time_graph(g, iters)
            del g
            for mode, t, cs in (("eager", t_eager, eager_sum), ("graph", t_graph, graph_sum)):
                rows.append({"bytes": nbytes, "count": n, "dtype": name, "mode": mode,
                             "us": round(t, 2), "checksum": cs})
            del bufs, inputs, refs, mags
            torch.cuda.empty_cache()
    return rows, failures


def tp_mlp(rank, world):
    """Column-parallel then row-parallel linear, the all-reduce at the end (bf16)."""
    hidden, ffn, tokens = 4096, 14336, 16
    g = torch.Generator(device="cuda").manual_seed(7)
    w1 = torch.randn(ffn, hidden, generator=g, device="cuda") / hidden ** 0.5
    w2 = torch.randn(hidden, ffn, generator=g, device="cuda") / ffn ** 0.5
    x = torch.randn(tokens, hidden, generator=g, device="cuda")
    shard = ffn // world
    w1s = w1[rank * shard:(rank + 1) * shard].to(torch.bfloat16).contiguous()
    w2s = w2[:, rank * shard:(rank + 1) * shard].to(torch.bfloat16).contiguous()
    xb = x.to(torch.bfloat16)

    def forward():
        y = torch.nn.functional.gelu(xb @ w1s.t()) @ w2s.t()
        dist.all_reduce(y)
        return y

    y_eager = forward()
    static_out = {}
    gr = capture(lambda i: static_out.__setitem__("y", forward()), 1)
    gr.replay()
    torch.cuda.synchronize()
    y_graph = static_out["y"]
    ref = torch.nn.functional.gelu(x.double() @ w1.double().t()) @ w2.double().t()
    err = float((y_eager.double() - ref).abs().max())
    scale = float(ref.abs().max())
    return {"checksum_eager": checksum(y_eager), "checksum_graph": checksum(y_graph),
            "eager_equals_graph": bool(torch.equal(y_eager, y_graph)),
            "max_abs_err_vs_f64": err, "max_abs_ref": scale,
            "within_bf16_tolerance": err < 0.05 * scale}


def other_collectives(rank, world):
    """What the library forwards to NCCL must still work through it."""
    out, n = {}, 4097
    x = torch.arange(n, device="cuda", dtype=torch.float32) + rank * 10000
    b = x.clone()
    dist.broadcast(b, src=0)
    out["broadcast"] = bool(torch.equal(b, torch.arange(n, device="cuda", dtype=torch.float32)))
    ag = torch.empty(world * n, device="cuda", dtype=torch.float32)
    dist.all_gather_into_tensor(ag, x)
    exp = torch.cat([torch.arange(n, device="cuda", dtype=torch.float32) + p * 10000 for p in range(world)])
    out["all_gather"] = bool(torch.equal(ag, exp))
    lst = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(lst, x)
    out["all_gather_list"] = bool(torch.equal(torch.cat(lst), exp))
    rs_in = torch.cat([torch.full((n,), float(p + 1 + rank), device="cuda") for p in range(world)])
    rs = torch.empty(n, device="cuda")
    dist.reduce_scatter_tensor(rs, rs_in)
    out["reduce_scatter"] = bool(torch.all(rs == sum(rank + 1 + p for p in range(world))))
    dist.barrier()
    out["barrier"] = True
    m = torch.full((1000,), float(rank), device="cuda", dtype=torch.bfloat16)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = bool(torch.all(m == world - 1))
    i = torch.full((1000,), rank + 1, device="cuda", dtype=torch.int32)
    dist.all_reduce(i)
    out["all_reduce_int32"] = bool(torch.all(i == world * (world + 1) // 2))
    a = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    out["all_reduce_avg"] = bool(torch.allclose(a, torch.full_like(a, (world + 1) / 2)))
    torch.cuda.synchronize()
    return out


def worker(rank, world, port, mode, sizes, path):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    t0 = time.time()
    res = {"mode": mode, "rank": rank, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "ld_preload": os.environ.get("LD_PRELOAD", "")}
    try:
        res["rows"], res["failures"] = all_reduce_cases(rank, world, sizes)
        res["mlp"] = tp_mlp(rank, world)
        res["collectives"] = other_collectives(rank, world)
    except Exception as ex:  # reported, not hidden
        import traceback
        res["error"] = traceback.format_exc()
    res["seconds"] = round(time.time() - t0, 1)
    with open(f"{path}.{mode}.rank{rank}.json", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def run(mode, lib, sizes, path, port):
    env_before = dict(os.environ)
    if mode == "dropin":
        os.environ["LD_PRELOAD"] = os.path.abspath(lib)
        os.environ.setdefault("TPCOMM_LOG", "info")
    else:
        os.environ.pop("LD_PRELOAD", None)
    try:
        mp.spawn(worker, args=(2, port, mode, sizes, path), nprocs=2, join=True)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    return [json.load(open(f"{path}.{mode}.rank{r}.json")) for r in range(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    sizes = QUICK_SIZES if a.quick else FULL_SIZES
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "res")
    # Alternated and repeated, so that drift of the machine between runs does
    # not land on one side: each time is the lower of its two runs' medians.
    allruns = {"nccl": [], "dropin": []}
    for i, mode in enumerate(("nccl", "dropin", "nccl", "dropin")):
        t0 = time.time()
        allruns[mode].append(run(mode, a.lib, sizes, f"{path}{i}", 29600 + i))
        print(f"== {mode} run {len(allruns[mode])}: {time.time() - t0:.1f} s", flush=True)
    runs = {m: rs[0] for m, rs in allruns.items()}
    ok = True
    for mode, reps in allruns.items():
        for rs in reps:
            for r in rs:
                if r.get("error"):
                    print(f"{mode} rank {r['rank']} ERROR:\n{r['error']}")
                    ok = False
                for f in r.get("failures", []):
                    print(f"{mode} rank {r['rank']} WRONG: {f}")
                    ok = False

    def key(x):
        return (x["bytes"], x["count"], x["dtype"], x["mode"])

    table = {}  # key -> {mode: [rows of every run and rank]}
    for mode, reps in allruns.items():
        for rs in reps:
            for r in rs:
                for x in r.get("rows", []):
                    table.setdefault(key(x), {}).setdefault(mode, []).append((r["rank"], x))
    rows = []
    for k, per in table.items():
        if "nccl" not in per or "dropin" not in per:
            continue
        sums = {m: {json.dumps(x["checksum"]) for _, x in v} for m, v in per.items()}
        r0 = {m: [x["us"] for rk, x in v if rk == 0] for m, v in per.items()}
        rows.append({"bytes": k[0], "count": k[1], "dtype": k[2], "mode": k[3],
                     "nccl_us": min(r0["nccl"]), "dropin_us": min(r0["dropin"]),
                     "ratio": round(min(r0["dropin"]) / min(r0["nccl"]), 3),
                     # Every run and every rank of both libraries gave the same bits.
                     "identical": len(sums["nccl"]) == 1 and sums["nccl"] == sums["dropin"],
                     "nccl_runs_us": r0["nccl"], "dropin_runs_us": r0["dropin"]})
    print(f"{'bytes':>10} {'count':>9} {'dtype':>5} {'mode':>6} {'nccl_us':>9} {'dropin_us':>9} {'ratio':>6} identical  runs")
    for r in rows:
        print(f"{r['bytes']:>10} {r['count']:>9} {r['dtype']:>5} {r['mode']:>6} {r['nccl_us']:>9.2f} {r['dropin_us']:>9.2f} {r['ratio']:>6.3f} {str(r['identical']):>9}  {r['nccl_runs_us']} {r['dropin_runs_us']}")
    mlp = {m: runs[m][0].get("mlp") for m in runs}
    mlp_same = bool(mlp["nccl"] and mlp["dropin"] and mlp["nccl"]["checksum_eager"] == mlp["dropin"]["checksum_eager"]
                    and mlp["nccl"]["checksum_graph"] == mlp["dropin"]["checksum_graph"])
    coll = {m: [r.get("collectives") for r in runs[m]] for m in runs}
    print("mlp:", json.dumps(mlp), "same both ways:", mlp_same)
    print("collectives:", json.dumps(coll))
    all_ident = all(r["identical"] for r in rows) and len(rows) > 0
    coll_ok = all(all(c.values()) for cs in coll.values() for c in cs if c) and all(c for cs in coll.values() for c in cs)
    ok = ok and all_ident and mlp_same and coll_ok
    summary = {"all_identical": all_ident, "mlp_identical": mlp_same, "collectives_ok": coll_ok, "all_ok": ok}
    print("summary:", json.dumps(summary))
    out = {"what": "torch.distributed all_reduce with and without LD_PRELOAD=libtpcomm_nccl.so, 2 ranks",
           "torch": runs["nccl"][0].get("torch"), "nccl": runs["nccl"][0].get("nccl"), "gpu": torch.cuda.get_device_name(0),
           "timing": "per run: median of 9 reps; eager: 50 calls (20 from 4 MiB) between CUDA events; graph: one replay of as many captured calls; per call, rank 0; runs alternate nccl, dropin, nccl, dropin and each column is the lower of its two runs",
           "summary": summary, "rows": rows, "mlp": mlp, "collectives": coll,
           "seconds": {m: [[r.get("seconds") for r in rs] for rs in reps] for m, reps in allruns.items()}}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
