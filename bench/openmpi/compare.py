"""Merges the rounds of bench/cpu_vs_openmpi.sh into one JSON and one .md.

Usage: compare.py WORKDIR ROUNDS OPENMPI_VERSION OUT_PREFIX
"""
import json
import statistics
import sys

work, rounds, mpi_version, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

mpi = {}  # bytes -> list of per-round medians
tp = {}  # bytes -> list of (time_us, algo)
meta = None
wrong = 0
for r in range(1, rounds + 1):
    for line in open(f"{work}/openmpi-{r}.jsonl"):
        row = json.loads(line)
        mpi.setdefault(row["bytes"], []).append(row["time_us"])
        wrong += row["wrong"]
    rep = json.load(open(f"{work}/tpcomm-{r}.json"))
    meta = rep["meta"]
    for row in rep["rows"]:
        tp.setdefault(row["bytes"], []).append((row["time_us"], row["algo"]))
        wrong += row["wrong"]

load = {k: open(f"{work}/load-{k}").read().strip() for k in ("before", "after")}
world = 2
factor = 2 * (world - 1) / world
rows = []
for b in sorted(set(mpi) & set(tp)):
    # The median over rounds of each round's median; the spread is the
    # rounds' lowest and highest median (never the best run alone).
    m = statistics.median(mpi[b])
    t = statistics.median(x for x, _ in tp[b])
    algo = sorted(tp[b])[len(tp[b]) // 2][1]
    rows.append({
        "bytes": b,
        "openmpi_time_us": m,
        "tpcomm_time_us": t,
        "tpcomm_algo": algo,
        "time_ratio": t / m,
        "openmpi_busbw_gbps": b / (m * 1e3) * factor,
        "tpcomm_busbw_gbps": b / (t * 1e3) * factor,
        "openmpi_spread_us": [min(mpi[b]), max(mpi[b])],
        "tpcomm_spread_us": [min(x for x, _ in tp[b]), max(x for x, _ in tp[b])],
        "openmpi_rounds_us": mpi[b],
        "tpcomm_rounds_us": [x for x, _ in tp[b]],
    })

def target(lo, hi, ok, what):
    sel = [r for r in rows if lo <= r["bytes"] <= hi]
    return {
        "what": what,
        "sizes": [r["bytes"] for r in sel],
        "reached": bool(sel) and all(ok(r) for r in sel),
        "failing_sizes": [r["bytes"] for r in sel if not ok(r)],
        "worst_time_ratio": max((r["time_ratio"] for r in sel), default=None),
    }

targets = {
    "latency_1KiB_64KiB": target(1 << 10, 64 << 10, lambda r: r["tpcomm_time_us"] <= r["openmpi_time_us"],
                                 "tpcomm time <= 1.0x OpenMPI's"),
    "busbw_16MiB_64MiB": target(16 << 20, 64 << 20, lambda r: r["tpcomm_busbw_gbps"] >= r["openmpi_busbw_gbps"],
                                "tpcomm busbw >= 1.0x OpenMPI's"),
}
doc = {
    "meta": {**meta, "openmpi": mpi_version, "rounds": rounds, "dtype": "f32", "op": "sum",
             "method": "each side run ROUNDS times alternately; per size the median of the per-round medians, spread = lowest..highest round; "
                       "median of individually timed calls, slowest rank; inputs rotated; every result checked",
             "wrong_elements_total": wrong,
             "load_average_1_5_15min": load},
    "targets": targets,
    "rows": rows,
}
json.dump(doc, open(out + ".json", "w"), indent=2)

def size(b):
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {unit}"
    return f"{b} B"

m = meta["machine"]
lines = [
    f"# tpcomm host all-reduce vs OpenMPI MPI_Allreduce, 2 ranks",
    "",
    f"Machine: {m['cpu_model']}, {meta['cores']} cores (host {m['hostname']}); {meta['date']}.",
    f"tpcomm {meta['versions'].get('tpcomm')} (ranks as {meta['launch']}, algorithm auto); {mpi_version} "
    f"(mpirun -np 2, default binding). f32 sum. Command: `bash bench/cpu_vs_openmpi.sh`.",
    f"Each side ran {rounds} times alternately; a time is the median of the {rounds} per-round medians "
    f"(each the median of individually timed calls, slowest rank), with the lowest..highest round beside it. "
    f"Wrong elements over all runs: {wrong}.",
    f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']} "
    f"(on {meta['cores']} cores; other work on the machine slows both sides).",
    "",
    "| size | OpenMPI us (rounds) | tpcomm us (rounds) | tpcomm algo | tpcomm / OpenMPI time | OpenMPI busbw GB/s | tpcomm busbw GB/s |",
    "| ---: | ---: | ---: | --- | ---: | ---: | ---: |",
]
for r in rows:
    (mlo, mhi), (tlo, thi) = r["openmpi_spread_us"], r["tpcomm_spread_us"]
    lines.append(f"| {size(r['bytes'])} | {r['openmpi_time_us']:.2f} ({mlo:.2f}..{mhi:.2f}) | "
                 f"{r['tpcomm_time_us']:.2f} ({tlo:.2f}..{thi:.2f}) | {r['tpcomm_algo']} | "
                 f"{r['time_ratio']:.2f}x | {r['openmpi_busbw_gbps']:.2f} | {r['tpcomm_busbw_gbps']:.2f} |")
lines.append("")
lines.append("Targets:")
for k, t in targets.items():
    state = "reached" if t["reached"] else f"NOT reached at {', '.join(size(b) for b in t['failing_sizes'])}"
    lines.append(f"- {k} ({t['what']}): {state}; worst time ratio {t['worst_time_ratio']:.2f}x")
open(out + ".md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
