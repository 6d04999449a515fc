"""``gemmgen.gemm`` with an epilogue tree (docs-notes/epilogue_abi.md): the wgmma kernel the
heuristics choose for the tree (never swapped: the tree's row and column operands stay as
given), or the dual GEMM (SwiGLU) for a tree of ``gate`` and ``up``, built once per process
and launched with the tree's operands (``row_scale``, ``col_scale``, ``row_bias``, ``R``,
``aux``, ``amax``; ``up``). Operands TMA cannot read are repacked, a C it cannot store to
takes the same tree with direct stores (``TmaKernel``'s fallback for a tree)."""
from __future__ import annotations

import re

from ..heuristics.select import decide
from ..heuristics.tunedb import TuneDB
from ..model.epilogue import Epilogue
from ..model.presets import PRESETS
from . import driver
from .build import build
from .device import device_identity
from .operands import OperandError

_KERNELS: dict[tuple, object] = {}
DUAL_BASE = {"dual": True, "bn": 128, "stages": 4}
"""The dual GEMM's kernel: preset wgmma_tma_store with two 128-column B tiles per stage."""


def dual_config(layout: str, epilogue: str, c_aligned: bool = True):
    """The dual-GEMM config for ``layout`` (Bg and Bu K-major: '?c?'); ``OperandError`` for a
    layout it cannot read."""
    if layout[1] != "c":
        raise OperandError("the dual GEMM reads B and up as nn.Linear weights: K x N "
                           "column-major views (w.T of an N x K weight), layout '?c?'")
    cfg = PRESETS["wgmma_tma_store"].config.replace(
        **DUAL_BASE, layout=layout, epilogue=epilogue, check=False,
        **({} if c_aligned else {"store": "direct"}))
    broken = cfg.violations()
    if broken:
        raise OperandError("no dual-GEMM kernel for these operands: "
                           + "; ".join(f"{v.rule.id} {v.rule.name}" for v in broken))
    return cfg


def tree_kernel(epi: Epilogue, dt: str, m: int, n: int, k: int, layout: str, c_aligned: bool,
                batch: int, device: int, db=None):
    """(Kernel, how) for a tree on ``device``, built once per process and kind of GPU."""
    gpu, cc = device_identity(device)
    key = (epi.spelling, dt, m, n, k, layout, c_aligned, batch, str(db or ""), gpu, cc)
    if key not in _KERNELS:
        if epi.count("gate"):
            cfg, how = dual_config(layout, epi.spelling, c_aligned), "dual"
        else:
            choice = decide(TuneDB(db), gpu, dt, m, n, k, cc, layout, epi.spelling, c_aligned,
                            "native", batch)
            if choice.swap:  # decide keeps trees unswapped; a table entry says otherwise
                raise OperandError("internal: a swapped kernel was chosen for an epilogue tree")
            cfg, how = choice.config, choice.how
        with driver.on_device(device):
            _KERNELS[key] = (build(cfg), how)
    return _KERNELS[key]


def tree_gemm(A, B, C, epi: Epilogue, problem: tuple, *, alpha=1.0, beta=0.0, bias=None,
              db=None, stream=None, **tree):
    """``gemm`` for an epilogue tree or the dual GEMM (see ``gemmgen.runtime.api.gemm``);
    ``problem``: (dtype, M, N, K, batch, layout, C 16-byte aligned, device) as ``gemm``
    finds them."""
    dt, m, n, k, batch, lay, c_aligned, device = problem
    if lay[2] == "c":
        epi = explicit_r_layout(epi)
    kernel, _ = tree_kernel(epi, dt, m, n, k, lay, c_aligned, batch, device, db)
    return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream, **tree)


def explicit_r_layout(epi: Epilogue) -> Epilogue:
    """``epi`` with a residual R that follows a column-major C spelled ``R(layout='c')``. The
    kernel reads an R of C's layout wrongly when C is column-major (8 GPU cases of
    tests/test_gpu_epilogue.py on an H200), and right when the layout is spelled out."""
    expr = re.sub(r"\bR\b(?!\()", "R(layout='c')", epi.expr)
    expr = re.sub(r"\bR\((?![^)]*layout=)", "R(layout='c', ", expr)
    return epi if expr == epi.expr else Epilogue.parse(expr)
