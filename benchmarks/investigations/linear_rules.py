"""The shape rules' kernel beside F.linear: for each forward layer of the llm suite's models
(training set) and of small_m.py's seven other families (held out), at M = 1 to 4096 (bf16,
rcr), the kernel ``decide`` chooses, launched as gemmgen launches it (PDL included), and
F.linear on the same data. Graph-captured back to back (kernel only), launches per graph
cycling over input sets that together exceed twice the L2, median of 9 replays, two rounds in
alternating order (the faster of each side kept). Every output is poisoned (NaN) first and
checked against float64. The summary gives, per set and M, the geomean and the lowest of
F.linear's time over the rules' kernel.

    python3 benchmarks/investigations/linear_rules.py compile DIR  # CPU: the cubins, into DIR
    python3 benchmarks/investigations/linear_rules.py run DIR      # GPU: $OUT/linear_rules_*.json

``LINEAR_MS`` (comma-separated) times other M values; the file name then ends in ``_M`` and
them.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("LINEAR_MS", "1,4,16,32,64,128,256,512,1024,4096")
           .split(","))
TAG = "_M" + "_".join(map(str, MS)) if "LINEAR_MS" in os.environ else ""


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return [(which, n, k, m, *small_m.candidates(m, n, k)["rules"])
            for which, layers in small_m.layers().items() for (n, k) in layers for m in MS]


def compile_to(folder: str) -> None:
    layer_sweep.compile_to(folder, [cfg for *_, cfg, _ in problems()])


def main_run(folder: str) -> None:
    import torch.nn.functional as F
    dev = layer_sweep.Device(folder)
    rows = []
    for which, n, k, m, cfg, swap in layer_sweep.limited(problems()):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        ours = layer_sweep.launcher(dev.kernel(cfg), swap, xs, ws, ys, sets)

        def theirs(i):
            F.linear(xs[i % sets], ws[i % sets])
        row = {"set": which, "M": m, "N": n, "K": k, "config": cfg.name, "swap": swap,
               "error": layer_sweep.error(ours, ys, ref), "torch_us": [], "ours_us": []}
        for rnd in range(2):
            for side_name, fn in (("torch", theirs), ("ours", ours))[::1 if rnd == 0 else -1]:
                row[f"{side_name}_us"].append(1e3 * dev.graph_ms(fn, reps, 9))
        row["x_torch"] = round(min(row["torch_us"]) / min(row["ours_us"]), 4)
        print(json.dumps({k_: row[k_] for k_ in ("set", "M", "N", "K", "x_torch")}), flush=True)
        rows.append(row)
        save(dev.gpu, rows, quiet=True)  # what is done so far survives a time limit
    save(dev.gpu, rows)


def summary(rows) -> dict:
    out = {}
    for which in ("train", "test"):
        for m in list(MS) + ["all"]:
            xs = [r["x_torch"] for r in rows if r["set"] == which and m in ("all", r["M"])]
            if xs:
                out[f"{which} M={m}"] = {
                    "rows": len(xs),
                    "geomean": round(math.exp(sum(map(math.log, xs)) / len(xs)), 3),
                    "lowest": round(min(xs), 3), "below_0.95": sum(x < 0.95 for x in xs)}
    return out


def save(gpu, rows, quiet=False) -> None:
    out = {"investigation": "linear_rules", "gpu": gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"), "timing": "graph-captured, kernel only",
           "dtype": "bf16", "layout": "rcr", "method": __doc__, "summary": summary(rows),
           "worst_error": max(r["error"] for r in rows), "rows": rows}
    name = "linear_rules_" + gpu.replace(" ", "_") + TAG + ".json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    if not quiet:
        print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    {"compile": compile_to, "run": main_run}[sys.argv[1]](sys.argv[2])
