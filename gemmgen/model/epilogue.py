"""Model: the fused epilogue as a description, a small tree of nodes applied to the accumulators
before the store: the accumulator, scalars, row and column broadcasts, a residual tensor,
activations, a cast and auxiliary outputs.

The nodes and the Python builder live in ``gemmgen.model.epilogue_tree`` (re-exported here),
the parser in ``epilogue_parse``. ``Epilogue`` is a tree in canonical form, with the canonical
expression (what a config stores), the name (what a kernel name carries), today's shorthands
("bias_gelu" is ``gelu(alpha*acc + beta*C + bias)``) and the transpose that the
swapped-operand path needs. The rules, the kernel ABI and the program the templates render live
in ``epilogue_rules`` and ``epilogue_program``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from .epilogue_parse import MAX_CHARS as MAX_EPILOGUE_CHARS, parse_node, too_deep
from .epilogue_tree import (  # noqa: F401 - the builder, re-exported
    ACCUMULATORS,
    ACTIVATIONS,
    CAST_DTYPES,
    LEAVES,
    RECORDERS,
    EpilogueError,
    Node,
    R,
    acc,
    alpha,
    amax,
    as_node,
    aux,
    beta_c,
    bias,
    canonical,
    cast,
    col_scale,
    gate,
    gelu,
    gelu_erf,
    identity,
    relu,
    residual,
    row_bias,
    row_scale,
    silu,
    text,
    token,
    transposed,
    up,
)
from .quote import quote

SHORTHANDS = {
    "none": "alpha*acc + beta*C", "bias": "alpha*acc + beta*C + bias",
    "relu": "relu(alpha*acc + beta*C)", "gelu": "gelu(alpha*acc + beta*C)",
    "bias_relu": "relu(alpha*acc + beta*C + bias)", "bias_gelu": "gelu(alpha*acc + beta*C + bias)",
}
"""Today's epilogue names and the trees they stand for (gemmgen.model.config.EPILOGUES)."""


@dataclass(frozen=True)
class Epilogue:
    """A canonical epilogue tree. ``Epilogue.parse(text)`` takes today's names or an
    expression; ``Epilogue.of(node)`` a built tree.

    ``expr`` is the canonical expression, ``shorthand`` today's name when the tree is one of
    them, ``spelling`` what a config stores (the shorthand, else the expression) and ``name``
    what its kernel name carries after ``_e`` (the shorthand, else ``token``)."""

    root: Node

    @classmethod
    def of(cls, node: Node) -> Epilogue:
        try:
            return cls(canonical(as_node(node)))
        except RecursionError:
            raise EpilogueError("the epilogue tree nests too deep") from None

    @classmethod
    def parse(cls, spelled: str) -> Epilogue:
        """Raises ``EpilogueError`` for a non-string, a name or expression it cannot read, or
        an expression longer than MAX_EPILOGUE_CHARS or nesting too deep (the message quotes
        at most the first characters)."""
        if not isinstance(spelled, str):
            raise EpilogueError(f"an epilogue is a string, got {quote(spelled)}")
        if len(spelled) > MAX_EPILOGUE_CHARS:  # before the cache hashes it
            return Epilogue.of(parse_node(spelled))
        try:
            return _parse_cached(spelled)
        except RecursionError:
            raise too_deep(spelled) from None

    @property
    def expr(self) -> str:
        """The canonical expression; a lone leaf spelled like a shorthand ("bias") is
        parenthesized so that it reads back as the leaf."""
        out = text(self.root)
        return f"({out})" if out in SHORTHANDS else out

    @property
    def shorthand(self) -> str | None:
        return _shorthand_of().get(self.expr)

    @property
    def spelling(self) -> str:
        return self.shorthand or self.expr

    @property
    def name(self) -> str:
        return self.shorthand or token(self.root)

    @property
    def is_tree(self) -> bool:
        """Not one of today's six epilogues (only the wgmma family renders these)."""
        return self.shorthand is None

    def count(self, op: str) -> int:
        return self.ops()[op]

    def ops(self) -> Counter:
        return Counter(n.op for n in self.root.walk())

    def transposed(self) -> Epilogue:
        """The epilogue of the swapped kernel (C^T = B^T A^T): a column bias of the caller
        becomes a row bias, col_scale becomes row_scale and an explicit R layout flips.
        Raises ``EpilogueError`` for a dual-GEMM tree (gate and up share A, not B)."""
        if self.count("gate") or self.count("up"):
            raise EpilogueError("a dual-GEMM epilogue (gate, up) has no transpose: the two "
                                "products share A, which the swap would make the B operand")
        return Epilogue.of(transposed(self.root))

    def tree_lines(self) -> list[str]:
        """The tree, one node per line, indented, with what each leaf reads (for the header)."""
        out: list[str] = []

        def visit(n: Node, depth: int) -> None:
            label = text(n) if not n.args else n.op + (f"[{n.attr('dtype')}]" if n.attrs else "")
            what = LEAVES[n.op][3] if n.op in LEAVES else ""
            if n.op == "R":
                what += f", layout {n.attr('layout') or 'as C'}, dtype {n.attr('dtype') or 'as C'}"
            out.append(f"{'  ' * depth}{label:<{max(1, 24 - 2 * depth)}} {what}".rstrip())
            for a in n.args:
                visit(a, depth + 1)
        visit(self.root, 0)
        return out


@lru_cache(maxsize=1)
def _shorthand_of() -> dict[str, str]:
    return {text(canonical(parse_node(expr))): name for name, expr in SHORTHANDS.items()}


@lru_cache(maxsize=4096)
def _parse_cached(spelled: str) -> Epilogue:
    key = spelled.strip()
    return Epilogue.of(parse_node(SHORTHANDS.get(key, key)))
