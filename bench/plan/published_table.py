#!/usr/bin/env python3
"""Reruns the planner on the published setups of docs/plan.md and prints its predictions
beside the published rates, for three catalogs:

  uncalibrated  catalog/ without any [gpu.published] or [gpu.measured] block
                (datasheet bandwidth, no per-layer or per-kernel cost);
  published     catalog/ without the [gpu.measured] blocks (published efficiencies only);
  built-in      catalog/ as it is (measured where measured, lent to the chip's class,
                else published).

    python3 bench/plan/published_table.py [--tpcomm target/release/tpcomm] [--json out.json]

The stripped catalogs are written to a temporary directory and passed with --catalog;
nothing in catalog/ changes. Each row: the planner's plain and speculative tok/s (the
speculative rate is the tree's when the setup gives one, else the best chain setting) and
the error = prediction / published - 1. The last line of each catalog counts the rows
within 15% (the issue's target), published setups only (the Kimi K2.5 row is a measurement
reported to the project, not a publication, and is not counted).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (label, plan spec arguments, published plain tok/s, published speculative tok/s or None,
#  published: counted toward the target)
SETUPS = [
    ("Llama-3.1-8B, 1 x H100", ["--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                                "--draft", "llama-3.1-8b-eagle3", "--context", "512"],
     158.34, 373.25, True),
    ("Qwen3-8B, 1 x H200", ["--model", "qwen3-8b", "--gpu", "h200-sxm",
                            "--draft", "qwen3-8b-eagle3", "--context", "512"],
     187.0, None, True),
    ("Qwen3-8B, 1 x RTX 5090", ["--model", "qwen3-8b", "--gpu", "rtx-5090",
                                "--draft", "qwen3-8b-eagle3", "--context", "512"],
     90.0, None, True),
    ("Qwen3-8B, 1 x H20", ["--model", "qwen3-8b", "--gpu", "h20", "--draft", "qwen3-8b-eagle3",
                           "--context", "512", "--tree", "6,10,32,1.99"],
     151.81, 257.52, True),
    ("Qwen3-14B, 1 x H20", ["--model", "qwen3-14b", "--gpu", "h20", "--draft", "qwen3-14b-eagle3",
                            "--context", "512", "--tree", "6,10,32,1.79"],
     93.26, 145.33, True),
    ("Qwen3-32B, 1 x H20", ["--model", "qwen3-32b", "--gpu", "h20", "--draft", "qwen3-32b-eagle3",
                            "--context", "512", "--tree", "6,10,32,1.91"],
     43.32, 74.1, True),
    ("Qwen3-30B-A3B, 1 x H20", ["--model", "qwen3-30b-a3b", "--gpu", "h20",
                                "--draft", "qwen3-30b-a3b-eagle3", "--context", "512",
                                "--tree", "6,10,32,2.04"],
     320.87, 438.07, True),
    ("Kimi K2.5, 8 x RTX PRO 6000 (reported)", ["--model", "kimi-k2.5", "--machine",
                                                "pcie8-rtxpro6000", "--weights", "int4",
                                                "--draft", "kimi-k2.5-eagle3", "--table",
                                                "observed-spec", "--plain-table", "nccl-typical"],
     89.5, 54.0, False),
]


def strip_blocks(text, headers):
    """The TOML text without the sub-tables named in `headers` (each from its header
    line to the next header line)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        s = line.strip()
        if s.startswith("["):
            skipping = s in headers
        if not skipping:
            out.append(line)
    return "".join(out)


def catalog_copy(dest, headers):
    shutil.copytree(os.path.join(ROOT, "catalog"), dest)
    path = os.path.join(dest, "gpus.toml")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(strip_blocks(text, headers))
    return dest


def predict(tpcomm, catalog, args):
    cmd = [tpcomm, "plan", "spec", "--catalog", catalog, "--json", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"published_table: {' '.join(cmd)} failed:\n{r.stderr}")
    plan = json.loads(r.stdout)["plan"]
    trees = [s for s in plan["settings"] if s["which"]["kind"] == "tree"]
    spec = trees[0] if trees else plan["settings"][plan["best"]]
    return plan["plain"]["tok_s"], spec["tok_s"], spec["which"]


def err(pred, pub):
    return pred / pub - 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpcomm", default=os.path.join(ROOT, "target", "release", "tpcomm"))
    ap.add_argument("--json", help="also write every prediction here")
    a = ap.parse_args()
    if not os.path.exists(a.tpcomm):
        sys.exit(f"published_table: no {a.tpcomm}; build it (cargo build --release -p tpcomm-cli) "
                 "or pass --tpcomm")
    variants = [
        ("uncalibrated", {"[gpu.published]", "[gpu.measured]"}),
        ("published", {"[gpu.measured]"}),
        ("built-in", set()),
    ]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, headers in variants:
            cat = catalog_copy(os.path.join(tmp, name), headers)
            print(f"## {name}\n")
            print("| setup | published plain | predicted | error | published spec | predicted | error |")
            print("|---|---|---|---|---|---|---|")
            rows, plain_in, spec_in, plain_n, spec_n = [], 0, 0, 0, 0
            for label, args, pub_plain, pub_spec, counted in SETUPS:
                plain, spec, which = predict(a.tpcomm, cat, args)
                e_plain = err(plain, pub_plain)
                e_spec = err(spec, pub_spec) if pub_spec else None
                if counted:
                    plain_n += 1
                    plain_in += abs(e_plain) <= 0.15
                    if e_spec is not None:
                        spec_n += 1
                        spec_in += abs(e_spec) <= 0.15
                if which["kind"] == "tree":
                    # S,K,N of --tree S,K,N,TAU
                    shape = "tree " + args[args.index("--tree") + 1].rsplit(",", 1)[0]
                else:
                    shape = f"chain, {which.get('steps')} steps"
                spec_txt = (f"{spec:.1f} ({shape}) | {e_spec:+.0%}" if e_spec is not None
                            else "not predicted | -")
                print(f"| {label} | {pub_plain:g} | {plain:.1f} | {e_plain:+.0%} | "
                      f"{pub_spec if pub_spec else '-'} | {spec_txt} |")
                rows.append(dict(setup=label, args=args, published_plain=pub_plain,
                                 predicted_plain=plain, published_spec=pub_spec,
                                 predicted_spec=spec if pub_spec else None, spec_setting=which,
                                 counted=counted))
            print(f"\nwithin 15% ({name}): {plain_in} of {plain_n} published plain rates, "
                  f"{spec_in} of {spec_n} published speculative rates\n")
            out[name] = rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
