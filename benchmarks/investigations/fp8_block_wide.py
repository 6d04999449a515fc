"""FP8 blockwise above decode: wider tiles with one partial set against choose_fp8's pick.

The pick above decode is 128 x 128 with two partial sets per consumer (promotion of K block j
under block j+1's wgmmas), 64 x 128 wgmmas. A 64 x 192 consumer tile cannot hold two partial
sets beside its sums (3 x 96 registers), but with one set (2 x 96) it can, as DeepGEMM's sm90
FP8 kernels do: each consumer promotes after its own wgmmas drain, while the other consumer's
wgmmas keep the tensor core busy. Candidates, each the deepest ring that fits:

- ``pick``: choose_fp8's config (128 x 128, two partial sets, overlapped);
- ``128x192``: 128 x 192, one partial set, TMA store;
- ``128x192cl2``: the same in 2 x 1 clusters (B multicast);
- ``128x160``: 128 x 160, one partial set, stores from registers (its TMA staging does not fit);
- ``128x128p1``: 128 x 128 with one partial set (what the second set buys).

Shapes: the DeepSeek-V3 blockwise shapes DeepGEMM tabulates at M = 4096 and 2048 ("seen") and
the held-out layers of fp8_decode_sweep.py's TEST models at M = 4096 ("held_out"), beside
torch._scaled_mm (cuBLASLt) on the same FP8 tensors and 1 x 128 / 128 x 128 scales.
Graph-captured (kernel only; 10 calls per graph, median of 7 replays), operands rotating past
twice the L2, two rounds in opposite orders (mean kept), every output poisoned with NaN first
and checked against float64 of the dequantized operands (within twice torch's error + 1e-3).

    python3 benchmarks/investigations/fp8_block_wide.py compile DIR    # CPU: the cubins
    python3 benchmarks/investigations/fp8_block_wide.py run DIR        # GPU: $OUT/fp8_block_wide_*.json
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fp8_decode_sweep import TEST  # beside this script
from gemmgen.heuristics import fp8
from gemmgen.heuristics.fp8 import choose_fp8

SEEN = [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512),
        (4096, 7168, 2048), (2048, 4096, 4096), (2048, 7168, 16384), (2048, 24576, 1536)]
HELD = [(4096, n, k) for layers in TEST.values() for n, k in layers]
SMS = 132
WIDE = {"128x192": dict(bn=192, partials=1, overlap=False, store="tma"),
        "128x192cl2": dict(bn=192, partials=1, overlap=False, store="tma", cluster_m=2),
        "128x160": dict(bn=160, partials=1, overlap=False, store="direct"),
        "128x128p1": dict(bn=128, partials=1, overlap=False, store="tma")}


def candidates(m: int, n: int, k: int) -> dict:
    """{label: config}: choose_fp8's pick and the wide tiles fitted to it (unsplit)."""
    pick = choose_fp8(m, n, k, "block", False, sms=SMS).config
    out = {"pick": pick}
    base = pick.replace(check=False, bm=128, consumers=2, regs_consumer=232, split_k=1,
                        cluster_m=1, cluster_n=1)
    for label, tile in WIDE.items():
        c = base.replace(check=False, **tile)
        c = c.replace(check=False, stages=fp8._deepest(c))
        if not c.violations():
            out[label] = c
    return out


def problems() -> list:
    return [("seen", *s) for s in SEEN] + [("held_out", *s) for s in HELD]


def compile_all(folder: str) -> None:
    from layer_sweep import compile_to
    compile_to(folder, [c for _, m, n, k in problems() for c in candidates(m, n, k).values()])


def run(folder: str) -> None:
    from fp8_prefill_sweep import time_row
    from layer_sweep import Device
    dev = Device(folder)
    rows = []
    for which, m, n, k in problems():
        row = {"set": which, "M": m, "N": n, "K": k,
               **time_row(dev, m, n, k, candidates(m, n, k), block=True, fast=False)}
        flops = 2 * m * n * k
        row["torch_tflops"] = round(flops / row["torch_ms"] / 1e9, 1)
        for c in row["candidates"].values():
            c["tflops"] = round(flops / c["ms"] / 1e9, 1)
            c["x_torch"] = round(row["torch_ms"] / c["ms"], 3)
        print(json.dumps({"set": which, "MNK": f"{m}x{n}x{k}", "torch": row["torch_tflops"],
                          **{x: (v["tflops"], v["x_torch"], v["ok"])
                             for x, v in row["candidates"].items()}}), flush=True)
        rows.append(row)
        doc = {"investigation": "fp8_block_wide", "gpu": dev.gpu, "scaling": "block",
               "git_commit": os.environ.get("GEMMGEN_COMMIT"), "baseline": "torch._scaled_mm",
               "timing": "graph-captured, kernel only", "out": "bf16", "method": __doc__,
               "rows": rows}
        name = f"fp8_block_wide_{dev.gpu.replace(' ', '_')}.json"
        Path(os.environ.get("OUT", "."), name).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    (compile_all if sys.argv[1] == "compile" else run)(sys.argv[2])
