"""Building a shipped tuned table: for each problem of a suite (the nn.Linear layers of public
LLMs), time the shape rules' choice and its variants (tiles, split-K, ring depth, swapped
operands) on the same buffers, verify each, and keep a variant that beats the rules' choice by
``MARGIN`` as the table's entry for that (dtype, layout, M, N, K).

    python -m gemmgen.tune.table --suite llm --out gemmgen/heuristics/tables/NVIDIA_H200.json
        [--dtypes bf16,fp16] [--layouts rcr,rrr,crr] [--max-minutes 8]

Needs a GPU, PyCUDA and CuPy. The table is a tuning database (``gemmgen.heuristics.tunedb``)
with a ``provenance`` object (GPU, CUDA, commit, date, method); every entry keeps the rules'
own timing beside the winner's. ``--rescore`` (no GPU) then keeps only the entries whose
winner beats the rules: ship a table only after it, and only when winners remain.
"""
from __future__ import annotations

import argparse
import datetime as dt
import time

import numpy as np

from ..compile.cache import compile_many
from ..heuristics.select import decide
from ..heuristics.ring import deepest
from ..heuristics.shapes import FLIP
from ..heuristics.tunedb import TuneDB, key
from ..model.dtypes import stored_as
from ..model.presets import PRESETS
from ..runtime.build import from_cubin
from ..runtime.device import device_arch, device_identity
from .bench import Problem, bench_kernel, device_info
from .results import git_commit
from .suite_cases import expand
from .suites import load as load_suite
from .verify import tolerance

MARGIN = 1.05
"""A variant must be this much faster than the rules' choice to enter the table (the same
config timed twice in one run differed by up to 3%)."""
TILES = ((128, 256), (256, 128), (128, 192), (128, 128), (64, 256), (128, 64), (64, 128))
SMS = 132


def _deepest(cfg):
    """``cfg`` at the deepest ring that fits (ring.deepest), None where none does."""
    stages = deepest(cfg)
    return cfg.replace(check=False, stages=stages) if stages else None


