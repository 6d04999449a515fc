"""Shape rules: the wgmma family's default preset fitted to an M x N x K problem.

In order: a small M (and no bias, which runs along N) is moved to wgmma's narrow N by computing
C^T = B^T A^T (swapped operands); a narrow N takes the smallest tile of 64, 128 or 256 rows
that runs in one wave, and K is split only where long K rows leave SMs idle; a problem of at
least SWAP_M rows takes the block tile of least estimated time (whole waves x the tile's work
/ the tile's measured efficiency), and splits K only when its tiles leave half the SMs idle
over a long K; the ring is as deep as shared memory allows; a C that TMA cannot store to gets
direct stores. Each rule states its reason, which ``explain`` prints. The constants come from
the table builder's measurements (``gemmgen.tune.table`` over the LLM-layer suite, H200).
"""
from __future__ import annotations

import math

from ..model.epilogue import Epilogue
from . import cost

FLIP = {"r": "c", "c": "r"}


MAX_STAGES = 8
"""The deepest ring the shape rules ask for (decode shapes measured 6 against 3 stages: 363
against 220 TFLOP/s at 128 x 8192 x 8192 swapped; a 64-row tile with 8 stages, 128 CTAs,
409 TFLOP/s; paths_NVIDIA_H200.json)."""
SWAP_M = 64
"""Swap operands when M is at most this (and N is larger): at M = 1 and 16 the swapped
problem measured fastest on every LLM layer, at M = 128 the unswapped 64 x 128 or 128 x 192
tile did (up to 2.6x)."""
TILE_EFFICIENCY = {(128, 256): 1.0, (256, 128): 0.94, (128, 192): 0.93, (128, 128): 0.84,
                   (64, 256): 0.78, (64, 128): 0.60}
"""Block tiles weighed for problems of more than SWAP_M rows, with their throughput relative to
128 x 256 per unit of work, fitted to 1950 timings of the LLM-layer suite (bf16 and fp16,
three layouts, H200): time ~ waves x BM x BN x (K + K_OVERHEAD) / efficiency."""
K_OVERHEAD = 768
"""A tile's fixed cost (prologue, epilogue) in units of K (fitted with TILE_EFFICIENCY)."""
DECODE_SLICE_K = 1024
"""A narrow (decode) problem splits K (inline, one launch) into slices at least this long while
its tiles stay in one wave: 1 x 1024 x 4096 measured 15.0 us unsplit and 11.0 us in four
slices, 1 x 512 x 3584 13.6 and 11.2 us in two (H200, kernel time with launch gaps)."""


def shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons) -> tuple:
    """(config, how, swap, reasons): the wgmma default preset ``cfg`` fitted to an M x N x K
    problem by the rules of the module docstring; ``reasons`` (a list) gets one line per rule
    that fired."""
    swap, m, n, layout = _swap(m, n, layout, epilogue, reasons)
    changes: dict = {"layout": layout} if swap else {}
    best = _tile(cfg, m, n, k, batch, changes, reasons, swap)
    tiles = cost.tiles_of(m, n, *best, batch)
    split = _split(cfg, m, n, k, batch, best, tiles, changes, reasons)
    if cfg.store == "tma" and (swap or split > 1 or not c_aligned or best[1] < 64):
        changes["store"] = "direct"
        why = ("split-K stores partial sums" if split > 1 else
               "C is not 16-byte aligned" if not c_aligned else "a narrow or transposed C tile")
        reasons.append(f"direct stores: {why}")
    _deepen(cfg, changes, reasons)
    out = _settle(cfg, changes, reasons)
    if out is None:
        return cfg.replace(layout=layout) if swap else cfg, "default", swap, reasons
    return out, "default, shaped" if changes else "default", swap, reasons


def keeps_sides(epilogue: str) -> bool:
    """The operands must not be swapped: a bias runs along N, and an epilogue tree's row and
    column operands would need the transposed tree (not passed yet)."""
    return epilogue.startswith("bias") or Epilogue.parse(epilogue).is_tree


def _swap(m, n, layout, epilogue, reasons) -> tuple:
    """(swap, M, N, layout) of the kernel: a small M (and a larger N, no bias) computes
    C^T = B^T A^T, so M goes to wgmma's N."""
    if m <= SWAP_M and n > m and not keeps_sides(epilogue):
        layout = FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]]
        reasons.append(f"M = {m} is small: computing C^T = B^T A^T puts it on wgmma's N, which "
                       f"can be as narrow as 8 (wgmma's M is 64 per warpgroup); layout {layout}")
        return True, n, m, layout
    if m <= SWAP_M and keeps_sides(epilogue):
        reasons.append(f"M = {m} is small, but the bias runs along N (an epilogue tree's "
                       f"operands keep their sides too): operands not swapped")
    return False, m, n, layout


