"""Which baseline: PyTorch (F.linear for rcr, torch.matmul otherwise) beside cublasGemmEx
through CuPy beside gemmgen.gemm's choice, on the same device buffers, for a handful of bf16
shapes; every output checked against a float64 reference (relative Frobenius error).

python3 benchmarks/investigations/baseline_check.py [--out DIR] [--budget S]
    (needs a GPU, PyCUDA, PyTorch with CUDA and CuPy)

All three are timed the way the suites time kernels (``gemmgen.tune.bench.time_launches``):
eager calls (no CUDA graph), one CUDA event pair per call, inputs rotated over buffer sets
spanning 3x L2, median of 5 to 200 calls filling about --budget seconds; TFLOP/s =
2·M·N·K / s. gemm's kernels are compiled first (in parallel; cached afterwards), then each
shape takes well under a second. Prints a table and writes DIR/baseline_check_<GPU>.json
(DIR default benchmarks/results).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's gemmgen

from gemmgen.heuristics.select import decide, tight_lds  # noqa: E402
from gemmgen.heuristics.tunedb import TuneDB  # noqa: E402
from gemmgen.runtime.build import build_many  # noqa: E402
from gemmgen.runtime.device import device_cc  # noqa: E402
from gemmgen.tune.baseline import bench_torch, torch_op  # noqa: E402
from gemmgen.tune.bench import (  # noqa: E402
    Problem,
    bench_cublas,
    bench_kernel,
    cublas_available,
    device_info,
    tflops,
)
from gemmgen.tune.results import file_stem  # noqa: E402
from gemmgen.tune.verify import tolerance  # noqa: E402

SHAPES = [("rcr", 64, 3072, 3072), ("rcr", 128, 8192, 8192), ("rcr", 256, 4544, 4544),
          ("rcr", 4096, 4096, 4096), ("rrr", 128, 4096, 4096), ("crr", 4096, 4096, 512)]
"""(layout, M, N, K): forward (rcr) decode to prefill, one dgrad (rrr), one wgrad (crr)."""
DTYPE = "bf16"


def choices(info: dict) -> dict:
    """(layout, M, N, K) -> (Kernel or the exception that stopped it, swap)."""
    db, cc, picked = TuneDB(None), device_cc(), {}
    for shape in SHAPES:
        layout, m, n, k = shape
        ldc = tight_lds(layout, m, n, k)[2]
        try:
            picked[shape] = decide(db, info["gpu"], DTYPE, m, n, k, cc, layout, "none",
                                   ldc * 2 % 16 == 0)
        except ValueError as exc:
            picked[shape] = exc
    configs = {c.config.name: c.config for c in picked.values() if not isinstance(c, Exception)}
    built = dict(zip(configs, build_many(list(configs.values()))))
    return {s: (c, False) if isinstance(c, Exception) else (built[c.config.name], c.swap)
            for s, c in picked.items()}


def measure(shape, kernel, swap, info: dict, budget: float, rng) -> dict:
    layout, m, n, k = shape
    p = Problem(m, n, k, rng, info["l2_bytes"], DTYPE, DTYPE, layout,
                device_data=cublas_available() is None)
    tol = tolerance(k, DTYPE, "fp32", DTYPE)
    row = {"layout": layout, "M": m, "N": n, "K": k, "dtype": DTYPE, "tolerance": tol,
           "torch_op": torch_op(layout)}
    runs = {"torch": lambda: bench_torch(p, budget), "cublas": lambda: bench_cublas(p, budget)}
    if not isinstance(kernel, Exception):
        runs["gemmgen"] = lambda: bench_kernel(kernel, p, budget, swap)
        row.update(gemmgen_kernel=kernel.name, swap=swap)
    else:
        row.update(gemmgen_error=f"{type(kernel).__name__}: {kernel}")
    for name, run in runs.items():
        try:
            timing, err = run()
        except Exception as exc:  # noqa: BLE001 - noted in the row, the others still run
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        row.update({f"{name}_tflops": round(tflops(m, n, k, timing.median), 2),
                    f"{name}_ms": round(timing.median * 1e3, 4), f"{name}_rel_error": err,
                    f"{name}_ok": bool(err <= tol)})
    t, c, g = (row.get(f"{x}_tflops") for x in ("torch", "cublas", "gemmgen"))
    row["torch_over_cublas"] = round(t / c, 3) if t and c else None
    row["gemmgen_over_torch"] = round(g / t, 3) if g and t else None
    row["gemmgen_over_cublas"] = round(g / c, 3) if g and c else None
    del p
    return row


def show(rows: list) -> None:
    head = (f"{'layout':6} {'M x N x K':>17} {'op':>12} {'torch':>8} {'cuBLAS':>8} "
            f"{'gemmgen':>8} {'t/cuB':>6} {'g/t':>6} {'g/cuB':>6}  errors (torch, cuBLAS, gemm)")
    print(head + "\n" + "-" * len(head))

    def f(v, spec):
        return "-" if v is None else format(v, spec)
    for r in rows:
        errs = ", ".join(f(r.get(f"{x}_rel_error"), ".1e") + ("" if r.get(f"{x}_ok", True)
                                                                 else " FAIL")
                         for x in ("torch", "cublas", "gemmgen"))
        print(f"{r['layout']:6} {r['M']:>5}x{r['N']}x{r['K']:<5} {r['torch_op']:>12} "
              f"{f(r.get('torch_tflops'), '8.1f')} {f(r.get('cublas_tflops'), '8.1f')} "
              f"{f(r.get('gemmgen_tflops'), '8.1f')} {f(r['torch_over_cublas'], '6.2f')} "
              f"{f(r['gemmgen_over_torch'], '6.2f')} {f(r['gemmgen_over_cublas'], '6.2f')}  "
              f"{errs}")
        for key in ("torch_error", "cublas_error", "gemmgen_error"):
            if key in r:
                print(f"    {key}: {r[key]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--budget", type=float, default=0.1, help="seconds of timing per run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    info = device_info()
    import torch
    picked = choices(info)
    built = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    rows = [measure(s, *picked[s], info, args.budget, rng) for s in SHAPES]
    show(rows)
    done = time.perf_counter()
    print(f"{info['gpu']}: build {built - start:.1f} s, measure {done - built:.1f} s")
    doc = {**info, "torch_version": torch.__version__, "budget_s": args.budget,
           "method": "eager calls on the same Problem buffers, CUDA events per call "
                     "(gemmgen.tune.bench.time_launches), TFLOP/s = 2MNK/s; rel_error = "
                     "||C - ref||_F / ||ref||_F against float64", "rows": rows}
    path = args.out / f"baseline_check_{file_stem(info['gpu'])}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    ok = all(r.get(f"{x}_ok", False) for r in rows for x in ("torch", "cublas", "gemmgen"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
