#!/usr/bin/env python3
"""Host<->device copy bandwidth of pinned memory, the ceiling of any all-reduce
through host memory: one GPU alone and all GPUs at once, each direction alone
and both directions together (copy engines, one stream per direction).

    python3 copy_bw.py [--bytes N] [--reps R] [--out FILE.json]
"""
import argparse, json, time
import torch


def run(devs, kinds, nbytes, reps):
    """Wall time of `reps` copies of each kind on each device, all issued
    before one synchronisation; returns GB/s per direction per device."""
    jobs = []
    for d in devs:
        dev = torch.device("cuda", d)
        for k in kinds:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            host.fill_(1)
            gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            jobs.append((d, k, host, gpu, torch.cuda.Stream(device=dev)))

    def issue(n):
        for d, k, host, gpu, s in jobs:
            with torch.cuda.stream(s):
                for _ in range(n):
                    if k == "h2d":
                        gpu.copy_(host, non_blocking=True)
                    else:
                        host.copy_(gpu, non_blocking=True)

    def sync():
        for d in devs:
            torch.cuda.synchronize(d)

    issue(2)
    sync()
    t0 = time.perf_counter()
    issue(reps)
    sync()
    dt = time.perf_counter() - t0
    return round(nbytes * reps / dt / 1e9, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=64 << 20)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    n = torch.cuda.device_count()
    rows = []
    sets = [[0]] + ([list(range(n))] if n > 1 else [])
    for devs in sets:
        for kinds in (["h2d"], ["d2h"], ["h2d", "d2h"]):
            gbps = run(devs, kinds, a.bytes, a.reps)
            row = {"gpus": devs, "directions": kinds, "gbps_per_direction_per_gpu": gbps}
            rows.append(row)
            print(f"gpus {devs} {'+'.join(kinds):>8}: {gbps:7.2f} GB/s per direction per GPU", flush=True)
    meta = {"tool": "copy_bw.py", "bytes": a.bytes, "reps": a.reps,
            "gpu": torch.cuda.get_device_name(0), "gpus": n,
            "timing": "wall clock over reps copies issued back to back, pinned host memory"}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
