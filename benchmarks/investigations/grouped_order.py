"""The grouped kernel's tile order on the GPU: gemmgen.grouped_gemm with preset grouped_bf16
(order "forward": group 0's tiles, then group 1's, ...) beside grouped_bf16_ends (even tiles
from the front of that sequence, odd ones from its back) and torch._grouped_mm, on the moe
suite's inputs (gemmgen.tune.suite_moe: A [T, K] and the experts' [G, N, K] weights from
torch.randn, B = W.transpose(1, 2), int32 offsets) for DeepSeek-V3 gate_up and down (256
experts, 4096 tokens x top-8 = 32768 rows) and Mixtral w1 (8 experts, 4096 x top-2 = 8192
rows), routed uniform, skew65 and skew90 (gemmgen.heuristics.grouped.row_counts).

Each output is checked against torch._grouped_mm's over a NaN-poisoned buffer (relative
Frobenius error <= 1e-2; a NaN or inf fails); each time is the median of 20 calls timed with
CUDA events after 3 warm-ups. One table row per case; $OUT/grouped_order.json when $OUT is
set. Exit 1 when a check fails. Under 2 minutes on an H100/H200 (two kernels compiled in
parallel first). Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/grouped_order.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

from gemmgen import grouped_gemm
from gemmgen.compile.cache import compile_many
from gemmgen.heuristics.grouped import offsets, row_counts
from gemmgen.model.presets import PRESETS
from gemmgen.runtime.device import device_arch

# (layer, experts, N, K, routed rows = tokens x top-k), as benchmarks/suites/moe.toml has them
PROBLEMS = [("deepseek_v3.gate_up", 256, 4096, 7168, 4096 * 8),
            ("deepseek_v3.down", 256, 7168, 2048, 4096 * 8),
            ("mixtral_8x7b.w1", 8, 14336, 4096, 4096 * 2)]
ROUTINGS = ("uniform", "skew65", "skew90")
ORDERS = {"forward": "grouped_bf16", "ends": "grouped_bf16_ends"}
TOLERANCE = 1e-2
REPS, WARMUP = 20, 3


def median_seconds(fn) -> float:
    for _ in range(WARMUP):
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(REPS)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    pairs[-1][1].synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / 1e3


def tensors(groups: int, n: int, k: int, rows: int) -> dict:
    """As gemmgen.tune.suite_moe._tensors builds them (seed 0)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(rows, k, generator=gen, device="cuda", dtype=torch.float32).bfloat16()
    w = torch.empty(groups, n, k, device="cuda", dtype=torch.bfloat16)
    for g in range(groups):  # one expert at a time: no float32 copy of every weight at once
        w[g] = torch.randn(n, k, generator=gen, device="cuda").bfloat16()
    return {"a": a, "b": w.transpose(1, 2), "out": torch.empty(rows, n, device="cuda",
                                                                dtype=torch.bfloat16)}


def error(out, ref) -> float:
    """Relative Frobenius error of ``out`` against ``ref``; inf when ``out`` holds a NaN/inf."""
    if not bool(torch.isfinite(out).all()):
        return float("inf")
    diff = torch.linalg.norm((out.float() - ref.float()).flatten())
    return float(diff / torch.linalg.norm(ref.float().flatten()))


def case(t: dict, configs: dict, layer: str, groups: int, n: int, k: int, rows: int,
         routing: str) -> dict:
    counts = row_counts(routing, rows, groups)
    offs = torch.tensor(offsets(counts), dtype=torch.int32, device="cuda")
    a, b, out = t["a"], t["b"], t["out"]
    stream = torch.cuda.current_stream().cuda_stream  # the stream the events are recorded on
    ref = torch._grouped_mm(a, b, offs)
    flop = 2.0 * rows * n * k
    row = {"layer": layer, "groups": groups, "rows": rows, "n": n, "k": k, "routing": routing,
           "max_rows": max(counts)}
    for order, cfg in configs.items():
        out.fill_(float("nan"))
        grouped_gemm(a, b, offs, out, config=cfg, stream=stream)
        torch.cuda.synchronize()
        row[f"{order}_error"] = err = error(out, ref)
        row[f"{order}_ok"] = err <= TOLERANCE
        row[f"{order}_tflops"] = flop / median_seconds(
            lambda cfg=cfg: grouped_gemm(a, b, offs, out, config=cfg, stream=stream)) / 1e12
    row["torch_tflops"] = flop / median_seconds(lambda: torch._grouped_mm(a, b, offs)) / 1e12
    row["ends_vs_forward"] = row["ends_tflops"] / row["forward_tflops"]
    return row


def main() -> int:
    began = time.monotonic()
    if not hasattr(torch, "_grouped_mm"):
        print("this PyTorch has no torch._grouped_mm")
        return 2
    configs = {order: PRESETS[name].config for order, name in ORDERS.items()}
    compile_many(list(configs.values()), device_arch())
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"compiled in {time.monotonic() - began:.0f} s")
    print(f"{'layer':<20} {'G':>3} {'rows':>6} {'routing':<8} {'max':>6}  {'forward':>8} "
          f"{'ends':>8} {'torch':>8}  {'ends/fwd':>8} {'ends/torch':>10}  check")
    rows, failed = [], 0
    for layer, groups, n, k, routed in PROBLEMS:
        t = tensors(groups, n, k, routed)
        for routing in ROUTINGS:
            r = case(t, configs, layer, groups, n, k, routed, routing)
            rows.append(r)
            ok = r["forward_ok"] and r["ends_ok"]
            failed += not ok
            check = "ok" if ok else (f"FAIL (error forward {r['forward_error']:.2e}, "
                                     f"ends {r['ends_error']:.2e})")
            print(f"{layer:<20} {groups:>3} {routed:>6} {routing:<8} {r['max_rows']:>6}  "
                  f"{r['forward_tflops']:8.1f} {r['ends_tflops']:8.1f} {r['torch_tflops']:8.1f}"
                  f"  {r['ends_vs_forward']:8.2f} {r['ends_tflops'] / r['torch_tflops']:10.2f}"
                  f"  {check}", flush=True)
        del t
        torch.cuda.empty_cache()
    print(f"TFLOP/s (2 x rows x N x K per call, median of {REPS}); {failed} case(s) failed; "
          f"{time.monotonic() - began:.0f} s")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "grouped_order.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
