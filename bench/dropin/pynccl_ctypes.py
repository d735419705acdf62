#!/usr/bin/env python3
"""Loads libtpcomm_nccl.so by path with ctypes, the way vLLM's and SGLang's pynccl do,
and runs all-reduces through it on 2 GPUs (one process each): results checked against a
float64 reference, eager and captured in a CUDA graph, with times.

    python3 pynccl_ctypes.py --lib path/to/libtpcomm_nccl.so [--out result.json]

The unique id travels over a gloo process group, as in pynccl. Set TPCOMM_LOG=info to see
the routing decisions; TPCOMM_DISABLE=1 makes the same run pure NCCL.
"""
import argparse, ctypes, json, os, sys
import torch, torch.distributed as dist
import torch.multiprocessing as mp


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def bind(path):
    lib = ctypes.CDLL(path)
    c_int, c_size_t, vp = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    sig = {
        "ncclGetVersion": [ctypes.POINTER(c_int)],
        "ncclGetUniqueId": [ctypes.POINTER(ncclUniqueId)],
        "ncclCommInitRank": [ctypes.POINTER(vp), c_int, ncclUniqueId, c_int],
        "ncclAllReduce": [vp, vp, c_size_t, c_int, c_int, vp, vp],
        "ncclAllGather": [vp, vp, c_size_t, c_int, vp, vp],
        "ncclBroadcast": [vp, vp, c_size_t, c_int, c_int, vp, vp],
        "ncclGroupStart": [],
        "ncclGroupEnd": [],
        "ncclCommDestroy": [vp],
    }
    for name, args in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = c_int, args
    lib.ncclGetErrorString.restype, lib.ncclGetErrorString.argtypes = ctypes.c_char_p, [c_int]
    return lib


def ck(lib, r, what):
    if r != 0:
        raise RuntimeError(f"{what} failed: {r} {lib.ncclGetErrorString(r).decode()}")


NCCL_BF16, NCCL_F32, NCCL_SUM = 9, 7, 0


