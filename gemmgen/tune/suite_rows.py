"""Benchmark suites, the rows of a run: the run's settings (``RunEnv``), a case's measured or
failed row, and cases grouped by the buffers they share. Imported by ``suite_run`` and by the
kinds' runners (``suite_kinds``, ``suite_torch``, ``suite_moe``)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model.dtypes import stored_as
from ..model.presets import PRESETS
from .suite_cases import Case


@dataclass
class RunEnv:
    """What a runner needs besides its cases: the device (``device_info()``), the seed, the
    seconds of timing per measurement, the arch to compile for (None: the device's), the
    tuning database for gemm's choice (None: its default path), ``op`` (the torch kind's
    ``gemmgen.torch.gemm``), ``progress(n)`` after each case, ``deadline``
    (``time.monotonic()`` after which no new problem starts) and ``checkpoint(rows)``, called
    at most every ``checkpoint_s`` seconds with the rows so far; ``baseline``: the run's
    (a key of ``suite_run.BASELINES``, from ``baseline.resolve``; None: resolved by the
    runner)."""

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
    baseline: str | None = None
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
    if case.model:
        out.update(model=case.model, layer=case.layer, tokens=case.tokens,
                   aliases=list(case.aliases))
    if case.groups:
        out.update(groups=case.groups, routing=case.routing)
    if case.scaling:
        out.update(scaling=case.scaling, accum=case.accum)
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
            "baseline": None, "baseline_tflops": None, "pct_baseline": None,
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
