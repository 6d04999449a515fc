"""How many 2 x 1 clusters of the fp8 family's 128 x 256 kernel run at once: the cost models
take a wave of clustered tiles as SMs / 2 (66 on 132 SMs), which holds only where every GPC
has an even count of free SMs. Times the kernel (per tensor, fast, one row of 256 x 256
cluster tiles, M = 256, K = 16384) at T = 56 to 72 cluster tiles: the time steps up where T
passes the clusters that fit at once. The 128 x 128 kernel without a cluster on one row of 2T
tiles (M = 128, the same N) is the control, whose step falls at 132 tiles (T = 66).
Graph-captured (kernel only; 10 calls, median of 7 replays), operands rotated past the L2.

    python3 benchmarks/investigations/cluster_wave.py compile DIR   # CPU: the two cubins
    python3 benchmarks/investigations/cluster_wave.py run DIR      # GPU: $OUT/cluster_wave_*.json
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gemmgen.heuristics.fp8 import PREFILL_TILES, _deepest, choose_fp8

K, TS = 16384, range(56, 73)
M = {"128x256cl2": 256, "128x128": 128}  # one row of tiles each


def configs() -> dict:
    base = choose_fp8(4096, 4096, 4096, "tensor", True, sms=132).config.replace(check=False,
                                                                                  split_k=1)
    out = {}
    for label in ("128x256cl2", "128x128"):
        c = base.replace(check=False, **PREFILL_TILES["fast"][label])
        c = c.replace(check=False, stages=_deepest(c))
        if not c.violations():
            out[label] = c
    return out


def run(folder: str) -> None:
    import torch

    import gemmgen.torch as gt
    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.plans import plan_scaled
    from layer_sweep import Device
    dev = Device(folder)
    rows = []
    for t in TS:
        n = 256 * t
        sets = max(2, -(-2 * dev.l2 // (n * K)))
        ws = [gt.quantize(torch.randn(n, K, device="cuda") * K ** -0.5, None)
              for _ in range(sets)]
        row = {"T": t, "N": n}
        for label, cfg in configs().items():
            ops = [(*gt.quantize(torch.randn(M[label], K, device="cuda"), None), w.t(), sw)
                   for w, sw in ws]
            ops = [(a, b, sa, sb) for a, sa, b, sb in ops]
            d = torch.empty(M[label], n, device="cuda", dtype=torch.bfloat16)
            plan = plan_scaled(dev.kernel(cfg), check_fp8(*ops[0], d), 0)

            def launch(i, plan=plan, ops=ops, d=d):
                a, b, sa, sb = ops[i % sets]
                plan.run(a, b, d, None, sa, sb, stream=torch.cuda.current_stream().cuda_stream)
            dev.graph_ms(launch, 10, 7)  # warm-up
            row[label] = dev.graph_ms(launch, 10, 7)
        print(json.dumps(row), flush=True)
        rows.append(row)
        doc = {"investigation": "cluster_wave", "gpu": dev.gpu, "M": M, "K": K,
               "git_commit": os.environ.get("GEMMGEN_COMMIT"), "method": __doc__, "rows": rows}
        Path(os.environ.get("OUT", "."), f"cluster_wave_{dev.gpu.replace(' ', '_')}.json"
             ).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        from layer_sweep import compile_to
        compile_to(sys.argv[2], list(configs().values()))
    else:
        run(sys.argv[2])
