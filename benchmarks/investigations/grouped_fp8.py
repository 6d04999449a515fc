"""FP8 M-grouped GEMM with DeepSeek-V3 block scales on the GPU: gemmgen.grouped_gemm (the
grouped family's FP8 axis, preset grouped_fp8 or the dispatch's choice) beside a loop of
torch._scaled_mm over the experts (blockwise 1 x 128 / 128 x 128 scales, one call per
non-empty expert, its rows zero-padded to a multiple of 128: cuBLASLt's blockwise scaling
refuses other M), on the same FP8 tensors and scales, both captured in CUDA graphs.

Problems: DeepGEMM's contiguous shapes (4 groups x 8192 rows, N 4096, K 7168; 8 x 4096, N
7168, K 2048), and DeepSeek-V3-shaped experts (256 experts, gate_up N 4096 K 7168 and down N
7168 K 2048) with 4096 or 1024 tokens x top-8 routed uniformly at random
(gemmgen.heuristics.grouped.row_counts "random"). Inputs: torch.randn tokens and weights
quantized with gemmgen.torch.fp8.quantize (1 x 128 for the tokens, 128 x 128 per expert).

Each output is checked against float64 of the dequantized inputs on sampled groups (relative
Frobenius error <= 2e-2, NaN-poisoned output first).  GEMMGEN_COMMIT names the commit in the
results file. Each time: graph_time (a CUDA graph of
many calls over input sets rotated past L2, replays timed with CUDA events, median);
TFLOP/s = 2 x rows x N x K / seconds. $OUT/grouped_fp8_<GPU>.json when $OUT is set. Usage on
the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/grouped_fp8.py
More configurations beside the dispatch's: GROUPED_FP8_CONFIGS (``_configs``); only the
problems whose name contains GROUPED_FP8_ONLY.
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

from gemmgen import PRESETS, grouped_gemm
from gemmgen.heuristics.grouped import offsets, row_counts
from gemmgen.runtime.grouped import plan_grouped
from gemmgen.torch.fp8 import dequantize, quantize
from gemmgen.tune.suite_fp8 import graph_time

# (name, experts, rows per expert or None for routed, N, K, routed rows)
PROBLEMS = [("deepgemm.contiguous_4x8192", 4, 8192, 4096, 7168, None),
            ("deepgemm.contiguous_8x4096", 8, 4096, 7168, 2048, None),
            ("deepseek_v3.gate_up.t4096", 256, None, 4096, 7168, 4096 * 8),
            ("deepseek_v3.down.t4096", 256, None, 7168, 2048, 4096 * 8),
            ("deepseek_v3.gate_up.t1024", 256, None, 4096, 7168, 1024 * 8),
            ("deepseek_v3.down.t1024", 256, None, 7168, 2048, 1024 * 8)]
TOLERANCE = 2e-2
BUDGET_S = 0.3
L2_BYTES = 60 << 20
PAD = 128
"""The baseline pads each expert's rows to a multiple of this (its padded rows are extra work
the loop does; TFLOP/s count the routed rows only)."""


def _experts(g: int, n: int, k: int):
    ws, ss = [], []
    for _ in range(g):
        q, s = quantize(torch.randn(n, k, device="cuda"), (128, 128))
        ws.append(q), ss.append(s)
    return torch.stack(ws), torch.stack(ss)                  # [G, N, K], [G, nb, kb]


def _padded(x):
    """``x``'s rows followed by zero rows up to a multiple of PAD."""
    pad = -x.shape[0] % PAD
    if not pad:
        return x.contiguous()
    out = torch.zeros(x.shape[0] + pad, x.shape[1], dtype=x.dtype, device=x.device)
    out[:x.shape[0]].copy_(x)
    return out


def _set(counts, n, k, w, sw):
    t = sum(counts)
    a, sa = quantize(torch.randn(t, k, device="cuda"), (1, 128))   # sa (T, kb), M-major
    offs = torch.tensor(offsets(counts), dtype=torch.int32, device="cuda")
    out = torch.empty(t, n, dtype=torch.bfloat16, device="cuda")
    bounds = [(sum(counts[:g]), c) for g, c in enumerate(counts)]
    # the loop's per-expert operands, made before timing: each expert's rows of a and of its
    # scales (M-major, as torch._scaled_mm's blockwise scale_a wants them) copied out and
    # zero-padded to a multiple of PAD rows (cuBLASLt refuses blockwise scaling of other M),
    # b = W[g]^T
    loop = [(_padded(a[s:s + c]), _padded(sa[s:s + c]).t().contiguous().t(), w[g].t(),
             sw[g].t(), g) for g, (s, c) in enumerate(bounds) if c]
    return {"a": a, "sa": sa, "offs": offs, "out": out, "loop": loop, "bounds": bounds}


