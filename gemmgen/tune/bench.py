"""Benchmarking: CUDA-event timing with rotated inputs on a problem's device buffers; cuBLAS
through CuPy (``bench_cublas``) and the rows' baseline fields. The baseline a run times beside
(F.linear / torch.matmul, else cublasGemmEx through CuPy) and ``run_bench`` are in
``gemmgen.tune.baseline``."""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model.dtypes import CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R, stored_as
from ..runtime.arrays import numpy_dtype
from ..runtime.device import pycuda_modules
from ..runtime.launch import to_device
from ..runtime.recipe import KernelArgs
from .verify import compare, random_operands, reference, tolerance

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


WARM_S = 0.05
"""About how long the warm-up before a timing lasts (clocks, caches, cuBLAS heuristics)."""


def repetitions(one: float, budget_s: float) -> tuple[int, int]:
    """(warm-up, timed) repetitions of a unit of work that takes ``one`` seconds: as many
    warm-ups as fill ``WARM_S`` (2 to 20), as many timed ones as fill ``budget_s`` (5 to
    200)."""
    one = max(one, 1e-6)
    return min(max(int(WARM_S / one), 2), 20), min(max(int(budget_s / one), 5), 200)


def summary(times: list[float], reps: int) -> Timing:
    """The ``Timing`` of ``reps`` measured seconds ``times``: median, 20th and 80th
    percentiles."""
    times = sorted(times)
    q = statistics.quantiles(times, n=5) if len(times) > 1 else times * 4
    return Timing(statistics.median(times), q[0], q[-1], reps)


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
    warm, reps = repetitions(end.time_since(start) / 1e3, budget_s)
    for i in range(warm):  # warm-up: clocks, caches, cuBLAS
        launch(i % sets)
    events = [(drv.Event(), drv.Event()) for _ in range(reps)]
    for i, (s, e) in enumerate(events):
        s.record()
        launch(i % sets)
        e.record()
    events[-1][1].synchronize()
    return summary([e.time_since(s) / 1e3 for s, e in events], reps)


GRAPH_SPAN_S = 200e-6
"""About how long one replay of ``time_graphed``'s graph lasts: launches per graph are
chosen so, between 1 and ``GRAPH_LAUNCHES``."""
GRAPH_LAUNCHES = 50


def graph_launches(first: float) -> int:
    """Launches per captured graph for a launch of ``first`` seconds (``GRAPH_SPAN_S``)."""
    return min(max(int(GRAPH_SPAN_S / max(first, 1e-6)), 1), GRAPH_LAUNCHES)


def time_graphed(launch: Callable[[int, int], None], sets: int, budget_s: float = 0.25
                 ) -> Timing:
    """Kernel-only time of ``launch(i, stream)`` (i picks an input set, rotating past L2;
    ``stream`` a raw CUstream handle to queue on): the launches are captured into a CUDA graph
    on a private non-blocking stream (``runtime.graphs.Graph``; a launch recipe's memsets and helper
    launches become graph nodes, its workspaces come from the capture's pool, freed after) and
    the graph is replayed, one CUDA event pair per replay; seconds per launch = replay time /
    launches in the graph. So no host time is counted: this is what a CUDA-graph replay (a
    served model, ``torch.compile`` with ``mode="reduce-overhead"``) sees, where
    ``time_launches`` counts the host's work per call when it exceeds the kernel's. As many
    launches per graph as fill about ``GRAPH_SPAN_S``, replays as fill ``budget_s`` (5 to
    200), after a warm-up; median and 20th/80th percentiles over the replays.

    Raises ``driver.DriverError`` when a launch cannot be captured."""
    from ..runtime import driver, workspaces
    from ..runtime.graphs import Event, Graph, Stream
    device = driver.current_device()
    driver.synchronize()  # the inputs, written on other streams, are ready
    stream = Stream()
    try:
        start, end = Event(), Event()
        launch(0, stream.handle)  # eager once: modules loaded, workspaces sized
        start.record(stream.handle)
        launch(1 % sets, stream.handle)
        end.record(stream.handle)
        first = max(end.seconds_since(start), 1e-6)
        per = graph_launches(first)
        graph = Graph(stream, lambda h: [launch(i % sets, h) for i in range(per)])
        try:
            warm, reps = repetitions(first * per, budget_s)
            for _ in range(warm):  # warm-up: clocks
                graph.launch()
            events = [(Event(), Event()) for _ in range(reps)]
            for s, e in events:
                s.record(stream.handle)
                graph.launch()
                e.record(stream.handle)
            times = [e.seconds_since(s) / per for s, e in events]
        finally:
            driver.stream_synchronize(stream.handle)
            graph.close()
    finally:
        driver.stream_synchronize(stream.handle)
        workspaces.release_captures(device, stream.handle)
        stream.close()
    return summary(times, reps)


