"""Model: the nodes of an epilogue tree (leaves, sums and products, activations, cast, aux and
amax), the Python builder (``silu(acc*row_scale + bias) + R``), the canonical form, its text
and name token, and the transpose. ``gemmgen.model.epilogue`` wraps a tree as an ``Epilogue``.
"""
from __future__ import annotations

from dataclasses import dataclass

LEAVES: dict[str, tuple[str, str, int, str]] = {
    # op: (canonical text, name token, order in sums and products, what it reads)
    "alpha": ("alpha", "al", 0, "the scalar alpha (kernel parameter)"),
    "acc": ("acc", "acc", 1, "the fp32 accumulator A@B"),
    "gate": ("gate", "g", 1, "the first fp32 accumulator of a dual GEMM, A@Bg"),
    "up": ("up", "u", 1, "the second fp32 accumulator of a dual GEMM, A@Bu"),
    "row_scale": ("row_scale", "rs", 4, "epi.row_scale[m], fp32, one per row of C"),
    "col_scale": ("col_scale", "cs", 5, "epi.col_scale[n], fp32, one per column of C"),
    "beta_c": ("beta*C", "bC", 6, "beta * C[m, n], C read in place (only when beta != 0)"),
    "R": ("R", "R", 7, "the residual R[m, n] (epi.R)"),
    "row_bias": ("row_bias", "rb", 8, "epi.row_bias[m], C's dtype, one per row"),
    "bias": ("bias", "b", 9, "bias[n], C's dtype, one per column (the kernel's bias parameter)"),
    "staged": ("staged", "z", 1, "the pre-activation staged in C's dtype (overlap; internal)"),
}
"""The leaves of an epilogue tree."""
ACCUMULATORS = ("acc", "gate", "up")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_erf": "gelue", "silu": "silu",
               "identity": "id"}
"""Activation -> its name token. gelu is the tanh form; identity vanishes in canonical form."""
RECORDERS = {"aux": "aux", "amax": "amax"}
"""Nodes that record their argument and pass it on: ``aux`` stores it to the aux tensor (the
pre-activation, for backward), ``amax`` folds max |x| into a per-tensor float."""
CAST_DTYPES = ("fp16", "bf16", "e4m3")
"""``cast(x, dtype)`` rounds x to one of these (e4m3 saturating) and goes on in fp32."""
TENSOR_DTYPES = ("fp16", "bf16", "fp32", "e4m3")
"""Dtype names a residual may be given (the rules say which ones a kernel reads)."""
LAYOUT_LETTERS = ("r", "c")
_TRANSPOSE = {"row_scale": "col_scale", "col_scale": "row_scale", "row_bias": "bias",
              "bias": "row_bias"}


class EpilogueError(ValueError):
    """An epilogue that cannot be described: an unknown name, operator or argument (the
    message names the token)."""


@dataclass(frozen=True)
class Node:
    """One node: a leaf (``LEAVES``), ``add`` or ``mul`` of two or more nodes, an activation,
    ``cast`` (attrs: dtype), ``aux`` or ``amax``. ``R``'s attrs hold its layout and dtype
    when given (else C's). Build trees with ``+``, ``*`` and the functions of this module."""

    op: str
    args: tuple[Node, ...] = ()
    attrs: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Node) -> Node:
        return Node("add", (self, as_node(other)))

    def __radd__(self, other: Node) -> Node:
        return Node("add", (as_node(other), self))

    def __mul__(self, other: Node) -> Node:
        return Node("mul", (self, as_node(other)))

    def __rmul__(self, other: Node) -> Node:
        return Node("mul", (as_node(other), self))

    def attr(self, key: str) -> str | None:
        return dict(self.attrs).get(key)

    def walk(self):
        """This node and every node below it, depth first."""
        yield self
        for a in self.args:
            yield from a.walk()


def as_node(x) -> Node:
    if not isinstance(x, Node):
        raise EpilogueError(f"an epilogue combines nodes, not {x!r} (constants are not nodes: "
                            f"scale through alpha, row_scale or col_scale)")
    return x


# ---- the builder ---------------------------------------------------------------------------
acc, gate, up, alpha = Node("acc"), Node("gate"), Node("up"), Node("alpha")
beta_c, row_scale, col_scale = Node("beta_c"), Node("row_scale"), Node("col_scale")
row_bias, bias = Node("row_bias"), Node("bias")


