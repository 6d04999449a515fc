"""What programmatic dependent launch buys: the shape rules' kernel for each forward layer of
the llm suite's models (training set) and of small_m.py's seven other families (held out), at
M = 1, 16, 64, 256, 1024 and 4096 (bf16, rcr), launched with PDL (as gemmgen launches it) and
without (the same cubin; its griddepcontrol.wait is then a no-op), beside F.linear on the same
data. Graph-captured back to back (kernel only), REPS launches per graph cycling over input
sets that together exceed twice the L2, median of 9 replays, both variants timed in two rounds
in alternating order (the faster of each kept). Every output is poisoned (NaN) first and checked
against float64.

    python3 benchmarks/investigations/pdl_gain.py compile DIR   # CPU: the cubins, into DIR
    python3 benchmarks/investigations/pdl_gain.py run DIR       # GPU: $OUT/pdl_gain_<GPU>.json
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = (1, 16, 64, 256, 1024, 4096)


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return layer_sweep.rule_problems(MS)


def main_run(folder: str) -> None:
    import torch.nn.functional as F

    from gemmgen.runtime import driver
    plain = driver.launch
    use_pdl = [True]

    def launch(function, grid, block, smem, params, stream=None, pdl=False):
        plain(function, grid, block, smem, params, stream, pdl and use_pdl[0])
    driver.launch = launch
    dev = layer_sweep.Device(folder)
    rows = []
    for which, n, k, m, cfg, swap in layer_sweep.limited(problems()):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        ours = layer_sweep.launcher(dev.kernel(cfg), swap, xs, ws, ys, sets)
        row = {"set": which, "M": m, "N": n, "K": k, "config": cfg.name, "swap": swap,
               "torch_us": [], "pdl_us": [], "plain_us": []}
        for rnd in range(2):
            order = ("pdl", "plain") if rnd == 0 else ("plain", "pdl")
            row["torch_us"].append(1e3 * dev.graph_ms(
                lambda i: F.linear(xs[i % sets], ws[i % sets]), reps, 9))
            for v in order:
                use_pdl[0] = v == "pdl"
                if rnd == 0:
                    row[f"{v}_error"] = layer_sweep.error(ours, ys, ref)
                row[f"{v}_us"].append(1e3 * dev.graph_ms(ours, reps, 9))
        use_pdl[0] = True
        t = min(row["torch_us"])
        row["x_torch_pdl"] = round(t / min(row["pdl_us"]), 4)
        row["x_torch_plain"] = round(t / min(row["plain_us"]), 4)
        print(json.dumps({k_: row[k_] for k_ in ("set", "M", "N", "K", "x_torch_pdl",
                                                 "x_torch_plain")}), flush=True)
        rows.append(row)
        save(dev.gpu, rows, quiet=True)  # what is done so far survives a time limit
    save(dev.gpu, rows)


def summary(rows) -> dict:
    def gm(xs):
        return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3)
    out = {}
    for key, sel in layer_sweep.by_set_and_m(rows, MS):
        out[key] = {
            "rows": len(sel),
            "pdl_x_torch": gm([r["x_torch_pdl"] for r in sel]),
            "plain_x_torch": gm([r["x_torch_plain"] for r in sel]),
            "pdl_over_plain": gm([min(r["plain_us"]) / min(r["pdl_us"]) for r in sel]),
            "worst_pdl_over_plain": round(min(min(r["plain_us"]) / min(r["pdl_us"])
                                              for r in sel), 3)}
    return out


def save(gpu, rows, quiet=False) -> None:
    out = {"investigation": "pdl_gain", "gpu": gpu, "git_commit": os.environ.get("GEMMGEN_COMMIT"),
           "timing": "graph-captured, kernel only", "dtype": "bf16", "layout": "rcr",
           "method": __doc__, "summary": summary(rows), "rows": rows}
    name = "pdl_gain_" + gpu.replace(" ", "_") + ".json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    if not quiet:
        print(json.dumps(out["summary"], indent=1))


def compile_to(folder: str) -> None:
    layer_sweep.compile_to(folder, [cfg for *_, cfg, _ in problems()])


if __name__ == "__main__":
    compile_to(sys.argv[2]) if sys.argv[1] == "compile" else main_run(sys.argv[2])
