#!/usr/bin/env python3
"""Summarise `tpcomm bench --device gpu --algos one-shot,two-shot,nccl,auto` (one run):
auto against the best fixed choice and against NCCL at every size and mode.

    python3 bench/device/summarize_auto.py auto.json [tuning.toml] [--date YYYY-MM-DD] [--outdir bench/results]

Writes <outdir>/<date>-h200x2-auto-vs-best.{json,md} (<date>-h200x2-host-auto-vs-best.*
for a run on the host transport, meta.transport "host"). Targets (issue 5): auto
within 5% of the best fixed choice at every size, never more than 5% slower
than NCCL. Exit status 0 when both hold, 1 when not, 2 on bad input.

Host-transport runs label their fixed rows by kernel (host-delta, host-push or host-ll,
host-chunked; one-shot above the one-pass cap runs, and is labelled, host-chunked) and their auto
rows by candidate (auto:host:one-shot, auto:host:two-shot); both are matched
here. Two rows with one label at one point keep the faster (same kernel).
"""
import argparse
import datetime
import json
import os
import sys

LIMIT = 1.05

# Which fixed-row labels run the candidate auto names, first present wins.
# P2P rows are labelled one-shot/two-shot; host rows by kernel.
FIXED_FOR = {
    "nccl": ["nccl"],
    "cuda:one-shot": ["one-shot"],
    "cuda:two-shot": ["two-shot"],
    "host:one-shot": ["host-delta", "host-push", "host-ll", "host-chunked"],
    "host:two-shot": ["host-chunked"],
    "host:ll": ["host-ll", "host-chunked"],
    "host:chunked": ["host-chunked"],
}


