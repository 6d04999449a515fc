"""Whether a deeper ring pays for 128-row tiles (bf16 rcr forward layers, M = 4096 and 8192):
128 x 192 tiles stored through TMA with 3 and 4 stages (4 is as deep as its whole staged C
tile leaves room for) and 128 x 256 tiles stored directly with 3 and 4 (its staged tile leaves
room for 3), each unsplit, beside the shape rules' choice and F.linear, on the layers of the llm
suite's models (training) and of small_m.py's seven other families (held out). Timed as
layer_sweep.py sweeps (graph-captured, kernel only; two rounds in opposite orders, the mean
kept); every output poisoned first and checked against float64.

    python3 benchmarks/investigations/stages_probe.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/stages_probe.py run DIR       # GPU: $OUT/stages_probe_<GPU>.json
    python3 benchmarks/investigations/stages_probe.py report FILE   # CPU: the fourth stage's gain
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics import shapes

MS = (4096, 8192)
TILES = ((192, "tma"), (256, "direct"))


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" and each tile of TILES with 3 and 4 stages."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1,
                         split_k=1, split_inline=False, c_stages=0)
    for bn, store in TILES:
        for st in (3, 4):
            cfg = base.replace(check=False, **shapes.mid_tile(128, bn), store=store, stages=st)
            if not cfg.violations():
                out[f"128x{bn} {store} st{st}"] = (cfg, False)
    return out


def report(path: str) -> dict:
    """Per M and tile: the 3-stage kernel's time over the 4-stage one's (geomean, worst,
    best), written into the file under ``fourth_stage``."""
    doc = json.loads(Path(path).read_text())
    out = {}
    for m in MS:
        for bn, store in TILES:
            a, b = f"128x{bn} {store} st3", f"128x{bn} {store} st4"
            gain = [r["candidates"][a]["ms"] / r["candidates"][b]["ms"] for r in doc["rows"]
                    if r["M"] == m and a in r["candidates"] and b in r["candidates"]]
            out[f"M={m} 128x{bn} {store}"] = {
                "rows": len(gain), "geomean": round(small_m._geomean(gain), 3),
                "worst": round(min(gain), 3), "best": round(max(gain), 3)}
    return layer_sweep.write_summary(path, "fourth_stage", out)


save = layer_sweep.saver("stages_probe", __doc__)


if __name__ == "__main__":
    os.environ.setdefault("SWEEP_ROUNDS", "2")
    layer_sweep.main(sys.argv, MS, candidates, 7, save, fit=None, reports={"report": report})
