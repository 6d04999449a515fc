"""Suite runner for the torch kind (GPU, PyTorch): ``op(x, W)`` (``gemmgen.torch.linear``,
F.linear's contract, passed in by the caller) against ``F.linear(x, W)`` per call, eager, CUDA-graph-captured and
host time, on the same tensors. Methods: ``suite_run.TORCH_METHOD``.
"""
from __future__ import annotations

import math
import time

from ..compile.cache import compile_many
from ..heuristics.select import decide
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import ELEM_BYTES, stored_as
from ..model.families import fallback_config, get_family
from ..runtime.api import chosen_choice
from ..runtime.device import device_arch, device_cc
from .bench import L2_MULTIPLE, Timing, summary, tflops, with_baseline
from .suite_cases import Case
from .suite_rows import RunEnv, failed_row, problem_groups, suite_row, why
from .verify import tolerance

LABEL = "gemmgen.torch.gemm"
REPEATS = 7  # loops (eager) or replays (graph) per measurement
HOST_BATCH, HOST_CALLS = 16, 400
GRAPH_CALLS = 200  # most calls captured in one graph


def run_torch(cases: list[Case], env: RunEnv) -> list[dict]:
    """One row per case: per problem (dtype, M, N, K) the tensors once, the errors of both
    once, then each mode (eager, graph, host) of both. ``env.op`` is the op under test."""
    import torch
    if env.op is None:
        raise ValueError("the torch kind needs env.op (gemmgen.torch.linear)")
    _precompile(cases, env)
    rows: list[dict] = []
    for group in problem_groups(cases).values():
        if env.out_of_time():
            env.not_run += len(group)
            continue
        try:
            rows += _problem(group, env, torch)
        except Exception as exc:  # noqa: BLE001 - recorded in every row of the problem
            rows += [failed_row(c, LABEL, why(exc)) for c in group]
        env.done(rows, len(group))
        torch.cuda.empty_cache()
    return rows


def _precompile(cases: list[Case], env: RunEnv) -> None:
    """Compile, in parallel, the kernels gemm will choose for the cases (x row-major, W^T
    column-major: layout rcr), with the fallbacks of TMA kernels whose rows TMA cannot read."""
    gpu, cc, db = env.info["gpu"], device_cc(), TuneDB(env.db)
    configs = {}
    for c in cases:
        item = ELEM_BYTES[stored_as(c.dtype)]
        try:
            cfg = decide(db, gpu, c.dtype, c.m, c.n, c.k, cc, "rcr", "none",
                         c.n * item % 16 == 0).config
        except ValueError:
            continue  # the run records the failure
        configs[cfg.name] = cfg
        if get_family(cfg.family).tma and (c.k * item % 16 or c.n * item % 16):
            fb = fallback_config(cfg)  # rows TMA cannot read: the fallback kernel runs
            configs[fb.name] = fb
    compile_many(list(configs.values()), env.arch or device_arch())


def _problem(group: list[Case], env: RunEnv, torch) -> list[dict]:
    import torch.nn.functional as F
    c0 = group[0]
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[c0.dtype]
    m, n, k = c0.m, c0.n, c0.k
    item = torch.tensor([], dtype=dt).element_size()
    sets = max(1, min(16, -(-L2_MULTIPLE * env.info["l2_bytes"] // ((m * k + n * k + m * n)
                                                                       * item))))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(env.seed if env.seed is not None else 0)
    xs = [torch.randn(m, k, generator=gen, device="cuda").to(dt) for _ in range(sets)]
    ws = [torch.randn(n, k, generator=gen, device="cuda").to(dt) for _ in range(sets)]

    def ours(i):
        return env.op(xs[i], ws[i])

    def theirs(i):
        return F.linear(xs[i], ws[i])
    err, base_err = _error(ours, xs[0], ws[0], torch), _error(theirs, xs[0], ws[0], torch)
    found = chosen_choice(xs[0], ws[0].t())
    extra = {"name": found[0].name if found else None, "how": found[1].how if found else None,
             "swap": found[1].swap if found else None}
    tol = tolerance(k, c0.dtype, "fp32", c0.dtype)
    rows = []
    for case in group:
        try:
            timing = MODES[case.mode](ours, sets, env.budget_s, torch)
            base = MODES[case.mode](theirs, sets, env.budget_s, torch)
            rows.append(torch_row(case, timing, base, err, base_err, tol, **extra))
        except Exception as exc:  # noqa: BLE001 - a failure is a row
            rows.append(failed_row(case, LABEL, why(exc)))
    return rows


