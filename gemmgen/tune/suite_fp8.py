"""Suite runner for the fp8 kind (GPU, PyTorch): gemmgen's FP8 kernel (``gemmgen.gemm``'s
choice for the case's scaling and accumulation, or a named fp8 preset) beside
``torch._scaled_mm`` with the same scaling and accumulation, on the same FP8 tensors and
scales, both timed as CUDA graphs of back-to-back calls, with the device copy bandwidth of the
same run for the memory-bound rows. Method: ``suite_run.FP8_METHOD``.
"""
from __future__ import annotations

import math
import statistics

from ..compile.cache import compile_many
from ..heuristics.fp8 import choose_fp8
from ..model.presets import PRESETS
from ..runtime.build import build
from ..runtime.device import device_arch, sm_count
from ..runtime.plans import plan_scaled
from ..runtime.operands.scales import check_fp8
from .bench import L2_MULTIPLE, Timing, summary, tflops, with_baseline
from .fp8_verify import fp8_tolerance
from .suite_cases import Case
from .suite_run import RunEnv, failed_row, suite_row, why

REPEATS = 7
MAX_CALLS = 200
SAMPLE_ROWS = 256
COPY_BYTES = 1 << 30
FP8_TORCH = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def run_fp8(cases: list[Case], env: RunEnv) -> list[dict]:
    """One row per case (a failure is a row); every row carries the copy bandwidth."""
    import torch
    configs = _configs(cases)
    compile_many([c for c in configs.values() if not isinstance(c, Exception)],
                 env.arch or device_arch())
    copy = copy_gbps(torch)
    rows: list[dict] = []
    for case in cases:
        if env.out_of_time():
            env.not_run += 1
            continue
        label = case.preset or "gemm"
        try:
            cfg = configs[case]
            if isinstance(cfg, Exception):
                raise cfg
            rows.append(_measure(case, build(cfg, env.arch), env, torch, copy, label))
        except Exception as exc:  # noqa: BLE001 - a failure is a row, not a crash
            rows.append({**failed_row(case, label, why(exc)), "copy_gbps": copy})
        env.done(rows)
        torch.cuda.empty_cache()
    return rows


def measure(case: Case, kernel, env: RunEnv, copy: float = 0.0, baseline: bool = True
            ) -> dict:
    """One case's row for ``kernel`` (``tune`` measures candidates without the baseline)."""
    import torch
    return _measure(case, kernel, env, torch, copy or 1.0, case.preset or "gemm", baseline)


def _configs(cases: list[Case]) -> dict:
    """Case -> the config it runs (the preset, or gemm's choice), or the exception."""
    out = {}
    for c in cases:
        try:
            out[c] = PRESETS[c.preset].config.replace(dtype=c.dtype, out="bf16") \
                if c.preset else choose_fp8(
                c.m, c.n, c.k, c.scaling, c.accum == "fast", c.dtype, sms=sm_count()).config
        except Exception as exc:  # noqa: BLE001 - recorded in the case's row
            out[c] = exc
    return out


def copy_gbps(torch) -> float:
    """Device-to-device copy bandwidth, GB/s of read + write bytes, median of 20 copies of
    1 GiB."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for i in range(23):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return round(2 * COPY_BYTES / statistics.median(times) / 1e9, 1)


def _wide(torch, rows: int, cols: int, gen):
    x = torch.randn(rows, cols, device="cuda", generator=gen)
    a = torch.rand(rows, 1, device="cuda", generator=gen) * 4 - 2
    b = torch.rand(1, -(-cols // 128), device="cuda", generator=gen) * 2 - 1
    return x * torch.exp2(a + b.repeat_interleave(128, dim=1)[:, :cols])


def quantize_groups(torch, x, groups: tuple, dtype):
    """(q, scale, scale broadcast to x's shape) per groups (rows, cols) of x (None: the whole
    extent), by PyTorch ops: scale = amax / FP8_MAX (float32)."""
    rows, cols = x.shape
    gr, gc = (g or e for g, e in zip(groups, (rows, cols)))
    nr, nc = -(-rows // gr), -(-cols // gc)
    pad = torch.nn.functional.pad(x.abs(), (0, nc * gc - cols, 0, nr * gr - rows))
    amax = pad.view(nr, gr, nc, gc).amax(dim=(1, 3))
    fmax = torch.finfo(dtype).max
    scale = amax.clamp_min(torch.finfo(torch.float32).tiny) / fmax
    full = broadcast_scales(scale, (gr, gc), rows, cols)
    q = (x / full).clamp(-fmax, fmax).to(dtype)
    return q, scale, full


def broadcast_scales(scale, groups: tuple, rows: int, cols: int):
    """``scale`` (one per group of ``groups`` = (rows, cols) per group, None: the whole
    extent) repeated over its group, cut to ``rows`` x ``cols``: what q is multiplied by."""
    gr, gc = (g or e for g, e in zip(groups, (rows, cols)))
    return scale.repeat_interleave(gr, 0).repeat_interleave(gc, 1)[:rows, :cols]


GROUPS = {"tensor": ((None, None), (None, None)), "row": ((1, None), (1, None)),
          "block": ((1, 128), (128, 128))}
"""Scaling -> groups of A (M x K) and of the weight W (N x K; b = W^T)."""


def _operands(torch, case: Case, seed: int, dtype, want_ref: bool, sample=None) -> dict:
    """a (M x K), b = W^T (K x N column-major), scales as torch._scaled_mm takes them and,
    with ``want_ref``, the float64 reference of the rows ``sample`` (all rows for None)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ga, gw = GROUPS[case.scaling]
    a, sa, fa = quantize_groups(torch, _wide(torch, case.m, case.k, gen), ga, dtype)
    w, sw, fw = quantize_groups(torch, _wide(torch, case.n, case.k, gen), gw, dtype)
    ref = None
    if want_ref:
        rows = slice(None) if sample is None else sample
        ref = (a.double() * fa.double())[rows] @ (w.double() * fw.double()).t()
    del fa, fw
    if case.scaling == "tensor":
        sa, sw = sa.reshape(()), sw.reshape(())
    elif case.scaling == "block":
        sa = sa.t().contiguous().t()                 # (M, KB), M-major
    return {"a": a, "b": w.t(), "sa": sa, "sb": sw.t() if case.scaling != "tensor" else sw,
            "ref": ref}


