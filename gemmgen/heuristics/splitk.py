"""How the shape rules' split-K sums its slices: in a cluster (the slices of a tile one
cluster, through distributed shared memory), inline (the last slice of a tile to arrive reads
the others' partials from a workspace) or apart (a second kernel), and the reason each gives."""
from __future__ import annotations

from . import cost

CLUSTER_SPLIT_CTAS = cost.SMS // 2
"""A split-K whose tiles x slices are at most this many CTAs (half the SMs), each tile split,
sums its slices in a cluster (``split_cluster``: one tile per CTA) where the kernel allows
it. The inline reduction's time over the cluster's, same tile and split (bf16 rcr, M = 128
to 1024, 64 x 64 to 128 x 128 tiles, 2 to 8 slices, H200; split_cost_NVIDIA_H200.json):
1.071 with one consumer (6 tiles and splits) and 1.077 with two (11), every one faster; with
more CTAs 0.754 and 0.939, the clusters' launch costing more than the inline reduction."""


SMALL_CLUSTER = {"ctas": 96, "min_slice_tiles": 6}
"""Where the rules split K for a caller's M of at most 64 rows in a decode tile or the narrow-N
rule's (not the block tiles of an M that keeps its operands: unmeasured), the split becomes the
most slices (up to 8) whose tiles x slices are at most ``ctas`` CTAs and whose slices hold at
least ``min_slice_tiles`` K tiles, summed in a cluster; K is not split where none fits. The
point of a grid (``ctas`` 64 to 112, ``min_slice_tiles`` 2 to 12, unsplit or the rules' inline
split where none fits) of best training geomean x F.linear (ties to the fewest slices), the
other families scored after (split_count.py ``fit``, H200, bf16 rcr, M = 1 to 64, the 74 layer
shapes where the rules split; split_count_NVIDIA_H200.json): training 1.12 -> 1.2, held out
1.032 -> 1.082."""


def small_split(cfg, small: bool, split: int, tiles: int, best, k: int, changes,
                reasons) -> int:
    """The slices of a split-K the rules chose (``split``, of ``tiles`` ``best`` tiles over a
    K of ``k``): for a caller's small M (``small``: a decode or narrow-N tile) that a cluster
    can sum, SMALL_CLUSTER's (saying so in ``reasons``); else ``split``."""
    if (not small or split == 1 or apart(cfg, changes, best) is not None
            or _clustered(cfg, 2, tiles, changes, 10 ** 9) is None):
        return split
    c, k_tiles = SMALL_CLUSTER, -(-k // cfg.bk)
    out = next((s for s in (8, 6, 4, 3, 2) if tiles * s <= c["ctas"]
                and k_tiles / s >= c["min_slice_tiles"]), 1)
    reasons.append(f"a small M: {out} slices, the most whose tiles x slices are at most "
                   f"{c['ctas']} CTAs (one cluster a tile) with {c['min_slice_tiles']} K tiles "
                   f"a slice or more" if out > 1 else
                   f"a small M: no split of at most {c['ctas']} CTAs (one cluster a tile) fits, "
                   f"and a split summed inline costs more than it gains: K not split")
    return out


def apart(cfg, changes, tile) -> str | None:
    """Why a split-K of ``cfg`` with ``changes`` in ``tile``s would be summed by a second kernel
    (None: inline, where it compiles clean: not ping-pong, not a wide column-major C)."""
    wide_col = changes.get("layout", cfg.layout)[2] == "c" and tile[1] >= 128
    return ("an epilogue tree" if getattr(cfg, "extended", False) else  # H51
            "ping-pong consumers" if cfg.pingpong else
            f"a column-major C tile {tile[1]} wide (an inline sum would spill)" if wide_col
            else None)


def _clustered(cfg, split, tiles, changes, ctas) -> dict | None:
    """The changes of a cluster split-K into ``split`` slices where ``tiles`` x ``split`` is at
    most ``ctas`` and the shaped kernel takes it (a wgmma kernel, one tile per CTA, direct
    stores), else None."""
    if "split_cluster" not in type(cfg).__dataclass_fields__ or tiles * split > ctas:
        return None
    ours = {"split_k": split, "split_inline": False, "split_cluster": True,
            "persistent": False, "store": "direct"}
    return ours if not cfg.replace(check=False, **{**changes, **ours}).violations() else None


def record_split(cfg, split, tiles, best, changes, reasons, small=False) -> int:
    """Record ``split`` slices in ``changes`` (in a cluster where the tiles x slices are at
    most CLUSTER_SPLIT_CTAS, or SMALL_CLUSTER's for a caller's ``small`` M; else inline where it
    compiles clean, else apart), say why and return ``split``."""
    if split > 1:
        why_apart = apart(cfg, changes, best)
        ctas = SMALL_CLUSTER["ctas"] if small else CLUSTER_SPLIT_CTAS
        cluster = _clustered(cfg, split, tiles, changes, ctas) if why_apart is None else None
        changes.update(cluster or {"split_k": split, "split_inline": why_apart is None})
        how = (f"each tile's slices are one cluster of {split} CTAs, which sum them in order "
               f"through distributed shared memory, each storing a share of the tile (at most "
               f"{ctas} CTAs)" if cluster else
               "the last slice of each tile to finish sums them in order (deterministic) in "
               "the same launch" if why_apart is None else "a second kernel sums them in "
               f"order (deterministic): {why_apart}")
        waves, tail = divmod(tiles, cost.SMS)
        what = (f"{tiles} tiles fill {100 * tiles / cost.SMS:.0f}% of {cost.SMS} SMs: K split "
                f"into {split} slices" if tiles <= cost.SMS else
                f"{tiles} tiles: {waves} whole wave{'s' * (waves > 1)} on {cost.SMS} SMs and "
                f"{tail} more, whose K is split into {split} slices (the others are not split)")
        reasons.append(f"{what}; {how}")
    else:
        reasons.append(f"{tiles} tiles: {tiles / cost.SMS:.2f} waves on {cost.SMS} SMs, "
                       f"K not split")
    return split
