#!/usr/bin/env python3
"""What an MoE layer costs at T tokens on one GPU, for `tpcomm plan`'s
speculative model of small-active MoE models (docs/plan.md, the
Qwen3-30B-A3B rows). Run on an H100, 2026-12-02
(bench/results/2026-12-02-h100-h200-plan-quant/call1-plan-h100/).

The layer is Qwen3-30B-A3B's expert block (hidden 2048, 128 experts, top 8,
expert width 768, bf16), with random weights and a random router, so tokens
route independently: the planner's own assumption, measured rather than
argued. For T in --tokens it reports, per layer:
- unique: distinct experts the T tokens hit (mean over the timed calls);
- grouped: a CUDA graph of router, top-k, tokens sorted by expert and
  torch._grouped_mm over the experts (each hit expert's weights read once,
  as fused-MoE kernels do), when this PyTorch has _grouped_mm;
- hf: transformers' own Qwen3MoeSparseMoeBlock, eager, as a PyTorch engine
  without fused kernels runs it (CUDA events on the stream, so the GPU's
  idle time waiting for Python counts);
- stream_us: the hit experts' bytes over the copy bandwidth measured in the
  same run, the planner's roofline term for them.
Layers rotate over --layers distinct weight sets so nothing stays in L2.
Medians of --reps timed calls after warm-ups, with the 10th and 90th
percentiles. Needs PyTorch with CUDA; transformers for the hf rows; no
network. Prints one JSON object and a markdown table.

  python3 bench/plan/moe_layer.py [--tokens 1,2,4,8,16,32,60] [--layers 8]
"""

import argparse
import json
import statistics
import sys

import torch