def _tile(cfg, m, n, k, batch, changes, reasons, swap=False) -> tuple[int, int]:
    """The block tile (BM, BN), recorded in ``changes``: for a narrow N the smallest of 64, 128
    or 256 rows whose tiles fit one wave (256 when none does); for a small M one 64-row tile;
    else the tile of least ``_tile_time``. ``swap``: M and N are the swapped kernel's."""
    bn_small = max(8, -(-n // 8) * 8)
    if bn_small < cfg.bn:
        rows = next((bm for bm in (64, 128, 256)
                     if cost.tiles_of(m, bn_small, bm, bn_small, batch) <= cost.SMS), None)
        why = "the smallest that runs in one wave" if rows else \
            f"the tallest, as no height runs in one wave on {cost.SMS} SMs"
        rows = rows or 256
        best = (rows, bn_small)
        what = f"the kernel's N = {n} (the caller's M)" if swap else f"N = {n}"
        reasons.append(f"{what}: one {bn_small}-column tile (wgmma N in steps of 8), "
                       f"{rows} rows: {why}")
    elif m <= SWAP_M:
        best = (64, cfg.bn)
        reasons.append(f"M = {m}: one 64-row tile computed by one consumer warpgroup")
    else:
        timed = {t: _tile_time(t, m, n, k, batch) for t in TILE_EFFICIENCY}
        best = min(timed, key=timed.get)
        if best != (cfg.bm, cfg.bn):
            pre = _tile_time((cfg.bm, cfg.bn), m, n, k, batch)
            reasons.append(f"tile {best[0]}x{best[1]}: {cost.tiles_of(m, n, *best, batch)} "
                           f"tiles, estimated {pre / timed[best]:.2f}x faster than "
                           f"{cfg.bm}x{cfg.bn} (whole waves x the tile's work / its efficiency)")
    if best != (cfg.bm, cfg.bn):
        changes.update(bm=best[0], bn=best[1])
    if best[0] == 64 and cfg.consumers == 2:  # one 64-row wgmma tile: one consumer
        changes.update(consumers=1, regs_producer=0, regs_consumer=0)
    return best


def _tile_time(tile: tuple[int, int], m: int, n: int, k: int, batch: int) -> float:
    """Estimated time of a problem in ``tile``s, in arbitrary units: whole waves over the SMs
    x the tile's work (BM x BN x (K + K_OVERHEAD)) / the tile's measured efficiency."""
    waves = math.ceil(cost.tiles_of(m, n, *tile, batch) / cost.SMS)
    return waves * tile[0] * tile[1] * (k + K_OVERHEAD) / TILE_EFFICIENCY[tile]


def _split(cfg, m, n, k, batch, best, tiles, changes, reasons) -> int:
    """Split-K slices (1: none), recorded in ``changes``: for a narrow (decode) tile the most
    of 2, 4 or 8 that stays in one wave with slices of at least DECODE_SLICE_K; for a small M
    (kept unswapped by a bias) ``cost.split_k_for``; else 2 or 4 only where the tiles leave
    half or three quarters of the SMs idle over a K of at least 8192 or 16384."""
    k_tiles = math.ceil(k / cfg.bk)
    if max(8, -(-n // 8) * 8) < cfg.bn:  # the narrow-N (decode) tile of ``_tile``
        split = max([s for s in (1, 2, 4, 8)
                     if tiles * s <= cost.SMS and k // s >= DECODE_SLICE_K] or [1])
    elif m <= SWAP_M:
        split = cost.split_k_for(m, n, k, batch, best[0], best[1], cfg.bk)
    else:
        split = 4 if tiles * 4 <= cost.SMS and k >= 16384 else \
            2 if tiles * 2 <= cost.SMS and k >= 8192 else 1
    if split > 1 and k_tiles / split < cost.MIN_SLICE_TILES:
        split = 1
    if split > 1:  # inline where it compiles clean: not ping-pong, not a wide column-major C
        inline = not cfg.pingpong and (changes.get("layout", cfg.layout)[2] == "r" or best[1] < 128)
        inline = inline and not getattr(cfg, "extended", False)  # H51: trees reduce apart
        changes.update(split_k=split, split_inline=inline)
        reasons.append(f"{tiles} tiles fill {100 * tiles / cost.SMS:.0f}% of {cost.SMS} SMs: "
                       f"K split into {split} slices; the last slice of each tile to finish "
                       f"sums them in order (deterministic) in the same launch")
    else:
        reasons.append(f"{tiles} tiles: {tiles / cost.SMS:.2f} waves on {cost.SMS} SMs, "
                       f"K not split")
    return split


def _deepen(cfg, changes, reasons) -> None:
    """The deepest ring (up to MAX_STAGES) the shaped config's shared memory allows: every
    candidate of the table builder measured fastest at its deepest ring."""
    deepest = next((st for st in range(MAX_STAGES, cfg.stages, -1)
                    if not cfg.replace(check=False, **{**changes, "stages": st}).violations()),
                   cfg.stages)
    if deepest != cfg.stages:
        changes["stages"] = deepest
        reasons.append(f"{deepest} stages: the ring as deep as shared memory allows")


def _settle(cfg, changes, reasons):
    """``cfg`` with ``changes``, its tile N rounded up to whole swizzle blocks where a rule asks;
    None (with the reason) when the shaped config still breaks a rule."""
    out = cfg.replace(check=False, **changes)
    broken = out.violations()
    if broken and "bn" in changes:  # e.g. a row-major B loads whole 128-byte blocks
        sw = out.sw_elems
        out = out.replace(check=False, bn=min(cfg.bn, -(-out.bn // sw) * sw))
        reasons.append(f"tile N rounded up to {out.bn}: "
                       f"{', '.join(v.rule.name for v in broken)}")
        # the wider tile may no longer fit its rows' registers or its ring: fewer rows, then
        # the deepest ring that fits
        for rows in (out.bm, 128, 64):
            one = {"consumers": 1, "regs_producer": 0, "regs_consumer": 0} if rows == 64 else {}
            trial = out.replace(check=False, bm=min(rows, out.bm), **one)
            fit = next((trial.replace(check=False, stages=st) for st in range(trial.stages, 0, -1)
                        if not trial.replace(check=False, stages=st).violations()), None)
            if fit is not None:
                out = fit
                break
    if out.violations():
        broken = ", ".join(f"{v.rule.id} {v.rule.name}" for v in out.violations())
        reasons.append(f"shaping the preset broke {broken}: the preset runs as it is")
        return None
    return out
