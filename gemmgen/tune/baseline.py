"""The baseline a GEMM is timed beside: what a PyTorch user gets (``F.linear`` for layout rcr,
``torch.matmul`` on the operands' views otherwise: cuBLAS/cuBLASLt as PyTorch calls it, with
its workspace) on the very buffers of a ``bench.Problem``, on the same stream, the inputs
rotated past L2 as the kernel's are; else, where PyTorch with CUDA is absent,
``cublasGemmEx`` through CuPy (``bench.bench_cublas``), named "cublasGemmEx (CuPy)".

Timed as the kernels are (``bench.time_launches``): eager calls, one CUDA event pair per call
(the host's work per call included where it exceeds the kernel's), median of 5 to 200 calls
after a warm-up; TFLOP/s = 2·M·N·K / seconds (times the batch). ``torch`` is imported only
inside the functions that time it.
"""
from __future__ import annotations

import numpy as np

from ..model.dtypes import stored_as
from .bench import (
    DEFAULT_SIZES,
    Problem,
    Timing,
    bench_cublas,
    bench_kernel,
    cublas_available,
    device_info,
    graph_launches,
    kernel_row,
    repetitions,
    summary,
    time_launches,
)

CUBLAS_NAME = "cublasGemmEx (CuPy)"
"""The row name of the CuPy baseline (``bench.bench_cublas``)."""
TORCH_TEXT = (
    "PyTorch on the same buffers in the same run, on the same stream, the inputs rotated past "
    "L2 as the kernels' are: F.linear(x, W) for rcr (B = W^T of a row-major N x K weight), "
    "torch.matmul on the operands' views in their layouts otherwise (3-D views for a batch; "
    "out= C where C is row-major in the inputs' dtype), i.e. cuBLAS/cuBLASLt as PyTorch calls "
    "it, with its workspace; fp32 with TF32 off, tf32 with torch.backends.cuda.matmul."
    "allow_tf32 on; eager calls timed as the kernels' launches are")
CUBLAS_TEXT = (
    "cublasGemmEx (CuPy): cublasGemmEx through CuPy on the same buffers in the same run, FP32 "
    "compute (CUBLAS_COMPUTE_32F_FAST_TF32 for tf32; SGEMM for fp32, 3xTF32 rows included); "
    "used where PyTorch with CUDA is not installed (or asked for: baseline = \"cublas\")")
KERNEL_KINDS = ("presets", "dispatch")
"""Suite kinds whose "torch" baseline is F.linear / torch.matmul on the Problem's buffers."""


def torch_available() -> str | None:
    """None when PyTorch can run on a CUDA device here, else the reason it cannot."""
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not installed ({exc})"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device (a CPU-only build or no GPU)"
    return None


def choose(requested: str = "torch") -> str | None:
    """The baseline a run gets: "torch" when asked for (the default) and PyTorch with CUDA is
    importable, else "cublas" when CuPy is (also when "cublas" is asked for explicitly), else
    None (no baseline: neither is installed)."""
    if requested == "torch" and torch_available() is None:
        return "torch"
    return "cublas" if cublas_available() is None else None


def resolve(kind: str, requested: str) -> str:
    """A suite's baseline for this run, as a key of ``suite_run.BASELINES``: for the kernel
    kinds (presets, dispatch) "torch" becomes "torch_ops" (F.linear / torch.matmul) where
    PyTorch with CUDA is importable, else "cublas" where CuPy is, else "unavailable"; an
    explicit "cublas" is "unavailable" without CuPy. Other kinds and "none" are as asked."""
    if kind not in KERNEL_KINDS or requested not in ("torch", "cublas"):
        return requested
    got = choose(requested)
    return {"torch": "torch_ops", "cublas": "cublas", None: "unavailable"}[got]


def torch_op(layout: str, batch: int | None = None) -> str:
    """The PyTorch call a problem's baseline times: "F.linear" for an unbatched rcr (A = x
    row-major M x K, B = W^T of a row-major N x K weight, C row-major), else "torch.matmul"
    on the operands' views in their layouts (3-D views for a batch)."""
    return "F.linear" if layout == "rcr" and not batch else "torch.matmul"


