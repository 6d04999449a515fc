"""Tuning: search space -> prune -> rank -> parallel compile -> verify -> time -> database."""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

from ..codegen.render import render
from ..compile.cache import compile_cached
from ..compile.nvcc import BuildError
from ..heuristics import tunedb
from ..model.arch import cc_of
from ..model.dtypes import stored_as
from ..model.families import config_from_dict, default_family, families_for, get_family
from ..model.registers import spill_risk
from ..model.space import DeviceLimits, enumerate_configs, predict, rank, select, unfit_reason
from .default import Candidate, defaults, neighbours
from .measure import REMATCH_ROUNDS, worker_main


@dataclass(frozen=True)
class Request:
    """One tuning job: the shape, A/B dtype (fp32, tf32, fp16, bf16), family (default: simt for
    fp32, wmma otherwise), wall-clock budget and candidate count, per-candidate limits (s)."""

    m: int
    n: int
    k: int
    dtype: str = "fp32"
    family: str | None = None
    budget_s: float = 600.0
    max_configs: int = 48
    compile_timeout: float = 120.0
    run_timeout: float = 2.0
    layout: str = "rrr"
    seed: int | None = None

    def family_on(self, arch: str) -> str:
        """The family searched: ``family`` if given, else the fastest one for the dtype that
        runs on ``arch`` (sm_XY) and has configurations in the request's layout (tf32 wgmma
        has none with a row-major B)."""
        if self.family:
            return self.family
        for fam in families_for(self.dtype, cc_of(arch)):
            if laid_out(fam.space(self.dtype), self.layout):
                return fam.name
        return default_family(self.dtype, cc_of(arch)).name


    @property
    def out(self) -> str:
        """C's dtype: the input dtype, float32 for fp32 and tf32."""
        return stored_as(self.dtype)


def laid_out(configs, layout: str) -> list:
    """``configs`` in ``layout`` (A, B, C each r or c), keeping those the rules accept there."""
    out = [c if c.layout == layout else c.replace(layout=layout, check=False) for c in configs]
    return [c for c in out if not c.violations()]


def compile_candidate(source: str, arch: str, name: str, timeout: float) -> tuple[bytes, dict]:
    """One candidate's compile (run in a thread; nvcc is the subprocess): (cubin, ptxas
    resources as a dict), through the cubin cache that ``gemmgen.gemm``'s builds share (the
    default and kernels tuned for other shapes are not compiled again)."""
    cubin, res = compile_cached(source, arch, name, timeout)
    return cubin, dataclasses.asdict(res)


