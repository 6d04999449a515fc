"""64-row tiles of the widths between 64 and 192 columns in steps of 16 for M = 256 to 1024
(bf16 rcr forward layers), each unsplit and split into 2 to 4 slices (inline, one wave, slices
of at least 8 K tiles), beside the shape rules' choice and F.linear, on the layers of the llm
suite's models (training) and of small_m.py's seven other families (held out). cuBLASLt runs
such layers in one wave of 64-row tiles of such widths (72 x 64, 96 x 64, 48 x 64 in its
names, whose first figure runs along N: cublas_kernels_*.json), where the mid-M rule weighs
only 64, 128 and 192. Each candidate is what the shape rules build for that tile and split
(the mid-M rule's path forced: the same store, waiter, ring depth and C staging). Graph-captured
(kernel only) as small_m.py times (input sets past twice the L2, median of 7 replays); every
output poisoned first and checked against float64.

    python3 benchmarks/investigations/mid_widths.py compile DIR  # CPU: the cubins
    python3 benchmarks/investigations/mid_widths.py run DIR      # GPU: $OUT/mid_widths_<GPU>.json
    python3 benchmarks/investigations/mid_widths.py fit FILE     # CPU: the widths' cost model
    python3 benchmarks/investigations/mid_widths.py lower FILE   # CPU: the rule from the run's M

``fit`` fits, per width, microseconds per wave = K tiles x a + b on the training rows' unsplit
timings (mid_m.py's model, least squares of the relative error), then the mid-M rule's split
cost ``shapes.MID_SPLIT`` (split + per_slice x slices: a grid, 0 to 4 us by 0.5 and 0 to 0.8 us
by 0.2, of best training geomean at M = 256 and 512, ties to the earliest point; a few minutes
of CPU), and reports what the mid-M rule picks with the tables as shipped and with those
(``fitted``): the training and held-out geomeans x F.linear per M (a pick that was not timed
counts with the rules' time, and is counted).
``lower`` scores the rules' picks on a run's rows as shipped and with the mid-M rule starting at
the run's smallest M (``lower`` in the file: geomeans x F.linear per set and M, and the picks
not timed). ``MID_WIDTHS_MS`` (comma-separated) times other M values; ``MID_WIDTHS_TALL=1`` adds the
mid-M rule's 128-row tiles (``shapes.MID_TILES``), built the same way (file name ``_tall``).

The shape rules of this checkout against an older tree's (OLD) where their kernels differ at
M = 256 and 512, $OUT/mid_widths_ab_<GPU>.json (rules_ab.py; ``MID_WIDTHS_AB_MS`` for other M
values, the file name then ending in ``_M`` and them):

    python3 benchmarks/investigations/mid_widths.py ab-compile DIR OLD  # CPU: both sides
    python3 benchmarks/investigations/mid_widths.py ab-run DIR          # GPU: into $OUT
"""
from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager

import layer_sweep  # beside this script
import rules_ab
import small_m
from gemmgen.heuristics import shapes

MS = tuple(int(m) for m in os.environ.get("MID_WIDTHS_MS", "256,512,1024").split(","))
WIDTHS = tuple(range(64, 193, 16))
SPLITS = (1, 2, 3, 4)
REPLAYS = 7
SMS = 132
MIN_SLICE = 8
TALL = os.environ.get("MID_WIDTHS_TALL") == "1"
AB_MS = tuple(int(m) for m in os.environ.get("MID_WIDTHS_AB_MS", "256,512").split(","))


