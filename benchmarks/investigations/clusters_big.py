"""TMA multicast clusters for the shape rules' kernels at M = 1024 to 16384 (bf16 rcr forward
layers): the rules' kernel as it is, and the same kernel in 2 x 1 clusters (two CTAs along M
share each B tile: each loads half and multicasts it to both) and 1 x 2 clusters (along N, A's
tile), where the config allows it, beside F.linear, on the layers of the llm suite's models
(training) and of small_m.py's seven other families (held out). cuBLASLt runs most of these
layers in 1 x 2 or 2 x 1 clusters (cublas_kernels_*.json). Timed as layer_sweep.py sweeps
(graph-captured, kernel only; input sets past twice the L2, median of 7 replays; two rounds in
opposite orders, the mean kept); every output poisoned first and checked against float64.

    python3 benchmarks/investigations/clusters_big.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/clusters_big.py run DIR       # GPU: $OUT/clusters_big_<GPU>.json
    python3 benchmarks/investigations/clusters_big.py report FILE   # CPU: per set and M

``CLUSTERS_BIG_MS`` (comma-separated) times other M values.
"""
from __future__ import annotations

import os
import sys

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("CLUSTERS_BIG_MS", "1024,4096,8192,16384").split(","))
SHAPES = {"cl2x1": (2, 1), "cl1x2": (1, 2)}


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and the same config in each
    cluster shape of SHAPES that breaks no rule (its ring no deeper); a config that splits K
    inline (no cluster allowed) is also timed unsplit ("unsplit") and so in each shape."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    bases = {"": rules}
    if rules.split_k > 1:  # an inline split takes no cluster: its tile unsplit, with and without
        bases = {"unsplit ": rules.replace(check=False, split_k=1, split_inline=False)}
        out["unsplit"] = (bases["unsplit "], swap)
    for prefix, base in bases.items():
        for label, (cm, cn) in SHAPES.items():
            twin = base.replace(check=False, cluster_m=cm, cluster_n=cn, persistent=True)
            if not twin.violations():
                out[prefix + label] = (twin, swap)
    return out


def report(path: str) -> dict:
    """Per set and M: the rules' time over each cluster shape's (geomean, worst, best) and
    F.linear's time over each, written into the file under ``clusters``."""
    return layer_sweep.variant_summary(path, "clusters", [p + s for p in ("", "unsplit ")
                                                          for s in SHAPES] + ["unsplit"])


save = layer_sweep.saver("clusters_big", __doc__,
                         "_M" + "_".join(map(str, MS)) if "CLUSTERS_BIG_MS" in os.environ else "")


if __name__ == "__main__":
    os.environ.setdefault("SWEEP_ROUNDS", "2")
    layer_sweep.main(sys.argv, MS, candidates, 7, save, fit=None, reports={"report": report})
