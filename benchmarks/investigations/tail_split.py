"""Split-K over the tail for problems of more than one wave (bf16 rcr forward layers, M = 1024
and 4096): the block tiles the shape rules weigh above 256 rows, each unsplit and with the
tiles past the persistent grid's last whole wave split into 2 to 16 slices (inline reduction;
the split tiles' slices at most one wave, slices of at least 4 K tiles), beside the shape
rules' choice and F.linear, on the layers of the llm suite's models (training) and of
small_m.py's seven other families (held out). Rings as deep as shared memory allows; TMA
stores where the tile is whole 64-column chunks. Graph-captured (kernel only) as small_m.py
times (input sets past twice the L2, median of 7 replays), in two rounds, the second in the
reverse order, each kernel's mean of the two kept (F.linear's too); every output poisoned
first and checked against float64.

    python3 benchmarks/investigations/tail_split.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/tail_split.py run DIR         # GPU: $OUT/tail_split_*.json
    python3 benchmarks/investigations/tail_split.py summarize FILE  # CPU: this checkout's rules
    python3 benchmarks/investigations/tail_split.py fit FILE ...    # CPU: the tail's cost

``fit`` scores the shape rules (``shapes.shaped``) over a grid of their tail cost's constants
(``shapes.TAIL_SPLIT``) on the training rows of the files given (one per GPU, pooled), takes
the point of best training geomean x F.linear, and writes into each file (``fit``) the training
and held-out geomeans per M of the rules at that point and of the same rules without a tail
split.
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

MS = tuple(int(m) for m in os.environ.get("TAIL_MS", "1024,4096").split(","))
TILES = tuple(tuple(int(x) for x in t.split("x")) for t in os.environ.get(
    "TAIL_TILES", "128x256,256x128,128x192,128x128,64x256,64x128").split(","))
"""The block tiles timed (``TAIL_TILES``, comma-separated BMxBN, to time others; the file name
then ends in ``_T`` and them)."""
SPLITS = (2, 3, 4, 6, 8, 12, 16)
MIN_SLICE = 4  # K tiles (of 64) a slice keeps at least
SMS = 132
REPLAYS = 7


def tail_splits(tiles: int, k_tiles: int) -> list:
    """The splits of the tiles past the last whole wave that keep their slices in one wave."""
    tail = tiles % SMS
    if tiles <= SMS or tail == 0:
        return []
    return [s for s in SPLITS if tail * s <= SMS and k_tiles / s >= MIN_SLICE]


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and every tile x split."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1)
    for bm, bn in TILES:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        for split in (1, *tail_splits(tiles, math.ceil(k / 64))):
            cfg = small_m._deepest(base.replace(
                check=False, **shapes.mid_tile(bm, bn), split_k=split, split_inline=split > 1,
                store="tma" if bn % 64 == 0 else "direct"))
            if cfg is not None:
                out[f"{bm}x{bn} sk{split}"] = (cfg, False)
    return out


save = layer_sweep.saver("tail_split", __doc__, (
    "_M" + "_".join(map(str, MS)) if "TAIL_MS" in os.environ else "") + (
    "_T" + "_".join(f"{a}x{b}" for a, b in TILES) if "TAIL_TILES" in os.environ else ""))


def fit(paths: list) -> dict:
    """The tail cost's constants of best training geomean (see the module doc)."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    memo: dict = {}

    def rules(cfg, m, n, k, batch, reasons):  # the checkout's shape rules, whole
        return shapes.shaped(cfg, m, n, k, "rcr", "none", True, batch, reasons)[0]

    def pick(r, values):
        key = (r["M"], r["N"], r["K"], tuple(sorted(values.items())))
        if key not in memo:
            c = layer_sweep.rule_pick(rules, shapes.TAIL_SPLIT, values, *key[:3])
            label = f"{c.bm}x{c.bn} sk{c.split_k}"  # else another rule's tile (narrow N)
            memo[key] = label if label in r["candidates"] else "rules"
        return memo[key]

    def score(doc, which, values, m=None):
        xs = [r["torch_ms"] / r["candidates"][pick(r, values)]["ms"] for r in doc["rows"]
              if r["set"] == which and m in (None, "all", r["M"])]
        return small_m._geomean(xs)
    grid = [{"split": a, "per_slice": b} for a in range(0, 1025, 128) for b in range(0, 513, 64)]
    best = max(grid, key=lambda v: (math.prod(score(d, "train", v) for d in docs),
                                    -grid.index(v)))
    never = {"split": 10 ** 9, "per_slice": 0}  # the same rules without a tail split
    out = {"tail_split": best}
    for path, d in zip(paths, docs):
        d["fit"] = {"tail_split": best, **{
            f"{name} {w} M={m}": round(score(d, w, v, m), 3) for name, v in (
                ("rules", best), ("no tail split", never)) for w in ("train", "test")
            for m in (*MS, "all")}}
        Path(path).write_text(json.dumps(d, indent=1))
        out[d["gpu"]] = d["fit"]
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    os.environ.setdefault("SWEEP_ROUNDS", "2")
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit)
