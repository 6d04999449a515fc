"""Model: an epilogue tree as the straight-line program a template renders, one step per node:
``v3 = mul(v1, v2)``. Every value is a pair of fp32 (two neighbouring elements of C), so the
loads, conversions and stores of a pair are one packed access where alignment allows."""
from __future__ import annotations

from dataclasses import dataclass

from .epilogue_tree import LEAVES, Node

INPUTS = {"acc": "a", "gate": "a", "up": "u", "staged": "z"}
"""Leaves that arrive as the program's parameters: the accumulator pair (``a``; ``gate`` in a
dual GEMM), ``up`` (``u``) and, in the deferred part, the staged pre-activation (``z``)."""


@dataclass(frozen=True)
class Step:
    """One node: ``id = op(args...)``. ``op`` is a leaf that loads (row_scale, R, ...), add or
    mul of two values, an activation, cast (``dtype``), aux or amax."""

    id: str
    op: str
    args: tuple[str, ...] = ()
    dtype: str = ""


@dataclass(frozen=True)
class Program:
    """The steps in order and the id of the result."""

    steps: tuple[Step, ...]
    result: str

    def uses(self, op: str) -> bool:
        return any(s.op == op for s in self.steps)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Parameters the program reads, of ``a``, ``u``, ``z``."""
        used = {a for s in self.steps for a in s.args} | {self.result}
        return tuple(v for v in ("a", "u", "z") if v in used)


def program(root: Node) -> Program:
    """The program of the tree ``root``: sums and products of n operands become n - 1 binary
    steps, left to right in canonical order."""
    steps: list[Step] = []

    def emit(op: str, args: tuple[str, ...] = (), dtype: str = "") -> str:
        sid = f"v{len(steps)}"
        steps.append(Step(sid, op, args, dtype))
        return sid

    def value(n: Node) -> str:
        if n.op in INPUTS:
            return INPUTS[n.op]
        if n.op in LEAVES:
            return emit(n.op)
        args = [value(a) for a in n.args]
        if n.op in ("add", "mul"):
            out = args[0]
            for a in args[1:]:
                out = emit(n.op, (out, a))
            return out
        return emit(n.op, (args[0],), n.attr("dtype") or "")
    result = value(root)
    return Program(tuple(steps), result)
