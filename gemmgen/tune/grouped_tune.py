"""Tuning a grouped problem (GPU, PyTorch): every configuration of the grouped search space on
one distribution of rows over the groups, each verified against float64 on sampled groups of a
NaN-poisoned output before it is timed; the winner is stored in the grouped tuning file
(``gemmgen.heuristics.grouped_db``), which ``grouped_gemm``'s dispatch reads. A failure is a
candidate's status, never a crash. FP8 (e4m3/e5m2) experts are M-grouped, layout rcr, with
DeepSeek-V3's block scales (1 x 128 of the tokens, M-major as ``gemmgen.torch.quantize``
writes them, and 128 x 128 of each expert's weights), checked against float64 of the
dequantized operands.
"""
from __future__ import annotations

import functools
import math
import time

from ..compile.cache import compile_many
from ..heuristics import grouped_db
from ..heuristics.grouped import choose, offsets, row_counts
from ..heuristics.tunedb import settle
from ..model.dtypes import FP8_DTYPES
from ..model.families.hopper.grouped import space
from ..runtime.device import device_arch, sm_count
from ..runtime.grouped import grouped_gemm
from .bench import tflops
from .measure import REMATCH_ROUNDS, in_turn
from .suite_moe import time_calls
from .suite_fp8 import FP8_TORCH, broadcast_scales, quantize_groups
from .suite_rows import why
from .verify import tolerance

SAMPLED = 4  # groups checked against float64 per candidate: the largest, the ends, one more


def _operands(torch, dtype, grouping, layout, groups, rows, n, k, counts):
    """A, B, the offsets, C's shape and the scales (keyword arguments of ``grouped_gemm``;
    empty but for FP8) for the problem (B as the layout asks). FP8: scale_a [T, ceil(K/128)]
    M-major, as ``gemmgen.torch.quantize`` writes it, scale_b [G, ceil(N/128), ceil(K/128)]."""
    offs = torch.tensor(offsets(counts), dtype=torch.int32, device="cuda")
    if dtype in FP8_DTYPES:  # M-grouped rcr: tokens 1 x 128, each expert's [N, K] 128 x 128
        fp8 = getattr(torch, FP8_TORCH[dtype])
        a, sa, _ = quantize_groups(torch, torch.randn(rows, k, device="cuda"), (1, 128), fp8)
        ws = [quantize_groups(torch, torch.randn(n, k, device="cuda"), (128, 128), fp8)[:2]
              for _ in range(groups)]
        w, sw = (torch.stack(t) for t in zip(*ws))
        return a, w.transpose(1, 2), offs, (rows, n), {"scale_a": sa.t().contiguous().t(),
                                                       "scale_b": sw}
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    if grouping == "k":  # A = X^T (M x T, column-major), B = dY (T x N)
        a = torch.randn(k, rows, device="cuda").to(dt).t()
        b = torch.randn(k, n, device="cuda").to(dt)
        return a, b, offs, (groups, rows, n), {}
    a = torch.randn(rows, k, device="cuda").to(dt)
    w = torch.randn(groups, n, k, device="cuda").to(dt)
    b = w.transpose(1, 2) if layout[1] == "c" else w.transpose(1, 2).contiguous()
    return a, b, offs, (rows, n), {}


def _float64(a, b, scales: dict, g: int, s: int, e: int):
    """Rows s .. e of A and group g's B (K x N) in float64, dequantized with ``scales``
    (blockwise: each scale over its 1 x 128 or 128 x 128 block) where FP8."""
    a64, b64 = a[s:e].float().double(), b[g].float().double()
    if scales:
        k, n = b64.shape
        a64 = a64 * broadcast_scales(scales["scale_a"][s:e].double(), (1, 128), e - s, k)
        b64 = b64 * broadcast_scales(scales["scale_b"][g].double(), (128, 128), n, k).t()
    return a64, b64


