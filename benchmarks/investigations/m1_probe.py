"""Why 1 x 3584 x 18944 (the swapped 64 x 8 tile, 56 tiles) runs slower at M = 1 than at M = 4
with the same kernel: that kernel unsplit, split 2 inline and split 2 in a cluster, at M = 1,
2, 4 and 8, beside F.linear, timed as linear_rules.py times (graph-captured, input sets past
twice the L2, median of 9 replays, two rounds).

    python3 benchmarks/investigations/m1_probe.py compile DIR
    python3 benchmarks/investigations/m1_probe.py run DIR      # GPU: $OUT/m1_probe_<GPU>.json
"""
from __future__ import annotations

import json
import sys

import layer_sweep  # beside this script
import small_m

N, K, MS = 3584, 18944, (1, 2, 4, 8)


def variants(m: int) -> dict:
    cfg, swap = small_m.candidates(m, N, K)["rules"]
    base = cfg.replace(split_k=1, split_inline=False, split_cluster=False, persistent=True)
    out = {"sk1": base, "sk1 np": base.replace(persistent=False),
           "sk2i": base.replace(split_k=2, split_inline=True)}
    c = base.replace(check=False, split_k=2, split_cluster=True, persistent=False)
    if not c.violations():
        out["sk2c"] = c
    return {k: (v, swap) for k, v in out.items()}


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        layer_sweep.compile_to(sys.argv[2], [c for m in MS for c, _ in variants(m).values()])
    else:
        dev = layer_sweep.Device(sys.argv[2])
        rows = []
        for m in MS:
            sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, N, K, dev.gen, dev.l2)
            launch = {v: layer_sweep.launcher(dev.kernel(c), s, xs, ws, ys, sets)
                      for v, (c, s) in variants(m).items()}
            row = layer_sweep.time_variants(dev, launch, sets, reps, xs, ws, ys, ref)
            rows.append({"set": "train", "M": m, "N": N, "K": K, "sets": sets, "reps": reps,
                         **row})
            print(json.dumps({k: (round(min(v), 2) if isinstance(v, list) else v)
                              for k, v in rows[-1].items()}), flush=True)
            layer_sweep.save_rows("m1_probe", __doc__, dev.gpu, rows, {
                f"M={r['M']}": {k[:-3]: round(min(v), 2) for k, v in r.items()
                                if k.endswith("_us")} for r in rows}, quiet=True)
