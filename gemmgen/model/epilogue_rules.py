"""Model: what an epilogue tree asks of a kernel: the named quantities its rules read, the rule
table (``EPILOGUE_RULES``), the kernel ABI of its device arguments (``EPILOGUE_ARGS``, one
trailing ``EpilogueArgs`` parameter) and the straight-line program the templates render, split
where the main-loop overlap defers the activation."""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import ELEM_BYTES
from .epilogue import Epilogue
from .epilogue_tree import ACCUMULATORS, ACTIVATIONS, Node
from .rules import Rule, at_least, at_most, equal, one_of

DTYPE_BYTES = {**ELEM_BYTES, "e4m3": 1}
ARG_OPS = ("row_scale", "col_scale", "row_bias", "R", "aux", "amax")
"""Nodes whose data reach the kernel through the ``EpilogueArgs`` parameter."""


@dataclass(frozen=True)
class ArgField:
    """One field of ``EpilogueArgs``: name, C++ type (``out_t``: C's type, ``r_t``: R's),
    byte offset and size, and the nodes that read it."""

    name: str
    ctype: str
    offset: int
    size: int
    used_by: str


def _layout(spec: tuple[tuple[str, str, int, str], ...]) -> tuple[ArgField, ...]:
    out, offset = [], 0
    for name, ctype, size, used_by in spec:
        offset = -(-offset // size) * size  # natural alignment
        out.append(ArgField(name, ctype, offset, size, used_by))
        offset += size
    return tuple(out)


EPILOGUE_ARGS: tuple[ArgField, ...] = _layout((
    ("row_scale", "const float*", 8, "row_scale: fp32, M values per batch entry"),
    ("col_scale", "const float*", 8, "col_scale: fp32, N values per batch entry"),
    ("row_bias", "const out_t*", 8, "row_bias: C's dtype, M values per batch entry"),
    ("R", "const r_t*", 8, "R: M x N in its own layout and dtype"),
    ("aux", "out_t*", 8, "aux: M x N in C's layout and dtype (written)"),
    ("amax", "unsigned int*", 8, "amax: one float as its bits, atomicMax (zeroed by the caller)"),
    ("stride_r", "long long", 8, "R: elements between batch entries (0: one R for all)"),
    ("stride_aux", "long long", 8, "aux: elements between batch entries"),
    ("stride_row", "long long", 8, "row_scale and row_bias: elements between batch entries"),
    ("stride_col", "long long", 8, "col_scale: elements between batch entries"),
    ("ldr", "int", 4, "R: leading dimension, elements"),
    ("ld_aux", "int", 4, "aux: leading dimension, elements"),
))
"""The ``EpilogueArgs`` struct, in order, with natural alignment (a stable ABI: every tree
that needs it passes the whole struct; fields its tree does not read are ignored)."""
EPILOGUE_ARGS_BYTES = -(-(EPILOGUE_ARGS[-1].offset + EPILOGUE_ARGS[-1].size) // 8) * 8


def epilogue_of(cfg) -> Epilogue:
    return Epilogue.parse(cfg.epilogue)


def deferral(epi: Epilogue) -> tuple[Node, Node] | None:
    """Where the main-loop overlap cuts the tree: (z, the rest with z as the leaf ``staged``).
    z is the argument of the lowest activation whose argument holds every accumulator leaf
    (the pre-activation, computed in registers and staged in C's dtype); the rest runs on the
    staged values during the next tile's main loop. None when no activation qualifies."""
    total = sum(epi.count(op) for op in ACCUMULATORS)
    found: list[Node] = []

    def visit(n: Node) -> None:
        if n.op in ACTIVATIONS:
            inside = sum(1 for x in n.args[0].walk() if x.op in ACCUMULATORS)
            if inside == total:
                found.append(n.args[0])
        for a in n.args:
            visit(a)
    visit(epi.root)
    if not found:
        return None
    z = found[-1]

    def replace(n: Node) -> Node:
        return Node("staged") if n is z else Node(n.op, tuple(replace(a) for a in n.args), n.attrs)
    return z, replace(epi.root)


def _amax_target(epi: Epilogue, out: str) -> int:
    """1 when every amax is measured for an fp32 C or for a value cast to e4m3 later."""
    if out == "fp32" or not epi.count("amax"):
        return 1

    def ok(n: Node, cast_above: bool) -> bool:
        if n.op == "amax" and not cast_above:
            return False
        above = cast_above or (n.op == "cast" and n.attr("dtype") == "e4m3")
        return all(ok(a, above) for a in n.args)
    return int(ok(epi.root, False))


def residual_dtype(epi: Epilogue, out: str) -> str:
    """R's dtype: as written, else C's."""
    found = [n.attr("dtype") for n in epi.root.walk() if n.op == "R"]
    return (found[0] if found else None) or out


def residual_col(epi: Epilogue, c_layout: str) -> bool:
    """R is column-major: as written, else as C."""
    found = [n.attr("layout") for n in epi.root.walk() if n.op == "R"]
    return ((found[0] if found else None) or c_layout) == "c"


def epilogue_env(epi: Epilogue, out: str, dual: int = 0) -> dict[str, int]:
    """The named quantities of ``EPILOGUE_RULES`` for ``epi`` in a kernel with C of ``out``."""
    ops = epi.ops()
    return {
        "EPI_TREE": int(epi.is_tree), "EPI_ARGS": int(any(ops[o] for o in ARG_OPS)),
        "EPI_ACC": ops["acc"], "EPI_GATE": ops["gate"], "EPI_UP": ops["up"],
        "EPI_R": ops["R"], "EPI_R_BYTES": DTYPE_BYTES[residual_dtype(epi, out)],
        "EPI_BETA_C": ops["beta_c"], "EPI_AUX": ops["aux"], "EPI_AMAX": ops["amax"],
        "EPI_AMAX_TARGET": _amax_target(epi, out), "EPI_ALPHA": int(bool(ops["alpha"])),
        "EPI_DEFERRABLE": int(deferral(epi) is not None), "DUAL": dual,
    }


_DUAL = equal("DUAL", 1)
EPILOGUE_RULES: tuple[Rule, ...] = (
    Rule("E01", "reads-accumulator", at_least(("EPI_ACC",), 1),
         "the tree reads the accumulator (acc) at least once", when=equal("DUAL", 0)),
    Rule("E02", "dual-leaves-only", equal(("EPI_GATE",), ("EPI_UP",)),
         "gate and up are the two accumulators of a dual GEMM: both or neither"),
    Rule("E03", "dual-needs-gate", at_least("EPI_GATE", 1),
         "a dual GEMM's epilogue combines its accumulators gate and up", when=_DUAL),
    Rule("E04", "dual-no-acc", equal("EPI_ACC", 0),
         "a dual GEMM has no single accumulator acc: use gate and up", when=_DUAL),
    Rule("E05", "gate-up-dual", equal("EPI_GATE", 0),
         "gate and up exist only in a dual GEMM (dual=True)", when=equal("DUAL", 0)),
    Rule("E06", "residual-once", at_most("EPI_R", 1),
         "one residual tensor R, read once (beta*C is the other, distinct input)"),
    Rule("E07", "beta-c-once", at_most("EPI_BETA_C", 1),
         "C is read once, as beta*C (R is a distinct input)"),
    Rule("E08", "residual-dtype", one_of("EPI_R_BYTES", (2, 4)),
         "R is read as fp16, bf16 or fp32 (give its dtype: R(dtype='bf16'))",
         when=at_least("EPI_R", 1)),
    Rule("E09", "aux-once", at_most("EPI_AUX", 1), "one aux output tensor"),
    Rule("E10", "amax-once", at_most("EPI_AMAX", 1), "one amax output"),
    Rule("E11", "amax-target", equal("EPI_AMAX_TARGET", 1),
         "amax measures what is stored: an fp32 C, or a value cast to e4m3 later "
         "(amax(...) inside cast(..., e4m3)), whose scale it sets", when=at_least("EPI_AMAX", 1)),
)
"""Rules every epilogue tree obeys, in any family that renders trees (wgmma)."""
FOREIGN_RULES: tuple[Rule, ...] = (
    Rule("E00", "tree-needs-wgmma", equal("EPI_TREE", 0),
         "this family renders only none, bias, relu, gelu, bias_relu and bias_gelu; an "
         "epilogue tree needs the wgmma family"),
)
"""Rules of a family that renders only today's six epilogues, for a config holding a tree."""
