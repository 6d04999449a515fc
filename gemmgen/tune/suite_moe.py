"""Suite runner for the moe kind (GPU, PyTorch): ``gemmgen.grouped_gemm`` beside
``torch._grouped_mm`` and a loop of ``torch.matmul`` over the experts, on the same tensors in
the same run, per (model layer, tokens, routing); and the issue's bars over such rows
(``bars``, ``print_bars``). Methods: ``suite_run.MOE_METHOD``.
"""
from __future__ import annotations

import json
import math
import sys

from ..compile.cache import compile_many
from ..heuristics.grouped import choose, offsets, row_counts
from ..runtime.device import device_arch
from ..runtime.grouped import chosen_grouped, grouped_gemm
from .bench import Timing, summary, tflops, with_baseline
from .suite_cases import Case
from .suite_rows import RunEnv, failed_row, suite_row, why
from .verify import tolerance

LABEL = "gemmgen.grouped_gemm"
SAMPLED_GROUPS = 6  # groups verified against float64 per case: the largest, the ends, random
MANY_EXPERTS = 64   # models with at least this many experts count as "many experts"


def run_moe(cases: list[Case], env: RunEnv) -> list[dict]:
    """One row per case; per problem shape the tensors once, then each routing."""
    import torch
    _precompile(cases, env)
    rows: list[dict] = []
    shapes: dict[tuple, list[Case]] = {}
    for c in cases:
        shapes.setdefault((c.dtype, c.m, c.n, c.k, c.groups), []).append(c)
    for (dtype, m, n, k, groups), group in shapes.items():
        if env.out_of_time():
            env.not_run += len(group)
            continue
        try:
            tensors = _tensors(torch, dtype, m, n, k, groups, env.seed)
        except Exception as exc:  # noqa: BLE001 - recorded in every row of the problem
            rows += [failed_row(c, LABEL, "tensors: " + why(exc)) for c in group]
            env.done(rows, len(group))
            continue
        for case in group:
            try:
                rows.append(_measure(torch, case, tensors, env.budget_s))
            except Exception as exc:  # noqa: BLE001 - a failure is a row
                rows.append(failed_row(case, LABEL, why(exc)))
            env.done(rows)
        del tensors
        torch.cuda.empty_cache()
    return rows


def _precompile(cases: list[Case], env: RunEnv) -> None:
    """The kernels the dispatch chooses for the cases, compiled in parallel first."""
    configs = {}
    for c in cases:
        cfg = choose(c.dtype, "m", "rcr", c.dtype, c.groups, c.m, c.n, c.k).config
        configs[cfg.name] = cfg
    compile_many(list(configs.values()), env.arch or device_arch())


def _tensors(torch, dtype: str, m: int, n: int, k: int, groups: int, seed) -> dict:
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed if seed is not None else 0)
    a = torch.randn(m, k, generator=gen, device="cuda", dtype=torch.float32).to(dt)
    w = torch.empty(groups, n, k, device="cuda", dtype=dt)
    for g in range(groups):  # one expert at a time: no float32 copy of every weight at once
        w[g] = torch.randn(n, k, generator=gen, device="cuda").to(dt)
    return {"a": a, "w": w, "out": torch.empty(m, n, device="cuda", dtype=dt)}


