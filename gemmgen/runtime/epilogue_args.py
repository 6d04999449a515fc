"""The device arguments of an epilogue tree (docs-notes/epilogue_abi.md): the operands that
``gemmgen.gemm`` and a built kernel take for the tree's leaves (``row_scale``, ``col_scale``,
``row_bias``, ``R``, ``aux``, ``amax``; ``up`` for the dual GEMM), checked and named, and the
``EpilogueArgs`` struct packed with its pointers as ``Ref``s, which a recipe patches per call
as it patches A, B and C.

Pure Python: nothing here touches the GPU.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..model.epilogue import Epilogue, EpilogueError
from ..model.epilogue_rules import (
    ARG_OPS,
    EPILOGUE_ARGS,
    EPILOGUE_ARGS_BYTES,
    residual_col,
    residual_dtype,
)
from ..model.quote import quote
from .operands import Operand, OperandError, describe
from .recipe import Block, Ref

INDEX = {name: 4 + i for i, name in enumerate(ARG_OPS)}
"""A recipe's operand index of each tree operand (0 A, 1 B, 2 C, 3 bias as in ``gemm``)."""
UP_INDEX = 4 + len(ARG_OPS)
"""The recipe's operand index of the dual GEMM's second weight (Bu)."""
EXTRA = (*ARG_OPS, "up")
"""Keyword operands of ``gemm`` and ``Kernel.__call__`` beyond A, B, C and bias, in a
recipe's numbering (operand 4 on: ``INDEX``, then ``UP_INDEX``)."""
STRUCT = struct.Struct("<" + "".join(
    {8: "Q" if "*" in f.ctype else "q", 4: "i"}[f.size] for f in EPILOGUE_ARGS))
assert STRUCT.size == EPILOGUE_ARGS_BYTES  # natural alignment: no padding between fields


def tree_of(cfg) -> Epilogue | None:
    """The epilogue tree a config renders from its program (an extended wgmma config: a tree,
    the dual GEMM or the overlap), else None (today's six epilogues, other families)."""
    if not getattr(cfg, "extended", False):
        return None
    return Epilogue.parse(cfg.epilogue)


def parse_epilogue(epilogue: str | None) -> Epilogue | None:
    """``epilogue`` as a tree (None stays None); ``ValueError`` naming what is wrong."""
    if epilogue is None:
        return None
    try:
        return Epilogue.parse(epilogue)
    except EpilogueError as exc:
        raise ValueError(f"unknown epilogue {quote(epilogue)}: {exc}") from None


def takes_args(cfg) -> bool:
    """The kernel takes the trailing ``EpilogueArgs`` parameter."""
    return tree_of(cfg) is not None and bool(cfg.env().get("EPI_ARGS"))


@dataclass(frozen=True)
class EpiOperands:
    """The checked tree operands of one call (``ops``: name -> Operand, the vectors seen as
    one row per batch entry) and the struct fields that follow from them."""

    ops: dict
    fields: dict

    def block(self, refs: bool) -> Block:
        """The packed ``EpilogueArgs``; with ``refs`` its pointers are patched per call (the
        operand indices of ``INDEX``)."""
        values = []
        for f in EPILOGUE_ARGS:
            v = self.fields.get(f.name, 0)
            if f.name in INDEX and f.name in self.ops:
                v = Ref(INDEX[f.name], self.ops[f.name].ptr) if refs else self.ops[f.name].ptr
            values.append(v)
        return Block.of(STRUCT, values)


def _vector(x, name: str, dtype: str, length: int, batch: int | None, what: str) -> tuple:
    """(Operand, batch stride) of a vector of ``length`` values: 1-D, or one row per batch
    entry (batch x length, rows contiguous)."""
    nd = getattr(x, "ndim", None)
    if nd not in (1, 2):
        raise OperandError(f"{name} must be a vector of {length} {what} (or one per batch "
                           f"entry: batch x {length}); got {type(x).__name__}"
                           f"{'' if nd is None else f' with {nd} dimensions'}")
    op = describe(x.reshape(1, -1) if nd == 1 else x, name, dtype)
    rows, cols = op.shape
    if cols != length or (nd == 2 and rows not in (1, batch or 1)):
        raise OperandError(f"{name} must hold {length} values ({what})"
                           f"{f' per batch entry ({batch})' if batch else ''}; got shape "
                           f"{tuple(x.shape)}")
    if "r" not in op.lds:
        raise OperandError(f"{name}'s values must be contiguous (stride 1)")
    return op, (op.lds["r"] if nd == 2 and rows > 1 else 0)


