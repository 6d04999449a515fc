"""Sliced K on the one-consumer tiles (bf16 rcr forward layers, M = 1 to 512): the shape rules'
kernel for each layer of the llm suite's models (training) and of small_m.py's seven other
families (held out), as chosen and, where it is a one-consumer tile, with two consumer
warpgroups taking its K stages in turn ("slk"; ``sliced_k``), each beside F.linear. Where the
rules split K, the same tile unsplit and sliced ("slk unsplit") too.

Sliced K is a config field (``sliced_k``) and a consumer loop that this checkout does not have:
it lost (the rules' kernels ran as fast or faster on every set and M), so it was not kept. It
lives in ``sliced_k.patch`` beside this script; to rerun, apply it first
(``git apply benchmarks/investigations/sliced_k.patch``).

Why it was tried: one consumer's wait for a full stage queues behind its own in-flight wgmmas' shared-memory
reads, and the tensor cores idle at every stage (smem_poll.py: 267 cycles an m64n64 stage with
one consumer, 189 with two taking stages in turn). Graph-captured (kernel only) as small_m.py
times (input sets past twice the L2, median of 7 replays); every output poisoned first and
checked against float64.

    python3 benchmarks/investigations/sliced_k.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/sliced_k.py run DIR         # GPU: $OUT/sliced_k_<GPU>.json
    python3 benchmarks/investigations/sliced_k.py report FILE     # CPU: rules over slk

``report`` writes ``sliced`` into the file: per set, M and variant, the rows timed, the geomean,
worst and best of the rules' time over the variant's, and F.linear's time over the rules' and
over the variant's (geomeans).
"""
from __future__ import annotations

import os
import sys

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("SLICED_K_MS", "1,16,64,128,256,512").split(","))
REPLAYS = 7
VARIANTS = ("slk", "slk unsplit")


def sliced(cfg):
    """``cfg`` with two consumers taking its K stages in turn, the deepest ring of at most 8
    stages that fits; None where that is not a valid config."""
    out = small_m._deepest(cfg.replace(check=False, consumers=2, sliced_k=True))
    return out if out is not None and not out.violations() else None


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``), "slk" (its one-consumer
    tile sliced) and "slk unsplit" (a split one's tile unsplit and sliced)."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    if rules.consumers == 1:
        if rules.split_k == 1:
            cfg = sliced(rules)
            if cfg is not None:
                out["slk"] = (cfg, swap)
        else:
            cfg = sliced(rules.replace(check=False, split_k=1, split_inline=False,
                                       stream_k=False))
            if cfg is not None:
                out["slk unsplit"] = (cfg, swap)
    return out


save = layer_sweep.saver("sliced_k", __doc__,
                         "_M" + "_".join(map(str, MS)) if "SLICED_K_MS" in os.environ else "")


def report(path: str) -> dict:
    """The ``sliced`` summary of a run's file (see the module doc), written into it."""
    return layer_sweep.variant_summary(path, "sliced", VARIANTS)


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit=None,
                     reports={"report": report})