def torch_row(case: Case, timing: Timing, base: Timing, err: float, base_err: float,
              tol: float, **extra) -> dict:
    """A row of the torch kind: the op's and F.linear's per-call times (ms) and TFLOP/s
    (2 M N K / seconds per call; for mode host, host seconds), % of F.linear, errors."""
    ours, theirs = (tflops(case.m, case.n, case.k, t.median) for t in (timing, base))
    row = {"kernel": LABEL, "name": extra.pop("name", None), "dtype": case.dtype, "M": case.m,
           "N": case.n, "K": case.k, "tflops": round(ours, 3), "cublas_tflops": round(theirs, 3),
           "pct_cublas": round(100 * ours / theirs, 1), "rel_error": err,
           "cublas_rel_error": base_err, "passed": bool(err <= tol), "acc": "fp32",
           "out": case.dtype, "layout": case.layout, "epilogue": case.epilogue, "batch": None,
           "time_ms": round(timing.median * 1e3, 5), "p20_ms": round(timing.p20 * 1e3, 5),
           "p80_ms": round(timing.p80 * 1e3, 5), "reps": timing.reps,
           "cublas_time_ms": round(base.median * 1e3, 5)}
    return suite_row(case, with_baseline(row, "F.linear"), **extra)


def _error(fn, x, w, torch) -> float:
    """||fn(0) - x W^T|| / ||x W^T|| against float64; the output's block NaN-filled first
    (a NaN tensor of its size freed just before the call, which the caching allocator hands
    back)."""
    ref = x.double() @ w.double().t()
    poison = torch.full((x.shape[0], w.shape[0]), float("nan"), dtype=x.dtype, device=x.device)
    del poison
    y = fn(0)
    err = float((y.double() - ref).norm() / ref.norm()) if ref.numel() else 0.0
    return err if math.isfinite(err) else math.inf


def _calls(fn, sets: int, budget: float, torch) -> int:
    """Calls per loop so that REPEATS loops take about ``budget`` seconds (3 to 2000)."""
    fn(0)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for j in range(10):
        fn(j % sets)
    torch.cuda.synchronize()
    per = max((time.perf_counter() - start) / 10, 1e-7)
    return min(max(int(budget / REPEATS / per), 3), 2000)


def eager(fn, sets: int, budget: float, torch) -> Timing:
    """Seconds per call: CUDA events around loops of calls (host work included)."""
    calls = _calls(fn, sets, budget, torch)
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    per = []
    for _ in range(REPEATS):
        start.record()
        for j in range(calls):
            fn(j % sets)
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / 1e3 / calls)
    return summary(per, REPEATS * calls)


def captured(fn, sets: int, calls: int, torch):
    """A ``torch.cuda.CUDAGraph`` of ``calls`` calls ``fn(j % sets)``, after a warm-up of
    each set used (up to ``calls``) on a side stream, outside capture, as PyTorch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for j in range(min(sets, calls)):
            fn(j)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for j in range(calls):
            fn(j % sets)
    return g


def graph(fn, sets: int, budget: float, torch) -> Timing:
    """Seconds per call: a loop of calls captured in one CUDA graph, replays timed."""
    calls = min(_calls(fn, sets, budget, torch), GRAPH_CALLS)
    g = captured(fn, sets, calls, torch)
    g.replay()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    per = []
    for _ in range(REPEATS):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / 1e3 / calls)
    del g
    return summary(per, REPEATS * calls)


def host(fn, sets: int, budget: float, torch) -> Timing:
    """Host seconds per call: perf_counter around single calls, batches of HOST_BATCH with no
    synchronization inside (synchronized between batches), until HOST_CALLS calls or
    about ``budget`` seconds (at least three batches)."""
    fn(0)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < HOST_CALLS and (len(times) < 3 * HOST_BATCH
                                       or time.perf_counter() - start < budget):
        torch.cuda.synchronize()
        for j in range(HOST_BATCH):
            t0 = time.perf_counter()
            fn(j % sets)
            times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return summary(times, len(times))


MODES = {"eager": eager, "graph": graph, "host": host}
