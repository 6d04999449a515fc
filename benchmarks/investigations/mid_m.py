"""Block tiles and split-K for M = 128 to 512 (bf16 rcr forward layers): 64-row tiles (one
consumer) of 64 to 256 columns and 128-row tiles (two consumers) of 64 to 256 columns in steps
of 32, each with K unsplit or split into 2, 3, 4, 6 or 8 slices (inline reduction, slices of
at least 8 K tiles, at most two waves of CTAs), beside the shape rules' choice and F.linear, on
the layers of the llm suite's models (training) and of small_m.py's seven other families (held
out). Rings as deep as the rules make them (up to 8 stages); TMA stores where the tile allows,
else direct. Graph-captured (kernel only) as small_m.py times (input sets past twice the L2,
median of 7 replays); every output poisoned first and checked against float64.

    python3 benchmarks/investigations/mid_m.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/mid_m.py run DIR         # GPU: $OUT/mid_m_<GPU>.json
    python3 benchmarks/investigations/mid_m.py summarize FILE  # CPU: this checkout's rules
    python3 benchmarks/investigations/mid_m.py fit FILE ...    # CPU: the mid-M cost model
    python3 benchmarks/investigations/mid_m.py narrow FILE     # CPU: what tiles under 64 wide add

``fit`` fits the cost model of the shape rules' mid-M rule on the training rows of the files
given (one per GPU, pooled): per tile, microseconds per wave = K tiles x a + b (least squares
of the relative error over the unsplit timings), then the split cost c + d x slices (a grid,
0 to 4 us by 0.25 and 0 to 0.8 us by 0.1) of best training geomean x F.linear of the model's
picks over M = 256 and 512 (ties to the earliest point), and reports the picks' training and
held-out geomeans per file and M.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics import shapes

MS = tuple(int(m) for m in os.environ.get("MID_M_MS", "128,256,512").split(","))
"""The M values (``MID_M_MS``, comma-separated, to time others; the file name then ends in
``_M`` and them)."""
TILES = tuple(tuple(map(int, t.split("x"))) for t in os.environ["MID_M_TILES"].split(",")) \
    if "MID_M_TILES" in os.environ else tuple((64, bn) for bn in (64, 128, 192, 256)) + tuple(
        (128, bn) for bn in (64, 96, 128, 160, 192, 224, 256))
"""The block tiles timed (``MID_M_TILES``, comma-separated BMxBN, to time others, such as the
narrow 64 x 16 to 64 x 48 tiles; the file name then ends in ``_tiles``)."""
SPLITS = (1, 2, 3, 4, 6, 8)
SMS = 132
REPLAYS = 7


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and every tile x split."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1)
    k_tiles = math.ceil(k / 64)
    for bm, bn in TILES:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        for split in SPLITS:
            if split > 1 and (k_tiles / split < small_m.MIN_SLICE or tiles * split > 2 * SMS):
                continue
            cfg = small_m._deepest(base.replace(
                check=False, **shapes.mid_tile(bm, bn),
                store="tma" if split == 1 and bn % 64 == 0 else "direct", split_k=split,
                split_inline=split > 1))
            if cfg is not None:
                out[f"{bm}x{bn} sk{split}"] = (cfg, False)
    return out


save = layer_sweep.saver("mid_m", __doc__,
                         ("_M" + "_".join(map(str, MS)) if "MID_M_MS" in os.environ else "")
                         + ("_tiles" if "MID_M_TILES" in os.environ else ""))


def fit(paths: list) -> dict:
    """The mid-M cost model fitted on ``paths``' training rows (see the module doc)."""
    import numpy as np

    docs = [json.loads(Path(p).read_text()) for p in paths]
    waves = lambda r, bm, bn, s: math.ceil(math.ceil(r["M"] / bm) * math.ceil(r["N"] / bn)  # noqa
                                            * s / SMS)
    rows = [r for d in docs for r in d["rows"] if r["set"] == "train"]
    model = {}
    for tile in TILES:
        xs, ys = [], []
        for r in rows:
            v = r["candidates"].get(f"{tile[0]}x{tile[1]} sk1")
            if v:
                xs.append([math.ceil(r["K"] / 64), 1.0])
                ys.append(v["ms"] * 1e3 / waves(r, *tile, 1))
        a, y = np.array(xs), np.array(ys)
        step, fixed = np.linalg.lstsq(a / y[:, None], np.ones_like(y), rcond=None)[0]
        model[tile] = (round(float(step), 4), round(float(fixed), 2))

    memo: dict = {}

    def pick(r, split_cost):  # the checkout's rule with ``model`` and ``split_cost``
        if not shapes.MID_M[0] <= r["M"] <= shapes.MID_M[1] or -(-r["N"] // 8) * 8 < 256:
            # outside the rule, or the narrow-N tile of the 128 x 256 preset
            return "rules"
        key = (r["M"], r["N"], r["K"], split_cost)
        if key not in memo:
            saved = dict(shapes.MID_TILES)
            shapes.MID_TILES.update(model)
            try:
                bm, bn, split = layer_sweep.rule_pick(
                    shapes._mid, shapes.MID_SPLIT,
                    {"split": split_cost[0], "per_slice": split_cost[1]}, *key[:3])
            finally:
                shapes.MID_TILES.update(saved)
            memo[key] = f"{bm}x{bn} sk{split}"
        return memo[key]

    def score(doc, which, split_cost, m=None):
        xs = [r["torch_ms"] / r["candidates"][pick(r, split_cost)]["ms"] for r in doc["rows"]
              if r["set"] == which and m in (None, r["M"])]
        return small_m._geomean(xs)
    grid = [(c / 4, d / 10) for c in range(17) for d in range(9)]
    split_cost = max(grid, key=lambda sc: (math.prod(score(d, "train", sc) for d in docs),
                                           -grid.index(sc)))
    out = {"tiles": {f"{t[0]}x{t[1]}": v for t, v in model.items()}, "split_cost": split_cost,
           "per_file": {d["gpu"]: {f"{w} M={m}": round(score(d, w, split_cost, m), 3)
                                   for w in ("train", "test") for m in MS} for d in docs}}
    print(json.dumps(out))
    return out


def narrow(path: str) -> dict:
    """Writes ``narrow_tiles`` into a run's file: per set and M, the geomean x F.linear of the
    rules, of the fastest candidate, and of the fastest candidate without the tiles under 64
    columns (``best_wide``)."""
    doc = json.loads(Path(path).read_text())
    out = {}
    for which in ("train", "test"):
        for m in MS:
            rows = [r for r in doc["rows"] if r["set"] == which and r["M"] == m]
            best = lambda r, keep: min(v["ms"] for x, v in r["candidates"].items()  # noqa
                                       if keep(x))
            wide = lambda x: x == "rules" or int(x.split()[0].split("x")[1]) >= 64  # noqa
            out[f"{which} M={m}"] = {key: round(small_m._geomean(
                [r["torch_ms"] / best(r, keep) for r in rows]), 3) for key, keep in (
                    ("rules", lambda x: x == "rules"), ("best", lambda x: True),
                    ("best_wide", wide))}
    return layer_sweep.write_summary(path, "narrow_tiles", out)


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit, reports={"narrow": narrow})
