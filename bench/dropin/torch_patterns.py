#!/usr/bin/env python3
"""torch.distributed communication patterns through libtpcomm_nccl.so, every output
element checked against a CPU reference (issue 39, "Verified").

    python3 -u bench/dropin/torch_patterns.py --lib PATH/libtpcomm_nccl.so --world N \
        --out result.json [--standalone] [--timeout S] [--pattern-timeout S] [--large N]
        [--large-dtypes bf16,fp32,int32] [--collective-timeout S] [--no-baseline]
    python3 bench/dropin/torch_patterns.py --self-test     # pure helpers only, no torch
    python3 bench/dropin/torch_patterns.py --cpu-gloo --world 3 --out r.json [--inject-fault]
        # the script itself without a GPU: gloo on the CPU instead of NCCL and the drop-in

Environment it expects (set these before running; bench/device/torch_patterns.sh does):
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  and, for several rank processes on one GPU, an MPS daemon of this user:
  CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog, started with
  `nvidia-cuda-mps-control -d` (stopped with `echo quit | nvidia-cuda-mps-control`).
  torch with CUDA and its NCCL backend (written for PyTorch 2.11, CUDA 13).

Runs. "dropin": N rank processes (torch.multiprocessing, spawn), every one on cuda:0,
LD_PRELOAD=--lib, TPCOMM_STANDALONE=1 with --standalone (plain NCCL refuses ranks that
share a GPU; without the flag the drop-in's auto mode has to notice), TPCOMM_TIMEOUT_S =
--collective-timeout unless set. "nccl" (the baseline): plain PyTorch, rank r on cuda:r, run first and only when
N <= the number of GPUs (else skipped, and said so). Both runs check against the same
reference, so either can fail on its own (their outputs are not compared with each other:
the drop-in's float sums may add in another order than NCCL's).

Process group: backend nccl, file:// rendezvous, device_id bound (eager init, so
new_group may use ncclCommSplit and dist.split_group works), timeout --collective-timeout
(60 s; the watchdog's per-collective bound); a gloo group beside it carries the script's own
bookkeeping.

Patterns (one row each, name = op.dtype.variant): all_reduce (sum, max, min, product, avg;
bf16 fp16 fp32 int32 int64 uint8), all_reduce graph; reduce (every root at the small
sizes); reduce_scatter_tensor (and graph); all_gather_into_tensor (and graph); broadcast
(every root at the small sizes); gather; scatter; all_to_all_single with uneven splits
(zero splits included) and equal splits; dist.send/recv and isend/irecv between every pair;
batch_isend_irecv ring shift, every shift, uneven sizes with two messages per peer, and
self-pairs; dist.new_group subgroups and dist.split_group (SKIP where torch lacks it), a
few collectives on each. Graph patterns capture one call in a CUDA graph and replay it 3
times, fresh inputs copied into the captured buffer before each replay.

Inputs: made on the CPU from seed_of(pattern, case, iteration, rank, part), never zero, so
every rank rebuilds every peer's input; the reference is float64 (floats) or int64
(integers) on the CPU. Data movement and integer reductions must match exactly, float
max/min exactly, other float reductions within bound() (the rule of check() in
torch_dropin.py: 2 roundings of the type relative to (|ref| + 1) plus world - 1 roundings
of the sum of magnitudes).

Robustness: every pattern in its own try/except; after each pattern the ranks agree over
gloo, and an ERROR on any rank, or an exception not every rank raised alike (their NCCL
streams may be out of step), ends the workers, which the parent starts again from the next
pattern (must_restart). A pattern that makes no progress for
--pattern-timeout seconds, or a rank that dies, is reported HANG or ERROR and the run goes on
from the next pattern; what the overall --timeout leaves unrun is reported HANG.

Output: a line per pattern `PASS|FAIL|SKIP|ERROR|HANG name world detail` (flushed), a
summary line, and --out (JSON: every row, per-rank details, runs, attempts). Each rank's
stdout/stderr go to <out>.logs/. Exit 0 only if nothing FAILed, ERRORed or HANGed.

What has run (2026-12-07, no GPU): --self-test; --cpu-gloo at worlds 2, 3 and 4 with
torch 2.11.0+cu130 from PyPI on a machine without a GPU: 112 PASS, 19 SKIP (graphs, split_group, integer AVG and
self-pairs, which gloo cannot do), and with --inject-fault every corrupted pattern FAILs.
The NCCL path, the drop-in, CUDA graphs and split_group have not run.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import zlib

# --------------------------------------------------------------------------------------
# Pure helpers (no torch): patterns, seeds, splits, reference arithmetic, merging.
# --------------------------------------------------------------------------------------

DTYPES = ["bf16", "fp16", "fp32", "int32", "int64", "uint8"]
FLOATS = ("bf16", "fp16", "fp32")
ESIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4, "int64": 8, "uint8": 1}
INT_BITS = {"int32": (32, True), "int64": (64, True), "uint8": (8, False)}
OPS = ["sum", "max", "min", "product", "avg"]
# One rounding of each type, relative (the reference is float64).
TOL = {"bf16": 2 ** -8, "fp16": 2 ** -11, "fp32": 2 ** -23}
GRAPH_DTYPES = ["bf16", "fp16", "fp32", "int32"]
GRAPH_REPLAYS = 3
LARGE = 1 << 23  # 8 Mi elements
MID = 262147  # the largest count of types that --large-dtypes leaves out
STATUSES = ("PASS", "FAIL", "SKIP", "ERROR", "HANG")


def seed_of(*parts):
    """A 62-bit seed from strings and ints, the same in every process (no str hash)."""
    s = 0x5EED
    for p in parts:
        v = zlib.crc32(p.encode()) if isinstance(p, str) else int(p)
        s = (s * 1000003 + v + 1) % (1 << 62)
    return s


def sizes(large, world=1, per_rank_total=False):
    """Element counts: 1, odd counts, a tail past 64 Ki, and the large one. With
    per_rank_total the large one is the total over `world` ranks (all-gather's output)."""
    big = max(1, large // world) if per_rank_total else large
    return [1, 7, 1003, 65537, big]


def int_range(dtype, op, world):
    """[lo, hi] of random integers for an integer op: no overflow of the type in any
    rank order, never zero."""
    bits, signed = INT_BITS[dtype]
    if op == "product":
        # The largest magnitude whose world-th power fits (a wrapped product would be
        # the same in any order too, but the reference should not need that).
        tmax = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
        m = 3 if 3 ** world <= tmax else 2
        return (1, m) if not signed else (-m, m)
    if not signed:
        return (1, 255 // world) if op in ("sum", "avg") else (1, 255)
    if bits == 32:
        return (-1000, 1000) if op in ("sum", "avg") else (-(1 << 30), 1 << 30)
    return (-(1 << 40), 1 << 40)


def wrap_int(v, dtype):
    """v (a Python int) as the type stores it (two's complement wrap)."""
    bits, signed = INT_BITS[dtype]
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def trunc_div(a, b):
    """Integer division rounding toward zero (NCCL's integer average), Python ints."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ref_scalar(vals, op, dtype):
    """The reference of one element: `vals` one value per rank, in rank order. Integers:
    exact, wrapped to the type (avg: the wrapped sum divided, toward zero). Floats: the
    float64 value (the check allows rounding)."""
    if dtype in FLOATS:
        if op == "sum":
            return float(sum(vals))
        if op == "avg":
            return float(sum(vals)) / len(vals)
        if op == "max":
            return max(vals)
        if op == "min":
            return min(vals)
        p = 1.0
        for v in vals:
            p *= v
        return p
    if op in ("sum", "avg"):
        s = wrap_int(sum(vals), dtype)
        return s if op == "sum" else wrap_int(trunc_div(s, len(vals)), dtype)
    if op == "max":
        return max(vals)
    if op == "min":
        return min(vals)
    p = 1
    for v in vals:
        p = wrap_int(p * v, dtype)
    return p


def magnitude_scalar(vals, op):
    """What bound() scales its world - 1 roundings by: the sum of magnitudes (sum), their
    mean (avg), the product's magnitude (product)."""
    if op == "product":
        p = 1.0
        for v in vals:
            p *= abs(v)
        return p
    m = float(sum(abs(v) for v in vals))
    return m / len(vals) if op == "avg" else m


def bound(ref, mag, world, dtype):
    """Largest error allowed for a float reduction (works on floats and on tensors):
    the final rounding to the type plus world - 1 roundings of partial results, each at
    most half an ulp of the magnitude `mag`; the rule of check() in torch_dropin.py."""
    return TOL[dtype] * 2 * ((abs(ref) + 1.0) + (world - 1) * mag)


def exact_op(op, dtype):
    """Whether a reduction's result must be bit-exact: integers always, floats for max/min."""
    return dtype not in FLOATS or op in ("max", "min")


def a2a_splits(world, n, variant):
    """S[src][dst]: elements rank src sends to rank dst in all_to_all_single.
    'uneven': every pair its own count around n (1 included); 'zeros': as uneven but
    some pairs send nothing; 'equal': n everywhere."""
    S = []
    for s in range(world):
        row = []
        for d in range(world):
            if variant == "equal":
                c = n
            else:
                c = max(1, n + ((s * 7 + d * 3) % 5 - 2) * max(1, n // 5) + (s + 2 * d) % 3)
                if variant == "zeros" and (s + d) % 3 == 1:
                    c = 0
            row.append(c)
        S.append(row)
    return S


def a2a_layout(S, rank):
    """(input_split_sizes, output_split_sizes) of `rank` for the matrix S."""
    return [S[rank][d] for d in range(len(S))], [S[s][rank] for s in range(len(S))]


def p2p_sizes(world, n):
    """Two message sizes (a, b) for each ordered pair src != dst, both >= 1, most pairs
    different, for the uneven batch_isend_irecv."""
    out = {}
    for s in range(world):
        for d in range(world):
            if s != d:
                a = max(1, n + (s * 5 + d * 11) % 7 * max(1, n // 7))
                b = max(1, (n // 3) + (s + 3 * d) % 4 + 1)
                out[(s, d)] = (a, b)
    return out


def pairs(world):
    """Every unordered pair (i, j), i < j, in one order all ranks share."""
    return [(i, j) for i in range(world) for j in range(i + 1, world)]


def subgroup_sets(world):
    """Rank lists for dist.new_group, the same on every rank: evens, odds, all but 0,
    the two ends (lists of one rank included: torch allows them)."""
    sets = [list(range(0, world, 2)), list(range(1, world, 2)), list(range(1, world)),
            sorted({0, world - 1})]
    out = []
    for s in sets:
        if s and s not in out:
            out.append(s)
    return out


def split_sets(world):
    """dist.split_group's split_ranks: disjoint lists covering every rank."""
    return [list(range(0, world, 2)), list(range(1, world, 2))] if world > 1 else [[0]]


def build_patterns(world):
    """Every pattern as (name, kind, params); the same list on every rank and the parent."""
    P = []
    for dt in DTYPES:
        for op in OPS:
            P.append((f"all_reduce.{dt}.{op}", "all_reduce", {"dtype": dt, "op": op}))
    for dt in GRAPH_DTYPES:
        P.append((f"all_reduce.{dt}.sum.graph", "all_reduce_graph", {"dtype": dt, "op": "sum"}))
    for dt in DTYPES:
        ops = OPS if dt in ("bf16", "fp32", "int32") else ["sum", "max"]
        for op in ops:
            P.append((f"reduce.{dt}.{op}", "reduce", {"dtype": dt, "op": op}))
    for dt in DTYPES:
        ops = OPS if dt in ("bf16", "fp32", "int32") else ["sum"]
        for op in ops:
            P.append((f"reduce_scatter_tensor.{dt}.{op}", "reduce_scatter", {"dtype": dt, "op": op}))
    for dt in GRAPH_DTYPES:
        P.append((f"reduce_scatter_tensor.{dt}.sum.graph", "reduce_scatter_graph", {"dtype": dt, "op": "sum"}))
    for dt in DTYPES:
        P.append((f"all_gather_into_tensor.{dt}", "all_gather", {"dtype": dt}))
    for dt in GRAPH_DTYPES:
        P.append((f"all_gather_into_tensor.{dt}.graph", "all_gather_graph", {"dtype": dt}))
    for dt in DTYPES:
        P.append((f"broadcast.{dt}", "broadcast", {"dtype": dt}))
    for dt in DTYPES:
        P.append((f"gather.{dt}", "gather", {"dtype": dt}))
    for dt in DTYPES:
        P.append((f"scatter.{dt}", "scatter", {"dtype": dt}))
    for dt in DTYPES:
        P.append((f"all_to_all_single.{dt}.uneven", "all_to_all", {"dtype": dt, "variant": "uneven"}))
    for dt in ("fp32", "int64"):
        P.append((f"all_to_all_single.{dt}.zeros", "all_to_all", {"dtype": dt, "variant": "zeros"}))
        P.append((f"all_to_all_single.{dt}.equal", "all_to_all", {"dtype": dt, "variant": "equal"}))
    for dt in ("bf16", "fp32", "int64"):
        P.append((f"send_recv.{dt}.blocking", "send_recv", {"dtype": dt, "api": "blocking"}))
    for dt in ("fp16", "int32", "uint8"):
        P.append((f"send_recv.{dt}.async", "send_recv", {"dtype": dt, "api": "async"}))
    for dt in ("bf16", "fp32", "int64", "uint8"):
        P.append((f"batch_isend_irecv.{dt}.ring", "batch_ring", {"dtype": dt, "shifts": [1]}))
    P.append(("batch_isend_irecv.fp32.every_shift", "batch_ring",
              {"dtype": "fp32", "shifts": list(range(1, world))}))
    for dt in ("fp32", "int32"):
        P.append((f"batch_isend_irecv.{dt}.uneven", "batch_uneven", {"dtype": dt}))
    P.append(("batch_isend_irecv.fp32.self", "batch_self", {"dtype": "fp32"}))
    P.append(("new_group.subgroups", "new_group", {}))
    P.append(("split_group.subgroups", "split_group", {}))
    return P


REFUSAL = re.compile(r"not supported|unsupported|does not support|Cannot use ReduceOp|not implemented",
                     re.IGNORECASE)


def classify_exception(text):
    """SKIP for torch refusing a combination before it reaches NCCL (the same on every
    rank), ERROR for anything else (an NCCL error text always counts as ERROR)."""
    if "NCCL" in text or "nccl" in text:
        return "ERROR"
    return "SKIP" if REFUSAL.search(text) else "ERROR"


def merge_rank_rows(world, by_rank):
    """One status and detail from every rank's row of a pattern (dict rank -> row or
    None when the rank did not report). HANG if a rank is missing; else ERROR, FAIL,
    SKIP (all skipped) or PASS (passed, or some ranks skipped, e.g. not in a subgroup)."""
    missing = [r for r in range(world) if by_rank.get(r) is None]
    st = [by_rank[r]["status"] for r in range(world) if by_rank.get(r) is not None]
    if missing:
        status = "HANG"
    elif "ERROR" in st:
        status = "ERROR"
    elif "FAIL" in st:
        status = "FAIL"
    elif all(s == "SKIP" for s in st):
        status = "SKIP"
    else:
        status = "PASS"
    details, seen = [], set()
    for r in range(world):
        row = by_rank.get(r)
        if row is None:
            continue
        d = row.get("detail", "")
        if row["status"] in ("FAIL", "ERROR") or (status in ("PASS", "SKIP") and r == 0):
            if d and d not in seen:
                seen.add(d)
                details.append(d if row["status"] == status and r == 0 else f"rank {r}: {d}")
    if missing:
        details.insert(0, f"no result from rank(s) {missing}")
    return status, "; ".join(details)[:600]


def must_restart(everyone):
    """After a pattern, from every rank's (status, exception text or None): whether the
    workers must start afresh. Yes after any ERROR, and after any exception unless every
    rank raised the same text (then all stopped at the same call and are still in step)."""
    if any(st == "ERROR" for st, _ in everyone):
        return True
    texts = {t for _, t in everyone}
    return any(t is not None for t in texts) and len(texts) != 1


def summary_counts(rows):
    c = {s: 0 for s in STATUSES}
    for r in rows:
        c[r["status"]] += 1
    return c


def summary_line(c):
    return (f"summary: {c['PASS']} passed, {c['FAIL']} failed, {c['ERROR']} errors, "
            f"{c['SKIP']} skipped, {c['HANG']} hung")


def self_test():
    """The pure helpers, without torch."""
    n_ok = 0

    def ok(cond, what):
        nonlocal n_ok
        if not cond:
            raise AssertionError(what)
        n_ok += 1

    ok(seed_of("a", 1, 2) == seed_of("a", 1, 2), "seed deterministic")
    ok(len({seed_of("all_reduce.fp32.sum", c, i, r) for c in range(5) for i in range(3) for r in range(8)}) == 120,
       "seeds distinct")
    ok(wrap_int(255 + 2, "uint8") == 1 and wrap_int(-1, "uint8") == 255, "uint8 wrap")
    ok(wrap_int(2 ** 31, "int32") == -2 ** 31 and wrap_int(-2 ** 31 - 1, "int32") == 2 ** 31 - 1, "int32 wrap")
    ok(wrap_int(2 ** 63, "int64") == -2 ** 63, "int64 wrap")
    ok(trunc_div(-7, 2) == -3 and trunc_div(7, 2) == 3 and trunc_div(-6, 3) == -2 and trunc_div(5, -2) == -2,
       "trunc div")
    ok(ref_scalar([3, -8, 4], "avg", "int32") == -0, "int avg truncates toward zero (-1/3 -> 0)")
    ok(ref_scalar([-3, -4], "avg", "int32") == -3, "int avg -7/2 -> -3")
    ok(ref_scalar([200, 100], "sum", "uint8") == 44, "uint8 sum wraps")
    ok(ref_scalar([3, 3, 3, 3, 3, 3], "product", "uint8") == (3 ** 6) % 256, "uint8 product wraps")
    ok(ref_scalar([1.5, -2.0, 4.0], "product", "fp32") == -12.0, "float product")
    ok(ref_scalar([1.0, 2.0, 4.0], "avg", "bf16") == 7.0 / 3, "float avg")
    ok(ref_scalar([1, -5, 3], "max", "int64") == 3 and ref_scalar([1, -5, 3], "min", "int64") == -5, "max/min")
    ok(magnitude_scalar([1.0, -2.0], "sum") == 3.0 and magnitude_scalar([1.0, -2.0], "avg") == 1.5, "mag")
    ok(abs(bound(1.0, 3.0, 2, "fp32") - 2 ** -23 * 2 * (2.0 + 3.0)) < 1e-20, "bound formula")
    ok(exact_op("max", "bf16") and exact_op("sum", "int32") and not exact_op("sum", "fp16"), "exact ops")
    for world in range(1, 9):
        lo_hi = {dt: {op: int_range(dt, op, world) for op in OPS} for dt in INT_BITS}
        for dt, per in lo_hi.items():
            bits, signed = INT_BITS[dt]
            tmax, tmin = (2 ** (bits - 1) - 1, -2 ** (bits - 1)) if signed else (2 ** bits - 1, 0)
            for op, (lo, hi) in per.items():
                ok(lo < hi, f"range {dt} {op}")
                ok(not signed or lo < 0, f"signed range has negatives {dt} {op}")
                extreme = max(abs(lo), abs(hi))
                if op in ("sum", "avg"):
                    ok(extreme * world <= tmax and -extreme * world >= tmin if signed else hi * world <= tmax,
                       f"no overflow {dt} {op} world {world}")
                if op == "product":
                    ok(extreme ** world <= tmax or (extreme == 2 and world >= bits - 1),
                       f"product fits {dt} world {world}")
        for n in (1, 7, 1003, 65537, LARGE):
            for variant in ("uneven", "zeros", "equal"):
                S = a2a_splits(world, n, variant)
                ok(len(S) == world and all(len(r) == world for r in S), "square")
                ok(all(c >= (0 if variant == "zeros" else 1) for r in S for c in r), "counts >= 1 (0 for zeros)")
                if variant == "equal":
                    ok(all(c == n for r in S for c in r), "equal splits")
                # What every rank sends equals what every rank receives, pair by pair.
                for r in range(world):
                    ins, outs = a2a_layout(S, r)
                    for q in range(world):
                        ok(ins[q] == a2a_layout(S, q)[1][r], "send count meets receive count")
            if world >= 3 and n >= 7:
                ok(len({c for r in a2a_splits(world, n, "uneven") for c in r}) > 1, "uneven really uneven")
                ok(any(c == 0 for r in a2a_splits(world, n, "zeros") for c in r), "zeros has a zero")
            ps = p2p_sizes(world, n)
            ok(len(ps) == world * (world - 1) and all(a >= 1 and b >= 1 for a, b in ps.values()), "p2p sizes")
        ok(len(pairs(world)) == world * (world - 1) // 2, "pairs")
        for s in subgroup_sets(world):
            ok(s == sorted(s) and len(set(s)) == len(s) and all(0 <= r < world for r in s), "subgroup set")
        flat = sorted(r for s in split_sets(world) for r in s)
        ok(flat == list(range(world)) and all(split_sets(world)), "split sets cover every rank once")
        P = build_patterns(world)
        names = [p[0] for p in P]
        ok(len(names) == len(set(names)), "pattern names unique")
        ok(all(p[1] and isinstance(p[2], dict) for p in P), "pattern shape")
    ok(build_patterns(3) == build_patterns(3), "pattern list deterministic")
    ok(sizes(LARGE)[0] == 1 and any(c % 2 for c in sizes(LARGE)) and sizes(LARGE)[-1] == LARGE, "sizes")
    ok(sizes(LARGE, 4, per_rank_total=True)[-1] == LARGE // 4, "all-gather large per rank")
    ok(classify_exception("RuntimeError: Cannot use ReduceOp.AVG with int") == "SKIP", "refusal is SKIP")
    ok(classify_exception("DistBackendError: NCCL error ... not supported") == "ERROR", "NCCL error is ERROR")
    ok(classify_exception("ValueError: bad") == "ERROR", "other is ERROR")
    P, F, S = ({"status": "PASS", "detail": "ok"}, {"status": "FAIL", "detail": "3 wrong"},
               {"status": "SKIP", "detail": "not a member"})
    ok(merge_rank_rows(2, {0: P, 1: P}) == ("PASS", "ok"), "merge pass")
    ok(merge_rank_rows(2, {0: P, 1: F})[0] == "FAIL" and "rank 1: 3 wrong" in merge_rank_rows(2, {0: P, 1: F})[1],
       "merge fail")
    ok(merge_rank_rows(3, {0: P, 1: F})[0] == "HANG", "merge missing rank")
    ok(merge_rank_rows(2, {0: S, 1: S})[0] == "SKIP" and merge_rank_rows(2, {0: P, 1: S})[0] == "PASS", "merge skip")
    ok(merge_rank_rows(2, {0: {"status": "ERROR", "detail": "x"}, 1: F})[0] == "ERROR", "merge error wins")
    ok(not must_restart([("PASS", None), ("SKIP", None)]), "no restart without exceptions")
    ok(must_restart([("PASS", None), ("ERROR", "x")]) and must_restart([("SKIP", "a"), ("PASS", None)]),
       "restart after an ERROR or an exception on some ranks only")
    ok(not must_restart([("SKIP", "a"), ("SKIP", "a")]) and must_restart([("SKIP", "a"), ("SKIP", "b")]),
       "same refusal everywhere keeps the workers")
    c = summary_counts([{"status": s} for s in ("PASS", "PASS", "FAIL", "SKIP", "HANG", "ERROR")])
    ok(summary_line(c) == "summary: 2 passed, 1 failed, 1 errors, 1 skipped, 1 hung", "summary line")
    for res in _self_test_parent():
        ok(res[0], res[1])
    print(f"self-test: {n_ok} checks passed", flush=True)
    return 0


def _fake_worker(rank, world, cfg):
    """Stands in for worker() in the self-test: PASS rows, except where cfg['fake'] says
    'hang' (rank 1 stops), 'crash' (rank 0 dies before its row), 'error' (rank 1 ERROR,
    every rank then leaves as after the gloo agreement), 'init' (rank 0 fails to start)."""
    rows = open(cfg["rowfile"].format(rank=rank), "a", buffering=1)
    fake = {int(k): v for k, v in cfg["fake"].items()}
    if fake.get(-1) == "init" and cfg["attempt"] < 2 and rank == 0:
        rows.write(json.dumps({"init_error": "Traceback\nRuntimeError: fake init failure\n"}) + "\n")
        rows.flush()
        sys.exit(2)
    rows.write(json.dumps({"init_s": 0.0}) + "\n")
    for idx in range(cfg["start"], len(build_patterns(world))):
        what = fake.get(idx)
        rows.write(json.dumps({"begin": idx}) + "\n")
        if what == "hang" and rank == 1:
            time.sleep(3600)
        if what == "crash" and rank == 0:
            os._exit(9)
        st = "ERROR" if what == "error" and rank == 1 else ("SKIP" if what == "skip" else "PASS")
        rows.write(json.dumps({"index": idx, "rank": rank, "status": st, "detail": f"fake {st}"}) + "\n")
        rows.flush()
        if what in ("hang", "crash"):
            time.sleep(3600)  # the peers wait in the next collective
        if what == "error":
            time.sleep(0.2)
            rows.write(json.dumps({"restart_after": idx}) + "\n")
            rows.flush()
            os._exit(4)
    rows.write(json.dumps({"done": True}) + "\n")
    rows.flush()


def _self_test_parent():
    """run_label with fake workers: a hang, a crash and an ERROR each cost one pattern,
    every other pattern still reports; an overall timeout leaves HANG rows."""
    out = []
    world = 2
    n = len(build_patterns(world))
    args = argparse.Namespace(world=world, large=LARGE, collective_timeout=60, pattern_timeout=2.0, init_timeout=0.0)
    tmp = tempfile.mkdtemp(prefix="tpcomm-patterns-selftest-")
    emitted = []

    def emit(label, idx, name, status, detail, by_rank):
        emitted.append((idx, status))
        return {"index": idx, "name": name, "status": status, "detail": detail}

    fake = {"3": "hang", "5": "crash", "8": "error", "9": "skip"}
    rows, attempts = run_label("t", {}, True, args, time.time() + 120, tmp, tmp, emit,
                               target=_fake_worker, extra={"fake": fake})
    st = {r["index"]: r["status"] for r in rows}
    out.append((len(rows) == n and [r["index"] for r in rows] == list(range(n)), "a row per pattern, in order"))
    out.append((st[3] == "HANG" and "no progress" in rows[3]["detail"], f"hang is HANG ({rows[3]})"))
    out.append((st[5] == "ERROR" and "exit codes" in rows[5]["detail"], f"crash is ERROR ({rows[5]})"))
    out.append((st[8] == "ERROR" and st[9] == "SKIP", f"error then skip ({st[8]}, {st[9]})"))
    out.append((all(st[i] == "PASS" for i in range(n) if i not in (3, 5, 8, 9)), "the rest PASS"))
    out.append((len(attempts) == 4 and [a["start"] for a in attempts] == [0, 4, 6, 9],
                f"restarts after each ({[a['start'] for a in attempts]})"))
    out.append((sorted(i for i, _ in emitted) == list(range(n)), "each pattern emitted once"))
    # Overall timeout in the middle of a hang: that pattern and the rest are HANG.
    emitted.clear()
    rows, attempts = run_label("u", {}, True, argparse.Namespace(**dict(vars(args), pattern_timeout=30.0)),
                               time.time() + 3, tmp, tmp, emit, target=_fake_worker, extra={"fake": {"2": "hang"}})
    st = [r["status"] for r in rows]
    out.append((st[:2] == ["PASS", "PASS"] and all(s == "HANG" for s in st[2:]) and len(st) == n,
                f"overall timeout leaves HANG ({st[:4]})"))
    out.append(("overall timeout" in rows[2]["detail"] and "not reached" in rows[3]["detail"], "timeout details"))
    # Workers that cannot start twice in a row: two patterns charged, the rest 'not run'.
    emitted.clear()
    rows, attempts = run_label("v", {}, True, args, time.time() + 60, tmp, tmp, emit,
                               target=_fake_worker, extra={"fake": {"-1": "init"}})
    st = [r["status"] for r in rows]
    out.append((len(attempts) == 2 and st[0] == "ERROR" and "init failed" in rows[0]["detail"]
                and all(s == "HANG" for s in st[2:]) and "initialise" in rows[2]["detail"],
                f"init failures ({st[:3]}, {rows[0]['detail'][:80]})"))
    shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------
# Worker side (torch imported inside).
# --------------------------------------------------------------------------------------

class Ctx:
    """What a pattern needs: torch, the rank, the device, the large size, the failures."""

    def __init__(self, torch, dist, rank, world, dev, large, gloo, large_dtypes=None):
        self.torch, self.dist, self.rank, self.world, self.dev = torch, dist, rank, world, dev
        self.large, self.gloo, self.large_dtypes = large, gloo, large_dtypes
        self.tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                       "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8}
        self.rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
                    "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}
        self.bitview = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

    def big(self, dtype):
        """The large count for this type: --large, or MID where --large-dtypes leaves it out."""
        return self.large if not self.large_dtypes or dtype in self.large_dtypes else min(self.large, MID)

    def gen(self, name, dtype, n, op, *parts):
        """Random CPU values for a pattern, the same in every process; never zero."""
        torch = self.torch
        g = torch.Generator().manual_seed(seed_of(name, *parts))
        if dtype in FLOATS:
            if op == "product":
                # Magnitudes in [0.5, 2): products stay far from underflow and overflow.
                u = torch.rand(n, generator=g, dtype=torch.float64)
                sgn = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
                x = sgn * (0.5 + 1.5 * u)
            else:
                x = torch.randn(n, generator=g, dtype=torch.float32)
                x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)
            return x.to(self.tdtype[dtype])
        lo, hi = int_range(dtype, op or "max", self.world)
        x = torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64)
        x = torch.where(x == 0, torch.ones_like(x), x)
        return x.to(self.tdtype[dtype])

    def wrong_exact(self, out, exp):
        """Elements whose bits differ (out and exp on the CPU, same dtype and count)."""
        if out.numel() != exp.numel():
            return max(out.numel(), exp.numel())
        v = self.bitview[out.element_size()]
        return int((out.contiguous().view(-1).view(v) != exp.contiguous().view(-1).view(v)).sum())

    def reference(self, xs, op, dtype):
        """(ref, mag) of the reduction of the CPU tensors xs (rank order): float64 and the
        magnitude bound() needs for floats; int64 wrapped to the type for integers (the
        same arithmetic as ref_scalar and magnitude_scalar, which the self-test checks).
        Accumulated one rank at a time, so a large case never holds world float64 copies."""
        torch = self.torch
        w = len(xs)
        if dtype in FLOATS:
            ref = xs[0].double()
            mag = ref.abs() if op in ("sum", "avg", "product") else None
            for x in xs[1:]:
                x = x.double()
                if op in ("sum", "avg"):
                    ref = ref + x
                    mag = mag + x.abs()
                elif op == "max":
                    ref = torch.maximum(ref, x)
                elif op == "min":
                    ref = torch.minimum(ref, x)
                else:
                    ref = ref * x
            if op == "avg":
                ref, mag = ref / w, mag / w
            if op == "product":
                mag = ref.abs()
            return ref, mag
        ref = xs[0].to(torch.int64)
        for x in xs[1:]:
            x = x.to(torch.int64)
            if op in ("sum", "avg"):
                ref = ref + x
            elif op == "max":
                ref = torch.maximum(ref, x)
            elif op == "min":
                ref = torch.minimum(ref, x)
            else:
                ref = self.wrap(ref * x, dtype)
        if op in ("sum", "avg"):
            ref = self.wrap(ref, dtype)
            if op == "avg":
                ref = self.wrap(torch.div(ref, w, rounding_mode="trunc"), dtype)
        return ref, None

    def wrap(self, v, dtype):
        bits, signed = INT_BITS[dtype]
        if bits == 64:
            return v  # int64 arithmetic wraps by itself
        mask = (1 << bits) - 1
        v = v & mask
        if signed:
            v = v - ((v >> (bits - 1)) & 1) * (1 << bits)
        return v

    def wrong_reduce(self, out, xs, op, dtype, world=None):
        """(wrong elements, largest error) of a reduction's output against the reference."""
        ref, mag = self.reference(xs, op, dtype)
        w = world or len(xs)
        if dtype not in FLOATS:
            got = out.to(self.torch.int64)
            return int((got != ref).sum()), int((got - ref).abs().max()) if out.numel() else 0
        got = out.double()
        err = (got - ref).abs()
        if exact_op(op, dtype):
            bad = int((got != ref).sum())
        else:
            bad = int((err > bound(ref, mag, w, dtype)).sum())
        return bad, float(err.max()) if out.numel() else 0.0


class Cases:
    """Failures of one pattern's cases, and how many ran."""

    def __init__(self):
        self.n, self.fail, self.notes = 0, [], []

    def check(self, bad, what, err=None):
        self.n += 1
        if bad:
            e = f" (max err {err:.3g})" if isinstance(err, float) else (f" (max err {err})" if err else "")
            self.fail.append(f"{what}: {bad} wrong{e}")

    def result(self, what=""):
        if self.fail:
            more = f" (+{len(self.fail) - 3} more)" if len(self.fail) > 3 else ""
            return "FAIL", f"{len(self.fail)} of {self.n} cases wrong: " + "; ".join(self.fail[:3]) + more
        note = ("; " + "; ".join(self.notes)) if self.notes else ""
        return "PASS", f"{self.n} cases{(' ' + what) if what else ''} every element right{note}"


def _sync(c):
    if c.dev.type == "cuda":
        c.torch.cuda.synchronize()


def _gloo_refuses(c, dt, op):
    """What gloo (the --cpu-gloo test of this script) cannot do, which NCCL does."""
    if c.dev.type == "cpu" and op == "avg" and dt not in FLOATS:
        return "SKIP", "gloo's AVG divides in float and cannot store integers (--cpu-gloo)"
    return None


def p_all_reduce(c, name, prm):
    dt, op = prm["dtype"], prm["op"]
    if _gloo_refuses(c, dt, op):
        return _gloo_refuses(c, dt, op)
    cs = Cases()
    for ci, n in enumerate(sizes(c.big(dt))):
        t = c.gen(name, dt, n, op, ci, 0, c.rank).to(c.dev)
        c.dist.all_reduce(t, op=c.rop[op])
        out = t.cpu()
        xs = [c.gen(name, dt, n, op, ci, 0, r) for r in range(c.world)]
        bad, err = c.wrong_reduce(out, xs, op, dt)
        cs.check(bad, f"n={n}", err)
    return cs.result(f"(n 1..{c.big(dt)})")


def _capture(c, fn):
    """fn warmed up on a side stream, then captured once in a CUDA graph."""
    torch = c.torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def p_graph(c, name, prm, kind):
    """all_reduce / reduce_scatter_tensor / all_gather_into_tensor captured once, replayed
    GRAPH_REPLAYS times with fresh inputs copied into the captured input buffer."""
    torch, dist = c.torch, c.dist
    dt, op = prm["dtype"], prm.get("op", "sum")
    if c.dev.type != "cuda":
        return "SKIP", "CUDA graphs need a GPU (--cpu-gloo)"
    cs = Cases()
    w, r = c.world, c.rank
    # All-gather's output and reduce-scatter's input hold world blocks: the large case is
    # their total.
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=(kind != "all_reduce"))):
        tdt = c.tdtype[dt]
        nin = n * w if kind == "reduce_scatter" else n
        nout = n * w if kind == "all_gather" else n
        inp = torch.empty(nin, dtype=tdt, device=c.dev)
        out = inp if kind == "all_reduce" else torch.empty(nout, dtype=tdt, device=c.dev)

        def inputs(it, rank):
            if kind == "reduce_scatter":
                return torch.cat([c.gen(name, dt, n, op, ci, it, rank, d) for d in range(w)])
            return c.gen(name, dt, n, op, ci, it, rank)

        def call():
            if kind == "all_reduce":
                dist.all_reduce(inp, op=c.rop[op])
            elif kind == "reduce_scatter":
                dist.reduce_scatter_tensor(out, inp, op=c.rop[op])
            else:
                dist.all_gather_into_tensor(out, inp)

        inp.copy_(inputs(0, r))
        g = _capture(c, call)
        for it in range(1, GRAPH_REPLAYS + 1):
            inp.copy_(inputs(it, r))
            if kind != "all_reduce":
                out.fill_(7)
            g.replay()
            got = out.cpu()
            if kind == "all_gather":
                exp = torch.cat([c.gen(name, dt, n, op, ci, it, q) for q in range(w)])
                cs.check(c.wrong_exact(got, exp), f"n={n} replay {it}")
            else:
                if kind == "reduce_scatter":
                    xs = [c.gen(name, dt, n, op, ci, it, q, r) for q in range(w)]
                else:
                    xs = [inputs(it, q) for q in range(w)]
                bad, err = c.wrong_reduce(got, xs, op, dt)
                cs.check(bad, f"n={n} replay {it}", err)
        del g
        torch.cuda.synchronize()
    return cs.result(f"x {GRAPH_REPLAYS} replays")


def _roots(c, ci):
    """Every root at the three small sizes, one root (moving) at the larger ones."""
    return list(range(c.world)) if ci < 3 else [(ci + 1) % c.world]


def p_reduce(c, name, prm):
    dt, op = prm["dtype"], prm["op"]
    if _gloo_refuses(c, dt, op):
        return _gloo_refuses(c, dt, op)
    cs = Cases()
    for ci, n in enumerate(sizes(c.big(dt))):
        for root in _roots(c, ci):
            t = c.gen(name, dt, n, op, ci, root, c.rank).to(c.dev)
            c.dist.reduce(t, dst=root, op=c.rop[op])
            out = t.cpu()
            if c.rank == root:
                xs = [c.gen(name, dt, n, op, ci, root, q) for q in range(c.world)]
                bad, err = c.wrong_reduce(out, xs, op, dt)
                cs.check(bad, f"n={n} root {root}", err)
            else:
                cs.n += 1
    return cs.result("(every root at n <= 1003; output checked on the root)")


def p_reduce_scatter(c, name, prm):
    torch = c.torch
    dt, op = prm["dtype"], prm["op"]
    if _gloo_refuses(c, dt, op):
        return _gloo_refuses(c, dt, op)
    cs = Cases()
    w, r = c.world, c.rank
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=True)):
        inp = torch.cat([c.gen(name, dt, n, op, ci, r, d) for d in range(w)]).to(c.dev)
        out = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
        c.dist.reduce_scatter_tensor(out, inp, op=c.rop[op])
        got = out.cpu()
        xs = [c.gen(name, dt, n, op, ci, q, r) for q in range(w)]
        bad, err = c.wrong_reduce(got, xs, op, dt)
        cs.check(bad, f"n={n} per rank", err)
    return cs.result(f"(largest: {c.big(dt)} elements in all over the ranks)")


def p_all_gather(c, name, prm):
    torch = c.torch
    dt = prm["dtype"]
    cs = Cases()
    w = c.world
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=True)):
        inp = c.gen(name, dt, n, None, ci, c.rank).to(c.dev)
        out = torch.empty(n * w, dtype=c.tdtype[dt], device=c.dev)
        c.dist.all_gather_into_tensor(out, inp)
        exp = torch.cat([c.gen(name, dt, n, None, ci, q) for q in range(w)])
        cs.check(c.wrong_exact(out.cpu(), exp), f"n={n} per rank")
    return cs.result("bit for bit")


def p_broadcast(c, name, prm):
    dt = prm["dtype"]
    cs = Cases()
    for ci, n in enumerate(sizes(c.big(dt))):
        for root in _roots(c, ci):
            src = c.gen(name, dt, n, None, ci, root)
            t = (src if c.rank == root else c.gen(name, dt, n, None, ci, root, "other", c.rank)).to(c.dev)
            c.dist.broadcast(t, src=root)
            cs.check(c.wrong_exact(t.cpu(), src), f"n={n} root {root}")
    return cs.result("bit for bit, every root at n <= 1003")


def p_gather(c, name, prm):
    torch = c.torch
    dt = prm["dtype"]
    cs = Cases()
    w = c.world
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=True)):
        for root in _roots(c, ci):
            x = c.gen(name, dt, n, None, ci, root, c.rank).to(c.dev)
            lst = [torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev) for _ in range(w)] if c.rank == root else None
            c.dist.gather(x, gather_list=lst, dst=root)
            if c.rank == root:
                got = torch.cat([t.cpu() for t in lst])
                exp = torch.cat([c.gen(name, dt, n, None, ci, root, q) for q in range(w)])
                cs.check(c.wrong_exact(got, exp), f"n={n} root {root}")
            else:
                _sync(c)
                cs.n += 1
    return cs.result("bit for bit, every root at n <= 1003")


