"""The default as a tuning candidate: what ``gemmgen.gemm`` runs for a shape without a tuning
database (``decide`` with the database left out: the shipped table's entry, else the shape
rules' fit of the family's preset), its neighbours, and the margin a measured winner must beat
it by before the database keeps that winner.

Every tuning run times the default first, on the same buffers as the other candidates; the
entry keeps a winner only where it is at least ``MARGIN`` times as fast as the default in that
run, and otherwise records that the default stands (``winner`` None, ``default_stands`` true),
which ``decide`` honours by running the default for that shape.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..heuristics import cost
from ..heuristics.select import decide
from ..heuristics.ring import ONE_CONSUMER, most_stages
from ..heuristics.shapes import FLIP
from ..heuristics.tunedb import MARGIN, settle  # noqa: F401 - the tuner's names for them
from ..model.families.hopper.waiter import takes_waiter
from ..model.presets import PRESETS

SPLITS = (1, 2, 4, 8)
"""Inline split-K factors tried around the default."""
MAX_NEIGHBOURS = 10
"""At most this many neighbours of the default are measured (first the swapped problem, then
split-K, tiles and ring depths, in that order)."""


@dataclass(frozen=True)
class Candidate:
    """One configuration to measure: ``config`` (laid out for the problem the kernel computes),
    ``swap`` (the kernel computes C^T = B^T A^T, as ``Choice.swap``), and ``role``:
    "default" (what gemm runs without a database), "rules" (the shape rules' own choice where
    the shipped table's differs), "neighbour" or "sampled"."""

    config: object
    swap: bool = False
    role: str = "sampled"

    @property
    def name(self) -> str:
        """The candidate's name in the database: the config's name, " swap" when swapped."""
        return self.config.name + (" swap" if self.swap else "")


def defaults(gpu: str, cc: int | None, dtype: str, m: int, n: int, k: int,
             layout: str) -> list[Candidate]:
    """The default (first) and, where the shipped table decided it, the shape rules' own
    choice: ``decide`` without a database, for C made by gemm (16-byte aligned rows when its
    leading dimension allows), no epilogue, no batch."""
    item = 4 if dtype in ("fp32", "tf32") else 2
    aligned = (n if layout[2] == "r" else m) * item % 16 == 0
    first = decide(None, gpu, dtype, m, n, k, cc, layout, c_aligned=aligned)
    out = [Candidate(first.config, first.swap, "default")]
    if first.how == "table":
        rules = decide(None, gpu, dtype, m, n, k, cc, layout, c_aligned=aligned, table=False)
        out.append(Candidate(rules.config, rules.swap, "rules"))
    return out


def neighbours(base: Candidate, m: int, n: int, k: int, layout: str) -> list[Candidate]:
    """Configurations one step from the wgmma candidate ``base`` for an M x N x K problem in
    ``layout``: the problem swapped (or unswapped), inline (or cluster) split-K factors, 64-row,
    128-row and narrow-N tiles, and a ring one stage shallower or deeper. Each is fitted to
    the rules (one consumer for 64 rows, direct stores for split-K, swapped or narrow tiles,
    fewer stages where shared memory runs out); those that still break one are left out.
    Other families have none."""
    cfg, swap = base.config, base.swap
    if cfg.family != "wgmma" or getattr(cfg, "math", "native") != "native":
        return []
    mm, nn = (n, m) if swap else (m, n)
    trials = []
    other = _flipped(cfg, swap, m, n, layout)
    if other is not None:
        trials.append((other, not swap))
    for s in SPLITS:
        if s != cfg.split_k and k // s >= cost.MIN_SLICE_TILES * cfg.bk:
            cluster = s > 1 and cfg.split_cluster  # a cluster split keeps its kind
            trials.append((cfg.replace(check=False, split_k=s, split_inline=s > 1 and not cluster,
                                       split_cluster=cluster), swap))
    narrow = max(8, -(-nn // 8) * 8)
    for bm, bn in ((64, cfg.bn), (128, cfg.bn), (cfg.bm, min(narrow, cfg.bn)),
                   (64, min(narrow, cfg.bn)), (cfg.bm, 128), (cfg.bm, 64)):
        if (bm, bn) != (cfg.bm, cfg.bn) and not (bm > 64 and mm <= 64):
            trials.append((cfg.replace(check=False, bm=bm, bn=bn), swap))
    most = most_stages(cfg)
    for st in (cfg.stages - 1, cfg.stages + 1, most):
        if 2 <= st <= most and st != cfg.stages:
            trials.append((cfg.replace(check=False, stages=st), swap))
    seen, out = {base.name}, []
    for trial, sw in trials:
        fitted = fit(trial, sw)
        if fitted is not None and (c := Candidate(fitted, sw, "neighbour")).name not in seen:
            seen.add(c.name)
            out.append(c)
    return out[:MAX_NEIGHBOURS]


def _flipped(cfg, swap: bool, m: int, n: int, layout: str):
    """``cfg`` for the other orientation of the problem (swapped if it was not, and back): the
    operands' layout flipped, the tile fitted to the new M and N (64 rows for a few, a narrow N
    for a few columns). None where swapping makes no sense (M and N both large)."""
    if not swap and min(m, n) > 256:
        return None
    mm, nn = (m, n) if swap else (n, m)  # the other orientation's kernel M and N
    lay = layout if swap else FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]]
    preset = PRESETS[f"wgmma_{'bf16' if cfg.dtype == 'bf16' else 'tma_store'}"].config
    bn = min(preset.bn, max(8, -(-nn // 8) * 8))
    bm = 64 if mm <= 64 else min(preset.bm, 128)
    return cfg.replace(check=False, layout=lay, bm=bm, bn=bn)


def fit(cfg, swap: bool):
    """``cfg`` made consistent: one consumer warpgroup (no register split) for 64 rows, with
    the waiter warp as the shape rules give it, the preset's two otherwise; direct stores for
    split-K, a swapped problem or a tile under 64 columns; the tile N rounded up to whole
    swizzle blocks and the ring made shallower where a rule asks. None when it still breaks
    a rule."""
    preset = PRESETS[f"wgmma_{'bf16' if cfg.dtype == 'bf16' else 'tma_store'}"].config
    rows = (dict(ONE_CONSUMER) if cfg.bm == 64 else
            {"consumers": preset.consumers, "regs_producer": preset.regs_producer,
             "regs_consumer": preset.regs_consumer})
    out = cfg.replace(check=False, **rows, waiter=False)
    out = out.replace(check=False, waiter=takes_waiter(out))
    if out.split_k > 1 or swap or out.bn < 64:
        out = out.replace(check=False, store="direct")
    if out.split_k > 1 and out.layout[2] == "c" and out.bn >= 128:
        # as the shape rules: inline or in a cluster only where it compiles clean
        out = out.replace(check=False, split_inline=False, split_cluster=False,
                          persistent=cfg.persistent or cfg.split_cluster)
    if out.violations():  # where it compiles clean
        sw = out.sw_elems
        out = out.replace(check=False, bn=-(-out.bn // sw) * sw)
    for st in range(min(out.stages, most_stages(out)), 0, -1):
        trial = out.replace(check=False, stages=st)
        if not trial.violations():
            return trial
    return None
