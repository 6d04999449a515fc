"""Cluster multicast and split-K on the layers whose tiles leave SMs idle (M = 256 to 1024, bf16
rcr): 64 x 64, 64 x 128, 128 x 64, 128 x 128 and 128 x 256 tiles, each unsplit with clusters of
1 x 1, 2 x 1 (two CTAs along M share B's tile) and 1 x 2 (along N, A's), and inline split-K 2 and
4 where the slices fit one wave, beside the shape rules' choice and F.linear. Timed as
layer_sweep.py sweeps (graph-captured, two rounds in opposite orders, the mean kept); every
output checked against float64.

    python3 benchmarks/investigations/clusters_idle.py compile DIR  # CPU: the cubins
    python3 benchmarks/investigations/clusters_idle.py run DIR      # GPU: $OUT/clusters_idle_*.json
"""
from __future__ import annotations

import math
import os
import sys

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics import shapes

WANT = {(1024, 512, 3584), (1024, 576, 7168), (1024, 768, 3072), (1024, 2304, 768),
        (1024, 2304, 2048), (1024, 512, 2048), (512, 1024, 4096), (512, 768, 3072),
        (256, 512, 2048), (256, 2304, 2048), (1024, 128, 896), (1024, 1536, 7168)}
"""(M, N, K) of the layers timed: the rules' lowest rows at M = 256 to 1024."""


def problems() -> list:
    return [p for p in layer_sweep.problems((256, 512, 1024)) if (p[3], p[1], p[2]) in WANT]


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" and every tile x cluster, and tile x split."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1)
    for bm, bn in ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256)):
        kw = shapes.mid_tile(bm, bn)
        for cm, cn in ((1, 1), (2, 1), (1, 2)):
            cfg = small_m._deepest(base.replace(check=False, store="tma", split_k=1,
                                                split_inline=False, **{**kw, "cluster_m": cm,
                                                                       "cluster_n": cn}))
            if cfg is not None:
                out[f"{bm}x{bn} cl{cm}x{cn}"] = (cfg, False)
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        for s in (2, 4):
            if tiles * s <= 132 and math.ceil(k / 64) / s >= 4:
                cfg = small_m._deepest(base.replace(check=False, store="tma", split_k=s,
                                                    split_inline=True, **kw))
                if cfg is not None:
                    out[f"{bm}x{bn} sk{s}"] = (cfg, False)
    return out


save = layer_sweep.saver("clusters_idle", __doc__)


if __name__ == "__main__":
    os.environ.setdefault("SWEEP_ROUNDS", "2")
    if sys.argv[1] == "compile":
        layer_sweep.compile_candidates(sys.argv[2], problems(), candidates)
    else:
        layer_sweep.sweep(sys.argv[2], problems(), candidates, 7, save)
