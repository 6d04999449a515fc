"""Shape rules: the wgmma family's default preset fitted to an M x N x K problem.

In order: a small M is moved to wgmma's narrow N by computing C^T = B^T A^T (swapped
operands); a small N narrows the tile (weighing a 64-row, one-consumer tile); the tile with the
fewest idle SMs in its last wave is taken; K is split when the tiles fill less than a quarter
of the SMs; under one wave the ring is as deep as shared memory allows; a C that TMA cannot
store to gets direct stores. Each rule states its reason, which ``explain`` prints.
"""
from __future__ import annotations

from . import cost

FLIP = {"r": "c", "c": "r"}


MAX_STAGES = 8
"""The deepest ring the shape rules ask for (decode shapes measured 6 against 3 stages: 363
against 220 TFLOP/s at 128 x 8192 x 8192 swapped; a 64-row tile with 8 stages, 128 CTAs,
409 TFLOP/s; paths_NVIDIA_H200.json)."""
SWAP_M = 128
"""Swap operands when M is at most this (and N is larger): measured at M = 1..128 x 8192 x
8192 (decode rows of paths_NVIDIA_H200.json)."""
ALT_TILES = ((256, 128), (128, 256))
"""Tiles weighed against the preset's by their last wave's idle SMs."""


def shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons) -> tuple:
    """(config, how, swap, reasons): the wgmma default preset ``cfg`` fitted to an M x N x K
    problem by the rules of the module docstring; ``reasons`` (a list) gets one line per rule
    that fired."""
    swap, m, n, layout = _swap(m, n, layout, epilogue, reasons)
    changes: dict = {"layout": layout} if swap else {}
    best = _tile(cfg, m, n, batch, changes, reasons)
    tiles = cost.tiles_of(m, n, *best, batch)
    split = _split(cfg, m, n, k, batch, best, tiles, changes, reasons)
    if cfg.store == "tma" and (swap or split > 1 or not c_aligned or best[1] < 64):
        changes["store"] = "direct"
        why = ("split-K stores partial sums" if split > 1 else
               "C is not 16-byte aligned" if not c_aligned else "a narrow or transposed C tile")
        reasons.append(f"direct stores: {why}")
    if tiles < cost.SMS:  # under one wave: memory-bound, keep as many loads in flight as fit
        _deepen(cfg, changes, reasons)
    out = _settle(cfg, changes, reasons)
    if out is None:
        return cfg.replace(layout=layout) if swap else cfg, "default", swap, reasons
    return out, "default, shaped" if changes else "default", swap, reasons


def _swap(m, n, layout, epilogue, reasons) -> tuple:
    """(swap, M, N, layout) of the kernel: a small M (and a larger N, no bias) computes
    C^T = B^T A^T, so M goes to wgmma's N."""
    if m <= SWAP_M and n > m and not epilogue.startswith("bias"):
        layout = FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]]
        reasons.append(f"M = {m} is small: computing C^T = B^T A^T puts it on wgmma's N, which "
                       f"can be as narrow as 8 (wgmma's M is 64 per warpgroup); layout {layout}")
        return True, n, m, layout
    if m <= SWAP_M and epilogue.startswith("bias"):
        reasons.append(f"M = {m} is small, but the bias runs along N: operands not swapped")
    return False, m, n, layout


def _tile(cfg, m, n, batch, changes, reasons) -> tuple[int, int]:
    """The block tile (BM, BN): a narrow N tile, a 64-row tile for a small M, else the
    candidate whose last wave leaves the fewest SMs idle; recorded in ``changes``."""
    bn_small = max(8, -(-n // 8) * 8)
    if bn_small < cfg.bn:
        tiles = [(cfg.bm, bn_small), (64, bn_small)]  # 64 rows: twice the CTAs to stream A
        reasons.append(f"N = {n}: one {bn_small}-column tile (wgmma N in steps of 8)")
    elif m <= 64:
        tiles = [(64, cfg.bn)]
        reasons.append(f"M = {m}: one 64-row tile computed by one consumer warpgroup")
    else:
        tiles = [(cfg.bm, cfg.bn)] + [t for t in ALT_TILES if t != (cfg.bm, cfg.bn)]
    eff = {t: cost.wave_efficiency(cost.tiles_of(m, n, *t, batch)) for t in tiles}
    best = max(tiles, key=eff.get)
    if best != (cfg.bm, cfg.bn):
        changes.update(bm=best[0], bn=best[1])
        if len(tiles) > 1 and eff[best] > eff[tiles[0]]:
            reasons.append(
                f"tile {best[0]}x{best[1]}: its last wave leaves {100 * (1 - eff[best]):.0f}% "
                f"of the SMs idle against {100 * (1 - eff[tiles[0]]):.0f}% for "
                f"{tiles[0][0]}x{tiles[0][1]}")
    if best[0] == 64 and cfg.consumers == 2:  # one 64-row wgmma tile: one consumer
        changes.update(consumers=1, regs_producer=0, regs_consumer=0)
    return best


def _split(cfg, m, n, k, batch, best, tiles, changes, reasons) -> int:
    """Split-K slices for ``tiles`` tiles of ``best`` (1: none); recorded in ``changes``."""
    split = cost.split_k_for(m, n, k, batch, best[0], best[1], cfg.bk)
    if split > 1:
        changes["split_k"] = split
        reasons.append(f"{tiles} tiles fill {100 * tiles / cost.SMS:.0f}% of {cost.SMS} SMs: "
                       f"K split into {split} slices, fp32 partial sums reduced by a second "
                       f"kernel (deterministic)")
    else:
        reasons.append(f"{tiles} tiles: {tiles / cost.SMS:.2f} waves on {cost.SMS} SMs, "
                       f"K not split")
    return split


def _deepen(cfg, changes, reasons) -> None:
    """The deepest ring (up to MAX_STAGES) the shaped config's shared memory allows."""
    deepest = next((st for st in range(MAX_STAGES, cfg.stages, -1)
                    if not cfg.replace(check=False, **{**changes, "stages": st}).violations()),
                   cfg.stages)
    if deepest != cfg.stages:
        changes["stages"] = deepest
        reasons.append(f"{deepest} stages: under one wave the SMs stream operands, so the "
                       f"ring is as deep as shared memory allows")


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
    if out.violations():
        broken = ", ".join(f"{v.rule.id} {v.rule.name}" for v in out.violations())
        reasons.append(f"shaping the preset broke {broken}: the preset runs as it is")
        return None
    return out
