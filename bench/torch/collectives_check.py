#!/usr/bin/env python3
"""torch.distributed collectives through the NCCL backend, checked against a CPU reference.

    python3 bench/torch/collectives_check.py --ranks 4 --placement shared \
        --lib target/release/libtpcomm_nccl.so --out results.json [--quick]

Every rank is a process (torch.multiprocessing) of one process group with the NCCL
backend; with --lib the drop-in is preloaded (LD_PRELOAD) into every rank, with
TPCOMM_LOG=info so stderr shows where each call ran. --placement shared puts every
rank on cuda:0 (run it under MPS: `nvidia-cuda-mps-control -d`); spread puts rank r on
cuda:(r mod GPUs).

For bf16, fp16 and fp32, sizes from 1 element to 64 MiB, each rank runs all_reduce
(sum), all_gather_into_tensor, reduce_scatter_tensor (sum), broadcast (the root moves
with the size) and barrier (all-gather's output and reduce-scatter's input, world blocks,
stay within 64 MiB in all: their block shrinks at the largest sizes), eager and captured in a CUDA graph (replayed once after
the inputs are refilled). Inputs are made on the CPU from (seed, rank), so every rank
rebuilds every rank's input and checks every output element against a float64
reference: sums within 2 roundings of the type relative to (|ref| + 1), gathered and
broadcast values bit for bit. Rank 0 writes one row per (op, dtype, size, mode) with
the number of wrong elements and the median time of 5 eager calls (graph: one replay).

What it needs: ranks sharing one GPU are refused by real NCCL ("Duplicate GPU
detected"), so --placement shared needs the drop-in's standalone mode: run it with
TPCOMM_STANDALONE=1 (and TPCOMM_MAX_BYTES=64MiB, the largest block sent here) in the
environment, which the ranks inherit (bench/device/suite.sh does). --placement
spread (one GPU per rank) runs with real NCCL, with or without the drop-in. Where it ran
(shared, on one H200): bench/results/shared-gpu.md.
Keep NCCL_NVLS_ENABLE=0 set on machines where NVLink multicast is off.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Relative tolerance of one rounding of each type (the reference is float64).
TOL = {"bf16": 2 ** -8, "fp16": 2 ** -11, "fp32": 2 ** -23}
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"]
MAX_BYTES = 64 << 20


def sizes(quick, elem):
    """Element counts from 1 to 64 MiB of this type: odd ones and powers of 4."""
    counts = [1, 3, 7, 1000] if quick else [1, 3, 7, 255, 1000, 4097]
    n = 1024
    while n * elem <= MAX_BYTES:
        if not quick or n in (1024, 1 << 18) or n * elem == MAX_BYTES:
            counts.append(n)
        n *= 4
    if counts[-1] * elem != MAX_BYTES:
        counts.append(MAX_BYTES // elem)
    return counts


def cpu_input(seed, rank, n, dtype, part=0):
    """Random values on the CPU, never zero; any rank can rebuild any rank's.
    `part`: which destination's block of a reduce-scatter input (each block
    has its own generator, so a rank checks its block without rebuilding the
    others)."""
    g = torch.Generator().manual_seed((seed * 7919 + rank) * 131 + part)
    x = torch.randn(n, generator=g, dtype=torch.float32)
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)
    return x.to(dtype)


def wrong_sum(out, ref64, abs64, world, name):
    """Elements off the float64 sum by more than rounding allows: the final
    rounding to the type, plus world - 1 additions each rounding at most half
    an ulp of a partial sum, which is at most the sum of the magnitudes
    (abs64). With the bound on the final rounding alone, 4-rank fp32 sums of
    randn inputs fail about 39 times in 64M elements when summed correctly in
    rank order in float32 (a C model of the kernels' order, 2026-12-02)."""
    err = (out.double() - ref64).abs()
    bound = TOL[name] * 2 * ((ref64.abs() + 1.0) + (world - 1) * abs64)
    return int((err > bound).sum())


def wrong_bits(out, expect):
    a = out.contiguous().view(-1)
    b = expect.contiguous().view(-1)
    if a.element_size() == 2:
        a, b = a.view(torch.int16), b.view(torch.int16)
    else:
        a, b = a.view(torch.int32), b.view(torch.int32)
    return int((a != b).sum())


class Case:
    """One (op, dtype, count): device buffers, the call, and the check."""

    def __init__(self, op, name, n, rank, world, dev, seed):
        self.op, self.name, self.n, self.rank, self.world = op, name, n, rank, world
        self.seed, self.dtype = seed, DTYPES[name]
        self.root = seed % world
        ins = world * n if op == "reduce_scatter" else n
        outs = world * n if op == "all_gather" else n
        self.inp = torch.empty(ins, dtype=self.dtype, device=dev)
        self.out = torch.empty(outs, dtype=self.dtype, device=dev)

    def fill(self):
        if self.op == "reduce_scatter":
            x = torch.cat([cpu_input(self.seed, self.rank, self.n, self.dtype, part=d)
                           for d in range(self.world)])
        else:
            x = cpu_input(self.seed, self.rank, self.n, self.dtype)
        self.inp.copy_(x)
        self.out.fill_(7.0)

    def call(self):
        if self.op == "all_reduce":
            self.out.copy_(self.inp)
            dist.all_reduce(self.out)
        elif self.op == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp)
        elif self.op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp)
        elif self.op == "broadcast":
            self.out.copy_(self.inp)
            dist.broadcast(self.out, src=self.root)
        else:
            dist.barrier()

    def wrong(self):
        out = self.out.cpu()
        n, w = self.n, self.world
        if self.op == "barrier":
            return 0
        if self.op == "all_gather":
            expect = torch.cat([cpu_input(self.seed, r, n, self.dtype) for r in range(w)])
            return wrong_bits(out, expect)
        if self.op == "broadcast":
            return wrong_bits(out, cpu_input(self.seed, self.root, n, self.dtype))
        ref = torch.zeros(n, dtype=torch.float64)
        mag = torch.zeros(n, dtype=torch.float64)
        for r in range(w):
            # A reduce-scatter's block for this rank is its own generator's.
            part = self.rank if self.op == "reduce_scatter" else 0
            x = cpu_input(self.seed, r, n, self.dtype, part=part)
            ref += x.double()
            mag += x.double().abs()
        return wrong_sum(out, ref, mag, w, self.name)