class Problem:
    """Device buffers for one M x N x K problem (optionally a batch) in one dtype pair and
    layout: ``sets`` rotated copies of A, B and C (fresh standard-normal data, never zeros),
    a bias vector, the set-0 host copies and their float64 references.

    ``device_data``: draw A and B on the GPU (CuPy's generator, float32 normals rounded to the
    dtype; bf16 by truncation) instead of on the host, and keep no host copies: the references
    are then computed from the device operands (CuPy needed). A 8192 x 14336 x 4096 problem's
    operands take seconds to draw on the host and milliseconds on the GPU."""

    def __init__(self, m: int, n: int, k: int, rng: np.random.Generator, l2_bytes: int,
                 dtype: str = "fp32", out: str = "fp32", layout: str = "rrr",
                 batch: int | None = None, device_data: bool = False):
        from pycuda import gpuarray
        self.m, self.n, self.k, self.dtype, self.out = m, n, k, dtype, out
        self.layout, self.batch = layout, batch
        ab, c = numpy_dtype(dtype), numpy_dtype(out)
        per = batch or 1
        set_bytes = per * (ab.itemsize * (m * k + k * n) + c.itemsize * m * n)
        self.sets = max(1, min(16, -(-L2_MULTIPLE * l2_bytes // max(set_bytes, 1))))
        self.A = self.B = None
        if not device_data:
            self.A, self.B, _ = random_operands(rng, m, n, k, 1.0, dtype, out, batch)
        self.bias_host = rng.standard_normal(n, dtype=np.float32).astype(c)
        self.bias = gpuarray.to_gpu(self.bias_host)
        self._refs: dict[str, np.ndarray] = {}
        self.a, self.b, self.c = [], [], []
        lead = (batch,) if batch else ()
        for i in range(self.sets):
            if device_data:
                seed = int(rng.integers(2 ** 31))
                a, self.lda = _device_normal(lead, m, k, layout[0] == "c", dtype, seed)
                b, self.ldb = _device_normal(lead, k, n, layout[1] == "c", dtype, seed + 1)
            else:
                A, B = (self.A, self.B) if i == 0 else random_operands(
                    rng, m, n, k, 1.0, dtype, out, batch)[:2]
                a, self.lda, _ = to_device(A, layout[0] == "c")
                b, self.ldb, _ = to_device(B, layout[1] == "c")
            zeros = np.zeros((*lead, m, n), c)
            c_dev, self.ldc, _ = to_device(zeros, layout[2] == "c")
            self.a.append(a)
            self.b.append(b)
            self.c.append(c_dev)

    @property
    def strides(self) -> tuple[int, int, int]:
        if not self.batch:
            return 0, 0, 0
        return self.m * self.k, self.k * self.n, self.m * self.n

    def launch(self, kernel, i: int, swap: bool = False, stream=None) -> None:
        """One launch of ``kernel`` on set ``i`` (alpha 1, beta 0, bias when it takes one) on
        ``stream`` (None: the legacy default stream; a raw handle or a library's stream).
        ``swap``: the kernel computes C^T = B^T A^T (its layout is the problem's transposed,
        as ``gemmgen.heuristics.select.Choice.swap`` says): launched with M and N, A and B
        exchanged."""
        sa, sb, sc = self.strides
        bias = int(self.bias.gpudata) if kernel.config.epilogue.startswith("bias") else 0
        a, lda, b, ldb = (int(self.a[i].gpudata), self.lda, int(self.b[i].gpudata), self.ldb)
        if swap:
            kernel.launch_raw(KernelArgs(self.n, self.m, self.k, b, ldb, a, lda,
                                         int(self.c[i].gpudata), self.ldc, 1.0, 0.0, sb, sa, sc,
                                         bias, self.batch or 1), stream)
            return
        kernel.launch_raw(KernelArgs(self.m, self.n, self.k, a, lda, b, ldb,
                                     int(self.c[i].gpudata), self.ldc, 1.0, 0.0, sa, sb, sc,
                                     bias, self.batch or 1), stream)

    def result(self) -> np.ndarray:
        out = self.c[0].get().view(numpy_dtype(self.out))
        return np.swapaxes(out, -1, -2) if self.layout[2] == "c" else out

    def error_of(self, run_set0: Callable[[], None], epilogue: str = "none") -> float:
        """Poison C of set 0 with NaN, run, and return ||C - ref|| / ||ref||: on the GPU in
        float64 through CuPy when it is installed (a 8192^3 reference takes milliseconds
        there and minutes on the host), else on the host."""
        _poison(self.c[0], self.out)
        run_set0()
        if cublas_available() is None:
            return self._device_error(epilogue)
        if self.A is None:
            raise RuntimeError("a Problem with device_data needs CuPy for its references")
        if epilogue not in self._refs:
            self._refs[epilogue] = reference(self.A, self.B, None, 1.0, 0.0, self.bias_host,
                                             epilogue)
        return compare(self.result(), self._refs[epilogue])[0]

    def _device_error(self, epilogue: str) -> float:
        import cupy
        if epilogue not in self._refs:
            if self.A is None:  # device_data: the operands of set 0 as they are stored
                up = [_cupy_float32(self.a[0], self.dtype, self.layout[0] == "c"),
                      _cupy_float32(self.b[0], self.dtype, self.layout[1] == "c")]
            else:
                up = [cupy.asarray(x.astype(np.float32)) for x in (self.A, self.B)]
            bias = cupy.asarray(self.bias_host.astype(np.float32))
            self._refs[epilogue] = reference(*up, None, 1.0, 0.0, bias, epilogue)
        return compare(_cupy_float32(self.c[0], self.out, self.layout[2] == "c"),
                       self._refs[epilogue])[0]


NAN_BITS = {"fp32": 0x7FC00000, "fp16": 0x7E00, "bf16": 0x7FC0}
"""A quiet NaN's bits in each storage dtype."""


def _poison(array, dtype: str) -> None:
    """Fill a GPUArray of gemmgen dtype ``dtype`` with NaN on the device (a driver memset,
    ordered on the legacy default stream like the launches that follow)."""
    import pycuda.driver as drv
    if array.size:
        bits = NAN_BITS[stored_as(dtype)]
        fill = drv.memset_d32 if array.dtype.itemsize == 4 else drv.memset_d16
        fill(array.gpudata, bits, array.size)


def _device_normal(lead: tuple, rows: int, cols: int, col: bool, dtype: str, seed: int):
    """(GPUArray, leading dimension) of a rows x cols matrix (or a batch: ``lead``) of
    standard-normal values drawn on the GPU by CuPy, stored as ``dtype`` (bf16: the float32
    draw truncated to its top 16 bits), column-major when ``col`` (stored transposed)."""
    import cupy
    from pycuda import gpuarray
    shape = (*lead, cols, rows) if col else (*lead, rows, cols)
    out = gpuarray.empty(shape, numpy_dtype(stored_as(dtype)))
    if out.size:
        draw = cupy.random.RandomState(seed).standard_normal(shape, dtype=cupy.float32)
        mem = cupy.cuda.UnownedMemory(int(out.gpudata), out.nbytes, out)
        raw = {"fp32": cupy.float32, "fp16": cupy.float16, "bf16": cupy.uint16}[stored_as(dtype)]
        view = cupy.ndarray(shape, raw, cupy.cuda.MemoryPointer(mem, 0))
        if dtype == "bf16":
            view[...] = (draw.view(cupy.uint32) >> 16).astype(cupy.uint16)
        else:
            view[...] = draw.astype(raw)
    return out, max(rows if col else cols, 1)


def _cupy_float32(array, dtype: str, col: bool):
    """A PyCUDA GPUArray of gemmgen dtype ``dtype`` as a float32 CuPy array (bf16 widened by
    its bits, as CuPy has no bfloat16), matrices transposed back when stored column-major."""
    import cupy
    mem = cupy.cuda.UnownedMemory(int(array.gpudata), array.nbytes, array)
    raw = {"fp32": cupy.float32, "fp16": cupy.float16, "bf16": cupy.uint16}[stored_as(dtype)]
    x = cupy.ndarray(array.shape, raw, cupy.cuda.MemoryPointer(mem, 0))
    if dtype == "bf16":
        x = (x.astype(cupy.uint32) << 16).view(cupy.float32)
    x = x.astype(cupy.float32)
    return cupy.swapaxes(x, -1, -2) if col else x


def bench_kernel(kernel, p: Problem, budget_s: float = 0.25,
                 swap: bool = False) -> tuple[Timing, float]:
    """(timing, relative error) of a built gemmgen kernel on problem ``p`` (alpha 1, beta 0);
    ``swap``: launched as C^T = B^T A^T (see ``Problem.launch``); ``budget_s``: seconds of
    timed launches (``time_launches``)."""
    err = p.error_of(lambda: p.launch(kernel, 0, swap), kernel.config.epilogue)
    return time_launches(lambda i: p.launch(kernel, i, swap), p.sets, budget_s), err


def cublas_available() -> str | None:
    """None when CuPy (our way to cuBLAS) can be used, else the reason it cannot."""
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); pip install 'gemmgen[cublas]'"
    return None


def bench_cublas(p: Problem, budget_s: float = 0.25) -> tuple[Timing, float]:
    """(timing, relative error) of cuBLAS on the same buffers and layouts: ``cublasGemmEx``
    (``cublasGemmStridedBatchedEx`` for a batch) through CuPy, A and B in ``p.dtype``, C in
    ``p.out``, FP32 compute (CUBLAS_COMPUTE_32F: SGEMM for fp32; _FAST_TF32 for tf32).
    cuBLAS is column-major: a row-major C is computed as C^T = B^T A^T, a column-major C as
    C = A B, each operand transposed or not as its layout requires. ``budget_s``: seconds of
    timed launches."""
    from cupy.cuda import cublas, device
    handle = device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)  # host pointer mode
    compute = CUBLAS_COMPUTE_32F_FAST_TF32 if p.dtype == "tf32" else CUBLAS_COMPUTE_32F
    ab, c = CUDA_R[p.dtype], CUDA_R[p.out]
    a_row, b_row = p.layout[0] == "r", p.layout[1] == "r"
    sa, sb, sc = p.strides
    if p.layout[2] == "r":  # C^T (N x M) = op(B) op(A)
        dims, first, second = (p.n, p.m, p.k), (p.b, p.ldb, int(not b_row), sb), \
            (p.a, p.lda, int(not a_row), sa)
    else:  # C (M x N) = op(A) op(B)
        dims, first, second = (p.m, p.n, p.k), (p.a, p.lda, int(a_row), sa), \
            (p.b, p.ldb, int(b_row), sb)

    def launch(i: int) -> None:
        (x, ldx, tx, sx), (y, ldy, ty, sy) = first, second
        head = (handle, tx, ty, *dims, one.ctypes.data, int(x[i].gpudata), ab, ldx)
        if p.batch:
            cublas.gemmStridedBatchedEx(*head, sx, int(y[i].gpudata), ab, ldy, sy,
                                        zero.ctypes.data, int(p.c[i].gpudata), c, p.ldc, sc,
                                        p.batch, compute, -1)
        else:
            cublas.gemmEx(*head, int(y[i].gpudata), ab, ldy, zero.ctypes.data,
                          int(p.c[i].gpudata), c, p.ldc, compute, -1)
    return time_launches(launch, p.sets, budget_s), p.error_of(lambda: launch(0))


def device_info() -> dict:
    """GPU name, SM count, L2 bytes, CUDA driver and toolkit versions of the current device."""
    drv, _ = pycuda_modules()  # makes the primary context current
    dev = drv.Context.get_device()
    attr = drv.device_attribute
    return {"gpu": dev.name(), "sms": dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
            "l2_bytes": dev.get_attribute(attr.L2_CACHE_SIZE),
            "cuda_driver": _version(drv.get_driver_version()),
            "cuda_version": ".".join(map(str, drv.get_version()))}


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def kernel_row(label: str, kernel, p: Problem, timing: Timing, err: float,
               base: tuple | None = None) -> dict:
    """One results row: ``kernel`` (labelled ``label``) timed on problem ``p`` beside the
    baseline ``base`` ((timing, relative error[, name]) from the same buffers: F.linear,
    torch.matmul or cublasGemmEx (CuPy), see ``baseline.bench_baseline``; None when there is
    none), with ``with_baseline``'s fields. TFLOP/s count 2 M N K per product (times the
    batch); ``passed``
    compares the error with ``verify.tolerance`` for the problem's K and the kernel's dtypes;
    times in milliseconds."""
    cfg, batch = kernel.config, p.batch
    flops = (batch or 1) * tflops(p.m, p.n, p.k, timing.median)
    base_flops = (batch or 1) * tflops(p.m, p.n, p.k, base[0].median) if base else None
    return with_baseline({
        "kernel": label, "name": kernel.name, "config": cfg.as_dict(), "dtype": cfg.dtype,
        "M": p.m, "N": p.n, "K": p.k, "tflops": round(flops, 3),
        "cublas_tflops": round(base_flops, 3) if base_flops else None,
        "pct_cublas": round(100 * flops / base_flops, 1) if base_flops else None,
        "rel_error": err, "cublas_rel_error": base[1] if base else None,
        "passed": bool(err <= tolerance(p.k, cfg.dtype, cfg.acc, p.out,
                                        getattr(cfg, "math", "native"))),
        "acc": cfg.acc, "out": p.out, "layout": p.layout, "batch": batch,
        "epilogue": cfg.epilogue, "specialized": cfg.specialized,
        "time_ms": round(timing.median * 1e3, 4), "p20_ms": round(timing.p20 * 1e3, 4),
        "p80_ms": round(timing.p80 * 1e3, 4), "reps": timing.reps,
        "registers": kernel.registers, "smem_bytes": kernel.smem_bytes},
        base[2] if base and len(base) > 2 else None)


def with_baseline(row: dict, name: str | None) -> dict:
    """``row`` with the baseline's fields: ``baseline`` (its name: F.linear, torch.matmul,
    cublasGemmEx (CuPy), torch._scaled_mm, ...), ``baseline_tflops``, ``pct_baseline`` and
    ``baseline_rel_error``, the same figures as the older ``cublas_tflops``, ``pct_cublas``
    and ``cublas_rel_error`` (kept: whatever the baseline is)."""
    return {**row, "baseline": name,
            "baseline_tflops": row.get("cublas_tflops"),
            "pct_baseline": row.get("pct_cublas"),
            "baseline_rel_error": row.get("cublas_rel_error")}