def variants(base, m: int, n: int, k: int, layout: str) -> list[tuple]:
    """(config, swap) candidates for an M x N x K problem in ``layout`` around the wgmma preset
    ``base``: block tiles, split-K 1/2/4 where the tiles leave SMs idle, the deepest ring that
    fits, and, for a small M, the swapped problem (C^T = B^T A^T)."""
    out = []
    swaps = [False, True] if m <= 256 and n > m else [False]
    for swap in swaps:
        mm, nn = (n, m) if swap else (m, n)
        lay = FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]] if swap else layout
        narrow = max(8, -(-nn // 8) * 8)
        for bm, bn in TILES:
            if not swap and True in swaps and m <= 64 and bm > 64:
                continue  # a few rows: the swapped problem or one 64-row tile
            bn = min(bn, narrow)
            tiles = -(-mm // bm) * -(-nn // bn)
            if bn < 128 and tiles >= 2 * SMS and (bm, bn) != (128, narrow):
                continue  # small tiles only pay where the big ones leave SMs idle
            for split in (1, 2, 4, 8):
                if split > 1 and (tiles * split > 2 * SMS or k // split < 8 * base.bk):
                    continue
                cfg = base.replace(check=False, layout=lay, bm=bm, bn=bn, split_k=split,
                                   split_inline=split > 1,
                                   consumers=1 if bm == 64 else 2,
                                   regs_producer=0 if bm == 64 else base.regs_producer,
                                   regs_consumer=0 if bm == 64 else base.regs_consumer,
                                   store="direct" if swap or split > 1 or bn < 64
                                   else base.store)
                cfg = _deepest(cfg)
                if cfg is not None:
                    out.append((cfg, swap))
    seen, unique = set(), []
    for cfg, swap in out:
        if (cfg.name, swap) not in seen:
            seen.add((cfg.name, swap))
            unique.append((cfg, swap))
    return unique


_KERNELS: dict = {}


def _build_all(configs: list, arch: str) -> dict:
    """Kernels of ``configs`` (compiled in parallel, loaded once per process) that compile
    without spills; the others are left out."""
    todo = [c for c in configs if c.name not in _KERNELS]
    for cfg, res in zip(todo, compile_many(todo, arch)):
        ok = isinstance(res, tuple) and not (res[1].spills or res[1].stack_bytes)
        _KERNELS[cfg.name] = from_cubin(cfg, res[2], res[0], res[1]) if ok else None
    return {c.name: _KERNELS[c.name] for c in configs if _KERNELS.get(c.name) is not None}


def measure(problem: dict, db: TuneDB, gpu: str, cc: int, info: dict, arch: str,
            budget_s: float = 0.03) -> dict:
    """Time the rules' choice and its variants for one problem; record and return its entry."""
    dtype, m, n, k, layout = (problem[f] for f in ("dtype", "m", "n", "k", "layout"))
    choice = decide(None, gpu, dtype, m, n, k, cc, layout)
    base = PRESETS["wgmma_bf16" if dtype == "bf16" else "wgmma_tma_store"].config
    cands = [(choice.config, choice.swap)] + variants(base, m, n, k, layout)
    kernels = _build_all(list({c.name: c for c, _ in cands}.values()), arch)
    p = Problem(m, n, k, np.random.default_rng(0), info["l2_bytes"], dtype, stored_as(dtype),
                layout, device_data=True)
    tol = tolerance(k, dtype, "fp32", stored_as(dtype))
    rows = {}
    for i, (cfg, swap) in enumerate(cands):
        kern = kernels.get(cfg.name)
        if kern is None:
            continue
        timing, err = bench_kernel(kern, p, budget_s, swap)
        if not err <= tol:
            continue
        label = ("rules " if i == 0 else "") + cfg.name + (" swap" if swap else "")
        rows[label] = {"config": cfg.as_dict(), "swap": swap, "status": "ok",
                       "time_ms": round(timing.median * 1e3, 5),
                       "tflops": round(2 * m * n * k / timing.median / 1e12, 3)}
    del p
    rules = next((r for lbl, r in rows.items() if lbl.startswith("rules ")), None)
    best_label = max(rows, key=lambda lbl: rows[lbl]["tflops"]) if rows else None
    ent = db.entry(key(gpu, dtype, m, n, k, layout, "wgmma"), gpu=gpu, dtype=dtype,
                   layout=layout, M=m, N=n, K=k, family="wgmma")
    ent["candidates"] = rows
    ent["rules_tflops"] = rules["tflops"] if rules else None
    beats = rules is None or rows[best_label]["tflops"] >= MARGIN * rules["tflops"]
    ent["winner"] = best_label if best_label and beats else None
    return ent


def build(suite: str, out: str, dtypes: list[str], layouts: list[str], max_minutes: float,
          only_models: list[str] | None = None, ms: list[int] | None = None) -> TuneDB:
    """Measure every problem of ``suite`` (quick set of M) in ``dtypes`` x ``layouts``, in that
    order, until ``max_minutes``; write the table to ``out`` after each problem."""
    gpu, cc = device_identity()
    info, arch = device_info(), device_arch()
    db = TuneDB(out)
    db.data["provenance"] = {
        "gpu": gpu, "cuda": info["cuda_version"], "driver": info["cuda_driver"],
        "commit": git_commit(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "suite": suite, "method": f"the shape rules' choice and its variants (tiles, split-K, "
        f"stages, swap) timed on the same buffers (CUDA events, median, inputs rotated over 3x "
        f"L2), verified against float64; a variant is kept when >= {MARGIN}x the rules'"}
    problems = [c for c in expand(load_suite(suite), quick=True)
                if c.dtype in dtypes and c.layout in layouts
                and (only_models is None or c.model in only_models)
                and (ms is None or c.tokens in ms)]
    problems.sort(key=lambda c: (layouts.index(c.layout), dtypes.index(c.dtype)))
    deadline = time.monotonic() + 60 * max_minutes
    seen = set()
    for c in problems:
        ident = (c.dtype, c.m, c.n, c.k, c.layout)
        if ident in seen or time.monotonic() > deadline:
            continue
        seen.add(ident)
        ent = measure({"dtype": c.dtype, "m": c.m, "n": c.n, "k": c.k, "layout": c.layout},
                      db, gpu, cc, info, arch)
        db.save()
        win = ent["candidates"].get(ent["winner"] or "", {}).get("tflops")
        print(f"{c.dtype} {c.layout} {c.m}x{c.n}x{c.k}: rules {ent['rules_tflops']} "
              f"best {win or '(rules)'}", flush=True)
    db.data["provenance"]["problems"] = len(seen)
    db.save()
    return db


def rescore(path: str, gpu: str = "NVIDIA H200", cc: int = 90) -> tuple[int, int]:
    """Re-choose each entry's winner against the shape rules as they are now (the rules' pick
    must be among the entry's measured candidates): a measured candidate stays the winner only
    where it beats the rules' pick by MARGIN; only the winner and the rules' pick are kept
    (the full measurements stay in the builder's output). Needs no GPU. Returns (entries,
    winners). An entry left without a winner is dropped: a shipped table holds only winners
    that beat the rules (``gemmgen.heuristics.shipped``)."""
    db = TuneDB(path)
    scored = len(db.entries)
    for ent in db.entries.values():
        ch = decide(None, gpu, ent["dtype"], ent["M"], ent["N"], ent["K"], cc, ent["layout"])
        cands = ent["candidates"]
        same = [lbl for lbl, row in cands.items()
                if row["config"] == ch.config.as_dict() and row["swap"] == ch.swap]
        pick = max(same, key=lambda lbl: cands[lbl]["tflops"]) if same else None
        others = [lbl for lbl in cands if lbl not in same]
        best = max(others, key=lambda lbl: cands[lbl]["tflops"]) if others else None
        rules = cands[pick]["tflops"] if pick else None
        ent["rules_tflops"] = rules
        # the rules' pick unmeasured: nothing to beat it by, so the rules stand
        ent["winner"] = best if best and rules and cands[best]["tflops"] >= MARGIN * rules \
            else None
        keep = {lbl for lbl in (ent["winner"], pick) if lbl}  # the evidence, not every variant
        ent["candidates"] = {lbl: row for lbl, row in cands.items() if lbl in keep}
    for k in [k for k, e in db.entries.items() if not e["winner"]]:
        db.remove(k)
    db.data.setdefault("provenance", {})["rescored"] = (
        "winners re-chosen against the shape rules of the commit that ships this table; "
        "entries where the rules stood are left out")
    db.save()
    return scored, len(db.entries)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="llm")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rescore", action="store_true",
                    help="no GPU: re-choose the winners of --out against the current rules")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--layouts", default="rcr,rrr,crr")
    ap.add_argument("--models", default=None)
    ap.add_argument("--max-minutes", type=float, default=8.0)
    ap.add_argument("--tokens", default=None, help="only these M (tokens), e.g. 1,16,128")
    a = ap.parse_args(argv)
    if a.rescore:
        print("%d entries, %d winners over the rules" % rescore(a.out))
        return
    build(a.suite, a.out, a.dtypes.split(","), a.layouts.split(","), a.max_minutes,
          a.models.split(",") if a.models else None,
          [int(t) for t in a.tokens.split(",")] if a.tokens else None)


if __name__ == "__main__":
    main()
