#!/usr/bin/env python3
"""A transformers tensor-parallel Llama on ranks sharing one GPU, checked against TP 1.

    python3 bench/torch/hf_tp_check.py --lib target/release/libtpcomm_nccl.so \
        --tp 2 4 --dtype float32 bfloat16 --out hf-tp.json [--timeout 900]

What it runs. A small Llama-architecture model (LlamaConfig: hidden 512, 4 layers, 8
attention heads, 4 KV heads, intermediate 1536, vocabulary 4096; random weights drawn
with --seed, no download) is saved once with save_pretrained (safetensors) to a
temporary directory, so every process loads the same weights. The prompt is --batch x
--seq random token ids drawn with --seed + 1, attention mask all ones.

  * TP 1, the reference: one process loads the model alone on cuda:0 (no process
    group), runs one forward over the prompt (the logits kept in float32 on the CPU)
    and a greedy generation of --new-tokens tokens (do_sample=False; the model has no
    EOS token, so every sequence gets all of them), keeping the tokens and each step's
    logits.
  * TP N for each N of --tp: N processes, every one on cuda:0 (LOCAL_RANK=0 in every
    rank, since transformers places a rank on cuda:LOCAL_RANK), one torch.distributed
    process group with the NCCL backend (file:// store), the model loaded with
    transformers' tensor parallelism (DistributedConfig(tp_size=N) where transformers
    has it, else tp_plan="auto"; see --api). The same forward and generation.
    Ranks sharing a GPU as processes need MPS (`nvidia-cuda-mps-control -d`) to run
    their kernels at once (docs/shared-gpu.md).

With --lib the drop-in is preloaded (LD_PRELOAD) into every process, with
TPCOMM_LOG=info and TPCOMM_STANDALONE=1 (unless set otherwise in the environment, or
--standalone env: the variable as the environment has it), so the NCCL process group is
served by tpcomm alone. Without --lib, plain NCCL serves it:
NCCL refuses ranks sharing a GPU ("Duplicate GPU detected"), and the script reports that
refusal as the expected outcome of the run without the drop-in, not as a crash.

What is checked, for each (dtype, N), against TP 1 in the same dtype:
  1. every rank reported (no crash, no hang within the limits), with no error;
  2. the model really was sharded on every rank: q_proj, o_proj, down_proj and
     lm_head weights are DTensors whose local shards have 1/N of the split dimension,
     and model.tp_size == N (a model that silently loaded whole would match TP 1
     trivially);
  3. every rank generated the same tokens as rank 0 (the all-reduced and all-gathered
     values every rank computes from must agree);
  4. the greedy tokens of rank 0 equal TP 1's exactly (all --batch x --new-tokens);
  5. logits: max relative difference = max|tp - ref| / max|ref| over the forward's
     logits, and over the generation steps' logits up to and including the first step
     whose token differs (before it, both ran on the same inputs); RMS relative
     difference = ||tp - ref|| / ||ref|| over the same.

Pass criteria. float32: 1 to 4 hold and both max relative differences are at most
--rtol (default 1e-4, justified at RTOL_FP32 below). bfloat16: reported only: 1 to 3
must hold (else FAIL), the logits' differences and whether the tokens match are
reported with no pass/fail, since bfloat16 roundings of differently ordered sums
legitimately move logits by about 1e-2 of their range and can flip a greedy choice
between two close logits, after which the sequences diverge. Without --lib, a run
whose ranks fail with "Duplicate GPU detected" is REFUSED-AS-EXPECTED; any other error
is a FAIL; a run that goes through is judged as above. The exit status is 0 when every
(dtype, N) is PASS, REPORTED or REFUSED-AS-EXPECTED, else 1.

Also reported: the smallest gap between the largest and second-largest logit of TP 1's
generation steps (how close a greedy choice came to a tie), the share of forward
positions whose argmax agrees, load/forward/generate times per rank (shared GPU: one
GPU doing every rank's work, never an N-GPU result), peak GPU memory, versions and
the TPCOMM_/NCCL_/CUDA_MPS_ environment.

Messages of this model through the process group (TPCOMM_MAX_BYTES): per layer two
all-reduces (o_proj and down_proj outputs, batch x seq x hidden: 64 KiB in float32 for
the forward, 4 KiB per generated token) and one all-gather for lm_head (each rank's
block batch x seq x vocab / N: 256 KiB in float32 at N=2 for the forward, 16 KiB per
generated token); the script makes no other collective call. Standalone mode refuses
all-gather blocks above TPCOMM_MAX_BYTES (all-reduces go in pieces), so the default
16 MiB covers the defaults here; the script prints the largest block.

Bounded: --timeout bounds the whole run and --phase-timeout each group of processes
(the process group's timeout is 80% of it, and with --lib TPCOMM_TIMEOUT_S defaults to
that or 120 s, whichever is less, so a rank waiting on a lost peer fails with its own
error before it is killed); a rank that hangs is killed and reported with the
last stage it reached, one that dies is reported with its exit status, and once one
rank reports an error the others get --grace seconds before they are killed. Each
process's stdout and stderr (tpcomm's and NCCL's logs included) go to a file in
<out>-logs/, whose tail the script prints for every failed rank.

--cpu-smoke runs all of it on the CPU with the gloo backend and no drop-in: a check of
this script's own logic on a machine with a CPU-only torch, not of tpcomm.
HF_TP_CHECK_FAULT=KIND:RANK (error, crash or hang) makes that TP rank fail before its
forward, to check the reporting above.
Keep NCCL_NVLS_ENABLE=0 set on machines where NVLink multicast is off.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.multiprocessing as mp

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# The float32 bound on max|tp - ref| / max|ref|. What differs between TP 1 and TP N is
# the order of float32 additions: o_proj and down_proj sum their 512 and 1536 products
# in N partial sums that the all-reduce adds, and cuBLAS may pick other kernels (other
# split-K orders) for the narrower per-rank matrices. Each reordered dot product moves
# by a few units of roundoff (2^-24 = 6e-8) times the sum of its terms' magnitudes
# (about sqrt(K) of them for random signs, K in the worst case: 1536 x 6e-8 = 9e-5
# relative to the sum of magnitudes, which is itself several times the result). Through
# 4 layers of residual adds, RMSNorm and softmax that should leave the logits of a float32
# TP run about 1e-7 to 1e-5 of their range from TP 1; on the CPU (--cpu-smoke, gloo,
# torch 2.11, transformers 5.17) TP 2 and TP 4 landed 6e-7 to 7.5e-7 away. 1e-4 leaves a
# factor of 10 or more above that, while a real fault is far larger: a missing or doubled
# rank's partial sum moves logits by a sizeable fraction of their range, and a reduction
# rounded to bfloat16 (unit roundoff 2^-9) or float16 (2^-11) instead of float32 would
# leave, by estimate, about 1e-3 and 3e-4 of the range here (the whole model in bfloat16
# lands 9e-3 away on the CPU). The bound is --rtol; the JSON keeps the measured values,
# so the first GPU run shows where float32 lands there.
RTOL_FP32 = 1e-4
DUPLICATE_GPU = "Duplicate GPU detected"
ENV_PREFIXES = ("TPCOMM_", "NCCL_", "HF_TP_CHECK_", "CUDA_MPS_", "CUDA_DEVICE_MAX_CONNECTIONS",
                "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "TORCH_NCCL_")


def llama_config(args):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=256,
        # No special tokens: with no EOS every sequence generates all --new-tokens.
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
        tie_word_embeddings=False)


def build_checkpoint(args, path):
    """Random weights drawn with --seed on the CPU, saved as safetensors."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(llama_config(args))
    model.save_pretrained(path)
    files = sorted(os.listdir(path))
    if not any(f.endswith(".safetensors") for f in files):
        raise RuntimeError(f"save_pretrained wrote no safetensors file in {path}: {files}")
    return dict(parameters=sum(p.numel() for p in model.parameters()), files=files)