def _sets(case: Case, l2: int) -> int:
    per = case.m * case.k + case.n * case.k + 2 * case.m * case.n
    return max(1, min(16, -(-L2_MULTIPLE * l2 // per)))


def graph_time(torch, call, sets: int, budget: float) -> Timing:
    """Seconds per call: ``call(i)`` (input set i) in a loop captured in one CUDA graph,
    replays timed with events (after a warm-up of every set outside capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(sets):
            call(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(3):
            call(i % sets)
        end.record()
    end.synchronize()
    per = max(start.elapsed_time(end) / 3e3, 1e-7)
    calls = min(max(int(budget / REPEATS / per), 3), MAX_CALLS)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            call(i % sets)
    g.replay()
    times = []
    for _ in range(REPEATS):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    del g
    return summary(times, REPEATS * calls)


def _measure(case: Case, kernel, env: RunEnv, torch, copy: float, label: str,
             baseline: bool = True) -> dict:
    dtype = getattr(torch, FP8_TORCH[case.dtype])
    seed = env.seed if env.seed is not None else 0
    sample = None if case.m <= SAMPLE_ROWS else torch.unique(torch.cat([
        torch.tensor([0, case.m - 1]), torch.randint(0, case.m, (SAMPLE_ROWS - 2,))])).cuda()
    sets = [_operands(torch, case, seed + i, dtype, i == 0, sample)
            for i in range(_sets(case, env.info["l2_bytes"]))]
    outs = [torch.empty(case.m, case.n, dtype=torch.bfloat16, device="cuda") for _ in sets]
    s0 = sets[0]
    plan = plan_scaled(kernel, check_fp8(s0["a"], s0["b"], s0["sa"], s0["sb"], outs[0]),
                       torch.cuda.current_device())
    fast = case.accum == "fast"

    def ours(i):
        s = sets[i]
        plan.run(s["a"], s["b"], outs[i], None, s["sa"], s["sb"],
                 stream=torch.cuda.current_stream().cuda_stream)

    def theirs(i):
        s = sets[i]
        return torch._scaled_mm(s["a"], s["b"], s["sa"], s["sb"], out_dtype=torch.bfloat16,
                                use_fast_accum=fast)
    outs[0].fill_(float("nan"))
    ours(0)
    err = _err(torch, outs[0], s0["ref"], sample)
    timing = graph_time(torch, ours, len(sets), env.budget_s)
    extra, base = {}, None
    if not baseline:
        return _row(case, kernel, label, timing, None, err, copy, extra)
    try:
        base_err = _err(torch, theirs(0), s0["ref"], sample)
        base = graph_time(torch, theirs, len(sets), env.budget_s)
        extra = {"cublas_rel_error": base_err}
    except RuntimeError as exc:
        extra = {"baseline_error": why(exc)}
    return _row(case, kernel, label, timing, base, err, copy, extra)


def _err(torch, out, ref, sample) -> float:
    out = (out if sample is None else out[sample]).double()
    if ref is None:
        return math.nan
    if not bool(torch.isfinite(out).all()):
        return math.inf
    norm = float(torch.linalg.norm(ref))
    return float(torch.linalg.norm(out - ref)) / norm if norm else 0.0


def _row(case: Case, kernel, label, timing: Timing, base: Timing | None, err: float,
         copy: float, extra: dict) -> dict:
    cfg = kernel.config
    kb, nb = math.ceil(case.k / 128), math.ceil(case.n / 128)
    scales = {"block": case.m * kb + nb * kb, "row": case.m + case.n}.get(case.scaling, 2)
    moved = case.m * case.k + case.n * case.k + 2 * case.m * case.n + 4 * scales
    ours = tflops(case.m, case.n, case.k, timing.median)
    theirs = tflops(case.m, case.n, case.k, base.median) if base else None
    gbps = moved / timing.median / 1e9
    tol = fp8_tolerance(case.k, "bf16", not cfg.promote)
    row = {"kernel": label, "name": cfg.name, "config": cfg.as_dict(), "dtype": case.dtype,
           "M": case.m, "N": case.n, "K": case.k, "tflops": round(ours, 3),
           "cublas_tflops": round(theirs, 3) if theirs else None,
           "pct_cublas": round(100 * ours / theirs, 1) if theirs else None,
           "ratio": round(ours / theirs, 3) if theirs else None,
           "gbps": round(gbps, 1), "cublas_gbps": round(moved / base.median / 1e9, 1)
           if base else None, "copy_gbps": copy, "pct_copy": round(100 * gbps / copy, 1),
           "rel_error": err, "tol": tol, "passed": bool(err <= tol), "acc": "fp32",
           "out": "bf16", "layout": "rcr", "epilogue": "none", "batch": None,
           "time_ms": round(timing.median * 1e3, 5), "p20_ms": round(timing.p20 * 1e3, 5),
           "p80_ms": round(timing.p80 * 1e3, 5), "reps": timing.reps,
           "cublas_time_ms": round(base.median * 1e3, 5) if base else None,
           "path": kernel.last_path, **extra}
    return suite_row(case, with_baseline(row, "torch._scaled_mm" if base else None))
