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
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import small_m  # beside this script

MS = (1, 4, 16, 32, 64, 128, 256, 512, 1024, 4096)


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return [(which, n, k, m, *small_m.candidates(m, n, k)["rules"])
            for which, layers in small_m.layers().items() for (n, k) in layers for m in MS]


def compile_to(folder: str) -> None:
    from gemmgen.compile.cache import compile_many
    os.makedirs(folder, exist_ok=True)
    configs = {cfg.name: cfg for *_, cfg, _ in problems()}
    todo = [c for c in configs.values() if not Path(folder, c.name + ".cubin").exists()]
    for cfg, done in zip(todo, compile_many(todo, arch="sm_90a")):
        Path(folder, cfg.name + ".cubin").write_bytes(done[0])
    print(len(configs), "kernels")


def main_run(folder: str) -> None:
    import torch
    import torch.nn.functional as F

    import graph_timing
    from gemmgen.runtime.build import adopt_pycuda, from_cubin
    from gemmgen.runtime.device import device_identity
    adopt_pycuda()
    gpu, _ = device_identity(0)
    side = torch.cuda.Stream()
    gen = torch.Generator(device="cuda").manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows, kernels = [], {}
    for which, n, k, m, cfg, swap in problems():
        if cfg.name not in kernels:
            kernels[cfg.name] = from_cubin(cfg, "sm_90a",
                                           Path(folder, cfg.name + ".cubin").read_bytes())
        kern = kernels[cfg.name]
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, gen, l2)

        def ours(i):
            x, w, y = xs[i % sets], ws[i % sets], ys[i % sets]
            s = torch.cuda.current_stream().cuda_stream
            kern(w, x.t(), y.t(), stream=s) if swap else kern(x, w.t(), y, stream=s)

        def theirs(i):
            F.linear(xs[i % sets], ws[i % sets])
        ys[0].fill_(float("nan"))
        ours(0)
        torch.cuda.synchronize()
        row = {"set": which, "M": m, "N": n, "K": k, "config": cfg.name, "swap": swap,
               "error": ((ys[0].double() - ref).norm() / ref.norm()).item(),
               "torch_us": [], "ours_us": []}
        for rnd in range(2):
            for side_name, fn in (("torch", theirs), ("ours", ours))[::1 if rnd == 0 else -1]:
                row[f"{side_name}_us"].append(
                    1e3 * graph_timing.graph_ms(fn, reps, 9, stream=side))
        row["x_torch"] = round(min(row["torch_us"]) / min(row["ours_us"]), 4)
        print(json.dumps({k_: row[k_] for k_ in ("set", "M", "N", "K", "x_torch")}), flush=True)
        rows.append(row)
        save(gpu, rows, quiet=True)  # what is done so far survives a time limit
    save(gpu, rows)


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
    name = "linear_rules_" + gpu.replace(" ", "_") + ".json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    if not quiet:
        print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    {"compile": compile_to, "run": main_run}[sys.argv[1]](sys.argv[2])
