"""What an early PDL trigger buys: the shape rules' kernel for each forward layer of the llm
suite's models (training set) and of small_m.py's seven other families (held out), at M = 1,
16, 64, 256, 1024 and 4096 (bf16, rcr; ``PDL_TRIGGER_MS``, comma-separated, for others), as
gemmgen renders it (every CTA runs ``griddepcontrol.launch_dependents`` right after its
``griddepcontrol.wait``) and rendered without that one line (the next kernel is then scheduled
only as this one's last CTA exits), both launched with PDL, beside F.linear on the same data.
Graph-captured back to back (kernel only): the next kernel is the same GEMM on the next input
set, REPS launches per graph cycling over input sets that together exceed twice the L2, median
of 9 replays, F.linear and both variants timed in two rounds in alternating order (the faster
of each kept). Every output is poisoned (NaN) first and checked against float64.

    python3 benchmarks/investigations/pdl_trigger.py compile DIR   # CPU: both cubins, into DIR
    python3 benchmarks/investigations/pdl_trigger.py run DIR       # GPU: $OUT/pdl_trigger_<GPU>.json
"""
from __future__ import annotations

import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("PDL_TRIGGER_MS", "1,16,64,256,1024,4096").split(","))
TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;\\n" ::: "memory");'
"""The line of the rendered kernel that the "wait only" variant leaves out."""
VARIANTS = ("trigger", "wait_only")


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return [(which, n, k, m, *small_m.candidates(m, n, k)["rules"])
            for which, layers in small_m.layers().items() for (n, k) in layers for m in MS]


def compile_to(folder: str) -> None:
    """NAME.cubin (as rendered) and NAME.wait_only.cubin (the trigger left out) per config."""
    from gemmgen import render
    from gemmgen.compile.cache import compile_cached
    os.makedirs(folder, exist_ok=True)
    unique = {cfg.name: cfg for *_, cfg, _ in problems()}

    def one(cfg):
        source = render(cfg, "sm_90a")
        assert source.count(TRIGGER) == 1, cfg.name
        for suffix, text in (("", source), (".wait_only", source.replace(TRIGGER, ""))):
            path = Path(folder, cfg.name + suffix + ".cubin")
            if not path.exists():
                path.write_bytes(compile_cached(text, "sm_90a", cfg.name)[0])
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(one, unique.values()))
    print(len(unique), "kernels, two cubins each")


def main_run(folder: str) -> None:
    import torch.nn.functional as F

    from gemmgen.runtime.build import from_cubin
    dev = layer_sweep.Device(folder)
    rows = []
    for which, n, k, m, cfg, swap in layer_sweep.limited(problems()):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        kernels = {"trigger": dev.kernel(cfg), "wait_only": from_cubin(
            cfg, "sm_90a", Path(folder, cfg.name + ".wait_only.cubin").read_bytes())}
        launch = {v: layer_sweep.launcher(kern, swap, xs, ws, ys, sets)
                  for v, kern in kernels.items()}
        row = {"set": which, "M": m, "N": n, "K": k, "config": cfg.name, "swap": swap,
               "torch_us": [], **{f"{v}_us": [] for v in VARIANTS}}
        for v in VARIANTS:
            row[f"{v}_error"] = layer_sweep.error(launch[v], ys, ref)
        for rnd in range(2):
            row["torch_us"].append(1e3 * dev.graph_ms(
                lambda i: F.linear(xs[i % sets], ws[i % sets]), reps, 9))
            for v in (VARIANTS if rnd == 0 else VARIANTS[::-1]):
                row[f"{v}_us"].append(1e3 * dev.graph_ms(launch[v], reps, 9))
        t = min(row["torch_us"])
        for v in VARIANTS:
            row[f"x_torch_{v}"] = round(t / min(row[f"{v}_us"]), 4)
        print(json.dumps({k_: row[k_] for k_ in ("set", "M", "N", "K", "x_torch_trigger",
                                                 "x_torch_wait_only")}), flush=True)
        rows.append(row)
        save(dev.gpu, rows, quiet=True)  # what is done so far survives a time limit
    save(dev.gpu, rows)


def summary(rows) -> dict:
    """Per set and M: geomean x F.linear of each variant, and of the trigger's speed-up."""
    def gm(xs):
        return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3)
    out = {}
    for which in ("train", "test"):
        for m in list(MS) + ["all"]:
            sel = [r for r in rows if r["set"] == which and m in ("all", r["M"])]
            if sel:
                gain = [min(r["wait_only_us"]) / min(r["trigger_us"]) for r in sel]
                out[f"{which} M={m}"] = {
                    "rows": len(sel),
                    "trigger_x_torch": gm([r["x_torch_trigger"] for r in sel]),
                    "wait_only_x_torch": gm([r["x_torch_wait_only"] for r in sel]),
                    "trigger_over_wait_only": gm(gain),
                    "worst_trigger_over_wait_only": round(min(gain), 3),
                    "errors_ok": all(r[f"{v}_error"] < 2e-2 for r in sel for v in VARIANTS)}
    return out


def save(gpu, rows, quiet=False) -> None:
    out = {"investigation": "pdl_trigger", "gpu": gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"),
           "timing": "graph-captured, kernel only", "dtype": "bf16", "layout": "rcr",
           "method": __doc__, "summary": summary(rows), "rows": rows}
    tag = "_M" + "_".join(map(str, MS)) if "PDL_TRIGGER_MS" in os.environ else ""
    name = "pdl_trigger_" + gpu.replace(" ", "_") + tag + ".json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    if not quiet:
        print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    compile_to(sys.argv[2]) if sys.argv[1] == "compile" else main_run(sys.argv[2])
