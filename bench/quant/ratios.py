#!/usr/bin/env python3
"""Quantized rows of several quant_bench runs against the exact call.

usage: python3 bench/quant/ratios.py FILES...
Each FILE is one quant_bench output named NAME-BUILD-ROUND.txt (as the device
scripts write them, e.g. host-qbase-1.txt). Prints, per (wire, size, build),
each run's quantized time over the exact time of the same run, as the median
[min-max] over the rounds, and the median times.
"""
import collections
import os
import statistics
import sys


def rows(path):
    """(size, wire, time us) of each row of a quant_bench results table."""
    for line in open(path):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].endswith("MiB") and cells[2] != "wire":
            yield cells[1], cells[2], float(cells[4])


def main(paths):
    ratio = collections.defaultdict(list)
    times = collections.defaultdict(list)
    for path in paths:
        build = os.path.basename(path)[:-4].split("-", 1)[1].rsplit("-", 1)[0]
        exact = {}
        for size, wire, us in rows(path):
            if wire == "exact":
                exact[size] = us
                times[(build, size, "exact")].append(us)
                continue
            ratio[(build, size, wire)].append(us / exact[size])
            times[(build, size, wire)].append(us)
    for key in sorted(ratio, key=lambda k: (k[2], int(k[1].split()[0]), k[0])):
        build, size, wire = key
        r = ratio[key]
        print(
            f"{wire:10} {size:7} {build:7} ratio {statistics.median(r):.3f} "
            f"[{min(r):.3f}-{max(r):.3f}]  {statistics.median(times[key]):8.1f} us "
            f"(exact {statistics.median(times[(build, size, 'exact')]):8.1f})  n={len(r)}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
