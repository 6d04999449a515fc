"""Shape rules: the wgmma family's default preset fitted to an M x N x K problem.

In order: an M of more than NARROW_M and at most SWAP_M rows with a K-major B (``nn.Linear``'s
weight) takes one 64-row tile over M and narrow tiles over N (NARROW_BNS) with the K split of least
estimated time, where such tiles run in one wave; an M of MID_M rows (256 to 512) with a K-major B
and an N not narrow takes the block tile (64 or 128 rows, 64 to 256 columns) and K split of least
estimated time by a per-tile cost model (MID_TILES, MID_SPLIT), and so does an M of more than
NARROW_M and at most SWAP_M rows whose narrow tiles cannot run in one wave (a wide N; unbatched, no
bias: 64 x 32768 x 512 in 128 tiles of 64 x 256 rather than swapped); a small M (and no bias, which
runs along N) is moved to wgmma's narrow N by computing C^T = B^T A^T (swapped operands), and so is
an M of up to SWAP_LONG_K_M rows whose tiles leave the SMs idle over a K at least twice N; a narrow
N takes the smallest tile of 64, 128 or 256 rows that runs in one wave, and K is split into as many
slices as keep one wave and DECODE_SLICE_TILES K tiles per slice; a problem of more than SWAP_M rows
takes the block tile of least estimated time (whole waves x the tile's work / the tile's measured
efficiency), and splits K where its tiles leave half the SMs idle or, above SMALL_M rows, in the
tiles past the last whole wave (TAIL_SPLIT); the ring is as deep as shared memory allows; a C that
TMA cannot store to gets direct stores. Each rule states its reason, which ``explain`` prints. The
tile constants come from the table builder's measurements (``gemmgen.tune.table`` over the LLM-layer
suite, H200); the split and swap constants and the 64 x 64 tile's efficiency were fitted on the
small-M sweep of the LLM suite's layers (M = 1 to 256, H200 and H100:
``benchmarks/results/small_m_*.json``, which also reports them on seven other model families'
layers).
"""
from __future__ import annotations

import math

from ..model.epilogue import Epilogue
from . import cost
from .ring import ONE_CONSUMER, deepen, settle
from .splitk import apart as _apart, record_split as _record_split, small_split

FLIP = {"r": "c", "c": "r"}

SWAP_M = 64
"""Swap operands when M is at most this (and N is larger): at M = 1 and 16 the swapped
problem measured fastest on every LLM layer, at M = 128 the unswapped tile (up to 2.6x)."""
TILE_EFFICIENCY = {(128, 256): 1.0, (256, 128): 0.94, (128, 192): 0.93, (128, 128): 0.84,
                   (64, 256): 0.78, (64, 128): 0.60, (64, 64): 0.5, (128, 144): 0.70,
                   (128, 224): 0.97}
