"""Tile widths in steps of 16 for M = 1024 and 4096 (bf16 rcr forward layers): 128-row tiles
(two consumers) 96 to 256 columns wide, unsplit, each stored through TMA (a width that is not
whole 128-byte rows of C stages C in 64- or 32-byte swizzled chunks), and at 144 and 192
columns also stored directly from registers, beside the shape rules' choice and F.linear, on
the layers of the llm suite's models (training) and of small_m.py's seven other families (held
out). cuBLASLt picks such widths (144 x 128, 176 x 128, 112 x 128 tiles) so that a layer's
tiles fill whole waves of the SMs. Rings as deep as shared memory allows (up to 8 stages).
Graph-captured (kernel only) as small_m.py times (input sets past twice the L2, median of 7
replays); every output poisoned first and checked against float64.

    python3 benchmarks/investigations/odd_tiles.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/odd_tiles.py run DIR         # GPU: $OUT/odd_tiles_<GPU>.json
    python3 benchmarks/investigations/odd_tiles.py widths FILE     # CPU: per-width report
    python3 benchmarks/investigations/odd_tiles.py fit FILE ...    # CPU: the widths' efficiency
    python3 benchmarks/investigations/odd_tiles.py ab FILE         # CPU: an _ab run's report

``fit`` chooses, for each width that is not a multiple of 64, its efficiency in
``shapes.TILE_EFFICIENCY`` (throughput per unit of work relative to 128 x 256; a grid of 0.60
to 1.10 by 0.01, coordinate descent from 0 (never chosen), three passes) of best geomean x
F.linear of the rules' picks over the training rows of the files given (one per GPU, pooled),
ties to the lowest; the picks' time is the row's timing of the same kernel (a pick timed only
unsplit, such as a width with its tail split, counts with its unsplit time; ``unmeasured``
says how often). It reports the training and held-out geomeans per file and M beside the
rules' own.

``ODD_TILES_MS`` (comma-separated) times other M values (the file name then ends in ``_M``
and them). ``ODD_TILES_AB=1`` times only the rules' kernel and, as "rules before", the one they
chose before they weighed the widths that are not multiples of 64 and before the mid-M rule
stored its tiles of such widths by TMA (file name ``_ab``).
"""
from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics import ring, shapes

MS = tuple(int(m) for m in os.environ.get("ODD_TILES_MS", "1024,4096").split(","))
WIDTHS = tuple(range(96, 257, 16))
DIRECT = (144, 192)
REPLAYS = 7
SMS = 132


AB = os.environ.get("ODD_TILES_AB") == "1"


@contextmanager
def _odd_widths(efficiency: dict):
    """``shapes.TILE_EFFICIENCY`` with ``efficiency`` ({(128, BN): e}) as its only widths that
    are not multiples of 64 for the duration, the shipped table back after."""
    table = shapes.TILE_EFFICIENCY
    shipped = {t: e for t, e in table.items() if t[1] % 64}
    for t in shipped:
        del table[t]
    table.update(efficiency)
    try:
        yield
    finally:
        for t in efficiency:
            del table[t]
        table.update(shipped)


def _width(label: str) -> int:
    """BN of a "128xBN store" candidate label."""
    return int(label.split()[0].split("x")[1])


def _before(m: int, n: int, k: int):
    """(config, swap) the rules chose before they weighed the widths that are not multiples of
    64 above SMALL_M rows, and before the mid-M rule's tiles of such widths stored C by TMA:
    those stored directly, with the ring as deep as that leaves room for."""
    with _odd_widths({}):
        cfg, swap = small_m.candidates(m, n, k)["rules"]
    if shapes.MID_M[0] <= m <= shapes.MID_M[1] and cfg.bn % 64 and cfg.store == "tma":
        cfg = small_m._deepest(cfg.replace(check=False, store="direct"), ring.MAX_STAGES)
    return cfg, swap


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and each 128 x BN tile
    (with ODD_TILES_AB, "rules before" instead)."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    if AB:
        return {**out, "rules before": _before(m, n, k)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1,
                         split_k=1, split_inline=False)
    for bn in WIDTHS:
        for store in ("tma", "direct") if bn in DIRECT else ("tma",):
            cfg = small_m._deepest(base.replace(check=False, **shapes.mid_tile(128, bn),
                                                store=store))
            if cfg is not None:
                out[f"128x{bn} {store}"] = (cfg, False)
    return out


save = layer_sweep.saver("odd_tiles", __doc__,
                         ("_M" + "_".join(map(str, MS)) if "ODD_TILES_MS" in os.environ else "")
                         + ("_ab" if AB else ""))


