"""Rings deeper than the shape rules' eight stages (bf16 rcr forward layers, M = 1 to 256,
where a CTA's K loop waits on memory): the rules' kernel for each layer of the llm suite's
models (training) and of small_m.py's seven other families (held out), as chosen (at most
MAX_STAGES = 8 stages, fewer where shared memory ends first) and with 12 and 16 stages, or the
deepest ring that shared memory allows between, each beside F.linear. More stages keep more
bytes of A and B in flight per SM: by Little's law a CTA's load rate is the bytes in flight
over the memory latency. cuBLASLt's kernels for such layers run 12 to 16 stages (the ring in
their names, ``nvjet_sm90_tst_64x24_64x16_...``: BK 64, 16 stages; cublas_kernels.py). Graph-
captured (kernel only) as small_m.py times (input sets past twice the L2, median of 7 replays);
every output poisoned first and checked against float64.

    python3 benchmarks/investigations/ring_depth.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/ring_depth.py run DIR         # GPU: $OUT/ring_depth_<GPU>.json
    python3 benchmarks/investigations/ring_depth.py summarize FILE  # CPU: this checkout's rules
    python3 benchmarks/investigations/ring_depth.py report FILE     # CPU: deeper over the rules'

``report`` writes ``deeper`` into the file: per set and M, for each depth, the rows it was
timed on and the geomean, worst and best of the rules' time over its time.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("RING_DEPTH_MS", "1,16,64,128,256").split(","))
DEPTHS = (12, 16)
REPLAYS = 7


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and "stN": its config with
    the deepest ring of at most N stages, deeper than the rules' (none where shared memory
    allows no deeper)."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    for depth in DEPTHS:
        cfg = small_m._deepest(rules, most=depth)
        if cfg is not None and cfg.stages > rules.stages and cfg.name not in {
                c.name for c, _ in out.values()}:
            out[f"st{depth}"] = (cfg, swap)
    return out


save = layer_sweep.saver("ring_depth", __doc__,
                         "_M" + "_".join(map(str, MS)) if "RING_DEPTH_MS" in os.environ else "")

def report(path: str) -> dict:
    """The ``deeper`` summary of a run's file (see the module doc), written into it."""
    doc = json.loads(Path(path).read_text())
    out: dict = {}
    for which in ("train", "test"):
        for m in MS:
            rows = [r["candidates"] for r in doc["rows"] if r["set"] == which and r["M"] == m]
            for depth in DEPTHS:
                gain = [c["rules"]["ms"] / c[f"st{depth}"]["ms"] for c in rows if f"st{depth}" in c]
                if gain:
                    out.setdefault(f"{which} M={m}", {})[f"st{depth}"] = {
                        "rows": len(gain), "geomean": round(small_m._geomean(gain), 3),
                        "worst": round(min(gain), 3), "best": round(max(gain), 3)}
    return layer_sweep.write_summary(path, "deeper", out)


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit=None,
                     reports={"report": report})