def p_scatter(c, name, prm):
    torch = c.torch
    dt = prm["dtype"]
    cs = Cases()
    w = c.world
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=True)):
        for root in _roots(c, ci):
            lst = [c.gen(name, dt, n, None, ci, root, d).to(c.dev) for d in range(w)] if c.rank == root else None
            out = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
            c.dist.scatter(out, scatter_list=lst, src=root)
            cs.check(c.wrong_exact(out.cpu(), c.gen(name, dt, n, None, ci, root, c.rank)), f"n={n} root {root}")
    return cs.result("bit for bit, every root at n <= 1003")


def p_all_to_all(c, name, prm):
    torch = c.torch
    dt, variant = prm["dtype"], prm["variant"]
    cs = Cases()
    w, r = c.world, c.rank
    for ci, n in enumerate(sizes(c.big(dt), w * w, per_rank_total=True)):
        S = a2a_splits(w, n, variant)
        ins, outs = a2a_layout(S, r)
        inp = torch.cat([c.gen(name, dt, ins[d], None, ci, r, d) for d in range(w)]).to(c.dev)
        out = torch.full((sum(outs),), 7, dtype=c.tdtype[dt], device=c.dev)
        if variant == "equal":
            c.dist.all_to_all_single(out, inp)
        else:
            c.dist.all_to_all_single(out, inp, output_split_sizes=outs, input_split_sizes=ins)
        exp = torch.cat([c.gen(name, dt, outs[s], None, ci, s, r) for s in range(w)])
        cs.check(c.wrong_exact(out.cpu(), exp), f"n~{n} in {ins} out {outs}" if n < 100 else f"n~{n}")
    return cs.result("bit for bit")


