"""A Llama-style decode loop (batch 1, one token at a time, eager PyTorch) with PyTorch's linear
layers and again with gemmgen's (``gemmgen.torch.patch``), on the same random weights; time per
token and the logits' agreement.

    python examples/decode_llama.py [--layers 4] [--hidden 4096] [--intermediate 14336]
                                    [--heads 32] [--kv-heads 8] [--tokens 64] [--dtype bf16]
                                    [--out benchmarks/results/decode_llama_<gpu>.json]

The model is transformers' ``LlamaForCausalLM`` built from a config with Llama-3-8B's layer
sizes (hidden 4096, intermediate 14336, 32 heads, 8 KV heads; meta-llama/Meta-Llama-3-8B
config.json) and fewer layers, random weights, no downloads. Each run prefills 16 tokens, then
decodes ``--tokens`` tokens greedily with the KV cache; the time per decoded token is the median
over the tokens (CUDA-synchronized wall clock, host work included: eager decode is host-bound
as often as not). Needs a CUDA GPU and transformers.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import gemmgen.torch as gt


def build(args, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                      max_position_embeddings=4096)
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(cfg).to("cuda", dtype).eval()


@torch.no_grad()
def decode(model, prompt: torch.Tensor, tokens: int) -> tuple[list[float], torch.Tensor]:
    """Per-token seconds of a greedy decode with the KV cache, and the prefill's logits (later
    steps follow each run's own argmax, which random weights make chaotic)."""
    out = model(prompt, use_cache=True)
    first = out.logits.float()
    past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    times = []
    for _ in range(tokens):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model(nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times, first


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    model = build(args, dtype)
    prompt = torch.randint(0, args.vocab, (1, 16), device="cuda")
    decode(model, prompt, 4)  # warm up PyTorch (cuBLAS handles, allocator)
    base_times, base_logits = decode(model, prompt, args.tokens)
    summary = gt.patch(model)
    decode(model, prompt, 4)  # warm up gemmgen: plan and build each shape once
    ours_times, ours_logits = decode(model, prompt, args.tokens)
    gt.unpatch(model)  # PyTorch once more: the machine did not drift between the runs
    again_times, _ = decode(model, prompt, args.tokens)
    rel = float((ours_logits - base_logits).norm() / base_logits.norm())
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "dtype": args.dtype, "layers": args.layers, "hidden": args.hidden,
           "intermediate": args.intermediate, "tokens": args.tokens,
           "launcher": gt.LAUNCHER, "patched": str(summary),
           "pytorch_ms_per_token": round(1e3 * statistics.median(base_times), 4),
           "gemmgen_ms_per_token": round(1e3 * statistics.median(ours_times), 4),
           "pytorch_again_ms_per_token": round(1e3 * statistics.median(again_times), 4),
           "logits_rel_diff": rel,
           "method": "median over the decoded tokens of CUDA-synchronized wall clock per token "
                     "(eager, batch 1, KV cache, after warm-up); PyTorch before and after "
                     "gemmgen; logits_rel_diff compares the prefill's logits"}
    res["ratio"] = round(res["gemmgen_ms_per_token"] / res["pytorch_ms_per_token"], 4)
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