"""Block tiles weighed for problems of more than SWAP_M rows, with their throughput relative to
128 x 256 per unit of work, fitted to 1950 timings of the LLM-layer suite (bf16 and fp16,
three layouts, H200): time ~ waves x BM x BN x (K + K_OVERHEAD) / efficiency. 64 x 64 from
the small-M sweep; 128 x 144 and 128 x 224, weighed above SMALL_M rows, fill waves that widths
of 64 leave part empty (cuBLASLt's in steps of 16): odd_tiles.py ``fit``, M 1024 and 4096."""
K_OVERHEAD = 768
"""A tile's fixed cost (prologue, epilogue) in units of K (fitted with TILE_EFFICIENCY)."""
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
"""The split-K slice counts the shape rules choose from."""
DECODE_SLICE_TILES = 12
"""A narrow (decode) problem splits K (inline, one launch) into the most SPLITS slices of at
least this many K tiles that keep its tiles in one wave. Fitted on the small-M sweep (8, 12 and
16 tried; 12 best on both GPUs): at 1 x 576 x 7168, 8 slices took 6.8 us against 20.0 unsplit
and F.linear's 7.8 (H200, graph-captured)."""
BIG_SPLIT_TILES = 16
"""A problem of more than SWAP_M and at most SMALL_M rows whose tiles fill less than half the
SMs splits K into the most SPLITS slices of this many K tiles or more in a wave (8-32 tried)."""
SMALL_M = 256
"""The most rows the small-M sweep measured: BIG_SPLIT_TILES applies up to here; above, splits
of 2 or 4 where the tiles leave half or three quarters of the SMs idle over a K of at least
8192 or 16384, and split tails (TAIL_SPLIT)."""
TILE64_M = 1024
"""The most rows for which the 64 x 64 tile is weighed: at M = 1024 the rules with it scored
higher on both GPUs' training and held-out layers (benchmarks/results/mid_m_*_M1024.json)."""
NARROW_M = 32
"""Above this many rows (and up to SWAP_M), the narrow-N rule (``_narrow``) applies: the
weights' stream is shared by as many CTAs as one wave holds, each reading a narrow slice of N
and the whole (64-row) A tile, where the swapped kernel's 64-row tiles over N leave most SMs
idle. At M = 32 it did not gain on the training layers (benchmarks/results/narrow_m_*.json)."""
NARROW_TWO_ROWS_M = 128
"""Above SWAP_M and up to this many rows (two 64-row tiles over M), the narrow-N rule applies too
where the 64 x 64 tiles would fill at most half the SMs (an N of up to 2112 at M = 128), unless
the long-K swap (SWAP_LONG_K_M) would run more than half the SMs' worth of tiles x K slices
(``_swap_fills``): its tiles read the weights once, two rows of narrow tiles twice. At M = 128 on
an H200 (benchmarks/results/narrow_m_NVIDIA_H200_M128.json, the rules before it in the same run)
it changed 5 of the 13 training layers and 6 of the 28 held-out layers, every one faster:
geomean x F.linear 0.966 to 0.993 (training) and 0.921 to 0.946 (held out); the swap kept 128
x 576 x 7168 and the held-out layers of a K of 4864 to 8192, where it ran 4% to 7% faster than
the narrow tiles."""
NARROW_BNS = (16, 24, 32, 48, 64)
"""The tile widths (N) the narrow-N rule chooses from."""
NARROW_COST = {"a_rows": 16, "split": 512, "per_slice": 32, "min_slice_tiles": 8}
"""The narrow-N rule's cost of a (BN, split) choice that runs in one wave: K tiles per slice x
(a_rows + BN), plus split + per_slice x slices when K is split (the inline reduction), slices
of at least min_slice_tiles K tiles. The constants are the point of a grid (a_rows 0-256,
split 0-2048, per_slice 0-256) with the best geomean x F.linear over both GPUs' training rows
(the llm suite's layers at M = 64, H100 and H200), ties to the earliest grid point; held-out
layers of seven other families were scored after (benchmarks/investigations/narrow_m.py
``fit``). Refitted once the inline reduction took one round trip per pass: its fixed cost fell
from 1024 to 512, its cost per slice from 128 to 32."""


def narrow_tile(bn: int) -> dict:
    """The config changes of the narrow-N rule's 64 x ``bn`` tile: one consumer, no cluster."""
    return {"bm": 64, "bn": bn, **ONE_CONSUMER, "cluster_m": 1, "cluster_n": 1}


MID_M = (256, 512)
"""From this many rows to this many (operands kept, a K-major B, 16-bit inputs, N not narrow), the
block tile and split-K come from MID_TILES and MID_SPLIT: the choice of least estimated time
(``_mid``). So too from NARROW_M to SWAP_M rows where the narrow-N rule finds no tiles that run in
one wave (a wide N), instead of the swap (unbatched, without a bias or tree, as measured): on
mid_widths.py's M = 64 sweep (H200) its picks ran 1.064 against 1.056 x F.linear over the training
layers and 0.976 against 0.96 over the held-out ones; beside the swap in one run at M = 48 and 64,
each of the 18 layers it changes ran 1.028x to 1.201x as fast
(mid_widths_ab_NVIDIA_H200_M48_64.json)."""
MID_TILES = {(64, 64): (0.1279, 1.99), (64, 80): (0.1384, 2.74), (64, 96): (0.1441, 3.0),
             (64, 112): (0.1569, 3.41), (64, 128): (0.1729, 2.95), (64, 144): (0.1888, 3.89),
             (64, 160): (0.2107, 3.02), (64, 176): (0.2174, 4.27), (64, 192): (0.2334, 3.5),
             (64, 256): (0.3315, 3.76), (128, 64): (0.2131, 2.49), (128, 96): (0.228, 4.79),
             (128, 128): (0.3001, 3.73), (128, 160): (0.3734, 5.89), (128, 192): (0.4422, 4.13),
             (128, 224): (0.5142, 7.11), (128, 256): (0.5915, 4.53)}