class WorkerError(RuntimeError):
    """A GPU worker could not start or died unrecoverably; ``detail`` holds its traceback."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def spill_reason(ptxas: dict) -> str | None:
    """Why a compiled candidate is not timed: ptxas reported spill traffic or a stack frame
    (local memory); None when it did neither. ``ptxas`` is ``Resources`` as a dict."""
    spills = ptxas.get("spill_stores", 0) + ptxas.get("spill_loads", 0)
    if not spills and not ptxas.get("stack_bytes", 0):
        return None
    return (f"ptxas: {ptxas.get('spill_stores', 0)} bytes spill stores, "
            f"{ptxas.get('spill_loads', 0)} bytes spill loads, {ptxas.get('stack_bytes', 0)} "
            f"bytes stack at {ptxas.get('registers', '?')} registers/thread")


class WorkerPool:
    """One spawned measuring process per GPU, all fed from one task queue. A worker that dies
    (a sticky CUDA error) is restarted and its candidate recorded as a launch_error."""

    def __init__(self, request: Request, devices: list[int] | None):
        self.ctx = mp.get_context("spawn")
        self.tasks, self.results = self.ctx.Queue(), self.ctx.Queue()
        self.req = {**dataclasses.asdict(request), "out": request.out}
        self.procs, self.in_flight, self.info = {}, {}, None
        for d in devices or [None]:
            self._start(d)
        for _ in self.procs:
            try:
                msg = self.results.get(timeout=600)
            except queue.Empty:
                self.close()
                raise WorkerError("no GPU worker started within 600 s") from None
            if msg[0] == "fatal":
                self.close()
                raise WorkerError(f"GPU worker {msg[1]} failed to start: {_last_line(msg[2])}",
                                  msg[2])
            if self.info and msg[2]["gpu"] != self.info["gpu"]:
                self.close()
                raise WorkerError(f"--devices mixes {self.info['gpu']} and {msg[2]['gpu']}: "
                                  f"time on GPUs of one kind")
            self.info = self.info or msg[2]

    def _start(self, device) -> None:
        p = self.ctx.Process(target=worker_main, args=(device, self.req, self.tasks, self.results),
                             daemon=True)
        p.start()
        self.procs[device] = p

    def submit(self, name: str, cfg, cubin: bytes, ptxas: dict, swap: bool = False) -> None:
        """Queue one compiled candidate; ``swap``: launched as C^T = B^T A^T."""
        self.tasks.put(("measure", name, cfg.as_dict(), cubin, ptxas, swap))

    def head_to_head(self, items, timeout: float = 600.0) -> dict:
        """Time ``items`` ((name, config, cubin, ptxas, swap), all verified before) again in
        turn on one worker (``Measurer.head_to_head``); {name: median ms}. Call with no
        candidate in flight. Raises ``WorkerError`` when the worker fails or dies, or after
        ``timeout`` seconds."""
        self.tasks.put(("head_to_head", [(name, cfg.as_dict(), cubin, ptxas, swap)
                                         for name, cfg, cubin, ptxas, swap in items]))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.results.get(timeout=2.0)
            except queue.Empty:
                dead = [d for d, p in self.procs.items() if not p.is_alive()]
                if dead:
                    raise WorkerError(f"GPU worker {dead[0]} died during the head-to-head "
                                      f"timing") from None
                continue
            if msg[0] == "fatal":
                raise WorkerError(f"GPU worker {msg[1]} failed: {_last_line(msg[2])}", msg[2])
            if msg[0] == "head_to_head":
                return msg[2]
        raise WorkerError(f"no head-to-head timing within {timeout:.0f} s")

    def poll(self, timeout: float) -> list[tuple[str, dict]]:
        rows = []
        try:
            while True:
                msg = self.results.get(timeout=timeout)
                timeout = 0
                if msg[0] == "ready":
                    continue
                if msg[0] == "fatal":
                    raise WorkerError(f"GPU worker {msg[1]} failed: {_last_line(msg[2])}",
                                      msg[2])
                if msg[0] == "start":
                    self.in_flight[msg[1]] = msg[2]
                elif msg[0] == "row":
                    self.in_flight.pop(msg[1], None)
                    rows.append((msg[2], msg[3]))
        except queue.Empty:
            pass
        for device, proc in list(self.procs.items()):
            if not proc.is_alive():
                name = self.in_flight.pop(device, None)
                if name:
                    rows.append((name, {"status": "launch_error", "reason":
                                        f"the GPU worker died (exit code {proc.exitcode})"}))
                self._start(device)  # its ready message is skipped below
        return rows

    def close(self) -> None:
        for _ in self.procs:
            self.tasks.put(None)
        for proc in self.procs.values():
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()


def plan(req: Request, dev: DeviceLimits, gpu: str | None = None) -> tuple[list[tuple], dict]:
    """(candidates to measure as (``Candidate``, prediction), counts of the pruning steps):
    first the default (what ``gemmgen.gemm`` runs on ``gpu``, default ``dev.name``, without a
    database), the shape rules' own choice where the shipped table's differs, and the
    default's neighbours (``gemmgen.tune.default``); then ``req.max_configs`` of the family's
    valid configs, less those the device cannot hold and those the register estimate says
    would spill, ranked by the cheap model. A name appears once, in its first role."""
    fam = req.family_on(dev.arch)
    configs = laid_out(enumerate_configs(fam, req.dtype), req.layout)
    family = get_family(fam)
    in_space = {c.name for c in configs}
    # Measured first: the dtype's default preset and the presets the search space contains
    # (not the slow early steps of a ladder).
    default = family.defaults.get(req.dtype)
    seeds = tuple(p.config.name for p in sorted(family.presets, key=lambda p: p.name != default)
                  if p.config.dtype == req.dtype
                  and (p.config.name in in_space or p.name == default))  # the default first
    spilling = [c for c in configs if c.name not in seeds and spill_risk(c)]
    keep = [c for c in configs if c.name in seeds or not spill_risk(c)]  # presets always
    ranked = rank(keep, req.m, req.n, req.k, dev)
    sampled = [(Candidate(c), pred) for c, pred in select(ranked, req.max_configs, seeds)]
    around = _around_default(req, dev, gpu or dev.name)
    chosen, seen = [], set()
    for cand, pred in around + sampled:
        if cand.name not in seen:
            seen.add(cand.name)
            chosen.append((cand, pred))
    unfit = sum(1 for c in configs if unfit_reason(c, dev))
    return chosen, {"valid": len(configs), "unfit": unfit, "spill_risk": len(spilling),
                    "ranked": len(ranked), "around_default": len(around),
                    "chosen": len(chosen)}


def _around_default(req: Request, dev: DeviceLimits, gpu: str) -> list[tuple]:
    """(Candidate, prediction) of the default, the rules' choice and the default's neighbours
    that the device can hold; none where no family takes the dtype and layout."""
    try:
        first = defaults(gpu, cc_of(dev.arch), req.dtype, req.m, req.n, req.k, req.layout)
    except ValueError:
        return []
    cands = first + neighbours(first[0], req.m, req.n, req.k, req.layout)
    out = []
    for cand in cands:
        if cand.role != "default" and unfit_reason(cand.config, dev):
            continue
        m, n = (req.n, req.m) if cand.swap else (req.m, req.n)
        out.append((cand, predict(cand.config, m, n, req.k, dev)))
    return out


def tune(req: Request, db: tunedb.TuneDB, runner, *, compile_fn=compile_candidate,
         jobs: int | None = None, progress=None) -> tuple[str, dict, dict]:
    """Measure the planned candidates that ``db`` lacks for this key; returns (key, entry,
    stats). ``runner`` measures on the GPU (``WorkerPool``; tests pass a stand-in). Every
    candidate becomes a row: compile_error, launch_error, wrong, timeout or ok. The default
    (what gemm runs without the database) is measured first, in every run (a resumed one
    too), and the entry keeps a winner only where it beats the default by
    ``gemmgen.tune.default.MARGIN`` (``settle``), in the single timings and again when the two
    are timed side by side (``_rematch``). Stops starting new work once
    ``req.budget_s`` has passed; a later run resumes where this one stopped."""
    info = runner.info
    dev = DeviceLimits(**info["limits"])
    # Resolve the family once (it enumerates the spaces when not given).
    req = dataclasses.replace(req, family=req.family_on(dev.arch))
    chosen, stats = plan(req, dev, info["gpu"])
    key = _open_entry(db, req, info)
    first = next((c.name for c, _ in chosen if c.role == "default"), None)
    db.entries[key]["default"] = first
    done = db.measured(key) - {first}  # the default is timed again in every run
    todo = {c.name: (c, pred) for c, pred in chosen if c.name not in done}
    stats.update(already_measured=len(chosen) - len(todo), measured_now=0, budget_hit=False)

    def finish(name: str, row: dict) -> None:
        cand, pred = todo[name]
        row.setdefault("config", cand.config.as_dict())
        row.setdefault("model", pred)
        db.record(key, name, {**row, "swap": cand.swap, "role": cand.role})  # settles, saves
        stats["measured_now"] += 1
        if progress:
            progress(1)
    _measure(req, dev, todo, runner, compile_fn, jobs, finish, stats, first)
    stats["head_to_head"] = _rematch(req, dev, db, key, runner, compile_fn)
    return key, db.entries[key], stats


def _rematch(req, dev, db: tunedb.TuneDB, key: str, runner, compile_fn) -> dict | None:
    """Where the single timings found a winner (``settle``: ``MARGIN`` times as fast as the
    default), time it and the default again, in turn on one GPU (``runner.head_to_head``),
    and record that as the entry's ``head_to_head``: ``settle`` then keeps the winner only if
    it is still ``MARGIN`` times as fast. One timing each, minutes apart, differed by a few
    percent for kernels of tens of microseconds; side by side they do not. Returns the record
    (None where the default stands)."""
    entry = db.entries[key]
    winner, default = entry.get("winner"), entry.get("default")
    if not winner or not default or winner == default:
        return None
    items = []
    for name in (default, winner):
        row = entry["candidates"][name]
        cfg = config_from_dict(row["config"])
        arch = get_family(cfg.family).arch_for(cc_of(dev.arch))
        cubin, ptxas = compile_fn(render(cfg, arch), arch, cfg.name, req.compile_timeout)
        items.append((name, cfg, cubin, ptxas, bool(row.get("swap"))))
    times = runner.head_to_head(items)
    entry["head_to_head"] = {"default": default, "winner": winner,
                             "default_ms": times[default], "winner_ms": times[winner],
                             "rounds": REMATCH_ROUNDS, "timing": "graph"}
    db.choose_winner(key)
    db.save()
    return entry["head_to_head"]


def _measure(req, dev, todo: dict, runner, compile_fn, jobs, finish, stats, first) -> None:
    """Compile ``todo`` (name -> (Candidate, prediction)) in parallel and measure what
    compiled clean on ``runner``, calling ``finish(name, row)`` for each; the candidate named
    ``first`` goes to the runner before any other."""
    deadline = time.monotonic() + req.budget_s
    held: list = []  # compiled before the default: submitted right after it
    # nvcc is a subprocess already: threads drive the parallel compiles, so no Python process
    # is spawned (a user script without a __main__ guard would run again in each one).
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        futures = {}
        for name, (cand, _) in todo.items():
            arch = get_family(cand.config.family).arch_for(cc_of(dev.arch))
            futures[pool.submit(compile_fn, render(cand.config, arch), arch, cand.config.name,
                                req.compile_timeout)] = name
        pending, measuring = set(futures), 0
        while pending or measuring or held:
            if pending and time.monotonic() > deadline:
                for f in pending:
                    f.cancel()
                pending, stats["budget_hit"] = set(), True
            finished, pending = (wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                                 if pending else (set(), set()))
            for f in finished:
                cand, pred = todo[futures[f]]
                row = _unmeasurable(cand.config, pred, f)
                if row is not None:
                    finish(cand.name, row)
                    first = None if cand.name == first else first
                    continue
                held.append((cand, f.result()))
            if first is None or any(c.name == first for c, _ in held) or not pending:
                held.sort(key=lambda item: item[0].name != first)
                for cand, (cubin, ptxas) in held:
                    runner.submit(cand.name, cand.config, cubin, ptxas, swap=cand.swap)
                    measuring += 1
                held, first = [], None
            for name, row in runner.poll(0.0 if pending else 0.5):
                finish(name, row)
                measuring -= 1


def _open_entry(db: tunedb.TuneDB, req: Request, info: dict) -> str:
    """The database key of ``req`` on the runner's GPU, its entry made (with the baseline's
    name, TFLOP/s and timing from the runner: ``baseline``, ``baseline_tflops``,
    ``baseline_timing``, also as ``cublas_tflops``) if new, or given them if it was made before baselines were named."""
    key = tunedb.key(info["gpu"], req.dtype, req.m, req.n, req.k, req.layout, req.family)
    entry = db.entry(key, gpu=info["gpu"], dtype=req.dtype, layout=req.layout, M=req.m,
                     N=req.n, K=req.k, family=req.family)
    if entry.get("baseline") is None and info.get("baseline_tflops") is not None:
        entry.update(baseline=info.get("baseline"), baseline_tflops=info["baseline_tflops"],
                     baseline_timing=info.get("baseline_timing"),
                     cublas_tflops=info["baseline_tflops"])
        db.save()
    elif entry.get("cublas_tflops") is None:
        entry["cublas_tflops"] = info.get("cublas_tflops")
        db.save()
    return key


def _unmeasurable(cfg, pred: dict, future) -> dict | None:
    """The row of a candidate that cannot be timed: nvcc failed (compile_error) or ptxas
    spilled to local memory (spill); None when its cubin is ready to measure."""
    try:
        _, ptxas = future.result()
    except (BuildError, OSError) as exc:
        reason = getattr(exc, "log", str(exc)).strip().splitlines()
        return {"config": cfg.as_dict(), "status": "compile_error",
                "reason": " | ".join(reason[-3:])[:500], "model": pred}
    reason = spill_reason(ptxas)
    if reason:  # compiled, but local memory: a row with the reason, never timed
        return {"config": cfg.as_dict(), "status": "spill", "reason": reason,
                "registers": ptxas.get("registers"),
                "spill_bytes": ptxas.get("spill_stores", 0) + ptxas.get("spill_loads", 0),
                "model": pred}
    return None