def _error(torch, out, a, b, counts, grouping, scales=None) -> float:
    """The worst relative error of sampled groups against float64 (of the operands
    dequantized with ``scales`` where FP8); inf when the output holds a NaN (a poisoned
    element the kernel did not write)."""
    if not bool(torch.isfinite(out).all()):
        return math.inf
    ends = offsets(counts)
    live = [g for g, c in enumerate(counts) if c]
    picks = sorted({max(live, key=lambda g: counts[g]), live[0], live[-1],
                    live[len(live) // 2]}) if live else []
    worst = 0.0
    for g in picks[:SAMPLED]:
        s, e = ends[g] - counts[g], ends[g]
        if grouping == "k":
            ref, got = a[:, s:e].double() @ b[s:e].double(), out[g]
        else:
            e = min(e, s + 4096)
            a64, b64 = _float64(a, b, scales, g, s, e)
            ref, got = a64 @ b64, out[s:e]
        worst = max(worst, float(torch.linalg.norm(got.double() - ref)
                                 / torch.linalg.norm(ref)))
    return worst


def tune_grouped(dtype: str, groups: int, rows: int, n: int, k: int, dist: str = "uniform",
                 grouping: str = "m", layout: str | None = None, out: str | None = None,
                 budget: float = 600.0, max_configs: int | None = None, path=None,
                 progress=None) -> tuple[str, dict]:
    """Measure the space on this GPU and store the entry; (key, entry). ``rows``: the rows of
    all groups (M-grouped) or M (K-grouped, where ``k`` is the rows of all groups). FP8
    ``dtype``: M-grouped, layout rcr, C bf16 unless ``out``; ValueError otherwise.

    The entry's ``default`` is what ``grouped_gemm`` runs without it, measured last, after the
    deadline too. The winner is settled as the GEMM tuner's are (``tunedb.settle``): the
    fastest candidate replaces the default only where it is ``tunedb.MARGIN`` times as fast,
    and then only if it still is when the two are timed again in turn (``head_to_head``);
    else ``winner`` is None and the default stands. Timed one after another at the GPU's
    power limit, one kernel read up to 20% apart by its place in a sweep; side by side, not."""
    layout = layout or ("rcr" if grouping == "m" else "crr")
    fp8 = dtype in FP8_DTYPES
    if fp8 and (grouping, layout) != ("m", "rcr"):
        raise ValueError(f"FP8 grouped kernels are M-grouped with layout rcr, not {grouping!r} "
                         f"with {layout!r}")
    import torch
    out = out or ("bf16" if fp8 else dtype)
    default = _default(dtype, grouping, layout, out, groups, rows, n, k)
    others = [c for c in space(dtype, grouping, layout, out)[:max_configs]
              if c.name != default.name]
    compile_many([default, *others], device_arch())
    counts = row_counts(dist, rows if grouping == "m" else k, groups, seed=0)
    a, b, offs, shape, scales = _operands(torch, dtype, grouping, layout, groups, rows, n, k,
                                          counts)
    c = torch.empty(shape, device="cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16,
                                                 "fp32": torch.float32}[out])

    def call(cfg):
        return lambda: grouped_gemm(a, b, offs, c, config=cfg, out_dtype=out, **scales)

    def error():
        return _error(torch, c, a, b, counts, grouping, scales)

    bound = tolerance(k if grouping == "m" else max(counts), dtype, "fp32", out)
    tick = progress or (lambda _: None)
    deadline, results = time.monotonic() + budget, {}
    for cfg in others:
        if time.monotonic() > deadline:
            break
        results[cfg.name] = _candidate(torch, cfg, call(cfg), c, error, bound, (rows, n, k))
        tick(1)
    # the default last, past the deadline too: the margin's baseline on a card as warm as the
    # sweep leaves it (a winner that makes too easily, the head-to-head takes back)
    results[default.name] = _candidate(torch, default, call(default), c, error, bound,
                                       (rows, n, k))
    tick(1)
    gpu = torch.cuda.get_device_name()
    entry = {"gpu": gpu, "dtype": dtype, "out": out, "grouping": grouping, "layout": layout,
             "groups": groups, "rows": rows, "n": n, "k": k, "dist": dist,
             "counts": counts if len(counts) <= 512 else None, "candidates": results,
             "default": default.name, "space": len(others) + 1}
    settle(entry)
    _rematch(torch, entry, {cfg.name: call(cfg) for cfg in (default, *others)})
    entry_key = grouped_db.key(gpu, dtype, out, grouping, layout, groups, rows, n, k, dist)
    grouped_db.store(entry_key, entry, path)
    return entry_key, entry


def _default(dtype, grouping, layout, out, groups, rows, n, k):
    """What ``grouped_gemm``'s dispatch runs for the problem without a tuned entry: its cost
    model on tokens routed at random (``runtime.grouped``), or the weight-gradient preset."""
    counts = row_counts("random", rows, groups) if grouping == "m" else None
    return choose(dtype, grouping, layout, out, groups, rows, n, k, counts, sm_count()).config


def _candidate(torch, cfg, run, c, error, bound: float, mnk) -> dict:
    """One candidate on the NaN-poisoned output ``c``: run, check (``error()`` within
    ``bound``), then time if correct; a failure is its status."""
    try:
        c.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = error()
        ok = err <= bound
        timing = time_calls(torch, run, 0.1) if ok else None
        rate = tflops(*mnk, timing.median) if timing else 0.0  # 2 rows N K either way
        return {"config": cfg.as_dict(), "status": "ok" if ok else "wrong", "rel_error": err,
                "tflops": round(rate, 3),
                "time_ms": round(timing.median * 1e3, 5) if timing else None}
    except Exception as exc:  # noqa: BLE001 - a failure is a candidate's status
        return {"config": cfg.as_dict(), "status": "error", "error": why(exc), "tflops": 0.0}


def _rematch(torch, entry: dict, calls: dict) -> None:
    """Where the single timings settled ``entry`` on a winner other than its default, time
    the two again in turn, record that as its ``head_to_head`` and settle it again."""
    best, default = entry["winner"], entry["default"]
    if best in (None, default) or entry.get("default_tflops") is None:
        return  # nothing to confirm, or a default that failed: no margin to hold it to
    record = {"default": default, "winner": best, "timing": "eager", "rounds": REMATCH_ROUNDS}
    try:
        ms = in_turn({name: functools.partial(time_calls, torch, calls[name], 0.2)
                      for name in (default, best)})
        record.update(default_ms=ms[default], winner_ms=ms[best])
    except Exception as exc:  # noqa: BLE001 - a rematch with no figures confirms nothing
        record["error"] = why(exc)
    entry["head_to_head"] = record
    settle(entry)


def show(entry: dict, limit: int = 12) -> str:
    """The entry's verdict (the winner, or the default standing), its head-to-head where it
    has one, then the candidates, fastest first, then the failures."""
    verdict = (f"winner: {entry['winner']}" if entry.get("winner") else
               f"the default stands: {entry['default']}" if entry.get("default_stands") else
               "no candidate verified")
    measured, space_ = len(entry["candidates"]), entry.get("space", len(entry["candidates"]))
    part = f" ({measured} of {space_} candidates measured)" if measured < space_ else ""
    lines = [(f"{entry['gpu']}  {entry['dtype']}->{entry['out']}  {entry['grouping']}-grouped "
              f"{entry['layout']}  G={entry['groups']} rows={entry['rows']} N={entry['n']} "
              f"K={entry['k']} ({entry['dist']})  {verdict}{part}")]
    h2h = entry.get("head_to_head")
    if h2h and "error" in h2h:
        lines.append(f"  head to head failed ({h2h['error']}): the default stands")
    elif h2h:
        lines.append(f"  head to head, timed in turn {h2h['rounds']} times each: "
                     f"{h2h['winner']} {h2h['winner_ms']:.4f} ms, the default "
                     f"{h2h['default']} {h2h['default_ms']:.4f} ms (margin "
                     f"{entry.get('margin')})")
    ranked = sorted(entry["candidates"].items(), key=lambda kv: -kv[1].get("tflops", 0.0))
    for name, r in ranked[:limit]:
        tag = "  (the default)" if name == entry.get("default") else ""
        lines.append(f"  {r.get('tflops', 0):8.1f} TFLOP/s  {r['status']:<6} {name}{tag}"
                     + (f"  ({r['error']})" if r.get("error") else ""))
    return "\n".join(lines)
