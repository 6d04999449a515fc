"""Unswapped narrow tiles for 16 < M <= 64 (bf16 rcr forward layers): the tokens take one
64-row wgmma tile, the weights narrow N tiles (BN 16, 24, 32, 48 or 64), so that more CTAs
share the weight stream than the swapped kernel's 64-row weight tiles give; each with K unsplit
or split into 2, 3, 4, 6 or 8 slices (inline reduction, slices of at least 8 K tiles), beside
the shape rules' choice and F.linear, on the layers of the llm suite's models (training) and of
small_m.py's seven other families (held out). Graph-captured (kernel only) as small_m.py times
(input sets past twice the L2, median of 9 replays); every output poisoned first and checked
against float64.

    python3 benchmarks/investigations/narrow_m.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/narrow_m.py run DIR         # GPU: $OUT/narrow_m_<GPU>.json
    python3 benchmarks/investigations/narrow_m.py summarize FILE  # CPU: this checkout's rules
    python3 benchmarks/investigations/narrow_m.py fit FILE ...    # CPU: NARROW_COST's grid

``fit`` scores every point of a grid of NARROW_COST constants (a_rows, split, per_slice) by the
geomean x F.linear of the rule's picks over the training rows of all the files given (one per
GPU), ties to the earliest point, and reports that point's training and held-out geomeans per
file.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics.shapes import narrow_tile

MS = tuple(int(m) for m in os.environ.get("NARROW_M_MS", "32,64").split(","))
"""The M values (``NARROW_M_MS``, comma-separated, to time others, such as 128 with two 64-row
tiles over M; the file name then ends in ``_M`` and them)."""
BNS = (16, 24, 32, 48, 64)
SPLITS = (1, 2, 3, 4, 6, 8)


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and the narrow tiles."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    k_tiles = math.ceil(k / 64)
    for bn in BNS:
        for split in SPLITS:
            if split > 1 and k_tiles / split < small_m.MIN_SLICE:
                continue
            cfg = small_m._deepest(rules.replace(
                check=False, layout="rcr", store="direct", split_k=split, **narrow_tile(bn),
                split_inline=split > 1, persistent=True, stages=3))
            if cfg is not None:
                out[f"64x{bn} sk{split}"] = (cfg, False)
    return out


save = layer_sweep.saver("narrow_m", __doc__,
                         "_M" + "_".join(map(str, MS)) if "NARROW_M_MS" in os.environ else "")


GRID = {"a_rows": (0, 16, 32, 64, 96, 128, 192, 256), "split": tuple(range(0, 2049, 128)),
        "per_slice": tuple(range(0, 257, 32))}


def fit(paths: list) -> dict:
    """The GRID point of best training geomean over ``paths``' rows (see the module doc)."""
    from gemmgen.heuristics import shapes
    docs = [json.loads(Path(p).read_text()) for p in paths]
    memo: dict = {}

    def pick(r, consts):
        if not shapes.NARROW_M < r["M"] <= shapes.SWAP_M:
            return "rules"
        key = (r["M"], r["N"], r["K"], tuple(consts.values()))
        if key not in memo:
            got = layer_sweep.rule_pick(shapes._narrow, shapes.NARROW_COST, consts, *key[:3])
            memo[key] = "rules" if got is None else f"64x{got[0]} sk{got[1]}"
        return memo[key]

    def score(which, consts, doc):
        xs = [r["torch_ms"] / r["candidates"][pick(r, consts)]["ms"]
              for r in doc["rows"] if r["set"] == which and r["M"] == 64]
        return small_m._geomean(xs)
    best = None
    for a in GRID["a_rows"]:
        for sp in GRID["split"]:
            for ps in GRID["per_slice"]:
                consts = {"a_rows": a, "split": sp, "per_slice": ps}
                train = math.prod(score("train", consts, d) for d in docs)
                if best is None or train > best[0] + 1e-12:
                    best = (train, consts)
    out = {**best[1], "per_file": {
        d["gpu"]: {w: round(score(w, best[1], d), 3) for w in ("train", "test")}
        for d in docs}}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, 9, save, fit)
