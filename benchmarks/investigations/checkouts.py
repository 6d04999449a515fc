"""Two checkouts' kernels on the same layers, in one process: the shape rules' kernel for each
forward layer of the llm suite's models (training set) and of small_m.py's seven other families
(held out), at M = 1, 16, 64, 128, 256, 512, 1024 and 4096 (bf16, rcr; ``CHECKOUTS_MS``,
comma-separated, for others), compiled by each checkout into its own folder (the configs must be
the same: a change to the kernels, not to the rules), timed in alternation beside F.linear on
the same data. Graph-captured back to back (kernel only), REPS launches per graph cycling over
input sets that together exceed twice the L2, median of 9 replays; F.linear and both kernels in
two rounds, the second in reverse order (the faster of each kept). Every output is poisoned
(NaN) first and checked against float64.

    PYTHONPATH=OLD:... python3 benchmarks/investigations/checkouts.py compile BEFORE   # CPU
    PYTHONPATH=NEW:... python3 benchmarks/investigations/checkouts.py compile AFTER    # CPU
    python3 benchmarks/investigations/checkouts.py run BEFORE AFTER   # GPU: $OUT/checkouts_<GPU>.json
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("CHECKOUTS_MS", "1,16,64,128,256,512,1024,4096")
           .split(","))
SIDES = ("before", "after")


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return layer_sweep.rule_problems(MS)


def main_run(before: str, after: str) -> None:
    from gemmgen.runtime.build import from_cubin

    def kernels(cfg):
        return {side: from_cubin(cfg, "sm_90a", Path(folder, cfg.name + ".cubin").read_bytes())
                for side, folder in zip(SIDES, (before, after))}
    layer_sweep.sweep_variants(layer_sweep.Device(after), problems(), kernels, save)


def summary(rows) -> dict:
    """Per set and M: geomean x F.linear of each side, and the after side's speed-up over the
    before side (geomean, worst, best)."""
    def gm(xs):
        return round(small_m._geomean(xs), 3)
    out = {}
    for which in ("train", "test"):
        for m in list(MS) + ["all"]:
            sel = [r for r in rows if r["set"] == which and m in ("all", r["M"])]
            if sel:
                gain = [min(r["before_us"]) / min(r["after_us"]) for r in sel]
                out[f"{which} M={m}"] = {
                    "rows": len(sel), "before_x_torch": gm([r["x_torch_before"] for r in sel]),
                    "after_x_torch": gm([r["x_torch_after"] for r in sel]),
                    "after_over_before": gm(gain), "worst": round(min(gain), 3),
                    "best": round(max(gain), 3),
                    "errors_ok": all(r[f"{s}_error"] < 2e-2 for r in sel for s in SIDES)}
    return out


def save(gpu, rows, quiet=False) -> None:
    tag = "_M" + "_".join(map(str, MS)) if "CHECKOUTS_MS" in os.environ else ""
    layer_sweep.save_rows("checkouts", __doc__, gpu, rows, summary(rows), tag, quiet,
                         before_commit=os.environ.get("GEMMGEN_BEFORE"))


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        layer_sweep.compile_to(sys.argv[2], [cfg for *_, cfg, _ in problems()])
    else:
        main_run(sys.argv[2], sys.argv[3])