def _check(st, w, sw, sample: list[int], config=None) -> float:
    st["out"].fill_(float("nan"))
    grouped_gemm(st["a"], w.transpose(1, 2), st["offs"], st["out"], scale_a=st["sa"],
                 scale_b=sw, config=config)
    torch.cuda.synchronize()
    worst = 0.0
    for g in sample:
        s, c = st["bounds"][g]
        if not c:
            continue
        ref = (dequantize(st["a"][s:s + c], st["sa"][s:s + c], (1, 128)).double()
               @ dequantize(w[g], sw[g], (128, 128)).double().t())
        got = st["out"][s:s + c].double()
        if not bool(torch.isfinite(got).all()):
            return float("inf")
        worst = max(worst, float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)))
    return worst


def inputs(g, per, n, k, routed, seed=0):
    """A problem's inputs: the rows per expert (``per`` each, or ``routed`` rows routed at
    random), the experts' FP8 weights and scales (w [G, N, K], sw) and enough sets of tokens
    (``_set``, at most 8) to rotate past twice the L2."""
    torch.manual_seed(seed)
    counts = [per] * g if per else row_counts("random", routed, g, seed)
    w, sw = _experts(g, n, k)
    per_set = sum(counts) * (k + 2 * n)
    sets = [_set(counts, n, k, w, sw) for _ in range(max(1, min(8, -(-2 * L2_BYTES // per_set))))]
    return counts, w, sw, sets


def gemmgen_call(sets, w, sw, config=None):
    """fn(i): set i through gemmgen.grouped_gemm (``config``, or the dispatch's choice) on
    torch's current stream."""
    b = w.transpose(1, 2)

    def ours(i):
        st = sets[i]
        grouped_gemm(st["a"], b, st["offs"], st["out"], scale_a=st["sa"], scale_b=sw,
                     stream=torch.cuda.current_stream().cuda_stream, config=config)
    return ours


def loop_call(sets):
    """fn(i): set i through the baseline, one torch._scaled_mm per non-empty expert."""
    def theirs(i):
        for a_g, sa_g, b_g, sb_g, _ in sets[i]["loop"]:
            torch._scaled_mm(a_g, b_g, sa_g, sb_g, out_dtype=torch.bfloat16)
    return theirs


def run(name, g, per, n, k, routed, seed=0, configs=(None,), baseline=True) -> list[dict]:
    """One row per config of ``configs`` (None: the dispatch's choice), all on the same
    inputs, and the baseline once (its figures in every row)."""
    counts, w, sw, sets = inputs(g, per, n, k, routed, seed)
    b = w.transpose(1, 2)
    theirs = loop_call(sets)
    flops = 2.0 * sum(counts) * n * k
    base, rows = None, []
    if baseline:
        try:
            base = graph_time(torch, theirs, len(sets), BUDGET_S)
        except RuntimeError as exc:
            base = str(exc).splitlines()[0][:200]
    for config in configs:
        err = _check(sets[0], w, sw, sorted({0, g // 2, g - 1}), config)
        mine = graph_time(torch, gemmgen_call(sets, w, sw, config), len(sets), BUDGET_S)
        row = {"case": name, "groups": g, "rows": sum(counts), "N": n, "K": k,
               "rows_per_group": per or f"random, {min(counts)}..{max(counts)}",
               "tflops": round(flops / mine.median / 1e12, 1),
               "time_us": round(mine.median * 1e6, 2), "rel_error": err,
               "passed": err <= TOLERANCE, "timing": "graph-captured (kernel only)"}
        row["config"] = plan_grouped(sets[0]["a"], b, sets[0]["offs"], sets[0]["out"],
                                     scale_a=sets[0]["sa"], scale_b=sw,
                                     config=config).kernel.config.name
        if isinstance(base, str):
            row["baseline_error"] = base
        elif base is not None:
            row.update(baseline="torch._scaled_mm per expert (graph-captured loop)",
                       baseline_tflops=round(flops / base.median / 1e12, 1),
                       baseline_time_us=round(base.median * 1e6, 2),
                       ratio=round(base.median / mine.median, 3))
        rows.append(row)
    return rows


def _configs() -> tuple:
    """None (the dispatch's choice), then each ``GROUPED_FP8_CONFIGS`` entry: a preset name with
    optional field=value changes after colons, e.g. ``grouped_fp8:stages=5``."""
    out = [None]
    for spec in filter(None, os.environ.get("GROUPED_FP8_CONFIGS", "").split(",")):
        name, *changes = spec.split(":")
        fields = {k: int(v) if v.isdigit() else v for k, v in (c.split("=") for c in changes)}
        out.append(PRESETS[name].config.replace(**fields))
    return tuple(out)


def main() -> int:
    started = time.time()
    rows = []
    only = os.environ.get("GROUPED_FP8_ONLY", "")
    for p in PROBLEMS:
        if only not in p[0]:
            continue
        for row in run(*p, configs=_configs()):
            rows.append(row)
            print(json.dumps(row), flush=True)
    gpu = torch.cuda.get_device_name()
    doc = {"investigation": "grouped_fp8", "gpu": gpu, "torch": torch.__version__,
           "git_commit": os.environ.get("GEMMGEN_COMMIT", ""),
           "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - started, 1),
           "rows": rows}
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"grouped_fp8_{gpu.replace(' ', '_')}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
