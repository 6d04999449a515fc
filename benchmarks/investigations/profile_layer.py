"""One linear layer's kernels for ncu: the shape rules' kernel and mid_m.py's candidates named
on the command line, then F.linear, each launched LAUNCHES times in turn on the layer's
rotating input sets (bf16 rcr, small_m.py's inputs), outside any graph so that ncu sees every
launch. Profile with, for example,

    ncu --clock-control none --set full -k 'regex:gemm_wgmma|nvjet' --launch-skip 4 \
        --launch-count 1 python3 benchmarks/investigations/profile_layer.py 128 2048 2048 rules

    python3 benchmarks/investigations/profile_layer.py compile DIR M N K LABEL ...  # CPU: cubins
    python3 benchmarks/investigations/profile_layer.py run DIR M N K LABEL ...      # GPU
"""
from __future__ import annotations

import sys

import layer_sweep  # beside this script
import mid_m
import small_m

LAUNCHES = 6


def chosen(m: int, n: int, k: int, labels: list) -> dict:
    """{label: (config, swap)} of ``labels`` among mid_m.py's candidates ("rules" included)."""
    every = mid_m.candidates(m, n, k)
    return {label: every[label] for label in labels}


def main_run(folder: str, m: int, n: int, k: int, labels: list) -> None:
    import torch
    import torch.nn.functional as F
    dev = layer_sweep.Device(folder)
    sets, _, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
    for label, (cfg, swap) in chosen(m, n, k, labels).items():
        launch = layer_sweep.launcher(dev.kernel(cfg), swap, xs, ws, ys, sets)
        print(label, cfg.name, "error", layer_sweep.error(launch, ys, ref), flush=True)
        for i in range(LAUNCHES):
            launch(i)
    for i in range(LAUNCHES):
        F.linear(xs[i % sets], ws[i % sets])
    torch.cuda.synchronize()


if __name__ == "__main__":
    folder, (m, n, k), labels = sys.argv[2], map(int, sys.argv[3:6]), sys.argv[6:]
    if sys.argv[1] == "compile":
        layer_sweep.compile_to(folder, [c for c, _ in chosen(m, n, k, labels).values()])
    else:
        main_run(folder, m, n, k, labels)
