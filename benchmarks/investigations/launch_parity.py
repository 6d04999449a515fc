"""A dispatch suite's launches as this checkout makes them (the llm suite by default): per
problem, the launch that ``benchmarks/run.py SUITE`` times (gemmgen.gemm's choice, ``Problem.launch`` as the dispatch
suite calls it), recorded at ``gemmgen.runtime.driver.launch``: kernel, grid, block, dynamic
shared memory and parameter-block size; and the host time of a launch: ``time.perf_counter``
around LAUNCHES launches without synchronization (the enqueue cost, host work only), median
of 5 batches, with the device synchronized between batches.

Run it in two checkouts on the same GPU, one after the other, and compare the files: the same
kernels with the same launch geometry and parameter sizes (whose cubins are identical) run
the same device work, so what can differ between the two is the host time. Usage on the GPU
machine, from the repository root of each checkout:
    PYTHONPATH=$PWD python3 benchmarks/investigations/launch_parity.py OUT.json [--quick] \
        [--suite square]
``--quick`` keeps the suite's ``[quick]`` values (for llm, T in 1, 16, 128, 1024, 4096).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

LAUNCHES = 100


def problems(suite: str, quick: bool) -> list:
    """The dispatch suite's cases (``expand``: each problem once)."""
    from gemmgen.tune.suite_cases import expand
    from gemmgen.tune.suites import load
    return expand(load(suite), quick)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--suite", default="llm", help="a dispatch suite (llm, square, odd)")
    args = ap.parse_args(argv)
    from gemmgen.runtime.device import pycuda_context
    with pycuda_context():
        return _run(args)


def _run(args) -> int:
    import pycuda.driver as drv

    # run_dispatch's decide call, spelled out: the script also runs in older checkouts
    from gemmgen.heuristics.select import decide, math_dtype
    from gemmgen.runtime import driver
    from gemmgen.runtime.device import device_cc
    from gemmgen.tune.bench import Problem, device_info
    from gemmgen.tune.suite_kinds import _build, _c_aligned
    from gemmgen.tune.suite_rows import out_dtype

    info, cc = device_info(), device_cc()
    cases = problems(args.suite, args.quick)
    choices = {c: decide(None, info["gpu"], math_dtype(c.dtype, c.math), c.m, c.n, c.k, cc,
                         c.layout, c.epilogue, _c_aligned(c), c.math) for c in cases}
    kernels = _build(choices, None)
    seen = []
    real = driver.launch

    def recording(function, grid, block, smem, params, stream=None):
        seen.append({"grid": list(grid), "block": list(block), "smem": smem,
                     "param_bytes": len(getattr(params, "data", params) or b"")})
        return real(function, grid, block, smem, params, stream)
    rows, rng = [], np.random.default_rng(0)
    for c in cases:
        ch = choices[c]
        kernel = kernels[ch.config.name]
        p = Problem(c.m, c.n, c.k, rng, info["l2_bytes"], c.dtype, out_dtype(c), c.layout,
                    device_data=True)
        driver.launch = recording
        seen.clear()
        p.launch(kernel, 0, ch.swap)
        driver.launch = real
        launches = list(seen)
        batches = []
        for _ in range(5):
            drv.Context.synchronize()
            t0 = time.perf_counter()
            for i in range(LAUNCHES):
                p.launch(kernel, i % p.sets, ch.swap)
            batches.append((time.perf_counter() - t0) / LAUNCHES)
        drv.Context.synchronize()
        rows.append({"problem": c.label, "kernel": ch.config.name,
                     "swap": ch.swap, "launches": launches,
                     "host_us": round(statistics.median(batches) * 1e6, 2)})
        del p
    doc = {"investigation": "launch_parity", "suite": args.suite, "quick": args.quick,
           "gpu": info["gpu"], "launches_per_batch": LAUNCHES,
           "rows": rows}
    Path(args.out).write_text(json.dumps(doc, indent=0))
    print(f"{len(rows)} problems, {len({r['kernel'] for r in rows})} kernels, median host "
          f"{statistics.median(r['host_us'] for r in rows):.2f} us a launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
