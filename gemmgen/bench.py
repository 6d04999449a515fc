"""Benchmarking: CUDA-event timing with rotated inputs, beside cuBLAS (through CuPy) in the same run."""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .verify import compare, random_operands, reference

DEFAULT_SIZES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                 (8192, 8192, 8192), (4095, 4097, 4093))
L2_MULTIPLE = 3  # the rotated input sets together span this many L2 caches


def tflops(m: int, n: int, k: int, seconds: float) -> float:
    """2 M N K / seconds, in TFLOP/s."""
    return 2.0 * m * n * k / seconds / 1e12


@dataclass(frozen=True)
class Timing:
    """Seconds per launch: median and 20th/80th percentiles over ``reps`` launches."""

    median: float
    p20: float
    p80: float
    reps: int


def time_launches(launch: Callable[[int], None], sets: int, budget_s: float = 0.25) -> Timing:
    """Time ``launch(i)`` (i picks an input set, rotating so L2 does not hold the inputs) with
    one CUDA event pair per launch, after a warm-up. The number of launches is chosen so that
    the timed part lasts about ``budget_s`` (5 to 200 launches)."""
    import pycuda.driver as drv
    start, end = drv.Event(), drv.Event()
    start.record()
    launch(0)
    end.record()
    end.synchronize()
    first = max(end.time_since(start) / 1e3, 1e-6)
    for i in range(min(max(int(0.05 / first), 2), 20)):  # warm-up: clocks, caches, cuBLAS
        launch(i % sets)
    reps = min(max(int(budget_s / first), 5), 200)
    events = [(drv.Event(), drv.Event()) for _ in range(reps)]
    for i, (s, e) in enumerate(events):
        s.record()
        launch(i % sets)
        e.record()
    events[-1][1].synchronize()
    times = sorted(e.time_since(s) / 1e3 for s, e in events)
    q = statistics.quantiles(times, n=5) if len(times) > 1 else times * 4
    return Timing(statistics.median(times), q[0], q[-1], reps)


class Problem:
    """Device buffers for one M x N x K problem: ``sets`` rotated copies of A, B and C (fresh
    standard-normal data, never zeros), the set-0 host copies and their float64 reference
    (alpha = 1, beta = 0)."""

    def __init__(self, m: int, n: int, k: int, rng: np.random.Generator, l2_bytes: int):
        from pycuda import gpuarray
        self.m, self.n, self.k = m, n, k
        set_bytes = 4 * (m * k + k * n + m * n)
        self.sets = max(1, min(16, -(-L2_MULTIPLE * l2_bytes // set_bytes)))
        self.A, self.B, _ = random_operands(rng, m, n, k, beta=1.0)
        self.ref = reference(self.A, self.B, None, 1.0, 0.0)
        self.a = [gpuarray.to_gpu(self.A)] + [gpuarray.to_gpu(rng.standard_normal(
            (m, k), dtype=np.float32)) for _ in range(self.sets - 1)]
        self.b = [gpuarray.to_gpu(self.B)] + [gpuarray.to_gpu(rng.standard_normal(
            (k, n), dtype=np.float32)) for _ in range(self.sets - 1)]
        self.c = [gpuarray.empty((m, n), np.float32) for _ in range(self.sets)]

    def error_of(self, run_set0: Callable[[], None]) -> float:
        """Poison C of set 0 with NaN, run, and return ||C - ref|| / ||ref||."""
        self.c[0].fill(np.float32(np.nan))
        run_set0()
        return compare(self.c[0].get(), self.ref)[0]


def bench_kernel(kernel, p: Problem) -> tuple[Timing, float]:
    """(timing, relative error) of a built gemmgen kernel on problem ``p`` (alpha 1, beta 0)."""
    def launch(i: int) -> None:
        kernel.launch_raw(p.m, p.n, p.k, 1.0, int(p.a[i].gpudata), p.k, int(p.b[i].gpudata),
                          p.n, 0.0, int(p.c[i].gpudata), p.n)
    return time_launches(launch, p.sets), p.error_of(lambda: launch(0))


def cublas_available() -> str | None:
    """None when CuPy (hence cuBLAS) can be used, else the reason it cannot."""
    os.environ["CUPY_TF32"] = "0"  # FP32 SGEMM, not TF32: read by CuPy at import
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install 'gemmgen[cublas]'"
    return None


def bench_cublas(p: Problem) -> tuple[Timing, float]:
    """(timing, relative error) of cuBLAS SGEMM (``cupy.matmul``, TF32 off) on the same buffers."""
    import cupy
    a = [cupy.asarray(x) for x in p.a]
    b = [cupy.asarray(x) for x in p.b]
    c = [cupy.asarray(x) for x in p.c]

    def launch(i: int) -> None:
        cupy.matmul(a[i], b[i], out=c[i])
    return time_launches(launch, p.sets), p.error_of(lambda: launch(0))


def device_info() -> dict:
    """GPU name, SM count, L2 bytes, CUDA driver and toolkit versions of the current device."""
    import pycuda.driver as drv
    dev = drv.Context.get_device()
    attr = drv.device_attribute
    return {"gpu": dev.name(), "sms": dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
            "l2_bytes": dev.get_attribute(attr.L2_CACHE_SIZE),
            "cuda_driver": _version(drv.get_driver_version()),
            "cuda_version": ".".join(map(str, drv.get_version()))}


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def run_bench(targets, sizes=DEFAULT_SIZES, seed: int | None = None, progress=None) -> dict:
    """Benchmark ``targets`` (``(label, Kernel)`` pairs) and cuBLAS at each ``(M, N, K)``.

    Returns the results document: device fields plus one row per kernel and size with TFLOP/s,
    cuBLAS TFLOP/s from the same buffers in the same run, % of cuBLAS and the relative error.
    ``progress(n)`` is called after each measurement.
    """
    from .verify import tolerance
    info = device_info()
    reason = cublas_available()
    rng = np.random.default_rng(seed)
    rows = []
    for m, n, k in sizes:
        p = Problem(m, n, k, rng, info["l2_bytes"])
        cub = bench_cublas(p) if reason is None else None
        if progress:
            progress(1)
        for label, kernel in targets:
            timing, err = bench_kernel(kernel, p)
            flops = tflops(m, n, k, timing.median)
            cub_flops = tflops(m, n, k, cub[0].median) if cub else None
            rows.append({
                "kernel": label, "name": kernel.name, "config": kernel.config.as_dict(),
                "dtype": kernel.config.dtype, "M": m, "N": n, "K": k,
                "tflops": round(flops, 3),
                "cublas_tflops": round(cub_flops, 3) if cub_flops else None,
                "pct_cublas": round(100 * flops / cub_flops, 1) if cub_flops else None,
                "rel_error": err, "cublas_rel_error": cub[1] if cub else None,
                "passed": bool(err <= tolerance(k, kernel.config.dtype)),
                "time_ms": round(timing.median * 1e3, 4), "p20_ms": round(timing.p20 * 1e3, 4),
                "p80_ms": round(timing.p80 * 1e3, 4), "reps": timing.reps,
                "registers": kernel.registers, "smem_bytes": kernel.smem_bytes})
            if progress:
                progress(1)
        del p
    return {**info, "cublas": "cupy.matmul, CUPY_TF32=0" if reason is None else reason,
            "rows": rows}