def p_send_recv(c, name, prm):
    """Every pair (i, j) in one shared order: i sends to j, then j to i (blocking
    dist.send/recv), or the same with isend/irecv waited at the end of the pair."""
    torch, dist = c.torch, c.dist
    dt, api = prm["dtype"], prm["api"]
    cs = Cases()
    r = c.rank
    for ci, n in enumerate(sizes(c.big(dt))):
        for (i, j) in pairs(c.world):
            if r not in (i, j):
                continue
            peer = j if r == i else i
            x = c.gen(name, dt, n, None, ci, r, peer).to(c.dev)
            y = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
            if api == "blocking":
                if r == i:
                    dist.send(x, dst=peer)
                    dist.recv(y, src=peer)
                else:
                    dist.recv(y, src=peer)
                    dist.send(x, dst=peer)
            else:
                if r == i:
                    works = [dist.isend(x, dst=peer), dist.irecv(y, src=peer)]
                else:
                    works = [dist.irecv(y, src=peer), dist.isend(x, dst=peer)]
                for wk in works:
                    wk.wait()
            cs.check(c.wrong_exact(y.cpu(), c.gen(name, dt, n, None, ci, peer, r)), f"n={n} from {peer}")
    return cs.result("bit for bit, every pair both ways")


def p_batch_ring(c, name, prm):
    torch, dist = c.torch, c.dist
    dt = prm["dtype"]
    if not prm["shifts"]:
        return "SKIP", "one rank: no shift but 0"
    if c.dev.type == "cpu" and c.world == 1:
        return "SKIP", "gloo has no pair to itself (--cpu-gloo)"
    cs = Cases()
    w, r = c.world, c.rank
    for ci, n in enumerate(sizes(c.big(dt))):
        for s in prm["shifts"]:
            dst, src = (r + s) % w, (r - s) % w
            x = c.gen(name, dt, n, None, ci, s, r).to(c.dev)
            y = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
            ops = [dist.P2POp(dist.isend, x, dst), dist.P2POp(dist.irecv, y, src)]
            for q in dist.batch_isend_irecv(ops):
                q.wait()
            cs.check(c.wrong_exact(y.cpu(), c.gen(name, dt, n, None, ci, s, src)), f"n={n} shift {s}")
    return cs.result(f"bit for bit, shifts {prm['shifts']}")


