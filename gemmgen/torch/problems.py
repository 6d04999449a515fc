"""The GEMMs a model runs, and compiling their kernels ahead of the first call."""
from __future__ import annotations

import time

from ..compile.cache import compile_many
from ..compile.nvcc import BuildError
from ..heuristics.select import choose
from ..heuristics.tunedb import TuneDB
from ..model.families import fallback_config, get_family
from ..runtime.device import device_arch, device_identity


def linear_problems(m: int, k: int, n: int, dtype: str, weight: str = "nk",
                    epilogue: str = "bias") -> list:
    """The GEMMs one linear layer of M rows, K inputs and N outputs runs in a training step, as
    ``precompile`` takes them: the forward pass (``weight`` "nk": nn.Linear's N x K weight read
    column-major; "kn": Conv1D's K x N weight read row-major) and the backward's dA and dB."""
    b = "c" if weight == "nk" else "r"
    return [(dtype, m, n, k, "r" + b + "r", epilogue),
            (dtype, m, k, n, "r" + ("r" if b == "c" else "c") + "r", "none"),
            (dtype, k, n, m, "crr", "none")]


def precompile(problems, db=None, jobs: int | None = None, fallbacks: bool = True) -> dict:
    """Compile at once, in parallel nvcc processes, the kernels ``gemmgen.gemm`` will choose for
    ``problems`` ((dtype, M, N, K, layout, epilogue) tuples; dtype "fp16", "bf16" or "fp32"),
    with the fallback kernel of each TMA (wgmma) kernel (unless ``fallbacks`` is False: it
    runs only for operands TMA cannot describe), into gemmgen's disk cache, so the
    calls that follow only load cubins. Returns {"kernels": configs, "seconds": wall time,
    "errors": [messages]}. Needs a GPU (the choice depends on it) and nvcc."""
    gpu, cc = device_identity()
    tunedb = TuneDB(db)
    configs = {}
    for dt, m, n, k, lay, epi in problems:
        cfg, _ = choose(tunedb, gpu, dt, m, n, k, cc, lay, epi)
        configs[repr(cfg)] = cfg
        if fallbacks and get_family(cfg.family).tma:
            fb = fallback_config(cfg)
            configs[repr(fb)] = fb
    start = time.perf_counter()
    done = compile_many(list(configs.values()), device_arch(), jobs=jobs)
    errors = [str(d) for d in done if isinstance(d, BuildError)]
    return {"kernels": len(configs), "seconds": time.perf_counter() - start, "errors": errors}
