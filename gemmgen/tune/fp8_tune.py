"""Tuning FP8 kernels (``gemmgen tune --dtype e4m3``): the fp8 search space for one shape,
scaling and accumulation, ranked by the shape (idle SMs of the last wave, then the tile's
global FLOP per byte), the best ``max_configs`` compiled in parallel, each verified and timed
(CUDA graph, as the fp8 suite times it), the winner kept in the tuning database under the dtype
``e4m3e4m3:<scaling>:<fast|promoted>``, where ``gemmgen.gemm``'s FP8 choice looks first."""
from __future__ import annotations

import math
import time

from ..compile.cache import compile_many
from ..heuristics import tunedb
from ..heuristics.fp8 import choose_fp8, tune_dtype
from ..model.families.hopper.fp8 import space
from ..runtime.build import build
from ..runtime.device import device_arch, sm_count
from .suite_cases import Case
from .suite_fp8 import measure
from .suite_run import RunEnv, why


def rank(configs: list, m: int, n: int, sms: int) -> list:
    """``configs`` best first by the shape: split-K last where the tiles alone fill whole waves
    (none is split there), then the busy share of the waves of work units times
    the tile's FLOP per byte (multicast's saving in part), deeper rings."""
    def score(c):
        units = c.work_units(m, n, sms)
        slots = sms // c.cluster
        idle = 1 - units / (math.ceil(units / slots) * slots)
        needless_split = c.split_k > 1 and not c.split_tiles(m, n, sms)  # whole waves
        # busy share of the waves x the tile's FLOP per byte of shared memory, times the square
        # root of the global traffic a cluster's multicast saves (it relieves L2, not the SM)
        fpb = c.flops_per_byte
        worth = (1 - idle) * fpb["shared"] * math.sqrt(fpb["global"])
        return (needless_split, -round(worth), -c.stages)
    return sorted(configs, key=score)


def tune_fp8(m: int, n: int, k: int, dtype: str, scaling: str, fast: bool, db: tunedb.TuneDB,
             env: RunEnv, max_configs: int = 24, budget_s: float = 600.0,
             progress=None) -> tuple[str, dict]:
    """Measure up to ``max_configs`` candidates (gemm's current choice always first) and
    record them; (database key, entry)."""
    sms = sm_count()
    base = choose_fp8(m, n, k, scaling, fast, dtype, sms=sms).config
    cands = [base] + [c for c in rank(space(dtype, scaling, 0 if fast else 128), m, n, sms)
                      if c != base]
    key = tunedb.key(env.info["gpu"], tune_dtype(dtype, "e4m3", scaling, fast), m, n, k, "rcr",
                     "fp8")
    entry = db.entry(key, family="fp8", gpu=env.info["gpu"],
                     dtype=tune_dtype(dtype, "e4m3", scaling, fast), M=m, N=n, K=k,
                     layout="rcr")
    done = db.measured(key)
    todo = [c for c in cands if c.name not in done][:max(0, max_configs - len(done))]
    compiled = compile_many(todo, env.arch or device_arch())
    case = Case(dtype, m, n, k, "rcr", scaling=scaling, accum="fast" if fast else "promoted")
    start = time.monotonic()
    for i, (cfg, result) in enumerate(zip(todo, compiled)):
        if time.monotonic() - start > budget_s:
            break
        row = {"config": cfg.as_dict(), "status": "ok", "reason": None, "tflops": 0.0}
        if isinstance(result, Exception):
            row.update(status="compile_error", reason=why(result))
        else:
            try:
                got = measure(case, build(cfg, env.arch), env, baseline=i == 0)
                row.update(tflops=got["tflops"], time_ms=got["time_ms"],
                           rel_error=got["rel_error"], status="ok" if got["passed"] else "wrong")
                if got.get("cublas_tflops"):
                    entry.update(cublas_tflops=got["cublas_tflops"], baseline=got["baseline"],
                                 baseline_tflops=got["cublas_tflops"])
            except Exception as exc:  # noqa: BLE001 - a failure is recorded, not raised
                row.update(status="launch_error", reason=why(exc))
        db.record(key, cfg.name, row)
        if progress:
            progress(1)
    return key, db.entries[key]
