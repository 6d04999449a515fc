"""The expert MLP of a public mixture-of-experts model, end to end on random weights (no
downloads), with its two expert GEMMs run three ways on the same routed tokens:

- gemmgen: ``gemmgen.torch.grouped_mm`` (one launch per GEMM, offsets on the device);
- PyTorch: ``torch._grouped_mm`` (same conventions);
- a loop of ``torch.matmul`` over the experts (the counts copied to the host once, outside the
  timing: a real model pays that synchronization every step).

    python examples/moe_mlp.py [--model qwen3_30b_a3b|mixtral_8x7b] [--tokens 4096]
                               [--skew 0.0] [--reps 20] [--json OUT]

Reported per implementation: milliseconds per MoE layer (router, top-k, sort, both GEMMs, SiLU
gate, weighted combine; CUDA events, median of --reps after warm-up), TFLOP/s of its two expert
GEMMs timed alone, and the max and relative error of the layer's output against a float64
evaluation of the same routing. ``--skew`` sends that fraction of the tokens' first choice to
expert 0 (load imbalance). Needs an H100/H200 (sm_90) and PyTorch with CUDA.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gemmgen.torch as gt  # noqa: E402

MODELS = {
    # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json: hidden_size 2048,
    # moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8, norm_topk_prob true
    "qwen3_30b_a3b": {"hidden": 2048, "inter": 768, "experts": 128, "top_k": 8, "norm": True},
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json: hidden_size
    # 4096, intermediate_size 14336, num_local_experts 8, num_experts_per_tok 2
    "mixtral_8x7b": {"hidden": 4096, "inter": 14336, "experts": 8, "top_k": 2, "norm": True},
}


def make_layer(spec: dict, dtype, seed: int = 0) -> dict:
    """Router [E, H], gate+up [E, 2I, H] (rows: gate then up) and down [E, H, I] weights, as the
    checkpoints store them (nn.Linear's [out, in]), scaled by 1/sqrt(fan_in)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    h, i, e = spec["hidden"], spec["inter"], spec["experts"]

    def w(*shape):
        return (torch.randn(*shape, generator=g, device="cuda") / shape[-1] ** 0.5).to(dtype)
    return {"router": w(e, h), "w13": w(e, 2 * i, h), "w2": w(e, h, i)}


def route(x, layer, spec, skew: float = 0.0):
    """Top-k routing: (token of each routed row, expert-sorted order, combine weights, counts,
    offs). ``skew``: the first choice of that fraction of tokens is forced to expert 0."""
    logits = (x @ layer["router"].t()).float()
    if skew > 0:
        n = int(skew * x.shape[0])
        logits[:n, 0] = logits[:n].max(dim=1).values + 10.0
    weights, experts = torch.topk(torch.softmax(logits, dim=-1), spec["top_k"], dim=-1)
    if spec["norm"]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    flat = experts.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=spec["experts"])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return order // spec["top_k"], order, weights.flatten()[order], counts, offs


def expert_gemms(impl: str, xs, layer, offs, host_counts):
    """The two expert GEMMs and the SiLU gate between them on expert-sorted rows ``xs``."""
    w13t, w2t = layer["w13"].transpose(1, 2), layer["w2"].transpose(1, 2)
    if impl == "gemmgen":
        h = gt.grouped_mm(xs, w13t, offs)
    elif impl == "torch._grouped_mm":
        h = torch._grouped_mm(xs, w13t, offs)
    else:
        h = torch.cat([xs[s:s + c] @ w13t[e] for e, (s, c) in enumerate(host_counts)])
    gate, up = h.chunk(2, dim=-1)
    a = F.silu(gate) * up
    if impl == "gemmgen":
        return gt.grouped_mm(a, w2t, offs)
    if impl == "torch._grouped_mm":
        return torch._grouped_mm(a, w2t, offs)
    return torch.cat([a[s:s + c] @ w2t[e] for e, (s, c) in enumerate(host_counts)])


def moe_layer(impl, x, layer, spec, skew=0.0):
    """The whole layer: routing, the expert GEMMs (the loop copies the counts to the host:
    a synchronization), the weighted combine."""
    tok, _, weights, counts, offs = route(x, layer, spec, skew)
    host = _host_counts(counts) if impl.startswith("loop") else None
    y = expert_gemms(impl, x[tok], layer, offs, host)
    out = torch.zeros_like(x, dtype=torch.float32)
    out.index_add_(0, tok, y.float() * weights[:, None])
    return out.to(x.dtype)


def _host_counts(counts) -> list:
    starts = torch.cumsum(counts, 0) - counts
    return list(zip(starts.tolist(), counts.tolist()))


def reference(x, layer, spec, routing):
    """The layer in float64 on the same routing (the router's choice is not re-made)."""
    tok, _, weights, _, _, host = routing
    xs = x[tok].double()
    w13t, w2t = layer["w13"].double().transpose(1, 2), layer["w2"].double().transpose(1, 2)
    h = torch.cat([xs[s:s + c] @ w13t[e] for e, (s, c) in enumerate(host)])
    gate, up = h.chunk(2, dim=-1)
    y = torch.cat([(F.silu(gate) * up)[s:s + c] @ w2t[e] for e, (s, c) in enumerate(host)])
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    return out.index_add_(0, tok, y * weights.double()[:, None])


def timed(fn, reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` event-timed calls after 3 warm-ups."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=list(MODELS), default="qwen3_30b_a3b")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--skew", type=float, default=0.0)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    spec, dtype = MODELS[args.model], torch.bfloat16
    torch.manual_seed(0)
    layer = make_layer(spec, dtype)
    x = torch.randn(args.tokens, spec["hidden"], device="cuda").to(dtype)
    routing = route(x, layer, spec, args.skew)
    routing = (*routing, _host_counts(routing[3]))
    ref = reference(x, layer, spec, routing)
    rows = routing[0].shape[0]
    flops = 2.0 * rows * spec["hidden"] * 3 * spec["inter"]  # gate+up (2I) and down (I)
    xs = x[routing[0]]
    report = {"model": args.model, "tokens": args.tokens, "routed_rows": rows,
              "skew": args.skew, "max_rows_per_expert": int(routing[3].max()),
              "gpu": torch.cuda.get_device_name(), "impls": {}}
    impls = ["gemmgen", "loop of torch.matmul"]
    if hasattr(torch, "_grouped_mm"):
        impls.insert(1, "torch._grouped_mm")
    for impl in impls:
        out = moe_layer(impl, x, layer, spec, args.skew)
        diff = (out.double() - ref).abs()
        layer_ms = timed(lambda i=impl: moe_layer(i, x, layer, spec, args.skew), args.reps)
        gemm_ms = timed(lambda i=impl: expert_gemms(i, xs, layer, routing[4], routing[5]),
                        args.reps)
        report["impls"][impl] = {
            "layer_ms": round(layer_ms, 4), "expert_gemms_ms": round(gemm_ms, 4),
            "expert_gemms_tflops": round(flops / gemm_ms / 1e9, 1),
            "max_abs_error": float(diff.max()),
            "rel_error": float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))}
    print(f"{args.model}: {args.tokens} tokens -> {rows} routed rows over {spec['experts']} "
          f"experts (max {report['max_rows_per_expert']} rows on one), {report['gpu']}")
    for impl, r in report["impls"].items():
        print(f"  {impl:<22} layer {r['layer_ms']:8.3f} ms   expert GEMMs "
              f"{r['expert_gemms_ms']:8.3f} ms = {r['expert_gemms_tflops']:6.1f} TFLOP/s   "
              f"max error {r['max_abs_error']:.2e} (relative {r['rel_error']:.2e})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
