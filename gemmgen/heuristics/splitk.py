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


def apart(cfg, changes, tile) -> str | None:
    """Why a split-K of ``cfg`` with ``changes`` in ``tile``s would be summed by a second kernel
    (None: inline, where it compiles clean: not ping-pong, not a wide column-major C)."""
    wide_col = changes.get("layout", cfg.layout)[2] == "c" and tile[1] >= 128
    return ("an epilogue tree" if getattr(cfg, "extended", False) else  # H51
            "ping-pong consumers" if cfg.pingpong else
            f"a column-major C tile {tile[1]} wide (an inline sum would spill)" if wide_col
            else None)


def _clustered(cfg, split, tiles, changes) -> dict | None:
    """The changes of a cluster split-K into ``split`` slices where ``tiles`` x ``split`` is at
    most CLUSTER_SPLIT_CTAS and the shaped kernel takes it (a wgmma kernel, one tile per CTA,
    direct stores), else None."""
    if "split_cluster" not in type(cfg).__dataclass_fields__ or tiles * split > CLUSTER_SPLIT_CTAS:
        return None
    ours = {"split_k": split, "split_inline": False, "split_cluster": True,
            "persistent": False, "store": "direct"}
    return ours if not cfg.replace(check=False, **{**changes, **ours}).violations() else None


def record_split(cfg, split, tiles, best, changes, reasons) -> None:
    """Record ``split`` slices in ``changes`` (in a cluster, else inline where it compiles
    clean, else apart) and say why."""
    if split > 1:
        why_apart = apart(cfg, changes, best)
        cluster = _clustered(cfg, split, tiles, changes) if why_apart is None else None
        changes.update(cluster or {"split_k": split, "split_inline": why_apart is None})
        how = (f"each tile's slices are one cluster of {split} CTAs, which sum them in order "
               f"through distributed shared memory, each storing a share of the tile (at most "
               f"{CLUSTER_SPLIT_CTAS} CTAs)" if cluster else
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
