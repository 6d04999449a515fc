"""How many slices a split-K of a narrow (decode) tile wants once it can sum in a cluster: for
each forward layer of small_m.py's two sets (bf16 rcr) at M = 1, 16, 32 and 64 where the
shape rules split K, the rules' tile unsplit and split into 2, 3, 4, 6 and 8 slices, each
summed in a cluster (``split_cluster``) and inline (the last slice to arrive sums), beside
the rules' own kernel and F.linear. Timed as small_m.py times (graph-captured, input sets
past twice the L2, median of 7 replays); every output poisoned first and checked against
float64.

    python3 benchmarks/investigations/split_count.py compile DIR  # CPU: the cubins
    python3 benchmarks/investigations/split_count.py run DIR      # GPU: $OUT/split_count_<GPU>.json
    python3 benchmarks/investigations/split_count.py fit FILE     # CPU: the small-M cluster rule

``fit`` scores a grid of rules on the run's training rows: the most slices (up to 8) whose
tiles x slices are at most CTAS and whose slices hold MIN K tiles or more, in a cluster; where
none fits, K unsplit or the run's rules' own split. It keeps the point of best training
geomean x F.linear, reports it on both sets (geomean and worst row, per
set and M), and scores this checkout's rules on the same timings (``this_checkout``). Ties go
to the most K tiles a slice (the fewest slices), then to the earliest point.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("SPLIT_COUNT_MS", "1,16,32,64").split(","))
SPLITS = (2, 3, 4, 6, 8)
REPLAYS = 7


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules", the rules' tile unsplit ("sk1") and each split of
    SPLITS summed in a cluster ("skSc") and inline ("skSi"), where the config breaks no
    rule."""
    cfg, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (cfg, swap)}
    if cfg.split_k == 1:
        return out
    kinds = {"sk1": dict(split_k=1, split_inline=False, split_cluster=False)}
    for s in SPLITS:
        kinds[f"sk{s}c"] = dict(split_k=s, split_inline=False, split_cluster=True,
                                persistent=False)
        kinds[f"sk{s}i"] = dict(split_k=s, split_inline=True, split_cluster=False,
                                persistent=True)
    for label, kw in kinds.items():
        trial = cfg.replace(check=False, **kw)
        if not trial.violations():
            out[label] = (trial, swap)
    return out


def problems() -> list:
    """[(set, N, K, M)] of small_m.py's layers at MS where the rules split K."""
    return [p for p in layer_sweep.problems(MS) if len(candidates(p[3], p[1], p[2])) > 1]


save = layer_sweep.saver("split_count", __doc__)


def _tiles(r) -> tuple[int, int]:
    """(tiles, K tiles) of a row's rules' kernel."""
    cfg, swap = small_m.candidates(r["M"], r["N"], r["K"])["rules"]
    m, n = (r["N"], r["M"]) if swap else (r["M"], r["N"])
    return math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn), math.ceil(r["K"] / cfg.bk)


def _scores(rows, label) -> dict:
    """Per set and M (and all M): geomean and worst F.linear time over the time of the
    candidate ``label(row)`` names."""
    out = {}
    for key, sel in layer_sweep.by_set_and_m(rows, MS):
        xs = [r["torch_ms"] / r["candidates"][label(r)]["ms"] for r in sel]
        out[key] = {"rows": len(xs), "geomean": round(small_m._geomean(xs), 3),
                    "worst": round(min(xs), 3)}
    return out


def fit(path: str) -> dict:
    """Writes ``fit`` and ``this_checkout`` into a run's file (see the module doc)."""
    doc = json.loads(Path(path).read_text())
    rows, info = doc["rows"], {}
    for r in rows:
        info[id(r)] = _tiles(r)

    def rule(ctas, least, otherwise):
        def label(r):
            tiles, k_tiles = info[id(r)]
            s = next((s for s in (8, 6, 4, 3, 2) if tiles * s <= ctas
                      and k_tiles / s >= least), None)
            pick = f"sk{s}c" if s else otherwise
            return pick if pick in r["candidates"] else "rules"
        return label
    grid = [(c, t, o) for o in ("sk1", "rules") for c in (64, 80, 96, 112)
            for t in (2, 3, 4, 6, 8, 12)]
    train = [r for r in rows if r["set"] == "train"]
    best = max(grid, key=lambda g: (round(small_m._geomean(
        [r["torch_ms"] / r["candidates"][rule(*g)(r)]["ms"] for r in train]), 6), g[1],
        -grid.index(g)))
    now = {}
    for r in rows:
        cfg = small_m.candidates(r["M"], r["N"], r["K"])["rules"][0]
        now[id(r)] = next(x for x, v in r["candidates"].items()
                          if v["config"] == cfg.name and x != "rules")
    doc["fit"] = {"ctas": best[0], "min_slice_tiles": best[1], "otherwise": best[2],
                  "rules": _scores(rows, lambda r: "rules"), "fitted": _scores(rows, rule(*best))}
    doc["this_checkout"] = _scores(rows, lambda r: now[id(r)])
    Path(path).write_text(json.dumps(doc, indent=1))
    print(json.dumps({k: doc[k] for k in ("fit", "this_checkout")}, indent=1))
    return doc["fit"]

if __name__ == "__main__":
    if sys.argv[1] == "compile":
        layer_sweep.compile_candidates(sys.argv[2], problems(), candidates)
    elif sys.argv[1] == "fit":
        fit(sys.argv[2])
    else:
        layer_sweep.sweep(sys.argv[2], problems(), candidates, REPLAYS, save)
