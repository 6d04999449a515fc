"""Measuring for the tuner: verify, then time, one compiled candidate on one GPU (worker side)."""
from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time
import traceback

import numpy as np

from ..model.families import config_from_dict
from ..model.space import predict
from ..runtime.build import from_cubin
from ..runtime.device import device_limits
from .baseline import bench_baseline, choose
from .bench import Problem, device_info, tflops, time_graphed
from .verify import check, device_runner, tolerance

VERIFY_CASE = (257, 131, 95, 1.5, -0.5)  # ragged in M, N and K, alpha and beta != 0, 1
REMATCH_ROUNDS = 6
"""Rounds of ``in_turn`` (``Measurer.head_to_head``, the grouped tuner's rematch): each
times every candidate once."""


class Measurer:
    """Owns the target problem's buffers (in the request's layout, which the baseline is timed
    in too) and reference on the current GPU."""

    def __init__(self, m: int, n: int, k: int, dtype: str, out: str, run_timeout: float,
                 seed: int | None = None, layout: str = "rrr"):
        self.info = device_info()
        self.rng = np.random.default_rng(seed)
        self.problem = Problem(m, n, k, self.rng, self.info["l2_bytes"], dtype, out, layout)
        self.run_timeout = run_timeout
        self.device = device_limits()

    def baseline(self) -> tuple[str | None, float | None, str | None]:
        """(name, TFLOP/s, timing) of the baseline on the target problem's buffers (TFLOP/s =
        2·M·N·K / s): F.linear (rcr) or torch.matmul where PyTorch with CUDA is importable,
        timed as CUDA-graph replays as the candidates are ("graph"), else cublasGemmEx
        through CuPy, timed eagerly ("eager"); (None, None, None) when neither is."""
        p = self.problem
        which = choose()
        got = bench_baseline(p, 0.25, which, graphed=True)
        if got is None:
            return None, None, None
        timing = "graph" if which == "torch" else "eager"
        return got[2], round(tflops(p.m, p.n, p.k, got[0].median), 3), timing

    def measure(self, cfg, cubin: bytes, ptxas: dict, swap: bool = False) -> dict:
        """A database row: status ok (verified, then timed), wrong, timeout or launch_error.
        ``swap``: the kernel computes C^T = B^T A^T (its config laid out for that), launched
        as ``gemmgen.gemm`` launches a swapped choice: M and N, A and B exchanged, on the
        same buffers. Launches go through the kernel's launch recipe (``Kernel.launches``,
        which ``gemmgen.gemm``'s plans run too: inline split-K workspaces, repacks), timed as
        CUDA-graph replays (``bench.time_graphed``: kernel time only, so a candidate of two
        launches is not charged the host's time per call that a graph replay never pays)."""
        p = self.problem
        row = {"config": cfg.as_dict(), "registers": ptxas["registers"],
               "spill_bytes": ptxas["spill_stores"] + ptxas["spill_loads"], "swap": swap}
        kernel = from_cubin(cfg, self.device.arch, cubin)
        m, n = (p.n, p.m) if swap else (p.m, p.n)
        row["model"] = predict(cfg, m, n, p.k, self.device, kernel.registers)
        math_ = getattr(cfg, "math", "native")
        small = check(cfg.name, device_runner(kernel), *VERIFY_CASE, self.rng, cfg.dtype,
                      cfg.acc, cfg.out, layout=cfg.layout, math_=math_)

        def launch(i: int) -> None:
            p.launch(kernel, i, swap)
        start = time.perf_counter()
        err = p.error_of(lambda: launch(0))  # poisoned C, target shape, before any timing
        first = time.perf_counter() - start
        row["rel_error"] = err
        if not small.passed or not err <= tolerance(p.k, cfg.dtype, cfg.acc, cfg.out, math_):
            bad = small if not small.passed else None
            return {**row, "status": "wrong", "reason": (
                f"{bad.m}x{bad.n}x{bad.k}: rel error {bad.rel_error:.2e} at {bad.worst}"
                if bad else f"target shape: rel error {err:.2e}")}
        if first > self.run_timeout:
            return {**row, "status": "timeout", "reason": f"one launch took {first:.2f} s"}
        timing = time_graphed(lambda i, stream: p.launch(kernel, i, swap, stream), p.sets)
        return {**row, "status": "ok", "reason": "", "timing": "graph",
                "time_ms": round(timing.median * 1e3, 4),
                "tflops": round(tflops(p.m, p.n, p.k, timing.median), 3)}


    def head_to_head(self, items, rounds: int = REMATCH_ROUNDS, budget_s: float = 0.05) -> dict:
        """Time already verified candidates again, in turn, on the target problem: ``items``
        are (name, config dict, cubin, ptxas, swap); ``rounds`` rounds of CUDA-graph replays
        (``bench.time_graphed``) by ``in_turn``. Returns {name: median ms per launch over the
        rounds}."""
        p = self.problem
        timers = {}
        for name, cfg, cubin, _, swap in items:
            kernel = from_cubin(config_from_dict(cfg), self.device.arch, cubin)
            timers[name] = functools.partial(
                time_graphed, lambda i, s, kernel=kernel, swap=swap: p.launch(kernel, i, swap, s),
                p.sets, budget_s)
        return in_turn(timers, rounds)


def in_turn(timers: dict, rounds: int = REMATCH_ROUNDS) -> dict:
    """Each of ``timers`` (name -> a call returning a ``bench.Timing``) once per round, the
    order reversed every other round (A B, B A, ...), so that drift in clocks and power falls
    on all alike. Returns {name: median ms per call over the rounds}."""
    names = list(timers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(timers[name]().median)
    return {name: round(statistics.median(t) * 1e3, 5) for name, t in times.items()}


def worker_main(device: int | None, request: dict, tasks, results) -> None:
    """Process entry: pin to ``device``, build a Measurer, then measure tasks until None.

    Tasks: ("measure", name, config dict, cubin, ptxas, swap) or ("head_to_head", items) (see
    ``Measurer.head_to_head``). Messages to ``results``: ("ready", device, info),
    ("start", device, name), ("row", device, name, row), ("head_to_head", device, {name: ms}),
    ("fatal", device, text).
    """
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    try:
        meas = Measurer(request["m"], request["n"], request["k"], request["dtype"],
                        request["out"], request["run_timeout"], request.get("seed"),
                        request.get("layout", "rrr"))
        name, base, timing = meas.baseline()
        results.put(("ready", device, {**meas.info, "arch": meas.device.arch,
                                       "limits": dataclasses.asdict(meas.device),
                                       "baseline": name, "baseline_tflops": base,
                                       "baseline_timing": timing,
                                       "cublas_tflops": base}))
    except Exception:  # noqa: BLE001 - reported to the parent, which stops the run
        results.put(("fatal", device, traceback.format_exc()))
        return
    while (task := tasks.get()) is not None:
        kind, *args = task
        if kind == "head_to_head":
            try:
                results.put(("head_to_head", device, meas.head_to_head(args[0])))
            except Exception:  # noqa: BLE001 - reported to the parent, which stops the run
                results.put(("fatal", device, traceback.format_exc()))
            continue
        name, cfg_dict, cubin, ptxas, swap = args
        results.put(("start", device, name))
        try:
            row = meas.measure(config_from_dict(cfg_dict), cubin, ptxas, swap)
        except Exception as exc:  # noqa: BLE001 - a failed launch is a row, not a crash
            row = {"config": cfg_dict, "status": "launch_error",
                   "reason": f"{type(exc).__name__}: {exc}".strip()[:500]}
        results.put(("row", device, name, {**row, "device": device}))