def bench_baseline(p, budget_s: float, which: str | None, graphed: bool = False
                   ) -> tuple[Timing, float, str] | None:
    """(timing, relative error, row name) of the baseline ``which`` ("torch", "torch_ops" or
    "cublas"; None or "unavailable": None) on problem ``p``'s buffers. ``graphed``: PyTorch's
    calls are timed as CUDA-graph replays (``bench_torch``); CuPy's are always eager."""
    if which in ("torch", "torch_ops"):
        return (*bench_torch(p, budget_s, graphed=graphed), torch_op(p.layout, p.batch))
    if which == "cublas":
        return (*bench_cublas(p, budget_s), CUBLAS_NAME)
    return None


class _Interface:
    """A device buffer described by ``__cuda_array_interface__`` (version 2: no stream, so
    torch.as_tensor wraps it without copying or synchronizing)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 2, "strides": None}


def as_torch(array, dtype: str, torch):
    """A PyCUDA GPUArray holding gemmgen dtype ``dtype`` as a torch tensor on the same memory
    (no copy): bf16's raw 16-bit words viewed as torch.bfloat16, tf32 as float32."""
    typestr = {"fp32": "<f4", "fp16": "<f2", "bf16": "<i2"}[stored_as(dtype)]
    t = torch.as_tensor(_Interface(int(array.gpudata), array.shape, typestr), device="cuda")
    return t.view(torch.bfloat16) if dtype == "bf16" else t


def views(p, i: int, torch) -> tuple:
    """(A, B, C, W) of set ``i`` as torch views: A (..., M, K), B (..., K, N) and C (..., M, N)
    in their layouts (a column-major operand is the transpose of its stored array), W the
    stored array of B (N x K for a column-major B)."""
    a, w, c = (as_torch(x[i], d, torch) for x, d in ((p.a, p.dtype), (p.b, p.dtype),
                                                      (p.c, p.out)))
    a = a.transpose(-1, -2) if p.layout[0] == "c" else a
    b = w.transpose(-1, -2) if p.layout[1] == "c" else w
    c = c.transpose(-1, -2) if p.layout[2] == "c" else c
    return a, b, c, w


def torch_call(p, torch, epilogue: str = "none"):
    """``call(i, into)``: the PyTorch op on set ``i`` (see ``torch_op``); ``into``: the result
    also written into C (for the error; not timed). torch.matmul writes into C (out=) where C
    is row-major in the inputs' dtype. ``epilogue`` "bias": F.linear(x, W, bias), rcr only."""
    import torch.nn.functional as F
    sets = [views(p, i, torch) for i in range(p.sets)]
    if epilogue not in ("none", "bias") or (epilogue == "bias" and torch_op(
            p.layout, p.batch) != "F.linear"):
        raise ValueError(f"the PyTorch baseline takes epilogue none (or bias for rcr), "
                         f"not {epilogue!r} in {p.layout}")
    bias = as_torch(p.bias, p.out, torch).to(sets[0][0].dtype) if epilogue == "bias" else None
    out_ok = p.layout[2] == "r" and stored_as(p.out) == stored_as(p.dtype)

    def call(i: int, into: bool = False) -> None:
        a, b, c, w = sets[i]
        if torch_op(p.layout, p.batch) == "F.linear":
            y = F.linear(a, w, bias)
        elif out_ok:
            torch.matmul(a, b, out=c)
            return
        else:
            y = torch.matmul(a, b)
        if into:
            c.copy_(y)
    return call


