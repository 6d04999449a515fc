"""The static tests' kernels compiled in batches: a fixture's configs as one translation unit
per core (each kernel lives in its own namespace), so that nvcc's front end parses the CUDA
headers once per unit and not once per kernel (four fp8 kernels: 6.8 s as one unit, 9.6 s one
by one), and the SASS of one config's kernels out of a unit's cubin."""
from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from gemmgen.codegen.render import render
from gemmgen.compile.cache import compile_many as compile_each, target_arch
from gemmgen.compile.nvcc import CUBIN_FLAGS, BuildError, _run_nvcc, parse_ptxas_kernels, sass

_SOURCES: dict[str, str] = {}
"""Config name -> its rendered source, for ``sass_of``."""


def _unit(configs, target: str) -> list:
    """One translation unit of ``configs``: per config (cubin, Resources, target)."""
    with tempfile.TemporaryDirectory(prefix="gemmgen-batch-") as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "k.cubin"
        for cfg in configs:
            _SOURCES[cfg.name] = render(cfg, target)
        src.write_text("\n".join(_SOURCES[cfg.name] for cfg in configs))
        log = _run_nvcc(["-cubin", f"-arch={target}", *CUBIN_FLAGS, "-o", str(out)], src, 600)
        cubin = out.read_bytes()
    found = {entry: res for (entry, _arch), res in parse_ptxas_kernels(log).items()}
    return [(cubin, found[cfg.name], target) for cfg in configs]


def compile_batched(configs, arch: str) -> list:
    """As ``gemmgen.compile.cache.compile_many`` (per config: (cubin, ptxas Resources, target)
    or BuildError, in the order given), but the configs of one target compile as one unit per
    core, so a cubin holds its unit's kernels (``param_layout`` and ``sass_of`` pick one out).
    A unit that fails is compiled config by config, so each names its own error."""
    configs = list(configs)
    targets = [target_arch(cfg, arch) for cfg in configs]
    cores = os.cpu_count() or 2
    jobs = []
    for target in dict.fromkeys(targets):
        idx = [i for i, t in enumerate(targets) if t == target]
        jobs += [(target, idx[j::cores]) for j in range(min(cores, len(idx)))]

    def run(job):
        target, idx = job
        try:
            return idx, _unit([configs[i] for i in idx], target)
        except (BuildError, KeyError):
            return idx, compile_each([configs[i] for i in idx], arch)
    out: list = [None] * len(configs)
    with ThreadPoolExecutor(max_workers=cores) as pool:
        for idx, done in pool.map(run, jobs):
            for i, d in zip(idx, done):
                out[i] = d
    return out


@lru_cache(maxsize=64)
def _functions(cubin: bytes) -> dict:
    """{function name: its SASS, from its ``Function :`` header on} of a cubin."""
    parts = re.split(r"(?m)^(?=\s*Function : )", sass(cubin))
    return {m[1]: part for part in parts if (m := re.match(r"\s*Function : (\S+)", part))}


def sass_of(cubin: bytes, name: str) -> str:
    """The SASS of config ``name``'s kernels in ``cubin``: its GEMM and the helpers its file
    defines (``name_pack``, ``name_reduce``, ...: the functions named ``name_*`` that its
    source names, and not another config's of the unit), each from its ``Function :``
    header. Raises ``FileNotFoundError`` without cuobjdump."""
    found = _functions(cubin)
    source = _SOURCES.get(name, "")
    return "".join(text for fn, text in found.items()
                   if fn == name or (fn.startswith(name + "_") and fn in source))


GLOBAL_ACCESS = re.compile(r"\b(LDG|STG|ATOMG|ATOM|RED|LD\.E|ST\.E|UTMALDG|UTMASTG|UBLKCP|"
                           r"UTMAREDG)\b")
"""SASS opcodes that read or write global memory (loads, stores, atomics, TMA, bulk copies)."""


def waits_before_global_access(cubin: bytes, name: str) -> bool:
    """Whether kernel ``name``'s first ``griddepcontrol.wait`` (SASS ``ACQBULK``) comes, in
    address order, before its first global memory access: the condition for launching it with
    programmatic dependent launch (the set-up before the wait is straight-line code, so
    address order is execution order there)."""
    text = _functions(cubin)[name]
    wait = text.find("ACQBULK")
    first = GLOBAL_ACCESS.search(text)
    return wait >= 0 and (first is None or wait < first.start())


def waterfall_tma_loads(cubin: bytes, name: str) -> tuple[int, int]:
    """(TMA loads, those in a waterfall loop) of kernel ``name``'s SASS: a load whose next
    instruction is ``BRA.U.ANY`` sits in the loop ptxas wraps around an instruction that reads
    uniform registers when its operands were computed in per-thread registers (ELECT, R2UR each
    operand, the load, branch back while any lane is left), the producer's cost per load when
    one thread runs the loop."""
    lines = [line for line in _functions(cubin)[name].splitlines()
             if re.search(r"/\*[0-9a-f]{4,}\*/\s+\S", line)]
    loads = [i for i, line in enumerate(lines) if "UTMALDG" in line]
    return len(loads), sum(i + 1 < len(lines) and "BRA.U.ANY" in lines[i + 1] for i in loads)
