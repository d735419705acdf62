#!/usr/bin/env python3
"""Measures what `tpcomm plan` needs to know about one GPU, for the
`[gpu.measured]` block of catalog/gpus.toml:

- bandwidth_gb_s: HBM bandwidth a streaming copy sustains (torch copy_ of a
  2 GiB bf16 buffer, bytes read + written per second, median of 20 timed
  copies after 5 warm-ups, CUDA events);
- layer_us: time per decoder layer beyond streaming its weights at that
  bandwidth, for one token at TP 1: a Llama-style bf16 layer (RMSNorm, fused
  QKV GEMV, SDPA over a short cache, O GEMV, RMSNorm, fused gate/up GEMV,
  SiLU-and-multiply, down GEMV, residual adds) repeated `--layers` times with
  distinct weights (so nothing stays in L2), captured in one CUDA graph and
  replayed; layer_us = forward / layers - weight bytes per layer / bandwidth.
  With --experts E the MLP is an MoE block instead (router GEMV, softmax,
  top-k, tokens sorted by expert, torch._grouped_mm over the hit experts:
  bench/plan/moe_layer.py's Experts), and the bytes streamed count the
  router and the experts the token hit; e.g. Qwen3-30B-A3B's layer:
  --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128
  --top-k 8 --mlp 768 --layers 16.

Needs PyTorch with CUDA and one GPU; no network. Prints one JSON object and
the TOML block to paste into catalog/gpus.toml. `tpcomm bench forward` is not
used: it needs two or more GPUs (one process per rank), and a TP 1 layer cost
is what the planner's roofline adds.
"""

import argparse
import json
import statistics
import sys

import torch

from moe_layer import Experts  # beside this file


def cuda_time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), times


def copy_bandwidth(gib):
    n = int(gib * (1 << 30)) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms, times = cuda_time_ms(lambda: dst.copy_(src), 5, 20)
    moved = 2 * n * 2  # read + write, bytes
    return moved / (ms * 1e-3), [moved / (t * 1e-3) for t in times]


class Layer:
    def __init__(self, hidden, heads, kv_heads, mlp, context, head_dim=None, experts=0, top_k=0):
        hd = head_dim or hidden // heads
        dev, dt = "cuda", torch.bfloat16
        s = 0.02
        self.hidden, self.heads, self.kv_heads, self.hd = hidden, heads, kv_heads, hd
        self.qkv = torch.randn(hidden, (heads + 2 * kv_heads) * hd, device=dev, dtype=dt) * s
        self.o = torch.randn(heads * hd, hidden, device=dev, dtype=dt) * s
        self.n1 = torch.ones(hidden, device=dev, dtype=dt)
        self.n2 = torch.ones(hidden, device=dev, dtype=dt)
        self.k = torch.randn(1, kv_heads, context, hd, device=dev, dtype=dt)
        self.v = torch.randn(1, kv_heads, context, hd, device=dev, dtype=dt)
        dense = [self.qkv, self.o, self.n1, self.n2]
        self.moe = None
        if experts:
            self.moe = Experts(hidden, experts, top_k, mlp)
            # One token hits top_k distinct experts: their bytes and the router's.
            moe_bytes = self.moe.router_bytes + top_k * self.moe.expert_bytes
        else:
            self.gate_up = torch.randn(hidden, 2 * mlp, device=dev, dtype=dt) * s
            self.down = torch.randn(mlp, hidden, device=dev, dtype=dt) * s
            dense += [self.gate_up, self.down]
            moe_bytes = 0
        self.weight_bytes = sum(t.numel() * t.element_size() for t in dense) + moe_bytes
        self.kv_bytes = 2 * self.k.numel() * self.k.element_size()

    def __call__(self, x):
        h = torch.nn.functional.rms_norm(x, (self.hidden,), self.n1)
        qkv = h @ self.qkv
        q, k, v = qkv.split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=-1)
        q = q.view(1, self.heads, 1, self.hd)
        a = torch.nn.functional.scaled_dot_product_attention(q, self.k, self.v, enable_gqa=True)
        x = x + a.reshape(1, self.heads * self.hd) @ self.o
        h = torch.nn.functional.rms_norm(x, (self.hidden,), self.n2)
        if self.moe is not None:
            return x + self.moe.grouped(h)[0]
        g, u = (h @ self.gate_up).chunk(2, dim=-1)
        return x + (torch.nn.functional.silu(g) * u) @ self.down


def layer_cost(args, bw):
    layers = [
        Layer(args.hidden, args.heads, args.kv_heads, args.mlp, args.context, args.head_dim, args.experts, args.top_k)
        for _ in range(args.layers)
    ]
    x = torch.randn(1, args.hidden, device="cuda", dtype=torch.bfloat16)

    def forward():
        y = x
        for layer in layers:
            y = layer(y)
        return y

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        forward()
    ms, _ = cuda_time_ms(g.replay, 10, 50)
    per_layer_us = ms * 1e3 / args.layers
    stream_us = (layers[0].weight_bytes + layers[0].kv_bytes) / bw * 1e6
    return {
        "forward_us": ms * 1e3,
        "per_layer_us": per_layer_us,
        "weight_bytes_per_layer": layers[0].weight_bytes,
        "kv_bytes_per_layer": layers[0].kv_bytes,
        "streaming_us_per_layer": stream_us,
        "layer_us": per_layer_us - stream_us,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=2.0, help="copy buffer size in GiB")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--mlp", type=int, default=14336, help="MLP width (each expert's with --experts)")
    p.add_argument("--head-dim", type=int, default=None, help="default hidden / heads")
    p.add_argument("--experts", type=int, default=0, help="routed experts per layer (0: a dense MLP)")
    p.add_argument("--top-k", type=int, default=8, help="experts per token with --experts")
    p.add_argument("--context", type=int, default=128, help="cached tokens attention reads")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU")
    torch.manual_seed(0)
    bw, samples = copy_bandwidth(args.gib)
    cost = layer_cost(args, bw)
    props = torch.cuda.get_device_properties(0)
    out = {
        "gpu": props.name,
        "total_memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "copy_bytes": int(args.gib * (1 << 30)),
        "bandwidth_gb_s": bw / 1e9,
        "bandwidth_gb_s_min_max": [min(samples) / 1e9, max(samples) / 1e9],
        "shape": {
            k: getattr(args, k)
            for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "mlp", "experts", "top_k", "context")
        },
        **cost,
    }
    print(json.dumps(out, indent=2))
    print()
    print(f"# paste under this GPU's [[gpu]] entry ({props.name}) in catalog/gpus.toml:")
    print("[gpu.measured]")
    print(f"bandwidth_gb_s = {bw / 1e9:.0f}")
    print(f"layer_us = {max(cost['layer_us'], 0.0):.2f}")
    print(
        f'source = "measured: bench/plan/h200_efficiency.py on 1 x {props.name}, torch {torch.__version__}: '
        f'copy of {args.gib:g} GiB (read + write) {bw / 1e9:.0f} GB/s median; a {args.layers}-layer '
        f'{args.hidden}-wide bf16 {"MoE (%d experts, top %d, %d wide) " % (args.experts, args.top_k, args.mlp) if args.experts else ""}decoder at 1 token in one CUDA graph {cost["per_layer_us"]:.2f} us per layer, '
        f'{cost["streaming_us_per_layer"]:.2f} us of it streaming its bytes"'
    )


if __name__ == "__main__":
    main()
