"""Grouped GEMM without a GPU: group-size distributions, the grouped kernel's tile schedule
mirrored in Python (the CPU tests check it over empty, 1-row, ragged and skewed groups), a cost
model of a configuration on a distribution, the dispatch heuristic and ``explain``'s text.

The schedule here is the one ``templates/_grouped_scheduler.cu.j2`` runs on the device: a
persistent CTA takes tiles ``blockIdx.x, blockIdx.x + gridDim.x, ...`` of the list "tiles of
group 0, then of group 1, ...", each group's tiles in raster order (GROUP tile rows walked
column by column), or (M-grouped, order "ends") of that list taken from both ends. Offsets are
clamped exactly as the kernel clamps them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..model.dtypes import ELEM_BYTES, FP8_DTYPES
from ..model.families import config_from_dict
from ..model.families.hopper.grouped import PRESETS as GROUPED_PRESETS, GroupedConfig, space
from . import cost, grouped_db

DISTRIBUTIONS = ("uniform", "skew65", "skew90", "empty", "random")
"""Named row distributions over the groups: equal shares; one group with 65% or 90% of the
rows and equal shares of the rest; every fourth group empty and equal shares of the rest;
a multinomial draw (uniform routing of independent tokens, seeded)."""

TILE_EFFICIENCY = {(128, 256): 1.0, (256, 128): 0.95, (128, 128): 0.88, (64, 256): 0.8,
                   (64, 128): 0.7}
"""Fraction of the sustained wgmma rate a tile shape reaches in its main loop (128 x 256 with
two consumers is the wgmma_bf16 preset's 780 TFLOP/s at 4096^3, NVIDIA_H200.json; the others
are estimates from the wgmma ladder (one consumer, 128 x 128: 0.8-0.9) to be calibrated on
the moe suite's results)."""
BANDWIDTH = 3.0e12
"""Bytes/s the grouped kernel streams A, B and C at when memory-bound (the copy reaches
3.6e12, gemmgen.heuristics.cost.COPY_BANDWIDTH; TMA tiles a little less)."""


def row_counts(dist: str, total: int, groups: int, seed: int = 0) -> list[int]:
    """Rows of each of ``groups`` groups summing to ``total`` under distribution ``dist``
    (``DISTRIBUTIONS``, or "skew<p>" for one group with p% of the rows). Raises
    ``ValueError`` for an unknown name."""
    if groups < 1:
        raise ValueError(f"groups must be at least 1, got {groups}")
    if dist == "random":
        import numpy as np
        draw = np.random.default_rng(seed).multinomial(total, [1 / groups] * groups)
        return [int(x) for x in draw]
    if dist.startswith("skew") and dist[4:].isdigit() and 0 < int(dist[4:]) <= 100:
        heavy = round(total * int(dist[4:]) / 100) if groups > 1 else total
        return [heavy] + _even(total - heavy, groups - 1)
    if dist == "empty":
        live = [g for g in range(groups) if g % 4 != 3] or [0]
        shares = iter(_even(total, len(live)))
        return [next(shares) if g in live else 0 for g in range(groups)]
    if dist == "uniform":
        return _even(total, groups)
    raise ValueError(f"unknown distribution {dist!r}; known: {', '.join(DISTRIBUTIONS)} "
                     f"or skew<percent>")


def _even(total: int, parts: int) -> list[int]:
    if parts <= 0:
        return []
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def offsets(counts: list[int]) -> list[int]:
    """Cumulative row ends (``torch._grouped_mm``'s ``offs``) of per-group row counts."""
    out, acc = [], 0
    for c in counts:
        acc += c
        out.append(acc)
    return out


# ---- the schedule ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Tile:
    """One tile as the kernel's scheduler gives it (see ``Tile`` in the template)."""

    g: int
    m0: int
    n0: int
    row: int
    z: int
    valid: int
    k0: int
    nk: int
    tail: int


def _raster(local: int, blocks: int, tiles_n: int, group: int) -> tuple[int, int]:
    span = group * tiles_n
    rg = local // span
    first = rg * group
    rows = min(group, blocks - first)
    r = local - rg * span
    return first + r % rows, r // rows


def grid_bound(cfg: GroupedConfig, groups: int, rows: int, n: int, masked: bool = False) -> int:
    """An upper bound of the tiles the kernel runs, known on the host without the offsets:
    M-grouped offs: ceil(rows/BM) + groups + 1 (each group adds at most one partial tile row,
    plus the zero-filled rows past the last offset) tile rows; masked and K-grouped: groups x
    ceil(rows/BM). Times ceil(N/BN)."""
    tiles_n = -(-n // cfg.bn)
    if cfg.grouping == "m" and not masked:
        return (-(-rows // cfg.bm) + groups + 1) * tiles_n
    return groups * -(-rows // cfg.bm) * tiles_n


def tiles_m_grouped(cfg: GroupedConfig, offs: list[int] | None, rows: int, n: int, k: int,
                    masked: bool = False, groups: int | None = None):
    """Every tile of an M-grouped problem in the kernel's order (an iterator; ``cfg.order``
    "ends": ``ends_order`` of the forward one): ``offs`` the cumulative row ends (or,
    ``masked``, per-group row counts; None with ``groups``: every row of every matrix),
    ``rows`` the rows of A and C (masked: of each matrix)."""
    tiles = _forward_m(cfg, offs, rows, n, k, masked, groups)
    return iter(ends_order(list(tiles))) if cfg.order == "ends" else tiles


def ends_order(seq: list) -> list:
    """Order "ends" of a forward tile sequence of T tiles: index t takes ``seq[t // 2]`` for
    even t (from the front) and ``seq[T - 1 - (t - 1) // 2]`` for odd t (from the back)."""
    last = len(seq) - 1
    return [seq[t // 2] if t % 2 == 0 else seq[last - (t - 1) // 2] for t in range(len(seq))]


def _forward_m(cfg: GroupedConfig, offs: list[int] | None, rows: int, n: int, k: int,
               masked: bool, groups: int | None):
    """The forward order: the tiles of group 0, then of group 1, ... (a generator)."""
    if offs is None:
        offs = [rows] * (groups or 0)
    groups = len(offs)
    tiles_n, k_tiles = -(-n // cfg.bn), -(-k // cfg.bk)
    end = 0
    for g in range(groups + (0 if masked else 1)):
        if masked:
            begin, end = 0, min(max(offs[g], 0), rows)
        else:
            begin = end
            end = min(max(offs[g], begin), rows) if g < groups else rows
        blocks = -(-(end - begin) // cfg.bm)
        for local in range(blocks * tiles_n):
            mb, tn = _raster(local, blocks, tiles_n, cfg.group)
            row = begin + mb * cfg.bm
            yield Tile(g, mb * cfg.bm, tn * cfg.bn, row, g if masked else 0, end - row, 0,
                       k_tiles if g < groups else 0, cfg.bk)


def tiles_k_grouped(cfg: GroupedConfig, offs: list[int], m: int, n: int, k_total: int):
    """Every tile of a K-grouped problem in the kernel's order (a generator)."""
    tiles_m, tiles_n = -(-m // cfg.bm), -(-n // cfg.bn)
    per = tiles_m * tiles_n
    for g in range(len(offs)):
        begin = min(max(offs[g - 1], 0), k_total) if g > 0 else 0
        end = min(max(offs[g], begin), k_total)
        nk = -(-(end - begin) // cfg.bk)
        for local in range(per):
            mb, tn = _raster(local, tiles_m, tiles_n, cfg.group)
            yield Tile(g, mb * cfg.bm, tn * cfg.bn, mb * cfg.bm, g, m - mb * cfg.bm, begin, nk,
                       end - begin - (nk - 1) * cfg.bk)


def per_cta(tiles: list[Tile], grid: int) -> list[list[Tile]]:
    """The tiles each of ``grid`` persistent CTAs runs: tile t goes to CTA t % grid."""
    out: list[list[Tile]] = [[] for _ in range(grid)]
    for t, tile in enumerate(tiles):
        out[t % grid].append(tile)
    return out


# ---- cost and choice --------------------------------------------------------------------------
@dataclass
class Prediction:
    """Predicted seconds of a configuration on one distribution and what they add up from."""

    config: GroupedConfig
    seconds: float
    tiles: int
    waves: float
    padded: float          # computed rows that lie past their group's end, as a fraction
    terms: dict = field(default_factory=dict)


def predict(cfg: GroupedConfig, counts: list[int], n: int, k: int, sms: int = cost.SMS
            ) -> Prediction:
    """The cost model: the slowest CTA's main loops at the tile shape's share of the sustained
    rate (``TILE_EFFICIENCY``), or the bytes of A, B (once per raster group of tile rows)
    and C at ``BANDWIDTH``, whichever is longer, plus one launch. M-grouped; ``counts`` the
    rows per group."""
    tiles_n = -(-n // cfg.bn)
    blocks = [-(-c // cfg.bm) for c in counts]
    tiles = sum(blocks) * tiles_n
    rate = cost.RATE.get(("wgmma", cfg.dtype), 700e12) * TILE_EFFICIENCY.get(
        (cfg.bm, cfg.bn), 0.7)
    tile_s = 2.0 * cfg.bm * cfg.bn * k / (rate / sms)
    compute = math.ceil(tiles / sms) * tile_s if tiles else 0.0
    item, out_item = ELEM_BYTES[cfg.dtype], ELEM_BYTES[cfg.out]
    total = sum(counts)
    b_reads = sum(-(-b // cfg.group) for b in blocks) * k * n * item
    moved = total * k * item + b_reads + total * n * out_item
    memory = moved / BANDWIDTH
    padded = 1.0 - total / (sum(blocks) * cfg.bm) if tiles else 0.0
    seconds = max(compute, memory) + cost.LAUNCH_SECONDS
    return Prediction(cfg, seconds, tiles, tiles / sms, padded,
                      {"compute": compute, "memory": memory, "launch": cost.LAUNCH_SECONDS})


def predict_waves(cfg: GroupedConfig, counts: list[int], n: int, k: int,
                  sms: int = cost.SMS) -> float:
    """Seconds of an M-grouped schedule in the kernel's order (``cfg.order``), wave by wave:
    waves of ``sms`` consecutive tiles (one per CTA, the CTAs in step), each taking the longer
    of one tile's main loop (as ``predict``) and the bytes its tiles read and write at
    ``BANDWIDTH``: A's tile rows once per (group, M block) and B's slice once per (group, N
    tile) in the wave (the L2 serves the wave's other readers), C's valid rows; plus a
    launch. Unlike ``predict`` it sees which groups run together: under skewed routing the
    forward order runs the heavy group's compute-bound waves, then the light groups'
    memory-bound ones; "ends" mixes both in each wave. Uncalibrated: ``explain`` shows it,
    the dispatch does not use it."""
    rate = cost.RATE.get(("wgmma", cfg.dtype), 700e12) * TILE_EFFICIENCY.get(
        (cfg.bm, cfg.bn), 0.7)
    tile_s = 2.0 * cfg.bm * cfg.bn * k / (rate / sms)
    item, out_item = ELEM_BYTES[cfg.dtype], ELEM_BYTES[cfg.out]
    tiles = list(tiles_m_grouped(cfg, offsets(counts), sum(counts), n, k))
    seconds = cost.LAUNCH_SECONDS
    for w in range(0, len(tiles), sms):
        wave = tiles[w:w + sms]
        a_rows = {(t.g, t.m0): min(t.valid, cfg.bm) for t in wave}
        b_cols = {(t.g, t.n0): min(cfg.bn, n - t.n0) for t in wave}
        c_out = sum(min(t.valid, cfg.bm) * min(cfg.bn, n - t.n0) for t in wave)
        moved = (sum(a_rows.values()) + sum(b_cols.values())) * k * item + c_out * out_item
        seconds += max(tile_s, moved / BANDWIDTH)
    return seconds


def _order_line(cfg: GroupedConfig, counts: list[int], n: int, k: int, sms: int) -> str:
    """explain's line on the tile order: both orders of ``cfg`` in the wave model."""
    fwd, ends = (predict_waves(cfg.replace(order=o), counts, n, k, sms)
                 for o in ("forward", "ends"))
    return (f"  - tile order (wave model, uncalibrated): forward {fwd * 1e6:.0f} us, ends "
            f"{ends * 1e6:.0f} us ({fwd / ends:.2f}x); the dispatch keeps {cfg.order}, "
            f"a config with order='ends' (preset grouped_bf16_ends) opts in")


def candidates(dtype: str, grouping: str, layout: str, out: str) -> list[GroupedConfig]:
    """One configuration per tile shape of the search space: the deepest ring that fits,
    raster groups of 8 tile rows, the forward order."""
    best: dict[tuple, GroupedConfig] = {}
    for cfg in space(dtype, grouping, layout, out):
        key = (cfg.bm, cfg.bn)
        if cfg.order != "forward":
            continue
        if cfg.group == 8 and (key not in best or cfg.stages > best[key].stages):
            best[key] = cfg
    return list(best.values())


def _rank(p: Prediction) -> tuple:
    """Fastest first; among equal predictions (memory-bound ones), the tile whose main loop
    is most efficient, then the deeper ring."""
    return (round(p.seconds, 7), -TILE_EFFICIENCY.get((p.config.bm, p.config.bn), 0.0),
            -p.config.stages)


@dataclass
class GroupedChoice:
    """What ``grouped_gemm`` runs: the configuration, how it was chosen and why."""

    config: GroupedConfig
    how: str
    reasons: list = field(default_factory=list)
    prediction: Prediction | None = None


def choose(dtype: str, grouping: str, layout: str, out: str, groups: int, rows: int, n: int,
           k: int, counts: list[int] | None = None, sms: int = cost.SMS) -> GroupedChoice:
    """The configuration for a grouped problem: for the K-grouped weight gradient the
    preset grouped_wgrad (its tiles fill the GPU: groups x M x N); for M-grouped problems
    the tile shape the cost model (``predict``) finds fastest on ``counts`` (default: the
    rows spread evenly, which is all the host knows when the offsets live on the device:
    ``rows`` in total over ``groups`` groups). Raises ``ValueError`` for a dtype, layout or
    C dtype no configuration takes."""
    if grouping == "k":
        base = next(p.config for p in GROUPED_PRESETS if p.name == "grouped_wgrad")
        cfg = base.replace(dtype=dtype, out=out, layout=layout, check=False)
        how = "default"
        if cfg.violations():  # e.g. an fp32 C whose staging leaves no room for 128 x 256
            options = candidates(dtype, grouping, layout, out)
            if not options:
                raise ValueError(f"no grouped configuration takes {dtype} -> {out} in layout "
                                 f"{layout}")
            cfg, how = max(options, key=lambda c: (TILE_EFFICIENCY.get((c.bm, c.bn), 0.0),
                                                   c.stages)), "default, shaped"
        why = f"K-grouped: {groups} groups x {rows} x {n} outputs in {cfg.bm}x{cfg.bn} tiles"
        return GroupedChoice(cfg, how, [why])
    counts = counts if counts is not None else _even(rows, groups)
    options = candidates(dtype, grouping, layout, out)
    if not options:
        raise ValueError(f"no grouped configuration takes {dtype} -> {out} in layout {layout}")
    ranked = sorted((predict(c, counts, n, k, sms) for c in options), key=_rank)
    best = ranked[0]
    avg = sum(counts) / max(groups, 1)
    bound = "memory" if best.terms["memory"] > best.terms["compute"] else "compute"
    why = [f"{groups} groups, {sum(counts)} rows ({avg:.0f} per group on average), N {n}, K {k}",
           (f"tile {best.config.bm}x{best.config.bn}: {best.tiles} tiles = {best.waves:.2f} "
            f"waves, {100 * best.padded:.0f}% of the computed rows are padding, predicted "
            f"{best.seconds * 1e6:.0f} us ({bound}-bound)")]
    if len(ranked) > 1:
        nxt = ranked[1]
        why.append(f"next: {nxt.config.bm}x{nxt.config.bn} at {nxt.seconds * 1e6:.0f} us")
    return GroupedChoice(best.config, "default, shaped", why, best)


def explain_grouped(dtype: str, groups: int, rows: int, n: int, k: int, dist: str = "uniform",
                    grouping: str = "m", layout: str | None = None, out: str | None = None,
                    sms: int = cost.SMS, seed: int = 0, tuned: dict | None = None,
                    gpu: str | None = None) -> str:
    """Text: the kernel ``grouped_gemm`` runs for a grouped problem (``rows`` in total over
    ``groups`` groups, N ``n``, K ``k``; for ``grouping`` "k", ``rows`` is M and ``k`` the
    total rows) and how it fares on distribution ``dist``: the choice and its reasons (made,
    as at run time, from the grouped tuning file's entries ``tuned``, read by
    ``grouped_db.load``, for GPU ``gpu``, else from the totals alone), the distribution's
    shape, the schedule (tiles per CTA) and every tile shape's predicted time on it."""
    layout = layout or ("rcr" if grouping == "m" else "crr")
    out = out or ("bf16" if dtype in FP8_DTYPES else dtype)
    # as the dispatch weighs an offsets problem: on tokens routed at random (runtime.grouped)
    routed = row_counts("random", rows, groups) if grouping == "m" else None
    ch = choose(dtype, grouping, layout, out, groups, rows, n, k, routed, sms)
    won = grouped_db.winner(tuned or {}, gpu or "", dtype, out, grouping, layout, groups, rows,
                            n, k)
    if won is not None:  # as grouped_gemm's dispatch: the tuned winner first
        ch = GroupedChoice(config_from_dict(won[0]), "tuned",
                           [f"tuned on {gpu} for this problem ({won[1]} rows per group)"])
    if grouping == "k":
        counts = row_counts(dist, k, groups, seed)
        tiles = list(tiles_k_grouped(ch.config, offsets(counts), rows, n, k))
        flops = 2.0 * rows * n * k
    else:
        counts = row_counts(dist, rows, groups, seed)
        tiles = list(tiles_m_grouped(ch.config, offsets(counts), rows, n, k))
        flops = 2.0 * rows * n * k
    cfg = ch.config
    if grouping == "m":
        head = f"M-grouped {dtype}: {rows} rows in {groups} groups ({dist}), N {n}, K {k}"
    else:
        head = (f"K-grouped {dtype}: {k} reduction rows in {groups} groups ({dist}), M {rows}, "
                f"N {n}")
    lines = [f"{head}, layout {layout}:",
             f"  kernel  {cfg.name}", f"  how     {ch.how}", f"  config  {cfg.brief()}"]
    lines += [f"  - {r}" for r in ch.reasons]
    live = sorted(counts)
    lines.append(f"  - {dist}: rows per group min {live[0]}, median {live[len(live) // 2]}, "
                 f"max {live[-1]}; {sum(1 for c in counts if c == 0)} empty, "
                 f"{sum(1 for c in counts if c == 1)} of one row")
    grid = max(1, min(sms, grid_bound(cfg, groups, rows, n)))
    load = [sum(t.nk for t in cta) for cta in per_cta(tiles, grid)]
    balance = sum(load) / max(1, len(load) * max(load))
    lines.append(f"  - schedule: {len(tiles)} tiles on {grid} CTAs; K tiles per CTA min "
                 f"{min(load)}, max {max(load)} (balance {balance:.2f})")
    if grouping == "m":
        lines.append(_order_line(cfg, counts, n, k, sms))
        preds = [predict(c, counts, n, k, sms) for c in candidates(dtype, grouping, layout, out)]
        for p in sorted(preds, key=_rank):
            mark = "*" if p.config == cfg else " "
            lines.append(f"  {mark} {p.config.bm:>3}x{p.config.bn:<3} st{p.config.stages}: "
                         f"{p.seconds * 1e6:8.1f} us  {flops / p.seconds / 1e12:6.0f} TFLOP/s  "
                         f"{p.tiles} tiles, padding {100 * p.padded:.0f}%")
    return "\n".join(lines)
