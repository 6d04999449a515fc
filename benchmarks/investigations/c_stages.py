"""C staged through chunk buffers (``c_stages``) so that 128-row tiles stored through TMA keep a
deeper ring: the shape rules' kernel (bf16 rcr forward layers, M = 256 to 16384) beside the one
they chose before they weighed the buffers ("rules before": the whole tile staged, as deep a ring
as that leaves room for) and, where the rules stage C through two buffers, the same kernel with
one ("one buffer"), beside F.linear, on the layers of the llm suite's models (training) and of
small_m.py's seven other families (held out). Timed as layer_sweep.py sweeps (graph-captured,
kernel only; input sets past twice the L2, median of 7 replays; two rounds in opposite orders,
the mean kept); every output poisoned first and checked against float64.

    python3 benchmarks/investigations/c_stages.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/c_stages.py run DIR       # GPU: $OUT/c_stages_<GPU>.json
    python3 benchmarks/investigations/c_stages.py report FILE   # CPU: per set and M

``C_STAGES_MS`` (comma-separated) times other M values.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import layer_sweep  # beside this script
import small_m
from gemmgen.heuristics import ring

MS = tuple(int(m) for m in os.environ.get("C_STAGES_MS", "256,512,1024,4096,8192,16384")
           .split(","))
VARIANTS = ("rules before", "one buffer")


@contextmanager
def _whole_tiles():
    """The shape rules without C staging buffers for the duration (``ring.C_STAGES`` empty)."""
    shipped, ring.C_STAGES = ring.C_STAGES, ()
    try:
        yield
    finally:
        ring.C_STAGES = shipped


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``), "rules before" and, for a
    rules' kernel with two C staging buffers, "one buffer"."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    with _whole_tiles():
        out = {"rules": (rules, swap), "rules before": small_m.candidates(m, n, k)["rules"]}
    if rules.c_stages == 2:
        out["one buffer"] = (rules.replace(c_stages=1), swap)
    return out


def report(path: str) -> dict:
    """Writes two summaries into a run's file: ``ab`` (``layer_sweep.ab_summary``: the rules'
    speed-up over "rules before" where the kernel changed, the unchanged rows' (noise), and
    per set and M the geomean x F.linear before and after) and ``c_stages``, per set and M the
    rules' time over each variant's where it is another kernel (geomean, worst, best)."""
    layer_sweep.variant_summary(path, "c_stages", list(VARIANTS), changed_only=True)
    return layer_sweep.ab_summary(path, "rules before")


save = layer_sweep.saver("c_stages", __doc__,
                         "_M" + "_".join(map(str, MS)) if "C_STAGES_MS" in os.environ else "")


if __name__ == "__main__":
    os.environ.setdefault("SWEEP_ROUNDS", "2")
    layer_sweep.main(sys.argv, MS, candidates, 7, save, fit=None, reports={"report": report})