def bench_torch(p, budget_s: float = 0.25, epilogue: str = "none", graphed: bool = False
                ) -> tuple[Timing, float]:
    """(timing, relative error) of PyTorch (``torch_op``) on ``p``'s buffers, on PyTorch's
    default stream (the legacy default stream the kernels' events are recorded on), eager,
    timed by ``bench.time_launches``, or with ``graphed`` as replays of a CUDA graph of the
    calls (``time_torch_graph``: kernel time only, as ``bench.time_graphed`` times gemmgen's
    launches); the error against the same float64 reference as the kernel's
    (``Problem.error_of``). fp32 runs with TF32 off, tf32 with it on (PyTorch's
    ``allow_tf32`` flag, restored after)."""
    import torch
    flags = torch.backends.cuda.matmul
    before = flags.allow_tf32
    flags.allow_tf32 = p.dtype == "tf32"
    try:
        with torch.cuda.stream(torch.cuda.default_stream()):
            call = torch_call(p, torch, epilogue)
            err = p.error_of(lambda: call(0, True), epilogue)
            torch.cuda.synchronize()
            if graphed:
                return time_torch_graph(call, p.sets, budget_s, torch), err
            return time_launches(call, p.sets, budget_s), err
    finally:
        flags.allow_tf32 = before


def time_torch_graph(call, sets: int, budget_s: float, torch) -> Timing:
    """Kernel-only time of PyTorch's ``call(i)`` (i: the input set), as ``bench.time_graphed``
    times gemmgen's launches: warmed up on a side stream, as many calls as fill about
    ``bench.GRAPH_SPAN_S`` captured into one ``torch.cuda.CUDAGraph``, replayed on the current
    stream with one CUDA event pair per replay (5 to 200 replays, as fill ``budget_s``);
    seconds per call = replay time / calls in the graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # PyTorch's rule: warm up (cuBLAS workspaces) before capture
        for i in range(3):
            call(i % sets)
    torch.cuda.current_stream().wait_stream(side)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call(0)
    end.record()
    end.synchronize()
    first = max(start.elapsed_time(end) / 1e3, 1e-6)
    per = graph_launches(first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per):
            call(i % sets)
    warm, reps = repetitions(first * per, budget_s)
    for _ in range(warm):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for s, e in events:
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) / 1e3 / per for s, e in events]
    del graph
    return summary(times, reps)


def run_bench(targets, sizes=DEFAULT_SIZES, seed: int | None = None, progress=None,
              batch: int | None = None, baseline: str = "torch") -> dict:
    """Benchmark ``targets`` (``(label, Kernel)`` pairs) at each ``(M, N, K)`` beside the
    baseline (``choose(baseline)``: F.linear / torch.matmul where PyTorch with CUDA is
    importable, else cublasGemmEx through CuPy) on the same buffers; kernels and baseline
    timed eagerly (no CUDA graph) by ``bench.time_launches``.

    Returns the results document: device fields, ``baseline`` (what it is) and
    ``baseline_label``, and one row per kernel and size with TFLOP/s (2·M·N·K / s), the
    baseline's name and TFLOP/s from the same run (``baseline``, ``baseline_tflops``,
    ``pct_baseline``; also as ``cublas_tflops``, ``pct_cublas``) and the relative error.
    ``progress(n)`` is called after each measurement.
    """
    info = device_info()
    which = choose(baseline)
    rng = np.random.default_rng(seed)
    rows = []
    groups = list(dict.fromkeys((k.config.dtype, k.config.out, k.config.layout)
                                for _, k in targets))
    for (m, n, k), (dtype, out, layout) in ((s, g) for s in sizes for g in groups):
        p = Problem(m, n, k, rng, info["l2_bytes"], dtype, out, layout, batch)
        base = bench_baseline(p, 0.25, which)
        if progress:
            progress(1)
        for label, kernel in targets:
            if (kernel.config.dtype, kernel.config.out, kernel.config.layout) != (dtype, out,
                                                                                   layout):
                continue
            rows.append(kernel_row(label, kernel, p, *bench_kernel(kernel, p), base))
            if progress:
                progress(1)
        del p
    text = {"torch": TORCH_TEXT, "cublas": CUBLAS_TEXT}.get(which) or (
        f"none: {torch_available()}; {cublas_available()}")
    label = {"torch": "F.linear / torch.matmul", "cublas": CUBLAS_NAME}.get(which, "none")
    return {**info, "baseline": text, "baseline_label": label, "rows": rows}