def p_batch_uneven(c, name, prm):
    """One batch per size: two messages (sizes a, b of p2p_sizes) to every other rank and
    two from every other rank, each pair's counts its own."""
    torch, dist = c.torch, c.dist
    dt = prm["dtype"]
    cs = Cases()
    w, r = c.world, c.rank
    for ci, n in enumerate(sizes(c.big(dt), w, per_rank_total=True)):
        ps = p2p_sizes(w, n)
        ops, recvs = [], []
        for d in range(w):
            if d != r:
                for k, cnt in enumerate(ps[(r, d)]):
                    ops.append(dist.P2POp(dist.isend, c.gen(name, dt, cnt, None, ci, r, d, k).to(c.dev), d))
        for s in range(w):
            if s != r:
                for k, cnt in enumerate(ps[(s, r)]):
                    y = torch.full((cnt,), 7, dtype=c.tdtype[dt], device=c.dev)
                    recvs.append((s, k, cnt, y))
                    ops.append(dist.P2POp(dist.irecv, y, s))
        if ops:
            for q in dist.batch_isend_irecv(ops):
                q.wait()
        for s, k, cnt, y in recvs:
            cs.check(c.wrong_exact(y.cpu(), c.gen(name, dt, cnt, None, ci, s, r, k)), f"n~{n} from {s} msg {k}")
    return cs.result("bit for bit, 2 uneven messages per ordered pair")