def make_prompt(args):
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g, dtype=torch.long)
    return ids, torch.ones_like(ids)


def redirect_output(path):
    """Send this process's fds 1 and 2 (Python's and native libraries' output) to path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def sharding(model, world, args):
    """Local shapes of the sharded weights of layer 0 and lm_head, and whether each has
    1/world of its split dimension, as transformers' Llama plan says (q/k/v, gate/up
    colwise: output rows split; o/down rowwise: input columns split; lm_head colwise)."""
    from torch.distributed.tensor import DTensor
    hd = args.hidden // args.heads
    layer = model.model.layers[0]
    expect = {
        "q_proj": (layer.self_attn.q_proj, [args.heads * hd // world, args.hidden]),
        "o_proj": (layer.self_attn.o_proj, [args.hidden, args.heads * hd // world]),
        "down_proj": (layer.mlp.down_proj, [args.hidden, args.intermediate // world]),
        "lm_head": (model.lm_head, [args.vocab // world, args.hidden]),
    }
    out = dict(tp_size=getattr(model, "tp_size", None))
    ok = out["tp_size"] == world
    for name, (mod, local_shape) in expect.items():
        w = mod.weight
        is_dt = isinstance(w, DTensor)
        local = w.to_local() if is_dt else w
        good = is_dt and list(local.shape) == local_shape
        out[name] = dict(dtensor=is_dt, shape=list(w.shape), local=list(local.shape),
                         expected_local=local_shape, ok=good)
        ok = ok and good
    out["ok"] = ok
    return out


def fault(role, rank):
    """HF_TP_CHECK_FAULT=KIND:RANK makes that TP rank fail before its forward, to check
    this script's own reporting: error (an exception), crash (exits with status 3, no
    report), hang (sleeps; its peers wait in their first all-reduce)."""
    kind, _, who = os.environ.get("HF_TP_CHECK_FAULT", "").partition(":")
    if role != "tp" or not kind or who != str(rank):
        return
    if kind == "error":
        raise RuntimeError("HF_TP_CHECK_FAULT: error asked for")
    if kind == "crash":
        os._exit(3)
    if kind == "hang":
        time.sleep(10 ** 6)
    raise ValueError(f"HF_TP_CHECK_FAULT={kind}:{who}: the kind is error, crash or hang")


def child(role, rank, world, args, paths, dtype_name, api):
    """One process: TP 1 reference (role 'ref') or one rank of TP world (role 'tp').
    Writes <work>/<tag>-rank<r>.json (status, error, times, checks) and .pt (tensors)."""
    tag = paths["tag"]
    base = os.path.join(paths["work"], f"{tag}-rank{rank}")
    log = os.path.join(paths["logs"], f"{tag}-rank{rank}.log")
    redirect_output(log)
    res = dict(role=role, rank=rank, world=world, dtype=dtype_name, status="error",
               stage="start", log=log, pid=os.getpid())

    def mark(stage):
        res["stage"] = stage
        with open(base + ".stage", "w") as f:
            f.write(stage)
        print(f"[hf_tp_check {tag} rank {rank}] {stage}", flush=True)

    dist_up = False
    code = 1
    try:
        import transformers
        from transformers import LlamaForCausalLM
        import torch.distributed as dist
        torch.set_float32_matmul_precision("highest")  # no TF32: float32 means float32
        res["matmul_precision"] = torch.get_float32_matmul_precision()
        dt = DTYPES[dtype_name]
        if args.cpu_smoke:
            dev = torch.device("cpu")
        else:
            dev = torch.device("cuda", 0)
            torch.cuda.set_device(dev)
            res["gpu"] = torch.cuda.get_device_name(dev)
            res["gpus_visible"] = torch.cuda.device_count()
        ids, mask = make_prompt(args)
        ids, mask = ids.to(dev), mask.to(dev)
        t0 = time.perf_counter()
        if role == "ref":
            for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
                os.environ.pop(k, None)
            mark("load")
            model = LlamaForCausalLM.from_pretrained(paths["ckpt"], dtype=dt).to(dev)
        else:
            # transformers' TP set-up reads LOCAL_RANK (the GPU index, 0 for every rank
            # here) and, for a tp_plan without tp_size, WORLD_SIZE.
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0",
                              LOCAL_WORLD_SIZE=str(world))
            mark("init_process_group")
            kw = {} if args.cpu_smoke else dict(device_id=dev)
            dist.init_process_group("gloo" if args.cpu_smoke else "nccl",
                                    init_method="file://" + paths["store"], rank=rank,
                                    world_size=world,
                                    timeout=timedelta(seconds=pg_timeout(args)), **kw)
            dist_up = True
            mark("load")
            if api == "distributed_config":
                from transformers import DistributedConfig
                model = LlamaForCausalLM.from_pretrained(
                    paths["ckpt"], dtype=dt, distributed_config=DistributedConfig(tp_size=world))
            else:
                model = LlamaForCausalLM.from_pretrained(paths["ckpt"], dtype=dt, tp_plan="auto",
                                                         tp_size=world)
            res["sharding"] = sharding(model, world, args)
        sync(dev)
        res["load_s"] = time.perf_counter() - t0
        res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        model.eval()
        with torch.no_grad():  # also selects transformers' local-tensor TP inference path
            mark("forward")
            fault(role, rank)
            t0 = time.perf_counter()
            logits = model(input_ids=ids, attention_mask=mask).logits
            sync(dev)
            res["forward_first_s"] = time.perf_counter() - t0
            logits = logits.float().cpu()
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask)
            sync(dev)
            res["forward_s"] = time.perf_counter() - t0
            mark("generate")
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=args.new_tokens, output_logits=True,
                                 return_dict_in_generate=True)
            sync(dev)
            res["generate_s"] = time.perf_counter() - t0
        seq = out.sequences.cpu()
        steps = torch.stack([s.float().cpu() for s in out.logits])  # [steps, batch, vocab]
        if seq.shape != (args.batch, args.seq + args.new_tokens):
            raise RuntimeError(f"generate returned sequences of shape {list(seq.shape)}, expected "
                               f"{[args.batch, args.seq + args.new_tokens]}")
        if dev.type == "cuda":
            res["peak_gpu_mib"] = torch.cuda.max_memory_allocated(dev) / 2 ** 20
        torch.save(dict(logits=logits, sequences=seq, step_logits=steps), base + ".pt")
        res["versions"] = dict(torch=torch.__version__, transformers=transformers.__version__)
        res["status"] = "ok"
        mark("done")
        code = 0
    except BaseException as e:  # reported by the parent with this rank's number
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc().splitlines()[-25:]
        traceback.print_exc()
    write_json_atomic(base + ".json", res)
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0 and dist_up:
        # Destroyed only after a clean run: after an error a peer may be stuck in a
        # collective and the destruction could wait on it (the parent bounds it anyway).
        try:
            torch.distributed.destroy_process_group()
        except Exception as e:
            print(f"destroy_process_group: {type(e).__name__}: {e}", flush=True)
    os._exit(code)


def pg_timeout(args):
    """The process group's timeout: 80% of --phase-timeout, so that a rank waiting on a
    lost peer fails with its own timeout error before the parent kills it."""
    return max(10, int(args.phase_timeout * 0.8))


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError as e:
        return [f"(cannot read {path}: {e})"]


def file_has(path, text):
    try:
        with open(path, errors="replace") as f:
            return text in f.read()
    except OSError:
        return False


def run_phase(ctx, role, world, args, paths, dtype_name, api, deadline):
    """Start world processes, wait for each one's result file within the deadline, and
    return {rank: result}; a rank without a result gets status 'crashed' or 'hung'."""
    procs = [ctx.Process(target=child, args=(role, r, world, args, paths, dtype_name, api))
             for r in range(world)]
    for p in procs:
        p.start()
    results, first_error, base = {}, None, os.path.join(paths["work"], paths["tag"])

    def collect(r):
        path = f"{base}-rank{r}.json"
        if r not in results and os.path.exists(path):
            with open(path) as f:
                results[r] = json.load(f)

    while len(results) < world:
        for r in range(world):
            collect(r)
        if first_error is None and any(v["status"] != "ok" for v in results.values()):
            first_error = time.time()
        for r, p in enumerate(procs):
            if r not in results and not p.is_alive():
                collect(r)  # it may have written its file just before exiting
                if r not in results:
                    code = p.exitcode
                    how = (f"killed by signal {-code}" if code is not None and code < 0
                           else f"exit status {code}")
                    results[r] = dict(status="crashed", rank=r,
                                      error=f"rank {r} died without a report ({how})")
                    if first_error is None:
                        first_error = time.time()
        now = time.time()
        late = now > deadline
        if first_error is not None and now > first_error + args.grace:
            late = True
        if late and len(results) < world:
            for r in range(world):
                if r not in results:
                    try:
                        with open(f"{base}-rank{r}.stage") as f:
                            stage = f.read().strip()
                    except OSError:
                        stage = "before its first stage"
                    why = ("after a peer failed" if first_error is not None and now <= deadline
                           else "within the time limit")
                    results[r] = dict(status="hung", rank=r, stage=stage,
                                      error=f"rank {r} gave no report {why} (last stage: {stage}); killed")
            break
        if len(results) < world:
            time.sleep(0.5)
    for p in procs:
        p.join(timeout=10 if all(v["status"] == "ok" for v in results.values()) else 1)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
    for r in range(world):
        results[r]["log"] = os.path.join(paths["logs"], f"{paths['tag']}-rank{r}.log")
    return results


def rel_diff(a, b):
    """(max|a - b| / max|b|, ||a - b|| / ||b||) in float64; NaN when either is not finite."""
    a, b = a.double(), b.double()
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return float("nan"), float("nan")
    d = a - b
    return float(d.abs().max() / b.abs().max()), float(d.norm() / b.norm())


def compare(ref, tp, args):
    """Rank 0's tensors against TP 1's."""
    out = {}
    out["forward_max_rel"], out["forward_rms_rel"] = rel_diff(tp["logits"], ref["logits"])
    out["forward_argmax_agree"] = float((tp["logits"].argmax(-1) == ref["logits"].argmax(-1))
                                        .float().mean())
    new_ref = ref["sequences"][:, args.seq:]
    new_tp = tp["sequences"][:, args.seq:]
    out["prompt_kept"] = bool(torch.equal(ref["sequences"][:, :args.seq], tp["sequences"][:, :args.seq]))
    same = new_ref == new_tp
    out["tokens_equal"] = int(same.sum())
    out["tokens_total"] = same.numel()
    out["tokens_identical"] = bool(same.all()) and out["prompt_kept"]
    diverge = (~same).any(0).nonzero()
    first = int(diverge[0]) if len(diverge) else None
    out["first_divergent_step"] = first
    upto = args.new_tokens if first is None else first + 1
    out["steps_compared"] = upto
    out["steps_max_rel"], out["steps_rms_rel"] = rel_diff(tp["step_logits"][:upto], ref["step_logits"][:upto])
    top2 = ref["step_logits"].double().topk(2, dim=-1).values
    margin = top2[..., 0] - top2[..., 1]  # [steps, batch]
    scale = ref["step_logits"].double().abs().max()
    out["ref_min_top2_gap"] = float(margin.min())
    out["ref_min_top2_gap_rel"] = float(margin.min() / scale)
    if first is not None:
        out["ref_top2_gap_at_divergence"] = float(margin[first].min())
    return out


def verdict(dtype_name, world, results, ref_tensors, tensors, args, plain):
    """(verdict, reasons, details) for one (dtype, world)."""
    errors = {r: v["error"] for r, v in results.items() if v["status"] != "ok"}
    details = dict(errors=errors)
    if errors:
        if plain:
            dup = [r for r, v in results.items() if DUPLICATE_GPU in v.get("error", "")
                   or file_has(v["log"], DUPLICATE_GPU)]
            details["duplicate_gpu_ranks"] = dup
            if dup:
                return ("REFUSED-AS-EXPECTED",
                        [f"plain NCCL refused the shared GPU ('{DUPLICATE_GPU}' from ranks {dup})"],
                        details)
        return "FAIL", [f"rank {r}: {e}" for r, e in sorted(errors.items())], details
    reasons = []
    shard = {r: v.get("sharding", {}) for r, v in results.items()}
    details["sharding_rank0"] = shard.get(0)
    bad_shard = [r for r, s in shard.items() if not s.get("ok")]
    if bad_shard:
        reasons.append(f"model not sharded {world} ways on ranks {bad_shard} (see sharding)")
    disagree = [r for r in range(1, world)
                if not torch.equal(tensors[r]["sequences"], tensors[0]["sequences"])]
    details["ranks_disagreeing_on_tokens"] = disagree
    details["ranks_max_logit_diff"] = max(
        [float((tensors[r]["logits"].double() - tensors[0]["logits"].double()).abs().max())
         for r in range(1, world)] or [0.0])
    if disagree:
        reasons.append(f"ranks {disagree} generated other tokens than rank 0")
    cmp = compare(ref_tensors, tensors[0], args)
    details.update(cmp)
    if dtype_name == "float32":
        if not cmp["tokens_identical"]:
            reasons.append(f"greedy tokens differ from TP 1 ({cmp['tokens_equal']}/{cmp['tokens_total']} "
                           f"equal, first at step {cmp['first_divergent_step']})")
        for k in ("forward_max_rel", "steps_max_rel"):
            if not cmp[k] <= args.rtol:  # also catches NaN
                reasons.append(f"{k} {cmp[k]:.3g} above {args.rtol:g}")
        return ("PASS" if not reasons else "FAIL"), reasons, details
    return ("REPORTED" if not reasons else "FAIL"), reasons, details


def fmt_line(dtype_name, world, mode, v, reasons, d, results):
    where = "CPU" if mode.startswith("cpu") else "ranks sharing cuda:0"
    head = f"TP {world} {dtype_name} ({mode}, {where}): {v}"
    if v in ("FAIL", "REFUSED-AS-EXPECTED") and d.get("errors"):
        return f"{head}: " + "; ".join(reasons)
    r0 = results.get(0, {})
    parts = []
    if "tokens_equal" in d:
        tok = f"tokens {d['tokens_equal']}/{d['tokens_total']} equal to TP 1"
        if d.get("first_divergent_step") is not None:
            tok += (f" (first difference at step {d['first_divergent_step']}, where TP 1's top two "
                    f"logits were {d['ref_top2_gap_at_divergence']:.2g} apart)")
        parts.append(tok)
        parts.append(f"logits max rel {d['forward_max_rel']:.2e} (forward) {d['steps_max_rel']:.2e} "
                     f"(generation){' bound %.0e' % d['rtol'] if 'rtol' in d else ''}, "
                     f"rms rel {d['forward_rms_rel']:.2e}")
    for k, name in (("load_s", "load"), ("forward_s", "forward"), ("generate_s", "generate")):
        if k in r0:
            parts.append(f"{name} {r0[k]:.3f} s")
    line = f"{head}: " + ", ".join(parts)
    if reasons:
        line += " -- " + "; ".join(reasons)
    return line


def lib_ok(path):
    return path and os.path.isfile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="libtpcomm_nccl.so to preload (omit: plain NCCL)")
    ap.add_argument("--tp", type=int, nargs="+", default=[2, 4], help="TP sizes (default 2 4)")
    ap.add_argument("--dtype", nargs="+", choices=list(DTYPES), default=["float32"])
    ap.add_argument("--out", required=True, help="JSON report; logs go to <out>-logs/")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the whole run")
    ap.add_argument("--phase-timeout", type=int, default=300,
                    help="seconds for one group of processes (also the process group's timeout)")
    ap.add_argument("--grace", type=int, default=30,
                    help="seconds the other ranks get after one reports an error")
    ap.add_argument("--api", choices=["auto", "distributed_config", "tp_plan"], default="auto",
                    help="how to ask transformers for TP: DistributedConfig(tp_size=N), "
                         "tp_plan='auto' with tp_size=N, or auto (the first where transformers has it)")
    ap.add_argument("--rtol", type=float, default=RTOL_FP32,
                    help="float32 bound on max|tp - ref| / max|ref| of the logits")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--standalone", choices=["1", "env"], default="1",
                    help="with --lib: 1 sets TPCOMM_STANDALONE=1 unless the environment sets it; "
                         "env leaves the variable as the environment has it (unset: the drop-in "
                         "decides for itself)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint and tensors")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run on the CPU with gloo: checks this script only, not tpcomm")
    args = ap.parse_args()
    started = time.time()
    if args.cpu_smoke and args.lib:
        ap.error("--cpu-smoke runs without the drop-in: leave out --lib")
    if args.lib and not lib_ok(args.lib):
        ap.error(f"--lib {args.lib}: no such file")
    for n in args.tp:
        for name, v in (("--heads", args.heads), ("--kv-heads", args.kv_heads),
                        ("--intermediate", args.intermediate), ("--vocab", args.vocab)):
            if n < 2 or v % n:
                ap.error(f"TP {n}: needs 2 or more ranks and {name} ({v}) divisible by it")
    if args.hidden % args.heads:
        ap.error("--hidden must be divisible by --heads")
    if args.lib and os.environ.get("TPCOMM_CHECK_PRELOADED") != "1":
        # Re-run this script with the drop-in preloaded from the start (every rank inherits it).
        env = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib), TPCOMM_LOG="info",
                   TPCOMM_CHECK_PRELOADED="1")
        if args.standalone == "1":
            env.setdefault("TPCOMM_STANDALONE", "1")
        env.setdefault("TPCOMM_TIMEOUT_S", str(min(120, pg_timeout(args))))
        os.execvpe(sys.executable, [sys.executable] + sys.argv, env)
    plain = not args.lib and not args.cpu_smoke
    if plain:
        os.environ.setdefault("NCCL_DEBUG", "WARN")  # NCCL's own reason in the rank logs
    mode = "cpu smoke, gloo" if args.cpu_smoke else (
        "drop-in, TPCOMM_STANDALONE=" + os.environ.get("TPCOMM_STANDALONE", "unset") if args.lib
        else "plain NCCL")

    out_base = args.out[:-5] if args.out.endswith(".json") else args.out
    logs = out_base + "-logs"
    os.makedirs(logs, exist_ok=True)
    report = dict(script="bench/torch/hf_tp_check.py", argv=sys.argv, mode=mode, lib=args.lib,
                  tp=args.tp, dtypes=args.dtype, rtol=args.rtol, logs=logs,
                  env={k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
                  runs={}, verdicts={})
    ok_all = True
    lines = []
    work = None
    try:
        import transformers
        report["versions"] = dict(torch=torch.__version__, transformers=transformers.__version__)
        try:
            import accelerate  # transformers' TP loading passes a device_map, which needs it
            report["versions"]["accelerate"] = accelerate.__version__
        except ImportError:
            raise RuntimeError("transformers' tensor-parallel loading needs the accelerate package "
                               "(check_and_set_device_map in transformers/integrations/accelerate.py)")
        api = args.api
        if api == "auto":
            api = "distributed_config" if hasattr(transformers, "DistributedConfig") else "tp_plan"
        report["api"] = api
        work = tempfile.mkdtemp(prefix="tpcomm-hf-")
        ckpt = os.path.join(work, "model")
        report["model"] = dict(config=dict(hidden=args.hidden, layers=args.layers, heads=args.heads,
                                           kv_heads=args.kv_heads, intermediate=args.intermediate,
                                           vocab=args.vocab, seed=args.seed),
                               prompt=[args.batch, args.seq], new_tokens=args.new_tokens,
                               **build_checkpoint(args, ckpt))
        elem = {"float32": 4, "bfloat16": 2}
        report["largest_messages"] = {
            d: dict(all_reduce_bytes=args.batch * args.seq * args.hidden * elem[d],
                    all_gather_block_bytes=args.batch * args.seq * args.vocab // min(args.tp) * elem[d])
            for d in args.dtype}
        print(f"model: {report['model']['parameters']} parameters in {ckpt}; largest messages per "
              f"rank: {report['largest_messages']}; logs in {logs}", flush=True)
        ctx = mp.get_context("spawn")
        deadline = started + args.timeout
        refs = {}
        for dtype_name in args.dtype:
            phases = [("ref", 1)] + [("tp", n) for n in args.tp]
            for role, world in phases:
                tag = f"tp{world}-{dtype_name}" if role == "tp" else f"ref-{dtype_name}"
                key = f"{dtype_name}/tp{world}" if role == "tp" else f"{dtype_name}/tp1"
                left = deadline - time.time()
                if left < 10:
                    report["runs"][key] = dict(status="not run: no time left of --timeout")
                    report["verdicts"][key] = "FAIL"
                    lines.append(f"{key}: FAIL (not run: no time left of --timeout {args.timeout} s)")
                    ok_all = False
                    continue
                if role == "tp" and dtype_name not in refs:
                    report["verdicts"][key] = "FAIL"
                    lines.append(f"TP {world} {dtype_name}: FAIL (no TP 1 reference to compare with)")
                    ok_all = False
                    continue
                paths = dict(tag=tag, work=work, logs=logs, ckpt=ckpt,
                             store=os.path.join(work, f"store-{tag}"))
                print(f"-- {key}: {world} process(es), limit {int(min(left, args.phase_timeout))} s",
                      flush=True)
                t0 = time.time()
                results = run_phase(ctx, role, world, args, paths, dtype_name, api,
                                    min(deadline, time.time() + args.phase_timeout))
                wall = time.time() - t0
                run = dict(wall_s=wall, ranks={r: {k: v for k, v in res.items() if k != "traceback"}
                                               for r, res in results.items()})
                report["runs"][key] = run
                bad = {r: v for r, v in results.items() if v["status"] != "ok"}
                for r, v in sorted(bad.items()):
                    print(f"   rank {r}: {v['error']}", flush=True)
                    for ln in v.get("traceback", [])[-6:]:
                        print(f"   rank {r} | {ln}", flush=True)
                    for ln in tail(v["log"], 15):
                        print(f"   rank {r} log | {ln}", flush=True)
                if role == "ref":
                    if bad:
                        lines.append(f"TP 1 {dtype_name} reference: FAIL ({bad[0]['error']})")
                        report["verdicts"][key] = "FAIL"
                        ok_all = False
                    else:
                        refs[dtype_name] = torch.load(
                            os.path.join(work, f"{tag}-rank0.pt"), weights_only=True)
                        report["verdicts"][key] = "REFERENCE"
                        r0 = results[0]
                        report["gpu"] = r0.get("gpu")
                        line = (f"TP 1 {dtype_name} reference: load {r0['load_s']:.3f} s, forward "
                                f"{r0['forward_s']:.3f} s, generate {r0['generate_s']:.3f} s")
                        if dtype_name != "float32" and "float32" in refs:
                            m, s = rel_diff(refs[dtype_name]["logits"], refs["float32"]["logits"])
                            run["vs_float32_reference"] = dict(forward_max_rel=m, forward_rms_rel=s)
                            line += (f"; against the float32 TP 1: logits max rel {m:.2e}, "
                                     f"rms rel {s:.2e} (the scale of {dtype_name} rounding)")
                        lines.append(line)
                    print("   " + lines[-1], flush=True)
                    continue
                tensors = {}
                if not bad:
                    for r in range(world):
                        tensors[r] = torch.load(os.path.join(work, f"{tag}-rank{r}.pt"),
                                                weights_only=True)
                v, reasons, details = verdict(dtype_name, world, results, refs[dtype_name], tensors,
                                              args, plain)
                if dtype_name == "float32":
                    details["rtol"] = args.rtol
                if plain and v != "REFUSED-AS-EXPECTED" and not bad:
                    reasons.insert(0, "plain NCCL ran ranks sharing one GPU (not expected)")
                run.update(verdict=v, reasons=reasons, checks=details)
                report["verdicts"][key] = v
                ok_all = ok_all and v in ("PASS", "REPORTED", "REFUSED-AS-EXPECTED")
                lines.append(fmt_line(dtype_name, world, mode, v, reasons, details, results))
                print("   " + lines[-1], flush=True)
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc().splitlines()[-25:]
        lines.append(f"FAIL: {report['error']}")
        ok_all = False
    finally:
        if work and args.keep:
            report["work"] = work
        elif work:
            shutil.rmtree(work, ignore_errors=True)
    report["wall_s"] = time.time() - started
    report["ok"] = ok_all
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print("== hf_tp_check" + ("" if args.cpu_smoke else
                              " (shared GPU: timings are one GPU doing every rank's work, not an N-GPU result)"))
    for ln in lines:
        print(ln)
    print(f"-> {args.out}; {'all as expected' if ok_all else 'NOT all as expected'}")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
