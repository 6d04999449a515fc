"""Two K stages a wgmma commit group against one, on the bf16 rcr forward layers at M = 1 to
512: the shape rules' kernel for each layer of the llm suite's models (training) and of
small_m.py's seven other families (held out), as chosen and with two stages a group ("g2", where
its ring holds two groups) and with two stages a group and the deepest ring of at most 16
stages ("g2 deep"), each beside F.linear.

Two stages a group are a config field (``group_stages``) and a consumer loop that this checkout
does not have: the change lost (the rules' kernels ran faster on every set and M), so it was
not kept. It lives in ``group_stages.patch`` beside this script; to rerun, apply it first
(``git apply benchmarks/investigations/group_stages.patch``).

Why it was tried: a consumer's wait for a full stage reads shared memory, which queues behind
the in-flight wgmmas' operand reads, and m64n64 and narrower wgmmas saturate shared memory
(smem_poll.py). One wait for two stages halves those waits. In the kernel it also holds four
stages instead of two while loads are in flight, and the loads set the pace as much as the
consumer does (k_step_timeline.py). Graph-captured (kernel only) as small_m.py times (input
sets past twice the L2, median of 7 replays); every output poisoned first and checked against
float64.

    python3 benchmarks/investigations/group_stages.py compile DIR     # CPU: the cubins
    python3 benchmarks/investigations/group_stages.py run DIR         # GPU: $OUT/group_stages_<GPU>.json
    python3 benchmarks/investigations/group_stages.py report FILE     # CPU: rules over g2

``report`` writes ``grouped`` into the file: per set, M and grouped kernel ("g2", "g2 deep"),
the rows timed, the geomean, worst and best of the rules' time over the grouped kernel's, and
F.linear's time over the rules' and over the grouped kernel's (geomeans).
"""
from __future__ import annotations

import os
import sys

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("GROUP_STAGES_MS", "1,16,64,128,256,512").split(","))
REPLAYS = 7
DEEPEST = 16
"""The grouped kernel also runs with the deepest ring of at most DEEPEST stages ("g2 deep"): a
consumer holds two groups, four stages, where it held two, so fewer stages are in flight."""


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)}: "rules" (this checkout's ``decide``) and "g2": its config with
    two stages a wgmma group, where that is valid."""
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap)}
    g2 = rules.replace(check=False, group_stages=2)
    if not g2.violations():
        out["g2"] = (g2, swap)
        deep = small_m._deepest(g2, most=DEEPEST)
        if deep is not None and deep.stages > g2.stages:
            out["g2 deep"] = (deep, swap)
    return out


save = layer_sweep.saver("group_stages", __doc__,
                         "_M" + "_".join(map(str, MS)) if "GROUP_STAGES_MS" in os.environ else "")


def report(path: str) -> dict:
    """The ``grouped`` summary of a run's file (see the module doc), written into it."""
    return layer_sweep.variant_summary(path, "grouped", ("g2", "g2 deep"))


if __name__ == "__main__":
    layer_sweep.main(sys.argv, MS, candidates, REPLAYS, save, fit=None,
                     reports={"report": report})