def residual(layout: str | None = None, dtype: str | None = None) -> Node:
    """The residual R (M x N): ``layout`` "r" or "c" and ``dtype`` default to C's."""
    if layout is not None and layout not in LAYOUT_LETTERS:
        raise EpilogueError(f"R's layout is 'r' or 'c', not {layout!r}")
    if dtype is not None and dtype not in TENSOR_DTYPES:
        raise EpilogueError(f"R's dtype is one of {', '.join(TENSOR_DTYPES)}, not {dtype!r}")
    attrs = tuple((k, v) for k, v in (("layout", layout), ("dtype", dtype)) if v is not None)
    return Node("R", (), attrs)


R = residual()


def _unary(op: str):
    def make(x: Node) -> Node:
        return Node(op, (as_node(x),))
    make.__name__ = op
    return make


relu, gelu, gelu_erf, silu, identity = (_unary(op) for op in ACTIVATIONS)
aux, amax = _unary("aux"), _unary("amax")


def cast(x: Node, dtype: str) -> Node:
    """Round x to ``dtype`` (fp16, bf16, or e4m3 saturating) and go on in fp32."""
    if dtype not in CAST_DTYPES:
        raise EpilogueError(f"cast to one of {', '.join(CAST_DTYPES)}, not {dtype!r}")
    return Node("cast", (as_node(x),), (("dtype", dtype),))


# ---- canonical form, text and name ----------------------------------------------------------
def _has_accumulator(n: Node) -> bool:
    return any(x.op in ACCUMULATORS for x in n.walk())


def _order(n: Node) -> tuple:
    """Sort key of an operand of a sum or product: alpha, then whatever reads an accumulator,
    then the other leaves in LEAVES order, then other subtrees; ties by their text."""
    if n.op in LEAVES and n.op not in ACCUMULATORS:
        rank = LEAVES[n.op][2]
    else:
        rank = 1 if _has_accumulator(n) else 20
    return (rank, text(n))


def canonical(n: Node) -> Node:
    """The canonical tree: identity removed, nested sums and products flattened, their operands
    in a fixed order (so ``col_scale*acc`` and ``acc*col_scale`` are one kernel)."""
    if n.op == "identity":
        return canonical(n.args[0])
    args = tuple(canonical(a) for a in n.args)
    if n.op in ("add", "mul"):
        flat: list[Node] = []
        for a in args:
            flat += a.args if a.op == n.op else [a]
        args = tuple(sorted(flat, key=_order))
    return Node(n.op, args, n.attrs)


def text(n: Node) -> str:
    """The expression of ``n`` as the parser reads it (``silu(acc*row_scale + bias) + R``)."""
    if n.op == "R":
        given = ", ".join(f"{k}={v!r}" for k, v in n.attrs)
        return f"R({given})" if given else "R"
    if n.op in LEAVES:
        return LEAVES[n.op][0]
    if n.op == "add":
        return " + ".join(text(a) for a in n.args)
    if n.op == "mul":
        return "*".join(f"({text(a)})" if a.op == "add" else text(a) for a in n.args)
    if n.op == "cast":
        return f"cast({text(n.args[0])}, {n.attr('dtype')})"
    return f"{n.op}({text(n.args[0])})"


def token(n: Node) -> str:
    """The identifier form of ``n`` in prefix order (sums and products carry their arity):
    ``add2_silu_add2_mul3_acc_rs_cs_b_R``."""
    if n.op == "R":
        return "R" + (n.attr("layout") or "") + (n.attr("dtype") or "")
    if n.op in LEAVES:
        return LEAVES[n.op][1]
    if n.op in ("add", "mul"):
        return f"{n.op}{len(n.args)}_" + "_".join(token(a) for a in n.args)
    head = {**ACTIVATIONS, **RECORDERS}.get(n.op) or f"cast{n.attr('dtype')}"
    return f"{head}_{token(n.args[0])}"


def transposed(n: Node) -> Node:
    """The tree of the swapped problem C^T = B^T A^T: row and column broadcasts trade places
    and an explicit R layout flips (a default R follows C's layout, which flips with it)."""
    attrs = n.attrs
    if n.op == "R" and n.attr("layout"):
        attrs = tuple((k, {"r": "c", "c": "r"}[v] if k == "layout" else v) for k, v in attrs)
    return Node(_TRANSPOSE.get(n.op, n.op), tuple(transposed(a) for a in n.args), attrs)
