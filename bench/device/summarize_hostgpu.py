#!/usr/bin/env python3
"""Turns the outputs of bench/device/hostgpu.sh into
bench/results/<date>-h200x2-hostgpu.{json,md}, with every issue-4 target
marked reached or not.

    python3 bench/device/summarize_hostgpu.py RESULTS [--log LOG] [--date YYYY-MM-DD] [--outdir bench/results]

RESULTS is the hostgpu.tgz the device call returned (or the folder it holds).
"""
import argparse, datetime, io, json, os, re, sys, tarfile

# (first size, last size, limit): host time / NCCL (P2P off) time, graph mode.
LATENCY_TARGETS = [(1024, 65536, 0.25), (262144, 262144, 0.35), (1048576, 1048576, 0.7)]
# Sizes where host busbw must be >= 1.3x NCCL's.
BW_SIZES = [16 << 20, 32 << 20, 64 << 20]
BW_FACTOR = 1.3
HOST_KERNELS = ("host-ll", "host-chunked")


def load(path):
    """{name: text} of every file of the results archive or folder."""
    files = {}
    if os.path.isdir(path):
        for root, _, names in os.walk(path):
            for n in names:
                with open(os.path.join(root, n), "rb") as f:
                    files[n] = f.read().decode("utf-8", "replace")
    else:
        with tarfile.open(path, "r:*") as t:
            for m in t.getmembers():
                if m.isfile():
                    files[os.path.basename(m.name)] = t.extractfile(m).read().decode("utf-8", "replace")
    return files


def bench_rows(files, name):
    text = files.get(name)
    if not text:
        return None, []
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        return None, []
    return d.get("meta"), d.get("rows", [])



def flat_meta(m):
    """The meta of either JSON shape with the older gpu-bench keys (world,
    driver, nvrtc, nccl) filled in from tpcomm bench's (world_size, versions)."""
    m = dict(m or {})
    v = m.get("versions") or {}
    if "world" not in m and m.get("world_size") is not None:
        m["world"] = m["world_size"]
    for k in ("driver", "nvrtc", "nccl"):
        if k not in m and v.get(k) is not None:
            m[k] = v[k]
    return m

