"""Stream-K for the forward layers that leave the SMs half empty (bf16 rcr, M = 128 to 1024):
each of five tiles (64 x 128, 64 x 192 with one consumer; 128 x 128, 128 x 192, 128 x 256)
unsplit on the persistent grid, and with stream-K over the tiles past its last whole wave (all
of them when they fit one wave), at most 3 or 4 pieces a tile (``WgmmaConfig.stream_k``),
beside the shape rules' choice and F.linear, on the layers of the llm suite's models
(training) and of small_m.py's seven other families (held out). Rings as deep as the rules
make them (up to 8 stages); TMA stores where the tile allows, else direct. Graph-captured
(kernel only) as small_m.py times (input sets past twice the L2, median of 7 replays); every
output poisoned first and checked against float64.

    python3 benchmarks/investigations/stream_k.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/stream_k.py run DIR         # GPU: $OUT/stream_k_<GPU>.json
    python3 benchmarks/investigations/stream_k.py summarize FILE  # CPU: this checkout's rules
    python3 benchmarks/investigations/stream_k.py report FILE     # CPU: stream-K against unsplit

``report`` writes ``stream_k`` into the file: per count of tile rows sharing each column of B
(ceil(M / BM)), the geomean speed-up of each stream-K candidate over its tile unsplit, on the
rows whose tiles fit one wave and whose K is 4096 or more; per M, the geomean of F.linear's
time over the fastest candidate with and without stream-K; and the rows a stream-K candidate
wins by more than 3%.
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

MS = tuple(int(m) for m in os.environ.get("STREAM_K_MS", "128,256,512,1024").split(","))
"""The M values (``STREAM_K_MS``, comma-separated; the file name then ends in ``_M`` and
them)."""
TILES = ((64, 128), (64, 192), (128, 128), (128, 192), (128, 256))
PIECES = (3, 4)
REPLAYS = 7


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``), every tile unsplit
    ("TILE sk1") and with stream-K ("TILE streamkP", at most P pieces a tile)."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1)
    for bm, bn in TILES:
        for pieces in (1, *PIECES):
            cfg = small_m._deepest(base.replace(
                check=False, **shapes.mid_tile(bm, bn),
                store="tma" if bn % 64 == 0 else "direct", split_k=pieces,
                split_inline=pieces > 1, stream_k=pieces > 1))
            if cfg is not None:
                out[f"{bm}x{bn} " + (f"streamk{pieces}" if pieces > 1 else "sk1")] = (cfg, False)
    return out


save = layer_sweep.saver("stream_k", __doc__,
                         "_M" + "_".join(map(str, MS)) if "STREAM_K_MS" in os.environ else "")

def report(path: str) -> dict:
    """The ``stream_k`` summary of a run's file (see the module doc), written into it."""
    doc = json.loads(Path(path).read_text())
    rows, out = doc["rows"], {"speedup_over_unsplit_by_tile_rows": {}, "x_flinear": {},
                              "stream_k_wins": []}
    for pieces in PIECES:
        by_rows: dict = {}
        for r in rows:
            for bm, bn in TILES:
                whole = r["candidates"].get(f"{bm}x{bn} sk1")
                sk = r["candidates"].get(f"{bm}x{bn} streamk{pieces}")
                tiles = math.ceil(r["M"] / bm) * math.ceil(r["N"] / bn)
                if whole and sk and tiles <= 132 and r["K"] >= 4096:
                    by_rows.setdefault(math.ceil(r["M"] / bm), []).append(whole["ms"] / sk["ms"])
        out["speedup_over_unsplit_by_tile_rows"][f"streamk{pieces}"] = {
            str(k): [round(small_m._geomean(v), 2), len(v)] for k, v in sorted(by_rows.items())}
    for m in MS:
        mine = [r for r in rows if r["M"] == m]
        best = lambda r, sk: min(v["ms"] for x, v in r["candidates"].items()  # noqa: E731
                                 if sk or "streamk" not in x)
        x = lambda sk: round(small_m._geomean(  # noqa: E731
            [r["torch_ms"] / best(r, sk) for r in mine]), 3)
        out["x_flinear"][f"M={m}"] = {"with stream-K": x(True), "without": x(False)}
    for r in rows:
        c = r["candidates"]
        win = min(c, key=lambda x: c[x]["ms"])
        other = min((x for x in c if "streamk" not in x), key=lambda x: c[x]["ms"])
        if "streamk" in win and c[other]["ms"] / c[win]["ms"] > 1.03:
            out["stream_k_wins"].append([r["M"], r["N"], r["K"], win, other,
                                         round(c[other]["ms"] / c[win]["ms"], 3)])
    return layer_sweep.write_summary(path, "stream_k", out)


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit=None,
                     reports={"report": report})