HIDDEN, EXPERTS, TOP_K, WIDTH = 2048, 128, 8, 768


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def copy_bandwidth_gb_s():
    n = (2 << 30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    times = []
    for i in range(25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        if i >= 5:
            times.append(a.elapsed_time(b))
    return 2 * n * 2 / (statistics.median(times) * 1e-3) / 1e9


class Experts:
    """One layer's router and experts as 3-D tensors (gate and up fused).
    The shape defaults to Qwen3-30B-A3B's; bench/plan/h200_efficiency.py
    --experts builds other shapes through it."""

    def __init__(self, hidden=HIDDEN, experts=EXPERTS, top_k=TOP_K, width=WIDTH):
        dev, dt = "cuda", torch.bfloat16
        self.hidden, self.experts, self.top_k, self.width = hidden, experts, top_k, width
        self.router = torch.randn(hidden, experts, device=dev, dtype=dt) * 0.02
        # Stored [experts, out, in] and passed transposed (column-major
        # [experts, in, out]), the layout _grouped_mm takes on sm_90.
        self.gate_up = torch.randn(experts, 2 * width, hidden, device=dev, dtype=dt) * 0.02
        self.down = torch.randn(experts, hidden, width, device=dev, dtype=dt) * 0.02
        self.expert_bytes = 3 * hidden * width * 2
        self.router_bytes = hidden * experts * 2

    def grouped(self, x):
        """x: [T, hidden]. Router, top-k, grouped GEMMs over the hit experts."""
        t = x.shape[0]
        k = self.top_k
        logits = (x @ self.router).float()
        probs = torch.softmax(logits, dim=-1)
        w, idx = torch.topk(probs, k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        rows = x.repeat_interleave(k, dim=0)[order]
        counts = torch.zeros(self.experts, dtype=torch.int32, device=x.device)
        counts.scatter_add_(0, flat.to(torch.int64), torch.ones_like(flat, dtype=torch.int32))
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        h = torch._grouped_mm(rows, self.gate_up.transpose(-2, -1), offs=offs)
        g, u = h[:, : self.width], h[:, self.width :]
        h = torch.nn.functional.silu(g) * u
        y = torch._grouped_mm(h, self.down.transpose(-2, -1), offs=offs)
        out = torch.empty_like(y)
        out[order] = y
        out = out.view(t, k, self.hidden) * w.unsqueeze(-1)
        return out.sum(dim=1), idx


def time_calls(fn, n_layers, warmup, reps):
    for i in range(warmup):
        fn(i % n_layers)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i % n_layers)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)  # us
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1,2,4,8,16,32,60")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_layer: needs a CUDA GPU")
    torch.manual_seed(0)
    tokens = [int(t) for t in args.tokens.split(",")]
    bw = copy_bandwidth_gb_s()
    layers = [Experts() for _ in range(args.layers)]
    expert_bytes = layers[0].expert_bytes
    have_grouped = hasattr(torch, "_grouped_mm")

    hf_blocks, hf_error = None, None
    try:
        from transformers import Qwen3MoeConfig
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

        cfg = Qwen3MoeConfig(
            hidden_size=HIDDEN,
            moe_intermediate_size=WIDTH,
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            norm_topk_prob=True,
        )
        hf_blocks = [
            Qwen3MoeSparseMoeBlock(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
            for _ in range(args.layers)
        ]
    except Exception as e:  # reported, not fatal: the grouped rows still run
        hf_error = f"{type(e).__name__}: {e}"

    rows = []
    for t in tokens:
        xs = [torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(args.layers)]
        row = {"tokens": t}
        uniq = []
        for i in range(args.layers):
            _, idx = layers[i].grouped(xs[i]) if have_grouped else (None, None)
            if idx is None:
                logits = xs[i] @ layers[i].router
                idx = torch.topk(logits.float(), TOP_K, dim=-1).indices
            uniq.append(int(torch.unique(idx).numel()))
        row["unique"] = statistics.mean(uniq)
        row["stream_us"] = row["unique"] * expert_bytes / (bw * 1e9) * 1e6
        if have_grouped:
            try:
                graphs = []
                for i in range(args.layers):
                    g = torch.cuda.CUDAGraph()
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        layers[i].grouped(xs[i])  # warm the kernels outside capture
                    torch.cuda.current_stream().wait_stream(s)
                    with torch.cuda.graph(g):
                        layers[i].grouped(xs[i])
                    graphs.append(g)
                ts = time_calls(lambda i: graphs[i].replay(), args.layers, args.warmup, args.reps)
                row["grouped_us"] = [statistics.median(ts), pct(ts, 0.1), pct(ts, 0.9)]
            except Exception as e:
                row["grouped_error"] = f"{type(e).__name__}: {e}"
        if hf_blocks is not None:
            try:
                with torch.no_grad():
                    hx = [x.unsqueeze(0) for x in xs]
                    ts = time_calls(lambda i: hf_blocks[i](hx[i]), args.layers, args.warmup, args.reps)
                row["hf_eager_us"] = [statistics.median(ts), pct(ts, 0.1), pct(ts, 0.9)]
            except Exception as e:
                row["hf_error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "copy_gb_s": bw,
        "expert_bytes": expert_bytes,
        "layers_rotated": args.layers,
        "reps": args.reps,
        "hf_error": hf_error,
        "rows": rows,
    }
    print(json.dumps(result, indent=1))
    print()
    print(f"{result['gpu']}, copy {bw:.0f} GB/s; us per MoE layer (median, p10-p90)")
    print("| tokens | unique experts | stream us | grouped graph us | hf eager us |")
    print("|---|---|---|---|---|")
    for r in rows:
        def cell(k, err):
            v = r.get(k)
            return f"{v[0]:.1f} ({v[1]:.1f}-{v[2]:.1f})" if v else r.get(err, hf_error or "-")

        grouped = cell("grouped_us", "grouped_error") if have_grouped else "no torch._grouped_mm"
        hf = cell("hf_eager_us", "hf_error")
        print(f"| {r['tokens']} | {r['unique']:.1f} | {r['stream_us']:.1f} | {grouped} | {hf} |")


if __name__ == "__main__":
    main()