def time_calls(torch, fn, budget: float) -> Timing:
    """Per-call CUDA events after two warm-ups: median and p20/p80 of 3 to 50 calls."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    reps = min(max(int(budget / max(start.elapsed_time(end) / 1e3, 1e-6)), 3), 50)
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for s, e in pairs:
        s.record()
        fn()
        e.record()
    pairs[-1][1].synchronize()
    return summary([s.elapsed_time(e) / 1e3 for s, e in pairs], reps)


def _measure(torch, case: Case, t: dict, budget: float) -> dict:
    counts = row_counts(case.routing, case.m, case.groups, seed=case.tokens or 0)
    ends = offsets(counts)
    offs = torch.tensor(ends, dtype=torch.int32, device="cuda")
    a, w, out = t["a"], t["w"], t["out"]
    b = w.transpose(1, 2)
    stream = torch.cuda.current_stream().cuda_stream
    err = _verify(torch, case, a, b, offs, out, counts, ends, stream)
    ours = time_calls(torch, lambda: grouped_gemm(a, b, offs, out, stream=stream), budget)
    theirs = time_calls(torch, lambda: torch._grouped_mm(a, b, offs), budget) \
        if hasattr(torch, "_grouped_mm") else None
    bounds = [(e - c, e) for c, e in zip(counts, ends)]

    def loop():
        for g, (s, e) in enumerate(bounds):
            if e > s:
                torch.matmul(a[s:e], b[g], out=out[s:e])
    looped = time_calls(torch, loop, budget)
    plan = chosen_grouped(a, b, offs)
    rates = [tflops(case.m, case.n, case.k, x.median) if x else None
             for x in (ours, theirs, looped)]
    row = {"kernel": LABEL, "name": plan.kernel.name if plan else None, "dtype": case.dtype,
           "M": case.m, "N": case.n, "K": case.k, "tflops": round(rates[0], 3),
           "cublas_tflops": round(rates[1], 3) if rates[1] else None,
           "pct_cublas": round(100 * rates[0] / rates[1], 1) if rates[1] else None,
           "loop_tflops": round(rates[2], 3), "pct_loop": round(100 * rates[0] / rates[2], 1),
           "rel_error": err, "passed": bool(err <= tolerance(case.k, case.dtype, "fp32",
                                                             case.dtype)),
           "acc": "fp32", "out": case.dtype, "layout": case.layout, "epilogue": "none",
           "batch": None, "time_ms": round(ours.median * 1e3, 5),
           "p20_ms": round(ours.p20 * 1e3, 5), "p80_ms": round(ours.p80 * 1e3, 5),
           "reps": ours.reps, "cublas_time_ms": round(theirs.median * 1e3, 5) if theirs else None,
           "loop_time_ms": round(looped.median * 1e3, 5), "max_rows": max(counts),
           "empty_groups": sum(1 for c in counts if c == 0)}
    row = with_baseline(row, "torch._grouped_mm" if theirs else None)
    return suite_row(case, row, how=plan.choice.how if plan else None,
                     reasons=plan.choice.reasons if plan else None)


def _verify(torch, case, a, b, offs, out, counts, ends, stream) -> float:
    """The output NaN-poisoned, one call, every row finite, then the relative error of
    sampled groups (the largest, the first and last non-empty, random others) against a
    float64 product; inf for a non-finite value."""
    out.fill_(float("nan"))
    grouped_gemm(a, b, offs, out, stream=stream)
    torch.cuda.synchronize()
    if not bool(torch.isfinite(out).all()):
        return math.inf
    live = [g for g, c in enumerate(counts) if c]
    if not live:
        return 0.0
    picks = {max(live, key=lambda g: counts[g]), live[0], live[-1]}
    gen = torch.Generator().manual_seed(case.m)
    picks |= {live[int(i)] for i in torch.randint(len(live), (SAMPLED_GROUPS,), generator=gen)}
    worst = 0.0
    for g in sorted(picks):
        s, e = ends[g] - counts[g], ends[g]
        rows = slice(s, min(e, s + 4096))  # at most 4096 rows of a group: the norm is per row
        ref = a[rows].double() @ b[g].double()
        worst = max(worst, float(torch.linalg.norm(out[rows].double() - ref)
                                 / torch.linalg.norm(ref)))
    return worst


# ---- the bars -----------------------------------------------------------------------
def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def bars(rows: list[dict]) -> list[tuple[str, float | None, float, bool]]:
    """(bar, measured, target, met) for the grouped GEMM bars over a moe suite's rows:
    many experts: geomean >= 1.2x torch._grouped_mm and >= 2x the loop; few large experts:
    >= 1.0x torch._grouped_mm uniform and >= 1.1x under skew (skew65); any routing: TFLOP/s
    >= 0.9x the uniform case's at the same layer and tokens."""
    ok = [r for r in rows if r.get("passed") and r.get("tflops")]
    many = [r for r in ok if (r.get("groups") or 0) >= MANY_EXPERTS]
    few = [r for r in ok if 0 < (r.get("groups") or 0) < MANY_EXPERTS]
    out = []

    def add(name, value, target):
        out.append((name, value, target, value is not None and value >= target))
    add("many experts: geomean x torch._grouped_mm",
        _geomean([r["pct_cublas"] / 100 for r in many if r.get("pct_cublas")]), 1.2)
    add("many experts: geomean x loop of torch.matmul",
        _geomean([r["pct_loop"] / 100 for r in many]), 2.0)
    add("few large experts, uniform: geomean x torch._grouped_mm",
        _geomean([r["pct_cublas"] / 100 for r in few if r.get("routing") == "uniform"
                  and r.get("pct_cublas")]), 1.0)
    add("few large experts, skew65: geomean x torch._grouped_mm",
        _geomean([r["pct_cublas"] / 100 for r in few if r.get("routing") == "skew65"
                  and r.get("pct_cublas")]), 1.1)
    uniform = {(r.get("model"), r.get("layer"), r.get("tokens")): r["tflops"] for r in ok
               if r.get("routing") == "uniform"}
    ratios = [r["tflops"] / uniform[key] for r in ok if r.get("routing") != "uniform"
              and (key := (r.get("model"), r.get("layer"), r.get("tokens"))) in uniform]
    add("skewed: worst TFLOP/s x the uniform case's", min(ratios) if ratios else None, 0.9)
    return out


def print_bars(path: str) -> int:
    """Print the bars of a moe results file; 0 when every measured bar is met, else 1."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    met = True
    for name, value, target, ok in bars(rows):
        shown = f"{value:.2f}" if value is not None else "-"
        print(f"{'PASS' if ok else 'MISS'}  {name}: {shown} (bar {target})")
        met &= ok or value is None
    failed = [r for r in rows if not r.get("passed")]
    for r in failed:
        print(f"FAIL  {r.get('case')}: {r.get('error') or r.get('rel_error')}")
    return 0 if met and not failed else 1


if __name__ == "__main__":
    sys.exit(print_bars(sys.argv[1]))