"""Per block tile (64 rows: one consumer; 128: two): microseconds of one wave per K tile and
per tile, least squares of the relative error over unsplit timings of the training layers. The
64-row tiles of 64 to 192 columns in steps of 16 (cuBLASLt runs such layers in one wave of
64-row tiles of such widths: 72, 96 or 48 columns) from their timings at M = 256 to 1024 on the
H200 (benchmarks/investigations/mid_widths.py ``fit``); the rest from M = 128 to 512 on the
H100 and the H200 (mid_m.py ``fit``)."""
MID_SPLIT = {"split": 1.5, "per_slice": 0.8, "min_slice_tiles": 8, "max_waves": 2}
"""Split-K in the mid-M rule: it costs split + per_slice x slices microseconds; slices keep at
least min_slice_tiles K tiles, and the tiles' slices at most max_waves waves. split and
per_slice are the point of a grid (0 to 4 by 0.5, 0 to 0.8 by 0.2) of best training geomean
x F.linear at M = 256 and 512 with the 64-row tiles' cost model above (mid_widths.py ``fit``,
H200); held-out layers were scored after."""
TAIL_SPLIT = {"split": 0, "per_slice": 128, "min_slice_tiles": 4}
"""Above SMALL_M rows, where a tile's tiles outnumber the SMs and the last wave is part full,
the tiles past the last whole wave may split K (their slices in one wave, of at least
min_slice_tiles K tiles): the tail then costs a slice's K + K_OVERHEAD + split + per_slice x
slices (units of K) instead of a wave (``_big_time``). split and per_slice: the point of a grid
(0-1024 by 128, 0-512 by 64) of best training geomean x F.linear over both GPUs' llm-suite layers
at M = 1024 and 4096, ties to the earliest (benchmarks/investigations/tail_split.py ``fit``)."""
SWAP_LONG_K_M = 128
"""Up to this many rows, a problem whose 64 x 64 tiles number fewer than the SMs and whose K
is at least twice N is swapped too: its K splits over the swapped tiles' rows. At 128 x 576 x
7168 the swapped 64 x 128 tile in 8 slices measured 1.06x F.linear, the best unswapped tile
0.76x (H100; the small-M sweep)."""


def shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons) -> tuple:
    """(config, how, swap, reasons): the wgmma default preset ``cfg`` fitted to an M x N x K
    problem by the rules of the module docstring; ``reasons`` (a list) gets one line per rule
    that fired."""
    applies = _narrow_applies(cfg, m, n, k, layout, epilogue, batch)
    narrow = _narrow(cfg, m, n, k, batch, reasons) if applies else None
    mid_ok = (layout[1] == "c" and cfg.dtype in ("fp16", "bf16")
              and max(8, -(-n // 8) * 8) >= cfg.bn)
    wide = (applies and narrow is None and m <= SWAP_M and mid_ok and batch == 1  # measured
            and _swap(m, n, k, layout, epilogue, [])[0])  # where the swap ran before
    if wide:
        reasons.append(f"M = {m}: no narrow tiles ({'/'.join(map(str, NARROW_BNS))} columns) "
                       f"over N = {n} run in one wave on {cost.SMS} SMs: the mid-M rule's "
                       f"64-row tiles, operands not swapped")
    mid = (_mid(cfg, m, n, k, batch, reasons) if (MID_M[0] <= m <= MID_M[1] or wide) and mid_ok
           else None)
    if narrow or mid:
        swap, best, split = False, (64, narrow[0]) if narrow else mid[:2], (narrow or mid)[-1]
        changes: dict = narrow_tile(narrow[0]) if narrow else mid_tile(*best)
        tiles = cost.tiles_of(m, n, *best, batch)
        small = bool(narrow) and m <= SWAP_M
        split = _record_split(cfg, small_split(cfg, small, split, tiles, best, k, changes,
                                               reasons), tiles, best, changes, reasons,
                              small=small)
    else:
        m0 = m  # the caller's M
        swap, m, n, layout = _swap(m, n, k, layout, epilogue, reasons)
        changes = {"layout": layout} if swap else {}
        best = _tile(cfg, m, n, k, batch, changes, reasons, swap)
        tiles = cost.tiles_of(m, n, *best, batch)
        split = _split(cfg, m, n, k, batch, best, tiles, changes, reasons, small=m0 <= SWAP_M)
    odd = bool(mid) and best[1] % (64 if layout[2] == "c"  # else the staging chunk's width
                                   else cfg.replace(check=False, **changes).c_chunk) != 0
    # an inline split of the tail past whole waves stores C as the whole tiles do
    parts = split > 1 and not (changes.get("split_inline") and tiles > cost.SMS)
    if cfg.store == "tma" and (swap or narrow or parts or not c_aligned or best[1] < 64
                               or odd):
        changes["store"] = "direct"
        why = ("split-K stores partial sums" if parts else
               "C is not 16-byte aligned" if not c_aligned else
               f"a C tile {best[1]} columns wide, not whole staging chunks" if odd else
               "a narrow or transposed C tile")
        reasons.append(f"direct stores: {why}")
    deepen(cfg, changes, reasons)
    out = settle(cfg, changes, reasons)
    if out is None:
        return cfg.replace(layout=layout) if swap else cfg, "default", swap, reasons
    return out, "default, shaped" if changes else "default", swap, reasons


def keeps_sides(epilogue: str) -> bool:
    """The operands must not be swapped: a bias runs along N, and an epilogue tree's row and
    column operands would need the transposed tree (not passed yet)."""
    return epilogue.startswith("bias") or Epilogue.parse(epilogue).is_tree


def _swap(m, n, k, layout, epilogue, reasons) -> tuple:
    """(swap, M, N, layout) of the kernel: a small M (and a larger N, no bias) computes
    C^T = B^T A^T, so M goes to wgmma's N; so does an M of up to SWAP_LONG_K_M rows with few
    tiles over a long K."""
    long_k = (SWAP_M < m <= SWAP_LONG_K_M and k >= 2 * n
              and cost.tiles_of(m, n, 64, 64) < cost.SMS)
    if (m <= SWAP_M or long_k) and n > m and not keeps_sides(epilogue):
        layout = FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]]
        why = (f"M = {m} is small" if m <= SWAP_M else
               f"M = {m} leaves the SMs idle over a K of {k} (at least twice N)")
        reasons.append(f"{why}: computing C^T = B^T A^T puts it on wgmma's N, which "
                       f"can be as narrow as 8 (wgmma's M is 64 per warpgroup); layout {layout}")
        return True, n, m, layout
    if m <= SWAP_M and keeps_sides(epilogue):
        reasons.append(f"M = {m} is small, but the bias runs along N (an epilogue tree's "
                       f"operands keep their sides too): operands not swapped")
    return False, m, n, layout


def _narrow_applies(cfg, m, n, k, layout, epilogue, batch) -> bool:
    """Whether the narrow-N rule weighs a problem: a K-major B and NARROW_M < M <= SWAP_M, or
    up to NARROW_TWO_ROWS_M rows where 64 x 64 tiles fill at most half the SMs and the long-K
    swap would not fill more than half (``_swap_fills``)."""
    if layout[1] != "c":
        return False
    if NARROW_M < m <= SWAP_M:
        return True
    return (SWAP_M < m <= NARROW_TWO_ROWS_M and cost.tiles_of(m, n, 64, 64, batch) <= cost.SMS // 2
            and not _swap_fills(cfg, m, n, k, layout, epilogue, batch))


def _swap_fills(cfg, m, n, k, layout, epilogue, batch) -> bool:
    """Whether the swapped kernel (``_swap``: the long-K swap above SWAP_M) would run more
    tiles x K slices than half the SMs: its 64-row tiles over N read the weights once, where
    two rows of narrow tiles read them twice."""
    swap, sm, sn, swapped = _swap(m, n, k, layout, epilogue, [])
    if not swap:
        return False
    changes = {"layout": swapped}
    best = _tile(cfg, sm, sn, k, batch, changes, [], True)
    tiles = cost.tiles_of(sm, sn, *best, batch)
    return tiles * _split(cfg, sm, sn, k, batch, best, tiles, changes, []) > cost.SMS // 2


def _narrow(cfg, m, n, k, batch, reasons) -> tuple[int, int] | None:
    """(BN, split) of the narrow-N rule: of the NARROW_BNS widths and SPLITS (slices of at
    least NARROW_COST's min_slice_tiles K tiles) whose 64 x BN tiles run in one wave and break
    no rule, the one of least NARROW_COST; ties to fewer slices, then wider tiles. None when
    no choice runs in one wave."""
    c, k_tiles = NARROW_COST, math.ceil(k / cfg.bk)
    best = None
    for bn in NARROW_BNS:
        tiles = cost.tiles_of(m, n, 64, bn, batch)
        trial = cfg.replace(check=False, store="direct", **narrow_tile(bn))
        if trial.violations():  # e.g. a row-major B is read in whole 64-column blocks
            continue
        for split in SPLITS:
            if tiles * split > cost.SMS or (split > 1 and k_tiles / split < c["min_slice_tiles"]):
                continue
            time = math.ceil(k_tiles / split) * (c["a_rows"] + bn) + (
                c["split"] + c["per_slice"] * split if split > 1 else 0)
            key = (time, split, -bn)
            if best is None or key < best[0]:
                best = (key, bn, split, tiles)
    if best is None:
        return None
    _, bn, split, tiles = best
    units = f"{tiles} tiles x {split} K slices" if split > 1 else f"{tiles} tiles"
    rows = "one 64-row tile" if m <= 64 else "two 64-row tiles"  # up to NARROW_TWO_ROWS_M
    reasons.append(f"M = {m}: {rows} over M and {bn}-column tiles over N, {units} in "
                   f"one wave on {cost.SMS} SMs, so that many SMs share the stream of B (the "
                   f"least estimated time of the widths {NARROW_BNS} and K splits)")
    return bn, split


def mid_tile(bm: int, bn: int) -> dict:
    """The config changes of a ``bm`` x ``bn`` tile (the mid-M rule's, and the sweeps'): one
    consumer for 64 rows, two (40 and 232 registers) for 128 or more, no cluster."""
    two = {"consumers": 2, "regs_producer": 40, "regs_consumer": 232}
    return {"bm": bm, "bn": bn, **(two if bm >= 128 else ONE_CONSUMER), "cluster_m": 1,
            "cluster_n": 1}


def _mid(cfg, m, n, k, batch, reasons) -> tuple[int, int, int] | None:
    """(BM, BN, split) of the mid-M rule: of the MID_TILES and the SPLITS up to 8 that MID_SPLIT
    allows, those that break no rule, the one of least estimated time: waves x (K tiles per
    slice x the tile's time per K tile + its time per tile), plus split-K's cost. None when no
    tile fits."""
    c, k_tiles, best = MID_SPLIT, math.ceil(k / cfg.bk), None
    for (bm, bn), (step, fixed) in MID_TILES.items():
        tiles = cost.tiles_of(m, n, bm, bn, batch)
        if cfg.replace(check=False, store="direct", **mid_tile(bm, bn)).violations():
            continue
        for split in (s for s in SPLITS if s <= 8):
            if split > 1 and (k_tiles / split < c["min_slice_tiles"]
                              or tiles * split > c["max_waves"] * cost.SMS):
                continue
            est = math.ceil(tiles * split / cost.SMS) * (math.ceil(k_tiles / split) * step + fixed)
            est += c["split"] + c["per_slice"] * split if split > 1 else 0
            best = min(best or (est, split, bm, bn), (est, split, bm, bn))
    if best is None:
        return None
    est, split, bm, bn = best
    reasons.append(f"M = {m}: tile {bm}x{bn} and the K split below: the least estimated time "
                   f"({est:.1f} us) of the mid-M rule's tiles and K splits")
    return bm, bn, split


def _tile(cfg, m, n, k, batch, changes, reasons, swap=False) -> tuple[int, int]:
    """The block tile (BM, BN), recorded in ``changes``: for a narrow N the smallest of 64, 128
    or 256 rows whose tiles fit one wave (256 when none does); for a small M one 64-row tile;
    else the tile of least ``_tile_time`` (``_big_time`` above SMALL_M rows; 64 x 64 up to
    TILE64_M rows). ``swap``: M and N are the swapped kernel's."""
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
        timed = {t: (_big_time(cfg, t, m, n, k, batch, _apart(cfg, changes, t) is None)[0]
                     if m > SMALL_M else _tile_time(t, m, n, k, batch))
                 for t in TILE_EFFICIENCY if (t != (64, 64) or m <= TILE64_M)
                 and (t[1] % 64 == 0 or m > SMALL_M)}
        best = min(timed, key=timed.get)
        if best != (cfg.bm, cfg.bn):
            pre, tail = timed[cfg.bm, cfg.bn], " or a tail" * (m > SMALL_M)
            reasons.append(f"tile {best[0]}x{best[1]}: {cost.tiles_of(m, n, *best, batch)} tiles, "
                           f"estimated {pre / timed[best]:.2f}x faster than {cfg.bm}x{cfg.bn} "
                           f"(whole waves{tail} x the tile's work / its efficiency)")
    if best != (cfg.bm, cfg.bn):
        changes.update(bm=best[0], bn=best[1])
    if best[0] == 64 and cfg.consumers == 2:  # one 64-row wgmma tile: one consumer
        changes.update(ONE_CONSUMER)
    return best


def _tile_time(tile: tuple[int, int], m: int, n: int, k: int, batch: int) -> float:
    """Estimated time of a problem in ``tile``s, in arbitrary units: whole waves over the SMs
    x the tile's work (BM x BN x (K + K_OVERHEAD)) / the tile's measured efficiency."""
    waves = math.ceil(cost.tiles_of(m, n, *tile, batch) / cost.SMS)
    return waves * tile[0] * tile[1] * (k + K_OVERHEAD) / TILE_EFFICIENCY[tile]


def _big_time(cfg, tile, m, n, k, batch, tail_ok=True) -> tuple[float, int]:
    """(estimated time in ``_tile_time``'s units, split) of an M x N x K problem of more than
    SMALL_M rows in ``tile``s: whole waves, or where ``tail_ok`` (the split would be inline) the
    whole waves and a tail split into the SPLITS slices of least TAIL_SPLIT cost (1: none).
    Not 64 x 64 tiles: untimed in tail_split.py, they lost at 1024 x 576 x 7168 (H200)."""
    best = (_tile_time(tile, m, n, k, batch), 1)
    if not tail_ok or tile == (64, 64):
        return best
    c, k_tiles, work = TAIL_SPLIT, math.ceil(k / cfg.bk), tile[0] * tile[1] / TILE_EFFICIENCY[tile]
    waves, tail = divmod(cost.tiles_of(m, n, *tile, batch), cost.SMS)
    for split in SPLITS[1:]:
        if waves and tail and tail * split <= cost.SMS and k_tiles / split >= c["min_slice_tiles"]:
            units = waves * (k + K_OVERHEAD) + math.ceil(k_tiles / split) * cfg.bk + \
                K_OVERHEAD + c["split"] + c["per_slice"] * split
            best = min(best, (units * work, split))
    return best


def _split(cfg, m, n, k, batch, best, tiles, changes, reasons, small=False) -> int:
    """Split-K slices (1: none), recorded in ``changes``: a narrow (decode) tile, the most SPLITS
    in one wave with slices of at least DECODE_SLICE_TILES K tiles; a small M (unswapped by a
    bias), ``cost.split_k_for``; up to SMALL_M rows, where the tiles leave half the SMs idle,
    the most SPLITS in one wave with slices of at least BIG_SPLIT_TILES K tiles; above, the
    split tail of ``_big_time`` where the tiles outnumber the SMs, else 2 or 4 where they leave
    half or three quarters of the SMs idle over a K of at least 8192 or 16384; for a caller's
    M of at most SWAP_M rows (``small``) in a decode tile, ``splitk.small_split`` of that."""
    k_tiles = math.ceil(k / cfg.bk)

    def most(min_tiles):
        return max([s for s in SPLITS if tiles * s <= cost.SMS and k_tiles / s >= min_tiles]
                   or [1])
    decode = max(8, -(-n // 8) * 8) < cfg.bn  # the narrow-N (decode) tile of ``_tile``
    small = small and decode
    if decode:
        split = most(DECODE_SLICE_TILES)
    elif m <= SWAP_M:
        split = cost.split_k_for(m, n, k, batch, best[0], best[1], cfg.bk)
        if split > 1 and k_tiles / split < cost.MIN_SLICE_TILES:
            split = 1
    elif m <= SMALL_M:
        split = most(BIG_SPLIT_TILES) if tiles * 2 < cost.SMS else 1
    elif tiles > cost.SMS:
        split = _big_time(cfg, best, m, n, k, batch, _apart(cfg, changes, best) is None)[1]
    else:
        split = 4 if tiles * 4 <= cost.SMS and k >= 16384 else \
            2 if tiles * 2 <= cost.SMS and k >= 8192 else 1
    return _record_split(cfg, small_split(cfg, small, split, tiles, best, k, changes, reasons),
                         tiles, best, changes, reasons, small=small)