def p_batch_self(c, name, prm):
    """Each rank sends to and receives from itself in one batch, beside a ring shift
    (torch 2.11's isend allows dst == rank; its blocking send does not)."""
    torch, dist = c.torch, c.dist
    dt = prm["dtype"]
    if c.dev.type == "cpu":
        return "SKIP", "gloo has no pair to itself (--cpu-gloo)"
    cs = Cases()
    w, r = c.world, c.rank
    for ci, n in enumerate(sizes(c.big(dt))[:4]):
        xs = c.gen(name, dt, n, None, ci, r, "self").to(c.dev)
        ys = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
        ops = [dist.P2POp(dist.isend, xs, r), dist.P2POp(dist.irecv, ys, r)]
        yr = None
        if w > 1:
            xr = c.gen(name, dt, n, None, ci, r, "ring").to(c.dev)
            yr = torch.full((n,), 7, dtype=c.tdtype[dt], device=c.dev)
            ops += [dist.P2POp(dist.isend, xr, (r + 1) % w), dist.P2POp(dist.irecv, yr, (r - 1) % w)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        cs.check(c.wrong_exact(ys.cpu(), c.gen(name, dt, n, None, ci, r, "self")), f"n={n} self")
        if yr is not None:
            cs.check(c.wrong_exact(yr.cpu(), c.gen(name, dt, n, None, ci, (r - 1) % w, "ring")), f"n={n} ring")
    return cs.result("bit for bit (n up to 65537)")


def _group_collectives(c, name, g, members, tag, cs):
    """On group g (global ranks `members` in group-rank order): all_reduce sum fp32 and
    int32, broadcast from the last member, all_gather_into_tensor bf16."""
    torch, dist = c.torch, c.dist
    r, gw = c.rank, len(members)
    for ci, n in enumerate([1, 1003, 65537]):
        for dt in ("fp32", "int32"):
            t = c.gen(name, dt, n, "sum", tag, ci, r).to(c.dev)
            dist.all_reduce(t, group=g)
            xs = [c.gen(name, dt, n, "sum", tag, ci, q) for q in members]
            bad, err = c.wrong_reduce(t.cpu(), xs, "sum", dt, gw)
            cs.check(bad, f"{tag} all_reduce {dt} n={n}", err)
        root = members[-1]
        src = c.gen(name, "fp16", n, None, tag, ci, "b", root)
        t = (src if r == root else c.gen(name, "fp16", n, None, tag, ci, "o", r)).to(c.dev)
        dist.broadcast(t, src=root, group=g)
        cs.check(c.wrong_exact(t.cpu(), src), f"{tag} broadcast from {root} n={n}")
        x = c.gen(name, "bf16", n, None, tag, ci, "g", r).to(c.dev)
        out = torch.empty(n * gw, dtype=torch.bfloat16, device=c.dev)
        dist.all_gather_into_tensor(out, x, group=g)
        exp = torch.cat([c.gen(name, "bf16", n, None, tag, ci, "g", q) for q in members])
        cs.check(c.wrong_exact(out.cpu(), exp), f"{tag} all_gather n={n}")


def p_new_group(c, name, prm):
    dist = c.dist
    cs = Cases()
    groups = []
    for s in subgroup_sets(c.world):
        groups.append((s, dist.new_group(ranks=s)))  # every rank, in the same order
    for k, (s, g) in enumerate(groups):
        if c.rank in s:
            members = dist.get_process_group_ranks(g)
            cs.check(0 if members == s else 1, f"group {s}: members {members}")
            _group_collectives(c, name, g, members, f"group{s}", cs)
    # A collective on the whole world after the subgroups, so they left it intact.
    _group_collectives(c, name, None, list(range(c.world)), "world-after", cs)
    return cs.result(f"groups {subgroup_sets(c.world)}")


def p_split_group(c, name, prm):
    dist = c.dist
    if not hasattr(dist, "split_group"):
        return "SKIP", "torch.distributed has no split_group in this torch"
    if c.dev.type != "cuda":
        return "SKIP", "split_group needs the NCCL backend (--cpu-gloo)"
    cs = Cases()
    sets = split_sets(c.world)
    g = dist.split_group(split_ranks=sets)
    mine = [s for s in sets if c.rank in s][0]
    if g is None:
        return "FAIL", f"split_group returned None on rank {c.rank}, a member of {mine}"
    members = dist.get_process_group_ranks(g)
    cs.check(0 if sorted(members) == mine else 1, f"split {mine}: members {members}")
    _group_collectives(c, name, g, members, f"split{mine}", cs)
    _group_collectives(c, name, None, list(range(c.world)), "world-after", cs)
    return cs.result(f"split_ranks {sets}")


KINDS = {
    "all_reduce": p_all_reduce,
    "all_reduce_graph": lambda c, n, p: p_graph(c, n, p, "all_reduce"),
    "reduce_scatter_graph": lambda c, n, p: p_graph(c, n, p, "reduce_scatter"),
    "all_gather_graph": lambda c, n, p: p_graph(c, n, p, "all_gather"),
    "reduce": p_reduce,
    "reduce_scatter": p_reduce_scatter,
    "all_gather": p_all_gather,
    "broadcast": p_broadcast,
    "gather": p_gather,
    "scatter": p_scatter,
    "all_to_all": p_all_to_all,
    "send_recv": p_send_recv,
    "batch_ring": p_batch_ring,
    "batch_uneven": p_batch_uneven,
    "batch_self": p_batch_self,
    "new_group": p_new_group,
    "split_group": p_split_group,
}


def worker(rank, world, cfg):
    """One rank: patterns cfg['start'].. in order, a JSON line per pattern to its file."""
    log = open(os.path.join(cfg["logdir"], f"{cfg['label']}.attempt{cfg['attempt']}.rank{rank}.txt"), "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    rows = open(cfg["rowfile"].format(rank=rank), "a", buffering=1)

    def put(obj):
        rows.write(json.dumps(obj) + "\n")
        rows.flush()

    import datetime
    import traceback
    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    cpu = cfg.get("cpu_gloo", False)
    if cpu:  # the script's own test without a GPU: gloo, tensors on the CPU
        dev = torch.device("cpu")
    else:
        dev = torch.device("cuda", 0 if cfg["shared"] else rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        os.environ["LOCAL_RANK"] = str(dev.index)
    t0 = time.time()
    try:
        timeout = datetime.timedelta(seconds=cfg["coll_timeout"])
        if cpu:
            dist.init_process_group("gloo", init_method="file://" + cfg["initfile"], rank=rank,
                                    world_size=world, timeout=timeout)
        else:
            dist.init_process_group("nccl", init_method="file://" + cfg["initfile"], rank=rank,
                                    world_size=world, timeout=timeout, device_id=dev)
        # The script's own agreement after each pattern goes over gloo (CPU), never through
        # the library under test.
        gloo = dist.new_group(backend="gloo")
    except Exception:
        put({"init_error": traceback.format_exc()[-2000:]})
        sys.exit(2)
    put({"init_s": round(time.time() - t0, 2), "torch": torch.__version__,
         "nccl": None if cpu else ".".join(map(str, torch.cuda.nccl.version())), "device": str(dev),
         "gpu": None if cpu else torch.cuda.get_device_name(dev),
         "ld_preload": os.environ.get("LD_PRELOAD", ""), "standalone": os.environ.get("TPCOMM_STANDALONE")})
    if cfg.get("inject_fault"):
        _inject_fault(dist, rank, world)
    c = Ctx(torch, dist, rank, world, dev, cfg["large"], gloo, cfg.get("large_dtypes"))
    patterns = build_patterns(world)
    for idx in range(cfg["start"], len(patterns)):
        name, kind, prm = patterns[idx]
        put({"begin": idx, "name": name})
        t1 = time.time()
        raised = None
        try:
            status, detail = KINDS[kind](c, name, prm)
            _sync(c)
        except Exception as e:  # one pattern's failure must not hide the rest
            text = f"{type(e).__name__}: {e}"
            raised = text
            status = classify_exception(text)
            tb = traceback.format_exc()
            print(f"pattern {name}:\n{tb}", flush=True)
            detail = text.strip().replace("\n", " ")[:400]
        put({"index": idx, "name": name, "rank": rank, "status": status, "detail": detail,
             "seconds": round(time.time() - t1, 3)})
        # Agree over gloo: an exception anywhere may leave NCCL streams out of step, so every
        # rank leaves and the parent starts fresh workers from the next pattern; unless every
        # rank was refused the same way (a SKIP raised by torch at the same point).
        try:
            everyone = [None] * world
            dist.all_gather_object(everyone, (status, raised), group=gloo)
        except Exception:
            os._exit(5)
        if must_restart(everyone):
            put({"restart_after": idx})
            os._exit(4)
        if not cpu:
            torch.cuda.empty_cache()
    put({"done": True, "seconds": round(time.time() - t0, 1)})
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    os._exit(0)


def _inject_fault(dist, rank, world):
    """--inject-fault (a test of the checks, with --cpu-gloo): the last rank's output of each
    of these calls gets its last element changed, so every pattern using them must FAIL."""
    if rank != world - 1:
        return

    def bump(t):
        if t is not None and t.numel():
            t.view(-1)[-1] += 1

    def wrap(fn, out_of):
        def f(*a, **k):
            res = fn(*a, **k)
            for t in out_of(a, k):
                bump(t)
            return res
        return f

    first = lambda a, k: [a[0]]  # noqa: E731
    dist.all_reduce = wrap(dist.all_reduce, first)
    dist.broadcast = wrap(dist.broadcast, first)
    dist.reduce = wrap(dist.reduce, first)
    dist.scatter = wrap(dist.scatter, first)
    dist.recv = wrap(dist.recv, first)
    dist.all_gather_into_tensor = wrap(dist.all_gather_into_tensor, first)
    dist.reduce_scatter_tensor = wrap(dist.reduce_scatter_tensor, first)
    dist.all_to_all_single = wrap(dist.all_to_all_single, first)
    dist.gather = wrap(dist.gather, lambda a, k: k.get("gather_list") or [])


LIVE = []  # the workers of the current attempt, for the SIGTERM handler
ON_TERM = []  # then called: main's writer of the rows so far


def _on_term(signum, frame):
    """`timeout` (or anyone) ending the parent ends its workers too, so no rank is left
    holding the GPU for the next run."""
    for p in LIVE:
        try:
            if p.is_alive():
                p.kill()
        except Exception:
            pass
    print(f"terminated by signal {signum}: workers killed", flush=True)
    for f in ON_TERM:
        try:
            f(signum)
        except Exception:
            pass
    os._exit(128 + signum)


def read_rows(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def run_label(label, env_extra, shared, args, deadline, tmp, logdir, emit, target=None, extra=None):
    """All patterns of one run ("nccl" or "dropin"), restarting workers after a pattern
    that hung, crashed or errored. Returns (rows, attempts). `target` and `extra` (put in
    each worker's cfg) let the self-test drive this with fake workers."""
    try:
        import torch.multiprocessing as mp
    except ImportError:  # the self-test, without torch
        import multiprocessing as mp

    world = args.world
    patterns = build_patterns(world)
    results = {}  # index -> merged row
    attempts = []
    start, init_failures, stopped = 0, 0, None
    saved = dict(os.environ)
    for k, v in env_extra.items():  # None: unset
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    ctx = mp.get_context("spawn")
    try:
        while start < len(patterns) and time.time() < deadline:
            a = len(attempts)
            initfile = os.path.join(tmp, f"{label}.init{a}")
            rowfile = os.path.join(tmp, f"{label}.attempt{a}.rank{{rank}}.jsonl")
            cfg = {"label": label, "attempt": a, "start": start, "shared": shared, "initfile": initfile,
                   "rowfile": rowfile, "logdir": logdir, "large": args.large,
                   "large_dtypes": getattr(args, "large_dtypes", None),
                   "cpu_gloo": getattr(args, "cpu_gloo", False),
                   "inject_fault": getattr(args, "inject_fault", False),
                   "coll_timeout": args.collective_timeout, **(extra or {})}
            procs = [ctx.Process(target=target or worker, args=(r, world, cfg), daemon=False) for r in range(world)]
            LIVE[:] = procs
            for p in procs:
                p.start()
            att = {"attempt": a, "start": start, "start_name": patterns[start][0]}
            attempts.append(att)
            reported = {}  # index -> {rank: row}
            last_progress, first = time.time(), True
            why = None
            while True:
                time.sleep(0.5)
                per_rank = [read_rows(rowfile.format(rank=r)) for r in range(world)]
                nrows = sum(len(x) for x in per_rank)
                for r, rs in enumerate(per_rank):
                    for row in rs:
                        if "status" in row:
                            reported.setdefault(row["index"], {})[r] = row
                        if "init_error" in row:
                            att.setdefault("init_error", {})[r] = row["init_error"]
                        if "init_s" in row:
                            att.setdefault("init", {})[r] = row
                # Emit every pattern all ranks have reported, in order.
                for idx in sorted(reported):
                    if idx not in results and len(reported[idx]) == world:
                        status, detail = merge_rank_rows(world, reported[idx])
                        results[idx] = emit(label, idx, patterns[idx][0], status, detail, reported[idx])
                if nrows != att.get("_nrows"):
                    att["_nrows"], last_progress, first = nrows, time.time(), first and nrows < world
                done = all(any(row.get("done") for row in rs) for rs in per_rank)
                alive = [p.is_alive() for p in procs]
                if done:
                    break
                if not all(alive):
                    # A rank left: by agreement after an ERROR (exit 4), or it died. Give the
                    # others a moment to report, then end this attempt.
                    if any(alive) and time.time() - last_progress < 10:
                        continue
                    codes = [p.exitcode for p in procs]
                    stalled = time.time() - last_progress
                    why = f"worker exit codes {codes}"
                    if stalled >= args.collective_timeout - 1:
                        # No row for as long as the watchdog waits: it ended a hung call.
                        why += f" after {stalled:.0f} s without progress (watchdog)"
                    break
                limit = args.pattern_timeout + (args.init_timeout if first else 0)
                if time.time() - last_progress > limit:
                    why = f"no progress for {limit:.0f} s"
                    break
                if time.time() > deadline:
                    why = "overall timeout"
                    break
            for p in procs:
                p.join(timeout=0 if why else 8)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
            att["exit_codes"] = [p.exitcode for p in procs]
            att.pop("_nrows", None)
            if why is None:
                start = len(patterns)
                break
            att["ended"] = why
            restart_after = [row["restart_after"] for rs in per_rank for row in rs if "restart_after" in row]
            if restart_after and max(restart_after) in results:
                # The ranks left together after an ERROR (already emitted): go on after it.
                att["ended"] = f"left after the ERROR of {patterns[max(restart_after)][0]}"
                start = max(restart_after) + 1
                init_failures = 0
                continue
            init_failures = init_failures + 1 if "init_error" in att else 0
            # The first pattern not reported by every rank: it hung, or a rank crashed in it.
            k = start
            while k in results:
                k += 1
            if k < len(patterns):
                by_rank = reported.get(k, {})
                if why == "overall timeout":
                    st = "HANG"
                elif "no progress" in why:
                    st = "HANG"
                elif "(watchdog)" in why:
                    st = "HANG"
                else:
                    st = "ERROR" if any(cd not in (0, None) for cd in att["exit_codes"]) else "HANG"
                rows_k = {r: by_rank.get(r) for r in range(world)}
                _, det = merge_rank_rows(world, rows_k)
                if "init_error" in att:
                    det = "init failed: " + list(att["init_error"].values())[0].strip().splitlines()[-1] + "; " + det
                results[k] = emit(label, k, patterns[k][0], st, f"{why}; {det}", by_rank)
                start = k + 1
            else:
                start = k
            if init_failures >= 2:
                # Twice in a row the ranks could not even start: do not walk the whole list.
                stopped = "not run: the workers failed to initialise twice in a row (see the logs)"
                break
        for idx in range(len(patterns)):
            if idx not in results:
                why = stopped or ("not reached before the overall timeout" if time.time() >= deadline else "not run")
                results[idx] = emit(label, idx, patterns[idx][0], "HANG", why, {})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [results[i] for i in range(len(patterns))], attempts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="libtpcomm_nccl.so to preload in the dropin run")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--out", help="JSON result file")
    ap.add_argument("--standalone", action="store_true", help="TPCOMM_STANDALONE=1 in the dropin run")
    ap.add_argument("--no-baseline", action="store_true", help="skip the plain NCCL run")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for everything")
    ap.add_argument("--pattern-timeout", type=float, default=75.0,
                    help="seconds a pattern may go without progress before it is HANG")
    ap.add_argument("--init-timeout", type=float, default=60.0, help="extra seconds for start-up")
    ap.add_argument("--collective-timeout", type=float, default=60.0, help="init_process_group timeout")
    ap.add_argument("--large", type=int, default=LARGE, help="the large element count")
    ap.add_argument("--large-dtypes", type=lambda v: [x for x in v.split(",") if x], default=None,
                    help=f"comma list: only these types get --large, the others stop at {MID} (default: all)")
    ap.add_argument("--self-test", action="store_true", help="test the pure helpers (no torch) and exit")
    ap.add_argument("--cpu-gloo", action="store_true",
                    help="test this script itself without a GPU: backend gloo, tensors on the CPU, no drop-in "
                         "(graph and split_group patterns SKIP; gloo refuses some ops)")
    ap.add_argument("--inject-fault", action="store_true",
                    help="with --cpu-gloo: corrupt one element of the last rank's outputs (the checks must FAIL)")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(self_test())
    if not args.out or not (args.lib or args.cpu_gloo):
        ap.error("--lib and --out are required")
    lib = os.path.abspath(args.lib) if args.lib else None
    if lib and not os.path.exists(lib):
        ap.error(f"no such library: {lib}")
    import signal
    import torch

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    t_start = time.time()
    deadline = t_start + args.timeout
    ngpu = torch.cuda.device_count()
    tmp = tempfile.mkdtemp(prefix="tpcomm-patterns-")
    logdir = args.out + ".logs"
    os.makedirs(logdir, exist_ok=True)
    # No CUDA context here (under MPS it would take a client): the ranks name the GPU.
    print(f"torch {torch.__version__}, {ngpu} GPU(s), "
          f"world {args.world}, {len(build_patterns(args.world))} patterns per run, logs in {logdir}", flush=True)
    for v in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if not os.environ.get(v):
            print(f"warning: {v} is not set (see the top of this script)", flush=True)
    all_rows, runs = [], {}

    def emit(label, idx, name, status, detail, by_rank):
        row = {"run": label, "index": idx, "name": name, "world": args.world, "status": status,
               "detail": detail, "per_rank": {str(r): v for r, v in sorted(by_rank.items()) if v}}
        secs = [float(v.get("seconds", 0)) for v in by_rank.values() if v]
        took = f" ({max(secs):.1f} s)" if secs else ""
        row["seconds"] = max(secs) if secs else None
        print(f"{status} {name} {args.world} [{label}]{took} {detail}", flush=True)
        all_rows.append(row)
        return row

    def partial(signum):
        counts = summary_counts(all_rows)
        with open(args.out, "w") as f:
            json.dump({"what": "partial: the parent was ended by signal %d" % signum, "world": args.world,
                       "summary": dict(counts, line=summary_line(counts), ok=False), "rows": all_rows}, f, indent=1)
        print(summary_line(counts) + " (terminated: rows so far)", flush=True)

    ON_TERM.append(partial)
    plan = []
    if args.cpu_gloo:
        args.no_baseline = True
    if args.no_baseline:
        runs["nccl"] = {"skipped": "--no-baseline"}
    elif args.world > ngpu:
        runs["nccl"] = {"skipped": f"world {args.world} > {ngpu} GPU(s): plain NCCL refuses ranks sharing a GPU"}
    else:
        plan.append(("nccl", {"LD_PRELOAD": None, "TPCOMM_STANDALONE": None}, False))
    if "skipped" in runs.get("nccl", {}):
        print(f"baseline (plain NCCL) skipped: {runs['nccl']['skipped']}", flush=True)
    env = {"LD_PRELOAD": lib} if not args.cpu_gloo else {"LD_PRELOAD": None}
    if args.standalone:
        env["TPCOMM_STANDALONE"] = "1"
    if not os.environ.get("TPCOMM_TIMEOUT_S"):
        env["TPCOMM_TIMEOUT_S"] = str(int(args.collective_timeout))
    plan.append(("cpu-gloo" if args.cpu_gloo else "dropin", env, True))
    for i, (label, env_extra, shared) in enumerate(plan):
        t0 = time.time()
        # The baseline gets at most half of what is left, so the drop-in always runs.
        dl = deadline if label != "nccl" else t0 + (deadline - t0) / 2
        where = "every rank on the CPU" if args.cpu_gloo else ("every rank on cuda:0" if shared else "rank r on cuda:r")
        print(f"== run {label}: {where}, "
              f"env {json.dumps({k: v for k, v in env_extra.items()})}", flush=True)
        rows, attempts = run_label(label, env_extra, shared, args, dl, tmp, logdir, emit)
        runs[label] = {"seconds": round(time.time() - t0, 1), "attempts": attempts, "env": env_extra,
                       "shared_gpu": shared}
        print(f"== run {label}: {time.time() - t0:.1f} s, {len(attempts)} attempt(s); "
              + summary_line(summary_counts(rows)), flush=True)
    counts = summary_counts(all_rows)
    line = summary_line(counts)
    print(line, flush=True)
    ok = counts["FAIL"] == 0 and counts["ERROR"] == 0 and counts["HANG"] == 0
    out = {"what": "torch.distributed patterns through libtpcomm_nccl.so, every element against a CPU reference",
           "script": "bench/dropin/torch_patterns.py", "argv": sys.argv, "world": args.world, "lib": lib,
           "standalone": args.standalone, "torch": torch.__version__, "gpus": ngpu,
           "gpu": sorted({i.get("gpu") for rn in runs.values() for a in rn.get("attempts", [])
                          for i in a.get("init", {}).values() if i.get("gpu")}),
           "large": args.large,
           "large_dtypes": args.large_dtypes,
           "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                  "NVSHMEM_DISABLE_NVLS", "CUDA_MPS_PIPE_DIRECTORY",
                                                  "TPCOMM_MAX_BYTES", "TPCOMM_TIMEOUT_S")},
           "summary": dict(counts, line=line, ok=ok), "seconds": round(time.time() - t_start, 1),
           "runs": runs, "rows": all_rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
