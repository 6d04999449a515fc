"""``gemmgen.gemm`` with an epilogue tree (docs-notes/epilogue_abi.md): the wgmma kernel the
heuristics choose for the tree (never swapped: the tree's row and column operands stay as
given), or the dual GEMM (SwiGLU) for a tree of ``gate`` and ``up``, built once per process
and launched with the tree's operands (``row_scale``, ``col_scale``, ``row_bias``, ``R``,
``aux``, ``amax``; ``up``). Operands TMA cannot read are repacked, a C it cannot store to
takes the same tree with direct stores (the wgmma launch's fallback for a tree)."""
from __future__ import annotations

import re

from ..heuristics.select import decide, writing
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import stored_as
from .arrays import dtype_name_of
from ..model.epilogue import Epilogue
from ..model.presets import PRESETS
from . import driver
from .build import build
from .device import device_identity
from .operands import OperandError, describe
from .plans import plan_gemm

_KERNELS: dict[tuple, object] = {}
DUAL_BASE = {"dual": True, "bn": 128, "stages": 4}
"""The dual GEMM's kernel: preset wgmma_tma_store with two 128-column B tiles per stage."""


def dual_config(layout: str, epilogue: str, c_aligned: bool = True, dtype: str = "fp16"):
    """The dual-GEMM config for ``layout`` (Bg and Bu K-major: '?c?') and ``dtype`` (fp16 or
    bf16; C of the same dtype); ``OperandError`` for a layout or dtype it cannot take."""
    if dtype not in ("fp16", "bf16"):
        raise OperandError(f"the dual GEMM takes fp16 or bf16 operands; got {dtype}")
    if layout[1] != "c":
        raise OperandError("the dual GEMM reads B and up as nn.Linear weights: K x N "
                           "column-major views (w.T of an N x K weight), layout '?c?'")
    cfg = PRESETS["wgmma_tma_store"].config.replace(
        **DUAL_BASE, layout=layout, epilogue=epilogue, dtype=dtype, out=dtype, check=False,
        **({} if c_aligned else {"store": "direct"}))
    broken = cfg.violations()
    if broken:
        raise OperandError("no dual-GEMM kernel for these operands: "
                           + "; ".join(f"{v.rule.id} {v.rule.name}" for v in broken))
    return cfg


def tree_kernel(epi: Epilogue, dt: str, m: int, n: int, k: int, layout: str, c_aligned: bool,
                batch: int, device: int, db=None, out: str | None = None):
    """(Kernel, how) for a tree on ``device``, built once per process and kind of GPU.
    ``out``: C's dtype when it is not the inputs' own (fp32 C of fp16 inputs, say)."""
    gpu, cc = device_identity(device)
    key = (epi.spelling, dt, m, n, k, layout, c_aligned, batch, str(db or ""), gpu, cc, out)
    if key not in _KERNELS:
        if epi.count("gate"):
            cfg, how = dual_config(layout, epi.spelling, c_aligned, dt), "dual"
        else:
            choice = decide(TuneDB(db), gpu, dt, m, n, k, cc, layout, epi.spelling, c_aligned,
                            "native", batch, out=out)
            if choice.swap:  # decide keeps trees unswapped; a table entry says otherwise
                raise OperandError("internal: a swapped kernel was chosen for an epilogue tree")
            cfg, how = choice.config, choice.how
        cfg = _with_out(cfg, out)
        with driver.on_device(device):
            _KERNELS[key] = (build(cfg), how)
    return _KERNELS[key]


def _with_out(cfg, out: str | None):
    """``cfg`` writing C as ``out`` (``gemmgen.heuristics.select.writing``); ``OperandError``
    where no kernel of its kind can."""
    if out is None or out == cfg.out:
        return cfg
    new = writing(cfg, out)
    broken = new.violations()
    if broken:
        raise OperandError(f"C has dtype {out}; no {cfg.dtype} kernel for this tree writes it: "
                           + "; ".join(f"{v.rule.id} {v.rule.name}" for v in broken))
    return new


def tree_gemm(A, B, C, epi: Epilogue, problem: tuple, *, alpha=1.0, beta=0.0, bias=None,
              db=None, stream=None, **tree):
    """``gemm`` for an epilogue tree or the dual GEMM (see ``gemmgen.runtime.api.gemm``);
    ``problem``: (dtype, M, N, K, batch, layout, C 16-byte aligned, device) as ``gemm``
    finds them. C's dtype, and a residual R's layout where the tree leaves it to C's, follow
    the operands given."""
    kernel = _kernel_of(C, epi, problem, db, tree.get("R"))
    return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream, **tree)


def tree_plan(A, B, C, epi: Epilogue, problem: tuple, *, alpha=1.0, beta=0.0, bias=None,
              db=None, **tree):
    """The launch plan (``plans.plan_gemm`` with the tree's operands) of ``tree_gemm`` for device operands (PyTorch,
    CuPy): the same kernel, every check once, and a recipe whose addresses are patched per
    call (``Plan.run_tree``). Raises as ``tree_gemm`` does."""
    kernel = _kernel_of(C, epi, problem, db, tree.get("R"))
    return plan_gemm(kernel, A, B, C, bias, alpha, beta, problem[-1], tree=tree)


def _kernel_of(C, epi: Epilogue, problem: tuple, db, R):
    """The kernel of ``tree_gemm``: ``tree_kernel``'s for the tree with R's layout filled in
    from the operand and C's dtype where it is not the inputs' own."""
    dt, m, n, k, batch, lay, c_aligned, device = problem
    epi = r_layout_of_operand(epi, R, lay[2])
    out = dtype_name_of(C) if C is not None else None
    kernel, _ = tree_kernel(epi, dt, m, n, k, lay, c_aligned, batch, device, db,
                            out if out != stored_as(dt) else None)
    return kernel


def r_layout_of_operand(epi: Epilogue, R, c_layout: str) -> Epilogue:
    """``epi`` with a residual R whose layout the tree leaves to C's spelled as the given R
    is laid out, where R cannot be read in C's layout (a column-major R beside a row-major
    C, say): ``R`` becomes ``R(layout='c')``. Trees that spell R's layout stay as written."""
    nodes = [node for node in epi.root.walk() if node.op == "R"]
    if R is None or not nodes or nodes[0].attr("layout") is not None:
        return epi
    try:
        lds = describe(R, "R", dtype_name_of(R)).lds
    except (OperandError, ValueError):
        return epi  # the launch's own checks name what is wrong with R
    if c_layout in lds:
        return epi
    want = next(iter(lds))
    expr = re.sub(r"\bR\b(?!\()", f"R(layout='{want}')", epi.expr)
    expr = re.sub(r"\bR\((?![^)]*layout=)", f"R(layout='{want}', ", expr)
    return Epilogue.parse(expr)
