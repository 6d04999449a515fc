"""What a Hopper kernel's two ends cost: the shape rules' kernel for each forward layer of the
llm suite's models (training set) and of small_m.py's seven other families (held out), at
M = 1, 16, 64, 256, 1024 and 4096 (bf16, rcr; ``KERNEL_ENDS_MS``, comma-separated, for others),
as gemmgen renders it and in variants that patch one line of the rendered source:

- ``trigger``: every CTA runs ``griddepcontrol.launch_dependents`` right after its
  ``griddepcontrol.wait``, so the stream's next kernel (launched with PDL) is scheduled once
  every CTA has started, not as the last one exits;
- ``trigger_half``: the same only where the grid has at most half as many CTAs as ``%nsmid``
  (SM identifiers), so the next kernel's early CTAs find SMs this grid leaves whole;
- ``read_exit``: a TMA-store kernel's last wait for its stores is ``cp.async.bulk.wait_group.read``
  (shared memory read) instead of ``cp.async.bulk.wait_group`` (writes complete), as CUTLASS's
  epilogue ``store_tail`` waits (the same as rendered where C is stored directly: not timed).

All launched with PDL, beside F.linear on the same data. Graph-captured back to back (kernel
only): the next kernel is the same GEMM on the next input set, REPS launches per graph cycling
over input sets that together exceed twice the L2, median of 9 replays, F.linear and every
variant timed in two rounds, the second in reverse order (the faster of each kept). Every output
is poisoned (NaN) first and checked against float64.

    python3 benchmarks/investigations/kernel_ends.py compile DIR   # CPU: the cubins, into DIR
    python3 benchmarks/investigations/kernel_ends.py run DIR       # GPU: $OUT/kernel_ends_<GPU>.json
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

MS = tuple(int(m) for m in os.environ.get("KERNEL_ENDS_MS", "1,16,64,256,1024,4096").split(","))
WAIT = 'asm volatile("griddepcontrol.wait;\\n" ::: "memory");'
TRIGGER = 'asm volatile("griddepcontrol.launch_dependents;\\n" ::: "memory");'
HALF = ('{ unsigned nsm; asm("mov.u32 %0, %%nsmid;" : "=r"(nsm)); '
        'if (2 * gridDim.x * gridDim.y * gridDim.z <= nsm) ' + TRIGGER + ' }')
EXIT = "if (wtid == 0) bulk_wait();"
PATCHES = {"trigger": (WAIT, WAIT + "\n    " + TRIGGER),
           "trigger_half": (WAIT, WAIT + "\n    " + HALF),
           "read_exit": (EXIT, "if (wtid == 0) bulk_wait_read();")}
"""Variant -> (line of the rendered source, its replacement)."""
VARIANTS = ("rendered", *PATCHES)


def problems():
    """[(set, N, K, M, config, swap)] over both sets' layers and MS."""
    return layer_sweep.rule_problems(MS)


def sources(cfg) -> dict:
    """{variant: source} of ``cfg``: as rendered, and each patch that changes it."""
    from gemmgen import render
    source = render(cfg, "sm_90a")
    assert source.count(WAIT) == 1, cfg.name
    out = {"rendered": source}
    for v, (old, new) in PATCHES.items():
        if old in source:
            out[v] = source.replace(old, new)
    return out


def compile_to(folder: str) -> None:
    """NAME.VARIANT.cubin per config and variant."""
    layer_sweep.compile_sources(folder, [cfg for *_, cfg, _ in problems()], sources)


def main_run(folder: str) -> None:
    from gemmgen.runtime.build import from_cubin

    def kernels(cfg):
        return {v: from_cubin(cfg, "sm_90a", Path(folder, f"{cfg.name}.{v}.cubin").read_bytes())
                for v in VARIANTS if Path(folder, f"{cfg.name}.{v}.cubin").exists()}
    layer_sweep.sweep_variants(layer_sweep.Device(folder), problems(), kernels, save)


def summary(rows) -> dict:
    """Per set and M: geomean x F.linear as rendered, and each variant's speed-up over it
    (geomean and worst) on the rows it was timed."""
    out = {}
    for key, sel in layer_sweep.by_set_and_m(rows, MS):
        s = out[key] = {"rows": len(sel), "rendered_x_torch": round(
            small_m._geomean([r["x_torch_rendered"] for r in sel]), 3)}
        s.update(layer_sweep.speedups(sel, "rendered", PATCHES))
        s["errors_ok"] = all(r[f"{v}_error"] < 2e-2 for r in sel for v in VARIANTS
                             if f"{v}_error" in r)
    return out


def save(gpu, rows, quiet=False) -> None:
    tag = "_M" + "_".join(map(str, MS)) if "KERNEL_ENDS_MS" in os.environ else ""
    layer_sweep.save_rows("kernel_ends", __doc__, gpu, rows, summary(rows), tag, quiet)


if __name__ == "__main__":
    compile_to(sys.argv[2]) if sys.argv[1] == "compile" else main_run(sys.argv[2])
