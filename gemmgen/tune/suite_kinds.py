"""Suite runners for the kernel kinds (GPU): ``presets`` (each preset as it is) and
``dispatch`` (the kernel ``gemmgen.gemm`` chooses for each problem), each beside its
baseline on the same buffers: F.linear / torch.matmul (``baseline.bench_torch``), else
cublasGemmEx through CuPy, or (dispatch, baseline "none") gemm's choice without the epilogue.
Kernels and baseline are timed eagerly by ``bench.time_launches``; TFLOP/s = 2·M·N·K / s. Kernels are compiled in parallel before any timing.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..compile.cache import compile_many
from ..heuristics.select import decide, math_dtype, tight_lds
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import ELEM_BYTES, stored_as
from ..model.families import fallback_config, get_family
from ..model.presets import PRESETS
from ..runtime.build import build_many
from ..runtime.device import device_arch, device_cc
from .baseline import bench_baseline, resolve
from .bench import Problem, bench_kernel, cublas_available, kernel_row
from .suite_cases import Case
from .suite_rows import RunEnv, failed_row, problem_groups, suite_row, why

KernelFor = Callable[[Case], tuple]
"""case -> (Kernel or the exception that stopped it, swap, extra row fields)."""


def run_presets(cases: list[Case], env: RunEnv, baseline: str | None = None) -> list[dict]:
    """Each case's preset as it is (its dtype, layout, epilogue), beside ``baseline`` (a key
    of ``suite_run.BASELINES``; None: ``baseline.resolve("presets", "torch")``)."""
    which = baseline or resolve("presets", "torch")
    names = list(dict.fromkeys(c.preset for c in cases))
    built = dict(zip(names, build_many([PRESETS[n].config for n in names], env.arch)))

    def kernel_for(case):
        return built[case.preset], False, {"how": "preset"}
    return run_groups(cases, env, kernel_for, lambda c: c.preset,
                      lambda p, group: bench_baseline(p, env.budget_s, which))


def dispatch_label(case: Case) -> str:
    """The kernel label of a dispatch row: gemm, gemm[bias_gelu], gemm 3xtf32."""
    return "gemm" + (f"[{case.epilogue}]" if case.epilogue != "none" else "") + (
        f" {case.math}" if case.math != "native" else "")


def run_dispatch(cases: list[Case], env: RunEnv, baseline: str | None = None) -> list[dict]:
    """The kernel ``gemmgen.gemm`` chooses for each case (``decide``: the tuning database,
    else the fastest family's default preset fitted to the shape), launched as gemm launches
    it, beside ``baseline`` (a key of ``suite_run.BASELINES``, None: ``baseline.resolve(
    "dispatch", "torch")``; "none": the choice for the same problem without an epilogue)."""
    baseline = baseline or resolve("dispatch", "torch")
    gpu, cc = env.info["gpu"], device_cc()
    db = TuneDB(env.db)
    plain = [_plain(c) for c in cases] if baseline == "none" else []
    choices = {}
    for c in cases + plain:
        try:
            choices[c] = decide(db, gpu, math_dtype(c.dtype, c.math), c.m, c.n, c.k, cc,
                                c.layout, c.epilogue, _c_aligned(c), c.math)
        except ValueError as exc:
            choices[c] = exc
    kernels = _build(choices, env.arch)

    def kernel_for(case):
        choice = choices[case]
        if isinstance(choice, Exception):
            return choice, False, {}
        return kernels[choice.config.name], choice.swap, {
            "how": choice.how, "swap": choice.swap, "reasons": choice.reasons}

    def base(p, group):
        if baseline != "none":
            return bench_baseline(p, env.budget_s, baseline)
        kernel, swap, _ = kernel_for(_plain(group[0]))
        if isinstance(kernel, Exception):
            raise kernel
        return (*bench_kernel(kernel, p, env.budget_s, swap), "epilogue none")
    return run_groups(cases, env, kernel_for, dispatch_label, base)


def _plain(case: Case) -> Case:
    return Case(**{**case.__dict__, "epilogue": "none"})


def _c_aligned(case: Case) -> bool:
    """Whether the problem's C (tight, as Problem allocates it) can take a TMA store."""
    ldc = tight_lds(case.layout, case.m, case.n, case.k)[2]
    return ldc * ELEM_BYTES[stored_as(case.dtype)] % 16 == 0


def _build(choices: dict, arch: str | None) -> dict:
    """Config name -> Kernel (or BuildError) for every choice, compiled in parallel; the
    fallback kernels of TMA choices whose A or B rows TMA cannot read are compiled too
    (into the cubin cache; loaded when a launch needs one)."""
    configs, fallbacks = {}, {}
    for case, ch in choices.items():
        if isinstance(ch, Exception):
            continue
        configs[ch.config.name] = ch.config
        lda, ldb, _ = tight_lds(case.layout, case.m, case.n, case.k)
        item = ELEM_BYTES[stored_as(case.dtype)]
        if get_family(ch.config.family).tma and (lda * item % 16 or ldb * item % 16):
            fb = fallback_config(ch.config)
            fallbacks[fb.name] = fb
    if fallbacks:
        compile_many(list(fallbacks.values()), arch or device_arch())
    return dict(zip(configs, build_many(list(configs.values()), arch)))


def run_groups(cases: list[Case], env: RunEnv, kernel_for: KernelFor,
               label_for: Callable[[Case], str], baseline) -> list[dict]:
    """Per problem (``problem_groups``): buffers once, ``baseline(p, group)`` once (a
    (timing, error, name) triple or None; a failure is noted as ``baseline_error`` in the rows), then
    each case's kernel; one row per case, failures included. Starts no problem past
    ``env.deadline`` (its cases are counted in ``env.not_run``). The baseline (a
    (timing, error, name) triple) is timed first on each problem."""
    rng = np.random.default_rng(env.seed)
    device_data = cublas_available() is None
    rows: list[dict] = []
    for (dtype, out, layout, m, n, k), group in problem_groups(cases).items():
        if env.out_of_time():
            env.not_run += len(group)
            continue
        try:
            p = Problem(m, n, k, rng, env.info["l2_bytes"], dtype, out, layout,
                        device_data=device_data)
        except Exception as exc:  # noqa: BLE001 - recorded in every row of the problem
            rows += [failed_row(c, label_for(c), "buffers: " + why(exc)) for c in group]
            env.done(rows, len(group))
            continue
        try:
            base, base_error = baseline(p, group), None
        except Exception as exc:  # noqa: BLE001 - the rows keep their own measurements
            base, base_error = None, why(exc)
        for case in group:
            row = _measure(case, p, base, kernel_for, label_for(case), env)
            rows.append({**row, "baseline_error": base_error} if base_error else row)
            env.done(rows)
        del p
    return rows


def _measure(case: Case, p: Problem, base, kernel_for: KernelFor, label: str,
             env: RunEnv) -> dict:
    """One case's row: its kernel verified and timed on ``p`` beside ``base``."""
    try:
        kernel, swap, extra = kernel_for(case)
        if isinstance(kernel, Exception):
            raise kernel
        timing, err = bench_kernel(kernel, p, env.budget_s, swap)
        row = kernel_row(label, kernel, p, timing, err, base)
        return suite_row(case, row, path=getattr(kernel, "last_path", None), **extra)
    except Exception as exc:  # noqa: BLE001 - a failure is a row, not a crash
        return failed_row(case, label, why(exc))