@contextmanager
def _forced(bm: int, bn: int, split: int):
    """The shape rules with the mid-M rule applying at every M and choosing ``bm`` x ``bn``
    in ``split`` slices, for the duration."""
    saved = shapes._mid, shapes.MID_M
    shapes._mid = lambda *a: (bm, bn, split)
    shapes.MID_M = (1, 1 << 30)
    try:
        yield
    finally:
        shapes._mid, shapes.MID_M = saved


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and "BMxBN skS" for each
    tile and split that fits: unsplit up to two waves, split in one."""
    out = {"rules": small_m.candidates(m, n, k)["rules"]}
    k_tiles = math.ceil(k / 64)
    tall = [(128, bn) for bm, bn in shapes.MID_TILES if bm == 128] if TALL else []
    for bm, bn in [(64, bn) for bn in WIDTHS] + tall:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        for split in SPLITS:
            if tiles * split > (2 if split == 1 else 1) * SMS or k_tiles / split < MIN_SLICE:
                continue
            with _forced(bm, bn, split):
                cfg, swap = small_m.candidates(m, n, k)["rules"]
            if (cfg.bm, cfg.bn, max(cfg.split_k, 1)) == (bm, bn, split) and not swap:
                out[f"{bm}x{bn} sk{split}"] = (cfg, False)
    return out


save = layer_sweep.saver("mid_widths", __doc__,
                         ("_M" + "_".join(map(str, MS)) if "MID_WIDTHS_MS" in os.environ else "")
                         + ("_tall" if TALL else ""))


def fit(paths: list) -> dict:
    """The widths' cost model fitted on the run's training rows, and the mid-M rule's picks
    with it (see the module doc)."""
    import json
    from pathlib import Path

    import numpy as np
    rows = [r for p in paths for r in json.loads(Path(p).read_text())["rows"]]
    model = {}
    for bn in WIDTHS:
        pts = [(math.ceil(math.ceil(r["M"] / 64) * math.ceil(r["N"] / bn) / SMS),
                math.ceil(r["K"] / 64), v["ms"] * 1e3) for r in rows if r["set"] == "train"
               for x, v in r["candidates"].items() if x == f"64x{bn} sk1"]
        if len(pts) < 4:
            continue
        # time / waves = a x K tiles + b, weighted by 1 / time: least relative error
        a = np.array([[kt / (t / w), 1 / (t / w)] for w, kt, t in pts])
        coef = np.linalg.lstsq(a, np.ones(len(pts)), rcond=None)[0]
        model[64, bn] = (round(float(coef[0]), 4), round(float(coef[1]), 2))
    out = {"model": {f"{t[0]}x{t[1]}": v for t, v in model.items()}}
    saved, saved_split = dict(shapes.MID_TILES), dict(shapes.MID_SPLIT)
    try:
        out["as_shipped"] = _score(rows)
        shapes.MID_TILES.update(model)
        mid = [r for r in rows if r["M"] in (256, 512)]
        grid = {}
        for split in (x / 2 for x in range(9)) if any(r["set"] == "train" for r in mid) else ():
            for per_slice in (round(x / 5, 1) for x in range(5)):
                shapes.MID_SPLIT.update(split=split, per_slice=per_slice)
                grid[split, per_slice] = _score(mid)["train M=all"][0]
        if grid:  # none without training rows at M = 256 or 512: the shipped split cost
            best = max(grid, key=lambda p: grid[p])  # the first of the best
            out["split"] = {"split": best[0], "per_slice": best[1]}
            shapes.MID_SPLIT.update(out["split"])
        out["fitted"] = _score(rows)
    finally:
        shapes.MID_TILES.clear()
        shapes.MID_TILES.update(saved)
        shapes.MID_SPLIT.update(saved_split)
    if len(paths) == 1:
        return layer_sweep.write_summary(paths[0], "fit", out)
    print(json.dumps(out, indent=1))
    return out


def lower(path: str) -> dict:
    """The rules' picks on ``path``'s rows as shipped and with the mid-M rule from the run's
    smallest M (see the module doc), written into the file."""
    import json
    from pathlib import Path
    rows = json.loads(Path(path).read_text())["rows"]
    low, saved = min(r["M"] for r in rows), shapes.MID_M
    out = {"as_shipped": _score(rows)}
    shapes.MID_M = (low, saved[1])
    try:
        out[f"from M = {low}"] = _score(rows)
    finally:
        shapes.MID_M = saved
    return layer_sweep.write_summary(path, "lower", out)


def _score(rows: list) -> dict:
    """{"SET M=m": [geomean x F.linear, picks not timed]} of this checkout's rules (with
    shapes' tables as they stand) over ``rows``."""
    picks = {}
    for r in rows:
        cfg = small_m.candidates(r["M"], r["N"], r["K"])["rules"][0]
        found = [v["ms"] for v in r["candidates"].values() if v["config"] == cfg.name]
        picks[id(r)] = (r["torch_ms"] / (found[0] if found else r["candidates"]["rules"]["ms"]),
                        not found)
    return {key: [round(small_m._geomean([picks[id(r)][0] for r in sel]), 3),
                  sum(picks[id(r)][1] for r in sel)]
            for key, sel in layer_sweep.by_set_and_m(rows, sorted({r["M"] for r in rows}))}


if __name__ == "__main__":
    if sys.argv[1] == "ab-compile":
        rules_ab.compile(sys.argv[2], sys.argv[3], AB_MS)
    elif sys.argv[1] == "ab-run":
        rules_ab.run(sys.argv[2], "mid_widths_ab", __doc__, AB_MS, "_M" + "_".join(
            map(str, AB_MS)) if "MID_WIDTHS_AB_MS" in os.environ else "")
    else:
        layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit, reports={"lower": lower})
