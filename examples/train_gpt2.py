"""Train GPT-2 (transformers, random weights, no downloads) with PyTorch's matmuls and again with
every linear layer of its blocks routed through gemmgen (``gemmgen.torch.patch``), from the same
seed on the same synthetic text, and compare.

    python examples/train_gpt2.py [--steps 200] [--layers 4] [--dtype fp16|bf16]
                                  [--out benchmarks/results/torch_gpt2_<gpu>.json]

Measured and written to the JSON file:
- loss curves of both runs (every step) and the relative difference of the final loss (mean of
  the last 10 steps; bar: within 1%);
- cosine similarity of the gradients of one step, parameter by parameter (bar: >= 0.999);
- step time and forward time, median over many steps with CUDA events after warm-up (bars:
  step <= 1.1x, forward <= 1.05x PyTorch's);
- ``torch.compile(fullgraph=True)`` and CUDA-graph capture of the patched forward against eager
  (max relative error of the logits) and their forward times;
- what ``gemmgen.gemm`` chose per GEMM (config, tuned/nearest/default), how many kernels nvcc
  compiled in this process and how long that took (0 on a second run: cubins are cached);
- the cost of the two ways to get GELU's pre-activation in the backward: recompute it (one more
  GEMM, what gemmgen.torch does) or keep it (an unfused forward plus M x N saved values);
- host microseconds per call of the op, its autocast wrapper and PyTorch's addmm (64^3).

Mixed precision: fp16 runs autocast with a GradScaler, bf16 autocast without; master weights
are float32 in both, as in PyTorch's AMP recipe. Needs a CUDA GPU, PyCUDA, nvcc, transformers.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gemmgen.runtime.api  # noqa: E402
import gemmgen.torch as gt  # noqa: E402

BUILD = importlib.import_module("gemmgen.compile.cache")  # where nvcc runs on a cache miss

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
COMPILES = {"count": 0, "seconds": 0.0}


def count_compiles() -> None:
    """Count nvcc runs (cache misses) of this process: wrap gemmgen.compile.cache's cubin_of."""
    inner = BUILD.cubin_of

    def counted(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            COMPILES["count"] += 1
            COMPILES["seconds"] += time.perf_counter() - start
    BUILD.cubin_of = counted


def synthetic_batches(n: int, batch: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    """``n`` batches of token ids from a fixed random Markov chain: each token has 8 likely
    successors, so a model can learn it (loss falls from ln(vocab) towards ln(8))."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, 8), device="cuda", generator=g)
    out = torch.empty(n, batch, seq, dtype=torch.long, device="cuda")
    tok = torch.randint(0, vocab, (n, batch), device="cuda", generator=g)
    for t in range(seq):
        out[:, :, t] = tok
        pick = torch.randint(0, 8, (n, batch), device="cuda", generator=g)
        tok = table[tok, pick]
    return out


def make_model(args):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(args.seed)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads,
                     n_positions=args.seq, vocab_size=args.vocab, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    return GPT2LMHeadModel(cfg).cuda()


def apply_patch(model, args):
    exclude = () if args.lm_head else ("lm_head",)
    return gt.patch(model, exclude=exclude)


def timed(fn, warmup: int, reps: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` runs (CUDA events, after ``warmup``)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def train(model, data, args) -> dict:
    """``args.steps`` AdamW steps; the loss of every step and the median step time."""
    dtype = DTYPES[args.dtype]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    losses, times = [], []
    model.train()
    for step in range(args.steps):
        ids = data[step % data.shape[0]]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=dtype):
            loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        end.record()
        losses.append(loss.detach())
        times.append((start, end))
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in times]
    return {"losses": [float(x) for x in torch.stack(losses).cpu()],
            "step_ms_median": statistics.median(ms[min(10, len(ms) - 1):]),
            "first_step_ms": ms[0]}


def forward_fn(model, ids, dtype):
    """The inference forward pass; autocast's cast cache off, as CUDA-graph capture needs (it
    saves nothing here: each weight is cast once per pass either way)."""
    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=dtype, cache_enabled=False):
            return model(input_ids=ids).logits
    return run


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    if not bool(torch.isfinite(x).all()):
        return math.inf
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))


def grad_cosines(args, data) -> dict:
    """One forward/backward of two identical models (PyTorch, patched) on one batch: the cosine
    similarity of each parameter's gradient, and the relative error of the patched logits."""
    dtype = DTYPES[args.dtype]
    ref = make_model(args)
    mine = copy.deepcopy(ref)
    apply_patch(mine, args)
    ids = data[0]
    grads, logits = [], []
    for model in (ref, mine):
        with torch.autocast("cuda", dtype=dtype):
            res = model(input_ids=ids, labels=ids)
        res.loss.backward()
        logits.append(res.logits.detach())
        grads.append({n: p.grad.float().flatten() for n, p in model.named_parameters()
                      if p.grad is not None})
    out = {}
    for name, g in grads[0].items():
        h = grads[1][name]
        out[name] = float(torch.nn.functional.cosine_similarity(g, h, dim=0))
    return out, rel_err(logits[1], logits[0])


def gelu_preactivation_cost(m: int, k: int, n: int, dtype) -> dict:
    """Milliseconds of the forward GEMM with the fused bias_gelu epilogue, the GEMM with the
    bias epilogue (the recompute, or the unfused forward) and PyTorch's GELU of its output."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    fused = timed(lambda: torch.ops.gemmgen.gemm(x, w.t(), b, "bias_gelu"), 5, 50)
    plain = timed(lambda: torch.ops.gemmgen.gemm(x, w.t(), b, "bias"), 5, 50)
    z = torch.ops.gemmgen.gemm(x, w.t(), b, "bias")
    act = timed(lambda: torch.nn.functional.gelu(z, approximate="tanh"), 5, 50)
    return {"shape_mnk": [m, n, k], "fused_forward_ms": fused, "bias_gemm_ms": plain,
            "gelu_ms": act,
            "recompute_total_ms": fused + plain,
            "keep_total_ms": plain + act,
            "keep_extra_bytes": m * n * torch.finfo(dtype).bits // 8,
            "note": "recompute: fused forward + one bias GEMM in the backward (gemmgen.torch's "
                    "choice); keep: unfused forward (bias GEMM + GELU), z saved"}


def call_overhead_us(dtype, calls: int = 2000) -> dict:
    """Host microseconds per call on a 64 x 64 x 64 problem (GPU time negligible, so the
    launch rate is the host's): the op, the autocast wrapper, and PyTorch's addmm."""
    x = torch.randn(64, 64, device="cuda", dtype=dtype)
    w = torch.randn(64, 64, device="cuda", dtype=dtype)
    b = torch.randn(64, device="cuda", dtype=dtype)
    out = {}
    for name, fn in (("gemmgen_op", lambda: torch.ops.gemmgen.gemm(x, w.t(), b, "bias")),
                     ("gemmgen_wrapper", lambda: gt.gemm(x, w.t(), b)),
                     ("torch_addmm", lambda: torch.addmm(b, x, w.t()))):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - start) / calls * 1e6
    return out


def compiled_forward(model, ids, dtype, eager_logits) -> dict:
    try:
        start = time.perf_counter()
        fn = torch.compile(model, fullgraph=True)
        run = forward_fn(fn, ids, dtype)
        logits = run()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        return {"ok": True, "rel_err_vs_eager": rel_err(logits, eager_logits),
                "compile_s": compile_s, "forward_ms": timed(run, 3, 20)}
    except Exception as exc:  # noqa: BLE001 - recorded in the results, not fatal
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}


def graphed_forward(model, ids, dtype, eager_logits) -> dict:
    try:
        static_ids = ids.clone()
        run = forward_fn(model, static_ids, dtype)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = run()
        graph.replay()
        torch.cuda.synchronize()
        return {"ok": True, "rel_err_vs_eager": rel_err(static_logits, eager_logits),
                "replay_ms": timed(graph.replay, 3, 20)}
    except Exception as exc:  # noqa: BLE001 - recorded in the results, not fatal
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}


def chosen_kernels() -> list:
    out = []
    for key, (kernel, choice) in gemmgen.runtime.api._KERNELS.items():
        dt, m, n, k, _db, lay, epi = key[:7]
        out.append({"dtype": dt, "mnk": [m, n, k], "layout": lay, "epilogue": epi,
                    "kernel": kernel.name, "family": kernel.config.family, "how": choice.how,
                    "swap": choice.swap, "reasons": choice.reasons})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp16")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lm-head", action="store_true",
                   help="patch the LM head too (N = vocab; default: the blocks' layers only)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile check")
    p.add_argument("--out", default=None,
                   help="JSON results (default benchmarks/results/torch_gpt2_<gpu>.json)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("train_gpt2: needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    out_path = Path(args.out or ROOT / "benchmarks" / "results" /
                    f"torch_gpt2_{re.sub(r'[^A-Za-z0-9]+', '_', gpu).strip('_')}.json")
    dtype = DTYPES[args.dtype]
    count_compiles()
    t0 = time.perf_counter()

    # Every GEMM of a patched training step, compiled at once (a no-op on a warm cache).
    m = args.batch * args.seq
    e = args.embd
    problems = []
    for k, n in ((e, 3 * e), (e, e), (e, 4 * e), (4 * e, e)):
        problems += gt.linear_problems(m, k, n, args.dtype, weight="kn")
    if args.lm_head:
        problems += [pr[:5] + ("none",) for pr in gt.linear_problems(m, e, args.vocab,
                                                                       args.dtype, "nk")]
    problems.append((args.dtype, m, 4 * e, e, "rcr", "bias_gelu"))  # the GELU cost below
    problems.append((args.dtype, m, 4 * e, e, "rcr", "bias"))
    pre = gt.precompile(problems)
    print(f"precompile: {pre['kernels']} kernels, {pre['seconds']:.1f} s, "
          f"{COMPILES['count']} compiled by nvcc", flush=True)

    data = synthetic_batches(max(16, min(args.steps, 64)), args.batch, args.seq, args.vocab,
                             args.seed + 1)
    results = {"gpu": gpu, "torch": torch.__version__, "args": vars(args),
               "gemmgen_commit": os.environ.get("GEMMGEN_GIT_COMMIT", ""),
               "precompile": pre}

    cos, logit_err = grad_cosines(args, data)
    results["grad_cosine"] = {"min": min(cos.values()), "per_parameter": cos,
                              "bar": 0.999, "met": min(cos.values()) >= 0.999}
    results["logits_rel_err_at_init"] = logit_err
    print(f"gradient cosine similarity: min {min(cos.values()):.6f}", flush=True)

    runs = {}
    for which in ("pytorch", "gemmgen"):
        model = make_model(args)
        if which == "gemmgen":
            results["patch"] = str(apply_patch(model, args))
            print(results["patch"], flush=True)
        runs[which] = train(model, data, args)
        ids = data[0]
        fwd = forward_fn(model, ids, dtype)
        runs[which]["forward_ms_median"] = timed(fwd, 5, 30)
        if which == "gemmgen":
            eager_logits = fwd()
            if not args.no_compile:
                results["torch_compile"] = compiled_forward(model, ids, dtype, eager_logits)
            results["cuda_graph"] = graphed_forward(model, ids, dtype, eager_logits)
        print(f"{which}: final loss {statistics.fmean(runs[which]['losses'][-10:]):.4f}, "
              f"step {runs[which]['step_ms_median']:.2f} ms, forward "
              f"{runs[which]['forward_ms_median']:.2f} ms", flush=True)
        del model
    ref, mine = runs["pytorch"], runs["gemmgen"]
    final_ref = statistics.fmean(ref["losses"][-10:])
    final_mine = statistics.fmean(mine["losses"][-10:])
    results["loss"] = {"pytorch": ref["losses"], "gemmgen": mine["losses"],
                       "final_pytorch": final_ref, "final_gemmgen": final_mine,
                       "rel_diff": abs(final_mine - final_ref) / abs(final_ref),
                       "bar": 0.01}
    results["loss"]["met"] = results["loss"]["rel_diff"] <= 0.01
    results["step_ms"] = {"pytorch": ref["step_ms_median"], "gemmgen": mine["step_ms_median"],
                          "ratio": mine["step_ms_median"] / ref["step_ms_median"], "bar": 1.1}
    results["step_ms"]["met"] = results["step_ms"]["ratio"] <= 1.1
    results["forward_ms"] = {"pytorch": ref["forward_ms_median"],
                             "gemmgen": mine["forward_ms_median"],
                             "ratio": mine["forward_ms_median"] / ref["forward_ms_median"],
                             "bar": 1.05}
    results["forward_ms"]["met"] = results["forward_ms"]["ratio"] <= 1.05
    results["gelu_preactivation"] = gelu_preactivation_cost(m, e, 4 * e, dtype)
    results["call_overhead_us"] = call_overhead_us(dtype)
    results["kernels"] = chosen_kernels()
    results["nvcc_compiles"] = dict(COMPILES)
    results["wall_s"] = time.perf_counter() - t0
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=1) + "\n")
    summary = {k: results[k] for k in ("grad_cosine", "step_ms", "forward_ms")}
    summary["grad_cosine"] = {k: v for k, v in summary["grad_cosine"].items()
                              if k != "per_parameter"}
    summary["loss_rel_diff"] = results["loss"]["rel_diff"]
    summary["logits_rel_err_at_init"] = logit_err
    summary["cuda_graph"] = results["cuda_graph"]
    summary["torch_compile"] = results.get("torch_compile")
    summary["nvcc_compiles"] = results["nvcc_compiles"]
    summary["call_overhead_us"] = results["call_overhead_us"]
    print(json.dumps(summary, indent=1))
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