def worker(rank, world, port, path, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    lib = bind(path)
    v = ctypes.c_int()
    ck(lib, lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
    uid = ncclUniqueId()
    if rank == 0:
        ck(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    box = [bytes(uid.internal)]
    dist.broadcast_object_list(box, src=0)
    ctypes.memmove(ctypes.addressof(uid.internal), box[0], 128)
    comm = ctypes.c_void_p()
    ck(lib, lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank), "ncclCommInitRank")
    res = {"rank": rank, "nccl_version": v.value, "checks": {}, "times_us": {}}
    stream = torch.cuda.current_stream()
    for n in (1, 1003, 8192, 65536, 1 << 20):
        for dt, code in ((torch.bfloat16, NCCL_BF16), (torch.float32, NCCL_F32)):
            g = torch.Generator(device="cuda")
            xs = []
            for p in range(world):
                g.manual_seed(1000 * n + p)
                xs.append(torch.randn(n, generator=g, device="cuda").to(dt))
            ref = sum(x.double() for x in xs)
            x = xs[rank].clone()
            y = torch.empty_like(x)
            # Out of place, eager.
            ck(lib, lib.ncclAllReduce(x.data_ptr(), y.data_ptr(), n, code, NCCL_SUM, comm, stream.cuda_stream), "ncclAllReduce")
            torch.cuda.synchronize()
            tol = (2 ** -7 if dt == torch.bfloat16 else 2 ** -22) * 2
            ok_eager = bool(((y.double() - ref).abs() <= tol * (ref.abs() + 1)).all())
            # In place, captured in a CUDA graph (the stream of the capture is what pynccl passes).
            z = xs[rank].clone()
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                ck(lib, lib.ncclAllReduce(z.data_ptr(), z.data_ptr(), n, code, NCCL_SUM, comm,
                                          torch.cuda.current_stream().cuda_stream), "ncclAllReduce (capture)")
            z.copy_(xs[rank])
            gr.replay()
            torch.cuda.synchronize()
            ok_graph = bool(torch.equal(z, y))
            res["checks"][f"{n}:{dt}"] = {"eager_ok": ok_eager, "graph_equals_eager": ok_graph}
            # Times: 50 captured calls per replay.
            if dt == torch.bfloat16:
                gr2 = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gr2):
                    for _ in range(50):
                        lib.ncclAllReduce(z.data_ptr(), z.data_ptr(), n, code, NCCL_SUM, comm,
                                          torch.cuda.current_stream().cuda_stream)
                gr2.replay()
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ts = []
                for _ in range(5):
                    s.record(); gr2.replay(); e.record(); torch.cuda.synchronize()
                    ts.append(s.elapsed_time(e) * 1000 / 50)
                res["times_us"][f"{n * 2}B bf16 graph"] = round(sorted(ts)[2], 2)
                del gr2
            del gr
    # Buffers whose alignment differs between ranks (a tensor view on rank 0,
    # a whole tensor on the others): every rank must still route the call the
    # same way (tpcomm, through its staging buffer where unaligned), or the
    # ranks would wait for each other in different libraries.
    for n in (1003, 65536):
        for dt, code in ((torch.bfloat16, NCCL_BF16), (torch.float32, NCCL_F32)):
            g = torch.Generator(device="cuda")
            xs = []
            for p in range(world):
                g.manual_seed(7000 * n + p)
                xs.append(torch.randn(n, generator=g, device="cuda").to(dt))
            ref = sum(x.double() for x in xs)
            off = 1 if rank == 0 else 0  # one element: 2 or 4 bytes off 16-byte alignment
            xb = torch.zeros(n + 8, dtype=dt, device="cuda")
            yb = torch.zeros(n + 8, dtype=dt, device="cuda")
            x, y = xb[off:off + n], yb[off:off + n]
            x.copy_(xs[rank])
            ck(lib, lib.ncclAllReduce(x.data_ptr(), y.data_ptr(), n, code, NCCL_SUM, comm, stream.cuda_stream), "ncclAllReduce (unaligned)")
            torch.cuda.synchronize()
            tol = (2 ** -7 if dt == torch.bfloat16 else 2 ** -22) * 2
            ok_out = bool(((y.double() - ref).abs() <= tol * (ref.abs() + 1)).all())
            # Untouched around the view: the staging copy wrote exactly n elements.
            ok_edges = bool((yb[:off] == 0).all() and (yb[off + n:] == 0).all())
            # In place, in a graph.
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                ck(lib, lib.ncclAllReduce(x.data_ptr(), x.data_ptr(), n, code, NCCL_SUM, comm,
                                          torch.cuda.current_stream().cuda_stream), "ncclAllReduce (unaligned, capture)")
            x.copy_(xs[rank])
            gr.replay()
            torch.cuda.synchronize()
            res["checks"][f"unaligned {n}:{dt}"] = {"eager_ok": ok_out, "edges_untouched": ok_edges,
                                                    "graph_equals_eager": bool(torch.equal(x, y))}
            del gr
    # A forwarded collective through the same library.
    a = torch.full((4096,), float(rank + 1), device="cuda")
    b = torch.empty(world * 4096, device="cuda")
    ck(lib, lib.ncclAllGather(a.data_ptr(), b.data_ptr(), 4096, NCCL_F32, comm, stream.cuda_stream), "ncclAllGather")
    torch.cuda.synchronize()
    res["checks"]["allgather"] = {"ok": bool(torch.equal(b, torch.cat([torch.full((4096,), float(p + 1), device="cuda") for p in range(world)])))}
    ck(lib, lib.ncclCommDestroy(comm), "ncclCommDestroy")
    res["all_ok"] = all(all(c.values()) for c in res["checks"].values())
    with open(f"{out}.rank{rank}", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default="/tmp/pynccl_ctypes.json")
    a = ap.parse_args()
    mp.spawn(worker, args=(2, 29650, os.path.abspath(a.lib), a.out), nprocs=2, join=True)
    rs = [json.load(open(f"{a.out}.rank{r}")) for r in range(2)]
    for r in rs:
        print(json.dumps(r))
    ok = all(r["all_ok"] for r in rs)
    json.dump({"ranks": rs, "all_ok": ok}, open(a.out, "w"), indent=1)
    print("pynccl_ctypes:", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