def fixed_row_for(choice, fixed):
    """The label of the fixed row that ran what auto chose, or None."""
    names = FIXED_FOR.get(choice, [choice.split(":", 1)[-1]])
    return next((n for n in names if n in fixed), None)



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

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("auto_json")
    ap.add_argument("table", nargs="?")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--outdir", default="bench/results")
    ap.add_argument("--machine", default="h200x2")
    a = ap.parse_args()
    try:
        doc = json.load(open(a.auto_json))
    except (OSError, ValueError) as e:
        print(f"summarize_auto: cannot read {a.auto_json}: {e}", file=sys.stderr)
        return 2
    points = {}
    for r in doc.get("rows", []):
        by = points.setdefault((r["mode"], r["bytes"]), {})
        old = by.get(r["algo"])
        if old is None or r["time_us"] < old["time_us"]:
            if old is not None:
                r = dict(r, wrong=r.get("wrong", 0) + old.get("wrong", 0))
            by[r["algo"]] = r
        else:
            old["wrong"] = old.get("wrong", 0) + r.get("wrong", 0)
    out_rows = []
    for (mode, nbytes), by in sorted(points.items()):
        auto = [k for k in by if k.startswith("auto:")]
        fixed = {k: v["time_us"] for k, v in by.items() if not k.startswith("auto")}
        if not auto or not fixed:
            continue
        label = auto[0]
        choice = label[len("auto:"):]
        fixed_name = fixed_row_for(choice, fixed)
        t_auto = by[label]["time_us"]
        best_name = min(fixed, key=fixed.get)
        best = fixed[best_name]
        nccl = fixed.get("nccl")
        row = {
            "mode": mode,
            "bytes": nbytes,
            "auto_choice": choice,
            "auto_us": round(t_auto, 3),
            "best_fixed": best_name,
            "best_us": round(best, 3),
            "auto_over_best": round(t_auto / best, 4),
            # Same run, the fixed row of the candidate auto picked: separates a
            # wrong pick from run-to-run noise between two rows of one kernel.
            "chosen_fixed_over_best": round(fixed[fixed_name] / best, 4) if fixed_name else None,
            "nccl_us": round(nccl, 3) if nccl else None,
            "auto_over_nccl": round(t_auto / nccl, 4) if nccl else None,
            "wrong": sum(v.get("wrong", 0) for v in by.values()),
        }
        out_rows.append(row)
    if not out_rows:
        print("summarize_auto: no size has both auto and fixed rows", file=sys.stderr)
        return 2
    worst_best = max(r["auto_over_best"] for r in out_rows)
    worst_nccl = max((r["auto_over_nccl"] for r in out_rows if r["auto_over_nccl"]), default=None)
    ok_best = worst_best <= LIMIT
    ok_nccl = worst_nccl is None or worst_nccl <= LIMIT
    wrong = sum(r["wrong"] for r in out_rows)
    summary = {
        "source": os.path.basename(a.auto_json),
        "table": os.path.basename(a.table) if a.table else None,
        "meta": flat_meta(doc.get("meta")),
        "targets": {
            "auto_within_5pct_of_best": ok_best,
            "worst_auto_over_best": worst_best,
            "auto_never_5pct_slower_than_nccl": ok_nccl,
            "worst_auto_over_nccl": worst_nccl,
            "nccl_measured": worst_nccl is not None,
            "wrong_elements": wrong,
        },
        "rows": out_rows,
    }
    transport = (doc.get("meta") or {}).get("transport") or "cuda"
    summary["transport"] = transport
    os.makedirs(a.outdir, exist_ok=True)
    host = "host-" if transport == "host" else ""
    base = os.path.join(a.outdir, f"{a.date}-{a.machine}-{host}auto-vs-best")
    with open(base + ".json", "w") as f:
        json.dump(summary, f, indent=2)
    m = flat_meta(doc.get("meta"))
    lines = [
        f"# auto against the best fixed choice and NCCL ({a.machine}, {a.date}"
        + (", host transport forced" if transport == "host" else "") + ")",
        "",
        f"One `tpcomm bench` GPU run (launch {m.get('launch')}, {m.get('world')} x {', '.join(sorted(set(m.get('gpus', []))))}, "
        f"driver {m.get('driver')}, NCCL {m.get('nccl')}, median of {m.get('reps')} reps x {m.get('iters') or '100 (< 4 MiB) / 20'} calls), "
        f"auto using the tuning table {summary['table'] or '(none: class defaults)'} (tuning/ names where it was measured).",
        "",
        f"- auto within 5% of the best fixed choice at every size: **{'yes' if ok_best else 'no'}** (worst {worst_best:.3f}x)",
        f"- auto never more than 5% slower than NCCL: **{'yes' if ok_nccl else 'no'}**"
        + (f" (worst {worst_nccl:.3f}x)" if worst_nccl is not None else " (NCCL not measured)"),
        f"- wrong elements: {wrong}",
        f"- picked a kernel other than the fastest fixed row's at {sum(1 for r in out_rows if (r['chosen_fixed_over_best'] or 1) > 1.0)} of {len(out_rows)} points",
    ]
    for mode in sorted({r["mode"] for r in out_rows}):
        rs = [r for r in out_rows if r["mode"] == mode]
        lines.append(
            f"- {mode}: worst auto/best {max(r['auto_over_best'] for r in rs):.3f}, points over 1.05: "
            f"{sum(1 for r in rs if r['auto_over_best'] > LIMIT)} of {len(rs)}"
        )
    lines += [
        "",
        "| mode | bytes | auto picks | auto us | best fixed | best us | auto/best | picked row/best | NCCL us | auto/NCCL |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in out_rows:
        f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
        lines.append(
            f"| {r['mode']} | {r['bytes']} | {r['auto_choice']} | {f(r['auto_us'])} | {r['best_fixed']} | {f(r['best_us'])} "
            f"| {f(r['auto_over_best'], 3)} | {f(r['chosen_fixed_over_best'], 3)} | {f(r['nccl_us'])} | {f(r['auto_over_nccl'], 3)} |"
        )
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {base}.json and {base}.md: auto/best worst {worst_best:.3f}, auto/NCCL worst {worst_nccl}")
    return 0 if (ok_best and ok_nccl and wrong == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
