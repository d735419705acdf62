#!/usr/bin/env python3
"""Summarise a run folder of bench/device/run.sh (or any bench JSON files).

    python3 bench/summarize.py RUN_FOLDER_OR_JSON... [--markdown]

Reads every `tpcomm bench` JSON (tpcomm::report::BenchReport, from the CPU or
the GPU bench) under the arguments. Repetitions of one command (same
transport, launch and world) are grouped; for each (mode, size, algorithm) it
prints the median time over the repetitions and the spread (lowest-highest),
never the best run alone. When the rows include `auto:<choice>`, it also gives
auto against the fastest fixed choice and against NCCL at each point, as
medians over the repetitions with their spread.

Every row's `wrong` count is summed; the exit status is 1 when any element was
wrong, 2 when nothing could be read, else 0.
"""
import argparse
import json
import os
import statistics
import sys

# Which fixed-row labels run the candidate auto names (first present wins):
# P2P rows are labelled one-shot/two-shot, host-transport rows by kernel.
FIXED_FOR = {
    "nccl": ["nccl"],
    "cuda:one-shot": ["one-shot"],
    "cuda:two-shot": ["two-shot"],
    "host:one-shot": ["host-delta", "host-push", "host-ll", "host-chunked"],
    "host:two-shot": ["host-chunked"],
}


def size(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def find_reports(paths):
    """(path, doc) of every JSON with `meta` and `rows`, in name order."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names if n.endswith(".json")]
        else:
            files.append(p)
    out = []
    for f in sorted(files):
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("rows"), list) and "meta" in doc:
            out.append((f, doc))
    return out


def group_key(meta):
    world = meta.get("world_size", meta.get("world"))
    return (meta.get("device") or "gpu", meta.get("transport"), meta.get("launch"), world)


def spread(values, digits=2):
    """'median (low-high)' or just the value when there is one."""
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def summarize(reports):
    """{group: {(mode, bytes): {algo: [time per report]}}} and the wrong total."""
    groups, wrong = {}, 0
    for path, doc in reports:
        g = groups.setdefault(group_key(doc["meta"]), {"files": [], "points": {}})
        g["files"].append(path)
        seen = {}
        for r in doc["rows"]:
            if not all(k in r for k in ("bytes", "algo", "time_us")):
                continue
            wrong += int(r.get("wrong", 0))
            key = ((r.get("mode", "eager"), r["bytes"]), r["algo"])
            # A label twice in one report (a merged run): the faster is kept,
            # as both ran the same kernel.
            t = r["time_us"]
            seen[key] = min(t, seen.get(key, t))
        for (point, algo), t in seen.items():
            g["points"].setdefault(point, {}).setdefault(algo, []).append(t)
    return groups, wrong


def auto_rows(points):
    """Per point: auto's choice, auto/best fixed and auto/NCCL per report."""
    out = []
    for (mode, nbytes), by in sorted(points.items()):
        autos = [a for a in by if a.startswith("auto:")]
        fixed = {a: ts for a, ts in by.items() if not a.startswith("auto")}
        if not autos or not fixed:
            continue
        label = autos[0]
        n = min(len(by[label]), *(len(ts) for ts in fixed.values()))
        over_best = [by[label][i] / min(ts[i] for ts in fixed.values()) for i in range(n)]
        nccl = fixed.get("nccl")
        over_nccl = [by[label][i] / nccl[i] for i in range(n)] if nccl else None
        out.append((mode, nbytes, label[len("auto:"):], over_best, over_nccl))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run folders or JSON files")
    a = ap.parse_args()
    reports = find_reports(a.paths)
    if not reports:
        print("summarize.py: no bench JSON (meta + rows) under " + ", ".join(a.paths), file=sys.stderr)
        return 2
    groups, wrong = summarize(reports)
    for (device, transport, launch, world), g in sorted(groups.items(), key=str):
        if not g["points"]:
            continue
        print(f"## {device}, transport {transport}, {world} ranks as {launch}: "
              f"{len(g['files'])} report(s)")
        print()
        for f in g["files"]:
            print(f"- `{f}`")
        print()
        # auto:<choice> rows share one column, "auto"; the choice is in the
        # auto table below.
        algos = sorted({"auto" if a.startswith("auto:") else a
                        for by in g["points"].values() for a in by})
        print("time per call, us: median over reports (lowest-highest)")
        print()
        print("| mode | size | " + " | ".join(algos) + " |")
        print("| --- | --- |" + " --- |" * len(algos))
        for (mode, nbytes), by in sorted(g["points"].items()):
            auto = next((ts for a, ts in by.items() if a.startswith("auto:")), None)
            cells = [spread(auto if a == "auto" and auto else by.get(a, [])) if (a in by or (a == "auto" and auto)) else ""
                     for a in algos]
            print(f"| {mode} | {size(nbytes)} | " + " | ".join(cells) + " |")
        print()
        rows = auto_rows(g["points"])
        if rows:
            print("auto against the fastest fixed choice and NCCL, per point: median (lowest-highest)")
            print()
            print("| mode | size | auto chose | auto / best fixed | auto / NCCL |")
            print("| --- | --- | --- | --- | --- |")
            for mode, nbytes, choice, ob, on in rows:
                print(f"| {mode} | {size(nbytes)} | {choice} | {spread(ob, 3)} | "
                      f"{spread(on, 3) if on else ''} |")
            meds = [statistics.median(ob) for *_, ob, _ in rows]
            worst = [max(ob) for *_, ob, _ in rows]
            print()
            print(f"auto / best fixed over {len(rows)} points: per-point medians from "
                  f"{min(meds):.3f} to {max(meds):.3f}; highest in any one report {max(worst):.3f}")
            print()
    print(f"wrong elements over every row: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