def worker(rank, world, args, init_file, q):
    # The CPU checks of all ranks share the machine's cores.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", 0 if args.placement == "shared" else rank % ngpu)
    torch.cuda.set_device(dev)
    os.environ["LOCAL_RANK"] = str(dev.index)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, device_id=dev)
    # The script's own bookkeeping (the summed wrong counts) goes over gloo
    # (CPU), so it never depends on the library under test: an int64 sum is
    # not something tpcomm's standalone mode serves.
    meta = dist.new_group(backend="gloo")
    rows, seed = [], 1
    started = time.time()
    try:
        for name in DTYPES:
            elem = torch.tensor([], dtype=DTYPES[name]).element_size()
            for n in sizes(args.quick, elem):
                if rank == 0:
                    # Progress, so a run cut by its time limit shows how far it got.
                    print(f"progress: {name} {n} elements ({n * elem} bytes), {len(rows)} rows so far, "
                          f"{time.time() - started:.1f} s", file=sys.stderr, flush=True)
                for op in OPS:
                    if op == "barrier" and n != 1:
                        continue
                    # All-gather's output and reduce-scatter's input hold world
                    # blocks: their total stays within 64 MiB, as nccl-tests
                    # sizes them (the block shrinks at the largest sizes).
                    m = n
                    if op in ("all_gather", "reduce_scatter") and world * n * elem > MAX_BYTES:
                        m = MAX_BYTES // (world * elem)
                    seed += 1
                    c = Case(op, name, m, rank, world, dev, seed)
                    # Eager: one checked call, then timed ones.
                    c.fill()
                    c.call()
                    torch.cuda.synchronize()
                    wrong = c.wrong()
                    times = []
                    for _ in range(5):
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        c.call()
                        torch.cuda.synchronize()
                        times.append((time.perf_counter() - t0) * 1e6)
                    rows.append(dict(op=op, dtype=name, count=m, bytes=m * elem, mode="eager",
                                     wrong=wrong, time_us=sorted(times)[2]))
                    if op == "barrier":
                        continue  # barrier is not captured (it synchronizes the host)
                    # Graph: capture one call on a side stream, refill, replay.
                    s = torch.cuda.Stream(device=dev)
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        c.call()  # warm-up on the capture stream
                    torch.cuda.current_stream().wait_stream(s)
                    torch.cuda.synchronize()
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=s):
                        c.call()
                    c.seed = seed = seed + 1
                    c.fill()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    g.replay()
                    torch.cuda.synchronize()
                    t = (time.perf_counter() - t0) * 1e6
                    rows.append(dict(op=op, dtype=name, count=m, bytes=m * elem, mode="graph",
                                     wrong=c.wrong(), time_us=t))
                    del g
        # Every rank's wrong counts, summed, so rank 0 reports them all.
        wrong = torch.tensor([r["wrong"] for r in rows], dtype=torch.int64)
        dist.all_reduce(wrong, group=meta)
        for r, w in zip(rows, wrong.tolist()):
            r["wrong_all_ranks"] = w
        q.put((rank, None, rows if rank == 0 else []))
    except Exception as e:  # reported by the parent with the rank that failed
        q.put((rank, f"{type(e).__name__}: {e}", rows if rank == 0 else []))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2, choices=[2, 4, 8])
    ap.add_argument("--placement", choices=["shared", "spread"], default="shared")
    ap.add_argument("--lib", help="libtpcomm_nccl.so to preload (omit: plain NCCL)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds for the whole run")
    args = ap.parse_args()
    if args.lib and os.environ.get("TPCOMM_CHECK_PRELOADED") != "1":
        # Re-run this script with the drop-in preloaded from the start.
        env = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib), TPCOMM_LOG="info",
                   TPCOMM_CHECK_PRELOADED="1")
        os.execvpe(sys.executable, [sys.executable] + sys.argv, env)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    init_file = tempfile.mktemp(prefix="tpcomm-coll-")
    procs = [ctx.Process(target=worker, args=(r, args.ranks, args, init_file, q))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    results, deadline = {}, time.time() + args.timeout
    while len(results) < args.ranks and time.time() < deadline:
        try:
            rank, err, rows = q.get(timeout=5)
            results[rank] = (err, rows)
        except Exception:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    errors = {r: e for r, (e, _) in results.items() if e}
    missing = [r for r in range(args.ranks) if r not in results]
    rows = results.get(0, (None, []))[1]
    bad = sum(r.get("wrong_all_ranks", r["wrong"]) for r in rows)
    report = dict(ranks=args.ranks, placement=args.placement, lib=args.lib,
                  torch=torch.__version__, gpu=torch.cuda.get_device_name(0),
                  nccl=".".join(map(str, torch.cuda.nccl.version())),
                  errors=errors, missing_ranks=missing, wrong=bad, rows=rows)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    shared = " (shared GPU: timings are not an N-GPU result)" if args.placement == "shared" else ""
    print(f"{args.ranks} ranks, {args.placement}{shared}: {len(rows)} rows, {bad} wrong elements, "
          f"errors {errors or 'none'}, missing ranks {missing or 'none'} -> {args.out}")
    sys.exit(0 if rows and not bad and not errors and not missing else 1)


if __name__ == "__main__":
    main()
