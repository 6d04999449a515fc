"""A waiter warp for the consumer's full-stage wait: the shape rules' kernel for each forward
layer of the llm suite's models (training set) and of small_m.py's seven other families (held
out), at M = 16, 64, 128, 256 and 512 (bf16, rcr; ``WAITER_MS``, comma-separated, for others), as
gemmgen renders it and with the rendered source patched (``waiter``), each also with the
deepest ring of at most 16 stages that fits (``deep``, ``deep_waiter``), where that is deeper:

- the producer warpgroup's second warp walks the consumers' tiles and K steps; at each it
  waits on the stage's full mbarrier (``mbarrier.try_wait``), then meets the consumer
  warpgroups at a named barrier (``bar.sync`` 15, consumers x 128 + 32 threads);
- the consumers meet it there instead of polling the full mbarrier themselves.

Why: a consumer's own poll of the full barrier is a shared-memory read, and it queues behind
its warpgroup's in-flight wgmmas' operand reads (smem_poll.py: 102 cycles a m64n32 stage without
a poll, 276 to 305 with one, on an H100). A warp that issues no wgmma polls without that
queue, and ``bar.sync`` reads no shared memory (smem_poll.py's ``waiter`` and ``named_bar``).
Kernels with a producer warpgroup and one consumer warpgroup only: ping-pong consumers take
alternate tiles, so no one warp could meet both, and two cooperative consumers held in step at
one barrier ran slower (k_step_timeline.py with K_STEP_WAITER=1: 546 cycles a 128 x 128 stage
against 527; waiter_NVIDIA_H200_cooperative.json, a first run of this script that patched
them too, at M = 64 to 4096 without the deeper ring: the waiter's kernels 0.997x and 0.993x
as fast on the two sets). With the consumer's poll gone the loads set the pace, and a deeper ring keeps
more of them in flight (k_step_timeline.py: 64 x 32 tiles at 128 x 2048 x 2048, 294 cycles a
stage as rendered, 258 with the waiter, 226 with the waiter and 12 stages).

Launched with PDL, beside F.linear on the same data, graph-captured back to back (kernel only),
REPS launches per graph cycling over input sets that together exceed twice the L2, median of 9
replays, F.linear and both variants timed in two rounds, the second in reverse order (the
faster of each kept). Every output is poisoned (NaN) first and checked against float64.

    python3 benchmarks/investigations/waiter.py compile DIR   # CPU: the cubins, into DIR
    python3 benchmarks/investigations/waiter.py run DIR       # GPU: $OUT/waiter_<GPU>.json

Once the shape rules took the waiter and the deeper ring (``waiter`` in the config), the same
timing compares their kernel with the one a checkout from before chose (OLD: its tree), on the
layers where the two differ, at M = 1 to 512 (``WAITER_AB_MS``):

    python3 benchmarks/investigations/waiter.py ab-compile DIR OLD  # CPU: both sides' cubins
    python3 benchmarks/investigations/waiter.py ab-run DIR          # GPU: $OUT/waiter_ab_<GPU>.json
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import rules_ab
import small_m

MS = tuple(int(m) for m in os.environ.get("WAITER_MS", "16,64,128,256,512").split(","))
DEEPEST = 16
MEET = "named_sync(15, CONSUMERS * WARPGROUP + 32);"
CONSUMER_WAIT = "                mbar_wait(full_bar + 8 * s, phase);\n                wgmma_fence();"
PRODUCER_END = "        }\n    } else {\n        // ---- consumer warpgroups ----"
WAITER = """        } else if (__shfl_sync(0xffffffffu, wtid / 32, 0) == 1) {
            // the waiter warp: each full stage, in the consumers' order, then meet them
            int s = 0;
            uint32_t phase = 0;
            for (int t = first_tile; t < num_tiles; t += tile_step) {
                const int nk = k_count(unit_of(t));
                for (int kt = 0; kt < nk; ++kt) {
                    mbar_wait(full_bar + 8 * s, phase);
                    MEET
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
""".replace("MEET", MEET)
VARIANTS = ("rendered", "waiter", "deep", "deep_waiter")


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return layer_sweep.rule_problems(MS)


def patchable(cfg) -> bool:
    """Whether ``cfg``'s kernel takes the patched waiter: a producer warpgroup and one
    consumer, and no waiter of its own (the shape rules give one since this script ran on
    02e1537's: its ``compile`` and ``run`` time the rules' kernels of a checkout from before)."""
    return (cfg.producer and cfg.consumers == 1 and cfg.math == "native"
            and not getattr(cfg, "waiter", False))


def sources(cfg) -> dict:
    """{variant: source} of ``cfg``: as rendered, and with the waiter warp (``patchable``)."""
    from gemmgen import render
    source = render(cfg, "sm_90a")
    out = {"rendered": source}
    if patchable(cfg):
        assert source.count(CONSUMER_WAIT) == 1 and source.count(PRODUCER_END) == 1, cfg.name
        out["waiter"] = (source.replace(CONSUMER_WAIT, CONSUMER_WAIT.replace(
            "mbar_wait(full_bar + 8 * s, phase);", MEET)).replace(
            PRODUCER_END, WAITER + PRODUCER_END))
    return out


def variants(cfg) -> dict:
    """{variant: (config, source variant)}: the rules' config as rendered and with the waiter,
    and its deepest ring (``deep``, ``deep_waiter``) where that is deeper; one-consumer
    kernels only (the others are not timed)."""
    if not patchable(cfg):
        return {}
    out = {"rendered": (cfg, "rendered"), "waiter": (cfg, "waiter")}
    deep = small_m._deepest(cfg, most=DEEPEST)
    if deep is not None and deep.stages > cfg.stages:
        out.update(deep=(deep, "rendered"), deep_waiter=(deep, "waiter"))
    return out


def compile_to(folder: str) -> None:
    """NAME.rendered.cubin and NAME.waiter.cubin per config of ``variants``."""
    layer_sweep.compile_sources(
        folder, [c for *_, cfg, _ in problems() for c, _ in variants(cfg).values()], sources)


def main_run(folder: str) -> None:
    from gemmgen.runtime.build import from_cubin

    def kernels(cfg):
        return {v: from_cubin(c, "sm_90a", Path(folder, f"{c.name}.{src}.cubin").read_bytes())
                for v, (c, src) in variants(cfg).items()}
    todo = [p for p in problems() if variants(p[4])]
    layer_sweep.sweep_variants(layer_sweep.Device(folder), todo, kernels, save)


def summary(rows) -> dict:
    """Per set and M: geomean x F.linear as rendered and of the fastest variant, and each
    variant's speed-up over the rendered kernel (geomean, worst, best) on the rows it was
    timed."""
    out = {}
    for key, sel in layer_sweep.by_set_and_m(rows, MS):
        s = out[key] = {"rows": len(sel), "rendered_x_torch": round(
            small_m._geomean([r["x_torch_rendered"] for r in sel]), 3)}
        best = [max(r.get(f"x_torch_{v}", 0) for v in VARIANTS) for r in sel]
        s["best_x_torch"] = round(small_m._geomean(best), 3)
        s.update(layer_sweep.speedups(sel, "rendered", VARIANTS[1:]))
        s["errors_ok"] = all(r[f"{v}_error"] < 2e-2 for r in sel for v in VARIANTS
                             if f"{v}_error" in r)
    return out


def save(gpu, rows, quiet=False) -> None:
    tag = "_M" + "_".join(map(str, MS)) if "WAITER_MS" in os.environ else ""
    layer_sweep.save_rows("waiter", __doc__, gpu, rows, summary(rows), tag, quiet)


AB_MS = tuple(int(m) for m in os.environ.get("WAITER_AB_MS", "1,8,16,32,64,128,256,512")
              .split(","))
if __name__ == "__main__":
    {"compile": lambda: compile_to(sys.argv[2]), "run": lambda: main_run(sys.argv[2]),
     "ab-compile": lambda: rules_ab.compile(sys.argv[2], sys.argv[3], AB_MS),
     "ab-run": lambda: rules_ab.run(sys.argv[2], "waiter_ab", __doc__, AB_MS)}[sys.argv[1]]()
