"""Running a benchmark suite: the run's settings, the rows (measured or failed), grouping cases
by problem, and the results document with its header (suite, GPU, CUDA, commit, date,
baseline, timing method). The kinds' runners are in ``suite_kinds`` and ``suite_torch``;
``suite_runs.run_cases`` calls them.

Every case becomes one row: a case that fails to build, launch or verify is recorded with
``passed`` false (and ``error`` saying why), never dropped. Only a run stopped by its time
limit leaves cases out; the header then says ``complete: false`` and how many.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.dtypes import stored_as
from ..model.presets import PRESETS
from .results import finish
from .suite_cases import Case

BASELINES = {
    "cublas": ("cuBLAS", ("cuBLAS: cublasGemmEx through CuPy on the same buffers in the same "
                          "run, FP32 compute (CUBLAS_COMPUTE_32F_FAST_TF32 for tf32; SGEMM for "
                          "fp32, 3xTF32 rows included)")),
    "none": ("epilogue none", ("gemmgen.gemm's choice for the same problem with epilogue "
                               "'none', on the same buffers in the same run")),
    "torch": ("F.linear", ("torch.nn.functional.linear(x, W) (cuBLAS/cuBLASLt through "
                           "PyTorch) on the same tensors in the same run, in the same mode")),
    "scaled_mm": ("torch._scaled_mm", (
        "torch._scaled_mm (cuBLASLt) on the same FP8 tensors and scales in the same run, the "
        "same scaling (tensor; row-wise (M, 1) x (1, N); blockwise a (M, K/128) M-major and b "
        "(K/128, N/128)) and use_fast_accum = (accum == fast), bf16 out")),
}
"""Baseline -> (short label for plots, the header's text)."""

KERNEL_METHOD = (
    "CUDA events, one pair around each launch (host enqueue time included where it exceeds the "
    "kernel's), after a warm-up of up to 20 launches; median and p20/p80 of 5 to 200 launches "
    "filling about {budget} s; inputs rotated over up to 16 buffer sets spanning 3x L2, "
    "standard-normal data drawn on the GPU; eager launches (no CUDA graph); the kernel as "
    "gemmgen.gemm would launch it (swapped operands where its choice says so) on device "
    "pointers, without gemm's Python dispatch")
TORCH_METHOD = (
    "per call, on PyTorch's current stream, inputs rotated over up to 16 (x, W) sets spanning "
    "3x L2, standard-normal data. eager: CUDA events around a loop of calls (host work "
    "included), per-call average, median and p20/p80 of 7 loops; graph: a loop of calls "
    "captured in one CUDA graph (warmed up on a side stream first), replays timed with "
    "events, per-call average of 7 replays; host: time.perf_counter around single calls, no "
    "synchronization inside a batch of 16 (synchronized between batches), median of up to "
    "400 calls; for host rows TFLOP/s is 2MNK over host seconds per call (the ceiling the "
    "host alone sets). Measurements fill about {budget} s each")
FP8_METHOD = (
    "per call on one stream: a loop of calls (inputs rotated over up to 16 sets spanning 3x L2, "
    "wide-range normal data quantized per the scaling by PyTorch ops) captured in one CUDA "
    "graph for each of gemmgen (gemm's choice, or the preset) and torch._scaled_mm, replays "
    "timed with events, per-call average, median and p20/p80 of 7 replays filling about "
    "{budget} s; TFLOP/s = 2MNK/t; GB/s = (A + B + D + scales bytes)/t; copy_gbps: a 1 GiB "
    "device copy (read + write bytes) in the same run. rel_error and cublas_rel_error: ||D - "
    "ref|| / ||ref|| over up to 256 sampled rows (all when M <= 256) against float64 on the "
    "dequantized inputs; passed: rel_error <= gemmgen.tune.fp8_verify.fp8_tolerance")
ERROR_METHOD = ("rel_error: ||C - ref||_F / ||ref||_F against a float64 product of the same "
                "(rounded) inputs, computed on the GPU, C poisoned with NaN first (for the "
                "torch kind, the output block the caching allocator hands out is NaN-filled "
                "first); passed: rel_error <= gemmgen.tune.verify.tolerance(K, dtypes)")


@dataclass
class RunEnv:
    """What a runner needs besides its cases: the device (``device_info()``), the seed, the
    seconds of timing per measurement, the arch to compile for (None: the device's), the
    tuning database for gemm's choice (None: its default path), ``op`` (the torch kind's
    ``gemmgen.torch.gemm``), ``progress(n)`` after each case, ``deadline``
    (``time.monotonic()`` after which no new problem starts) and ``checkpoint(rows)``, called
    at most every ``checkpoint_s`` seconds with the rows so far."""

    info: dict
    seed: int | None = None
    budget_s: float = 0.1
    arch: str | None = None
    db: str | None = None
    op: Callable | None = None
    progress: Callable[[int], None] | None = None
    deadline: float | None = None
    checkpoint: Callable[[list], None] | None = None
    checkpoint_s: float = 30.0
    not_run: int = 0
    _last: float = field(default_factory=time.monotonic)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def done(self, rows: list, n: int = 1) -> None:
        """``n`` cases done: progress, and a checkpoint when one is due."""
        if self.progress:
            self.progress(n)
        if self.checkpoint and time.monotonic() - self._last > self.checkpoint_s:
            self.checkpoint(rows)
            self._last = time.monotonic()


def case_fields(case: Case) -> dict:
    """The row fields that say which case it is: its label (``case``, what --only matches)
    and mode always; math unless native; model, layer, tokens and aliases for a model's
    layer."""
    out = {"case": case.label, "mode": case.mode}
    if case.math != "native":
        out["math"] = case.math
    if case.scaling:
        out.update(scaling=case.scaling, accum=case.accum)
    if case.model:
        out.update(model=case.model, layer=case.layer, tokens=case.tokens,
                   aliases=list(case.aliases))
    return out


def suite_row(case: Case, row: dict, **extra) -> dict:
    """A measured row (``bench.kernel_row``'s, or the torch kind's) with the case's fields
    and ``extra`` (how, swap, path, ...); dtype is the case's (fp32 for 3xTF32 rows, whose
    kernel's dtype is tf32)."""
    return {**row, "dtype": case.dtype, **case_fields(case), **extra}


def failed_row(case: Case, label: str, error: str) -> dict:
    """The row of a case that could not be measured: no timings, ``passed`` false, ``error``
    saying why (one line)."""
    return {"kernel": label, "name": None, "dtype": case.dtype, "M": case.m, "N": case.n,
            "K": case.k, "tflops": 0.0, "cublas_tflops": None, "pct_cublas": None,
            "rel_error": None, "passed": False, "out": out_dtype(case), "layout": case.layout,
            "epilogue": case.epilogue, "batch": None, "time_ms": None, "p20_ms": None,
            "p80_ms": None, "error": error, **case_fields(case)}


def why(exc: BaseException) -> str:
    """One line for a failure recorded in a row."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]


def out_dtype(case: Case) -> str:
    """C's dtype: the preset's for the presets kind, else what gemm allocates (fp16 and bf16
    keep theirs; tf32 and fp32 write fp32)."""
    if case.preset:
        return PRESETS[case.preset].config.out
    return "bf16" if case.scaling else stored_as(case.dtype)


def problem_groups(cases: list[Case]) -> dict[tuple, list[Case]]:
    """Cases that share one set of buffers, in suite order: key (dtype, out, layout, M, N, K)
    -> cases (presets of one dtype, epilogues, torch modes)."""
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        groups.setdefault((c.dtype, out_dtype(c), c.layout, c.m, c.n, c.k), []).append(c)
    return groups


def document(suite, info: dict, rows: list, selection: dict, complete: bool = True,
             not_run: int = 0) -> dict:
    """The results document: the header (suite, suite_file, gpu, cuda_version, cuda_driver,
    git_commit, date, baseline, method, selection, ...) and the rows. ``info`` is
    ``bench.device_info()``'s; ``selection`` the run's --only/--quick/--max-rows."""
    done = finish({**info, "rows": rows})
    method = {"torch": TORCH_METHOD, "fp8": FP8_METHOD}.get(suite.kind, KERNEL_METHOD).format(
        budget=suite.budget_s)
    run = {k: done[k] for k in ("date", "git_commit")}
    return {"suite": suite.name, "suite_file": suite.suite_file,
            "description": suite.description, "kind": suite.kind,
            **{k: done[k] for k in ("gpu", "cuda_version", "cuda_driver", "git_commit", "date")},
            "sms": info.get("sms"), "l2_bytes": info.get("l2_bytes"),
            "baseline": BASELINES[suite.baseline][1],
            "baseline_label": BASELINES[suite.baseline][0],
            "method": f"{method}. {ERROR_METHOD}", "plot": suite.plot, "selection": selection,
            "complete": complete, "not_run": not_run,
            "runs": [{**run, "selection": selection, "rows": len(rows)}], "rows": rows}


def row_id(r: dict) -> tuple:
    """What makes a row one measurement of a suite (for merging partial runs)."""
    return (r["kernel"], r.get("dtype"), r["M"], r["N"], r["K"], r.get("layout"),
            r.get("epilogue"), r.get("mode"), r.get("math"), r.get("batch"), r.get("scaling"),
            r.get("accum"))


def merge(old: dict, new: dict) -> dict:
    """``new`` with ``old``'s rows that ``new`` did not measure again (earlier partial runs
    of the suite, e.g. other --only filters), and both runs' entries in ``runs``."""
    fresh = {row_id(r) for r in new["rows"]}
    rows = [r for r in old.get("rows", []) if row_id(r) not in fresh] + new["rows"]
    return {**new, "runs": old.get("runs", []) + new["runs"], "rows": rows}