def widths(path: str) -> dict:
    """Writes ``widths`` into a run's file: per set and M, the geomean x F.linear of the rules,
    of the fastest TMA-stored 128-row tile of 64-column multiples (``best_64``), of any width
    (``best_128``), of the fastest of those and the rules (``best_or_rules``: what a rule
    choosing among both could reach), and of each width; the geomean of direct-store time over
    TMA-store time per width where both ran; and each width's mean wave fill (tiles over whole
    waves of the SMs)."""
    import json
    from pathlib import Path
    doc = json.loads(Path(path).read_text())
    out = {}

    def best(r, keep):
        return min(v["ms"] for x, v in r["candidates"].items() if keep(x))
    for which in ("train", "test"):
        for m in MS:
            rows = [r for r in doc["rows"] if r["set"] == which and r["M"] == m]
            if not rows:
                continue
            keeps = {"rules": lambda x: x == "rules",
                     "best_64": lambda x: x.endswith("tma") and _width(x) % 64 == 0,
                     "best_128": lambda x: x != "rules", "best_or_rules": lambda x: True}
            keeps.update({x: (lambda y, x=x: y == x) for x in rows[0]["candidates"]
                          if x != "rules"})
            out[f"{which} M={m}"] = {key: round(small_m._geomean(
                [r["torch_ms"] / best(r, keep) for r in rows]), 3) for key, keep in keeps.items()}
    for bn in DIRECT:
        pairs = [r["candidates"][f"128x{bn} direct"]["ms"] / r["candidates"][f"128x{bn} tma"]["ms"]
                 for r in doc["rows"] if f"128x{bn} direct" in r["candidates"]]
        out[f"direct over tma 128x{bn}"] = round(small_m._geomean(pairs), 3)
    waves = {}
    for r in doc["rows"]:
        for x, v in r["candidates"].items():
            if x.endswith("tma"):
                tiles = math.ceil(r["M"] / 128) * math.ceil(r["N"] / _width(x))
                waves.setdefault(x, []).append(tiles / (SMS * math.ceil(tiles / SMS)))
    out["mean_wave_fill"] = {x: round(sum(w) / len(w), 3) for x, w in waves.items()}
    return layer_sweep.write_summary(path, "widths", out)


def ab(path: str) -> dict:
    """Writes ``ab`` into an ODD_TILES_AB run's file (``layer_sweep.ab_summary``)."""
    return layer_sweep.ab_summary(path, "rules before")


def _pick(m: int, n: int, k: int) -> str:
    """The config name this checkout's shape rules pick (with shapes' tables as they stand)."""
    from gemmgen.heuristics.select import decide
    from gemmgen.heuristics.tunedb import TuneDB
    return decide(TuneDB(None), "NVIDIA H200", "bf16", m, n, k, 90, "rcr", "none", True,
                  "native", 1, table=False).config.name


def _score(docs: list, which: str, by_file: bool = False):
    """Geomean x F.linear of the rules' picks over ``which`` rows of ``docs`` (per file and M
    with ``by_file``), and the count of picks not timed as such."""
    from collections import defaultdict
    ratios, unmeasured = defaultdict(list), 0
    for d in docs:
        for r in d["rows"]:
            if r["set"] != which:
                continue
            name, c = _pick(r["M"], r["N"], r["K"]), r["candidates"]
            times = [v["ms"] for v in c.values() if v["config"] == name]
            if not times:  # the same tile unsplit
                unmeasured += 1
                times = [v["ms"] for v in c.values()
                         if v["config"].split("_sk")[0] == name.split("_sk")[0]]
                times = times or [c["rules"]["ms"]]
            key = (d["gpu"], r["M"]) if by_file else "all"
            ratios[key].append(r["torch_ms"] / min(times))
    return {k: small_m._geomean(v) for k, v in ratios.items()}, unmeasured


def fit(paths: list) -> dict:
    """The widths' efficiencies fitted on ``paths``' training rows (see the module doc)."""
    import json
    from pathlib import Path
    docs = [json.loads(Path(p).read_text()) for p in paths]
    with _odd_widths({}):
        before = {w: _score(docs, w, True)[0] for w in ("train", "test")}
    new = [(128, bn) for bn in WIDTHS if bn % 64]
    grid = [0] + [round(0.60 + 0.01 * i, 2) for i in range(51)]
    chosen = {t: 0 for t in new}

    def kept(trial: dict) -> dict:  # the widths given an efficiency (0: not weighed)
        return {t: e for t, e in trial.items() if e}
    for _ in range(3):
        for t in new:
            scores = {}
            for e in grid:
                with _odd_widths(kept({**chosen, t: e})):
                    scores[e] = _score(docs, "train")[0]["all"]
            chosen[t] = max(grid, key=lambda e: (round(scores[e], 6), -e))
    with _odd_widths(kept(chosen)):
        after = {w: _score(docs, w, True) for w in ("train", "test")}
    out = {"efficiency": {f"{t[0]}x{t[1]}": e for t, e in chosen.items()},
           "per_file": {f"{g} {w} M={m}": [round(before[w][g, m], 3), round(v, 3)]
                        for w in ("train", "test") for (g, m), v in after[w][0].items()},
           "unmeasured": {w: after[w][1] for w in after}}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit,
                     reports={"widths": widths, "ab": ab})