def parse_json(text):
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--log", default=None)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--outdir", default="bench/results")
    a = ap.parse_args()
    files = load(a.results)
    log = open(a.log).read() if a.log and os.path.exists(a.log) else ""

    meta_s, rows_s = bench_rows(files, "bench-procs-small.json")
    meta_l, rows_l = bench_rows(files, "bench-procs-large.json")
    rows = rows_s + rows_l
    meta = meta_s or meta_l or {}
    source = "procs"
    if not rows:
        # No process run (e.g. /dev/shm too small): fall back to threads, and say so.
        meta, rows = bench_rows(files, "bench-threads.json")
        meta = meta or {}
        source = "threads (the process run produced no rows)"
    meta = flat_meta(meta)
    for r in rows:
        # "auto(host-ll)" -> "host-ll": the kernel that ran.
        m = re.fullmatch(r"auto\((.*)\)", r["algo"])
        if m:
            r["algo"] = m.group(1)
    # (bytes, mode) -> {algo: row}; the large run's rows win for sizes in both.
    table = {}
    for r in rows:
        table.setdefault((r["bytes"], r["mode"]), {})[r["algo"]] = r
    sizes = sorted({b for b, _ in table})
    wrong = sum(r.get("wrong", 0) for r in rows)

    def best_host(b, mode):
        cands = [table[(b, mode)][k] for k in HOST_KERNELS if k in table.get((b, mode), {})]
        return min(cands, key=lambda r: r["time_us"]) if cands else None

    def nccl(b, mode):
        return table.get((b, mode), {}).get("nccl")

    per_size = []
    for b in sizes:
        e = {"bytes": b}
        for mode in ("graph", "eager"):
            t = table.get((b, mode), {})
            for k in HOST_KERNELS + ("nccl",):
                if k in t:
                    e[f"{k}_{mode}_us"] = round(t[k]["time_us"], 2)
                    e[f"{k}_{mode}_busbw"] = round(t[k]["busbw_gbps"], 2)
            bh, n = best_host(b, mode), nccl(b, mode)
            if bh:
                e[f"best_{mode}"] = bh["algo"]
            if bh and n and n["time_us"] > 0:
                e[f"ratio_{mode}"] = round(bh["time_us"] / n["time_us"], 3)
        per_size.append(e)

    targets = []
    for lo, hi, lim in LATENCY_TARGETS:
        for b in [s for s in sizes if lo <= s <= hi]:
            bh, n = best_host(b, "graph"), nccl(b, "graph")
            if not (bh and n):
                targets.append({"target": f"graph time <= {lim}x NCCL (P2P off)", "bytes": b, "reached": None, "why": "missing rows"})
                continue
            ratio = bh["time_us"] / n["time_us"]
            targets.append({"target": f"graph time <= {lim}x NCCL (P2P off)", "bytes": b, "kernel": bh["algo"],
                            "host_us": round(bh["time_us"], 2), "nccl_us": round(n["time_us"], 2),
                            "ratio": round(ratio, 3), "reached": ratio <= lim})
    for b in BW_SIZES:
        bh, n = best_host(b, "graph"), nccl(b, "graph")
        if not (bh and n):
            targets.append({"target": f"graph busbw >= {BW_FACTOR}x NCCL (P2P off)", "bytes": b, "reached": None, "why": "missing rows"})
            continue
        ratio = bh["busbw_gbps"] / n["busbw_gbps"] if n["busbw_gbps"] else 0.0
        targets.append({"target": f"graph busbw >= {BW_FACTOR}x NCCL (P2P off)", "bytes": b, "kernel": bh["algo"],
                        "host_busbw": round(bh["busbw_gbps"], 2), "nccl_busbw": round(n["busbw_gbps"], 2),
                        "ratio": round(ratio, 3), "reached": ratio >= BW_FACTOR})

    copy = parse_json(files.get("copy-bw.json"))
    copy_all_bidir = None
    if copy:
        for r in copy["rows"]:
            if len(r["gpus"]) > 1 and len(r["directions"]) == 2:
                copy_all_bidir = r["gbps_per_direction_per_gpu"]
    big = best_host(64 << 20, "graph")
    # With 2 ranks the chunked kernel moves the message once each way per GPU,
    # so its algbw is directly comparable with the per-direction copy rate.
    copy_fraction = round(big["algbw_gbps"] / copy_all_bidir, 3) if big and copy_all_bidir else None

    tests = files.get("tests.txt", "")
    tests_ok = len(re.findall(r"test result: ok\. [1-9]", tests))
    tests_failed = len(re.findall(r"test result: FAILED", tests)) + len(re.findall(r"panicked", tests))
    stress = re.findall(r"host stress: .*", tests)

    threads_meta, threads_rows = bench_rows(files, "bench-threads.json")
    doc = {
        "what": "tpcomm host-memory GPU transport (issue 4) vs NCCL with NCCL_P2P_DISABLE=1, one run",
        "meta": meta,
        "source": source,
        "wrong_elements": wrong,
        "rows": per_size,
        "targets": targets,
        "copy_bandwidth": copy,
        "chunked_64MiB_fraction_of_copy_bw": copy_fraction,
        "tests": {"suites_ok": tests_ok, "failures": tests_failed, "stress": stress},
        "threads_auto_graph": [{"bytes": r["bytes"], "algo": r["algo"], "us": round(r["time_us"], 2),
                                "busbw": round(r["busbw_gbps"], 2), "wrong": r["wrong"]} for r in threads_rows],
        "torch_nop2p": parse_json(files.get("torch-nop2p.json")),
    }
    os.makedirs(a.outdir, exist_ok=True)
    base = os.path.join(a.outdir, f"{a.date}-h200x2-hostgpu")
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)

    md = io.StringIO()
    w = md.write
    w("# Host-memory GPU all-reduce (no P2P) vs NCCL with P2P disabled\n\n")
    w(f"Machine: {meta.get('world', '?')} x {', '.join(sorted(set(meta.get('gpus', []))))} ({meta.get('arch', '?')}), "
      f"driver CUDA {meta.get('driver', '?')}, NVRTC {meta.get('nvrtc', '?')}, NCCL {meta.get('nccl', '?')}, "
      f"transport {meta.get('transport', '?')}, launch {meta.get('launch', '?')}; "
      f"median of {meta.get('reps', '?')} reps x {meta.get('iters', '?')} calls, bf16.\n")
    w("NCCL rows ran with NCCL_P2P_DISABLE=1 in the same processes. Command: `bash bench/device/hostgpu.sh` "
      "(tpcomm bench --device gpu --launch procs --transport host; host-ll = one-shot, host-chunked = two-shot).\n\n")
    w(f"Rows from: {source}. Wrong elements over every checked row: **{wrong}**.\n\n")
    w("## Targets (graph mode, best host kernel per size)\n\n| target | bytes | kernel | host | NCCL | ratio | reached |\n|---|---|---|---|---|---|---|\n")
    for t in targets:
        if t.get("reached") is None:
            w(f"| {t['target']} | {t['bytes']} | - | - | - | - | no data ({t.get('why')}) |\n")
        elif "host_us" in t:
            w(f"| {t['target']} | {t['bytes']} | {t['kernel']} | {t['host_us']} us | {t['nccl_us']} us | {t['ratio']} | {'yes' if t['reached'] else 'NO'} |\n")
        else:
            w(f"| {t['target']} | {t['bytes']} | {t['kernel']} | {t['host_busbw']} GB/s | {t['nccl_busbw']} GB/s | {t['ratio']} | {'yes' if t['reached'] else 'NO'} |\n")
    w("\n## Every size (us; busbw GB/s in brackets)\n\n| bytes | LL graph | chunked graph | NCCL graph | best/NCCL graph | LL eager | chunked eager | NCCL eager |\n|---|---|---|---|---|---|---|---|\n")
    for e in per_size:
        def c(k, m):
            us = e.get(f"{k}_{m}_us")
            return "-" if us is None else f"{us} ({e.get(f'{k}_{m}_busbw')})"
        w(f"| {e['bytes']} | {c('host-ll','graph')} | {c('host-chunked','graph')} | {c('nccl','graph')} | {e.get('ratio_graph','-')} | "
          f"{c('host-ll','eager')} | {c('host-chunked','eager')} | {c('nccl','eager')} |\n")
    w("\n## Host <-> device copy bandwidth (pinned, 64 MiB, copy engines)\n\n")
    if copy:
        for r in copy["rows"]:
            w(f"- GPUs {r['gpus']}, {'+'.join(r['directions'])}: {r['gbps_per_direction_per_gpu']} GB/s per direction per GPU\n")
        w(f"\nChunked kernel at 64 MiB (graph): algbw {fmt(big['algbw_gbps'] if big else None)} GB/s = "
          f"{fmt(copy_fraction, 3)} of the copy rate with both GPUs copying both ways.\n")
    else:
        w("not measured (copy_bw.py did not run)\n")
    w("\n## GPU tests (threads, TPCOMM_GPU_TESTS=1)\n\n")
    w(f"Suites passed: {tests_ok}; failures: {tests_failed}.\n")
    for s in stress:
        w(f"- {s}\n")
    if threads_rows:
        w("\n## One thread per GPU, Auto, graph\n\n| bytes | kernel | us | busbw | wrong |\n|---|---|---|---|---|\n")
        for r in threads_rows:
            w(f"| {r['bytes']} | {r['algo']} | {r['time_us']:.2f} | {r['busbw_gbps']:.2f} | {r['wrong']} |\n")
    if log:
        w("\n## Device log (tail)\n\n```\n" + "\n".join(log.splitlines()[-40:]) + "\n```\n")
    with open(base + ".md", "w") as f:
        f.write(md.getvalue())
    print(f"wrote {base}.json and {base}.md")
    reached = sum(1 for t in targets if t.get("reached"))
    print(f"targets reached: {reached}/{len(targets)}; wrong elements {wrong}")


if __name__ == "__main__":
    sys.exit(main())
