"""Running a suite's cases: each kind's runner (``suite_kinds``, ``suite_torch``, ``suite_fp8``,
``suite_moe``), rows in the order of the cases."""
from __future__ import annotations

from .baseline import resolve
from .suite_cases import Case
from .suite_kinds import run_dispatch, run_presets
from .suite_fp8 import run_fp8
from .suite_moe import run_moe
from .suite_run import RunEnv
from .suite_torch import run_torch


def run_cases(suite, cases: list[Case], env: RunEnv) -> list[dict]:
    """Run ``cases`` of ``suite`` with the kind's runner: one row per case run (see the
    module docstring), in the order of ``cases`` (runners go problem by problem). The kernel
    kinds run beside ``env.baseline`` (None: ``baseline.resolve`` of the suite's)."""
    which = env.baseline or resolve(suite.kind, suite.baseline)
    if suite.kind == "torch":
        run = run_torch
    elif suite.kind == "fp8":
        run = run_fp8
    elif suite.kind == "moe":
        run = run_moe
    else:
        run = (lambda c, e: (run_presets if suite.kind == "presets" else run_dispatch)(
            c, e, which))
    order = {c.label: i for i, c in enumerate(cases)}
    return sorted(run(cases, env), key=lambda r: order.get(r.get("case"), len(order)))