def _matrix(x, name: str, dtype: str, m: int, n: int, col: bool, batch: int | None) -> tuple:
    """(Operand, leading dimension, batch stride) of an M x N matrix (or a batch of them)."""
    op = describe(x, name, dtype)
    if op.shape != (m, n):
        raise OperandError(f"{name} has shape {op.shape}; C is {m}x{n}")
    want = "c" if col else "r"
    if want not in op.lds:
        raise OperandError(f"{name} must be {'column' if col else 'row'}-major (the epilogue "
                           f"reads it so); pass a copy in that order")
    if op.batch and batch and op.batch not in (1, batch):
        raise OperandError(f"{name} holds a batch of {op.batch}; the GEMM's is {batch}")
    return op, op.lds[want], (op.batch_stride if op.batch and op.batch > 1 else 0)


def check_epilogue(cfg, given: dict, m: int, n: int, batch: int | None,
                   host: bool = False) -> EpiOperands | None:
    """Check the tree operands ``given`` (name -> array or None) against ``cfg``'s tree:
    each one the tree reads is required, none other may be given; device arrays, or NumPy
    arrays when ``host`` (the NumPy path, which copies them). None when the kernel takes no
    ``EpilogueArgs``. Raises ``OperandError`` naming the argument."""
    epi = tree_of(cfg)
    present = {k: v for k, v in given.items() if v is not None and k != "up"}
    if epi is None:
        if present:
            raise OperandError(f"{', '.join(present)} given, but this kernel's epilogue "
                               f"({cfg.epilogue}) reads none of them")
        return None
    for name in ARG_OPS:
        if epi.count(name) and name not in present:
            raise OperandError(f"{name} is required: the epilogue {epi.expr} reads it")
        if name in present and not epi.count(name):
            raise OperandError(f"{name} given, but the epilogue {epi.expr} does not read it")
    ops, fields = {}, {}
    out, col = cfg.out, cfg.layout[2] == "c"
    for name, dtype, length, what in (("row_scale", "fp32", m, "fp32, one per row of C"),
                                      ("col_scale", "fp32", n, "fp32, one per column of C"),
                                      ("row_bias", out, m, f"{out}, one per row of C")):
        if name in present:
            ops[name], stride = _vector(present[name], name, dtype, length, batch, what)
            fields["stride_row" if name.startswith("row") else "stride_col"] = stride
    if "R" in present:
        ops["R"], fields["ldr"], fields["stride_r"] = _matrix(
            present["R"], "R", residual_dtype(epi, out), m, n, residual_col(epi, cfg.layout[2]),
            batch)
    if "aux" in present:
        ops["aux"], fields["ld_aux"], fields["stride_aux"] = _matrix(
            present["aux"], "aux", out, m, n, col, batch)
        if ops["aux"].readonly:
            raise OperandError("aux is read-only; the kernel writes the tree's value there")
    if "amax" in present:
        x = present["amax"]
        if getattr(x, "size", None) != 1:
            raise OperandError("amax must be a one-element float32 device array (zeroed by "
                               "the caller; the kernel atomicMax-es its bits)")
        ops["amax"] = describe(x.reshape(1, 1), "amax", "fp32")
    if not host and any(op.kind == "numpy" for op in ops.values()):
        raise OperandError(f"{', '.join(k for k, op in ops.items() if op.kind == 'numpy')}: "
                           f"epilogue operands must be device arrays (PyTorch, CuPy)")
    if "row_scale" in ops and "row_bias" in ops and (
            _stride(ops, "row_scale", batch) != _stride(ops, "row_bias", batch)):
        raise OperandError("row_scale and row_bias share one batch stride: give both one "
                           "vector, or both one row per batch entry")
    return EpiOperands(ops, fields)


def _stride(ops: dict, name: str, batch) -> int:
    op: Operand = ops[name]
    return op.lds["r"] if op.shape[0] > 1 else 0
