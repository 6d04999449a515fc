"""Model: read an epilogue expression (``'silu(acc*row_scale*col_scale + bias) + R'``) into an
epilogue tree with Python's ``ast`` (the text is parsed, never evaluated). Anything but the
names, ``+``, ``*`` and the calls of ``gemmgen.model.epilogue`` is refused with an
``EpilogueError`` naming the token."""
from __future__ import annotations

import ast

from . import epilogue_tree
from .epilogue_tree import EpilogueError, Node
from .quote import quote

MAX_CHARS = 4096
"""The longest epilogue expression read (a real one is under a hundred characters); a longer
one is refused before it is parsed."""
MAX_DEPTH = 64
"""The deepest expression read: sums and products of at most this many terms, calls within
calls at most this deep; deeper ones are refused before Python's recursion limit is reached."""

NAMES = {leaf[0]: op for op, leaf in epilogue_tree.LEAVES.items() if op not in ("beta_c", "staged")}
"""Leaf names an expression may use (beta*C is written as that product)."""
_OPERATORS = {ast.Sub: "-", ast.Div: "/", ast.Pow: "**", ast.Mod: "%", ast.FloorDiv: "//",
              ast.MatMult: "@", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}


def parse_node(spelled: str) -> Node:
    """The tree ``spelled`` describes. Raises ``EpilogueError`` naming the offending token and
    its column, for an expression longer than MAX_CHARS or deeper than MAX_DEPTH."""
    if len(spelled) > MAX_CHARS:
        raise EpilogueError(f"epilogue {quote(spelled)} is {len(spelled)} characters long; an "
                            f"expression has at most {MAX_CHARS}")
    source = spelled.strip()
    try:
        tree = ast.parse(source, mode="eval")
        if _depth(tree.body) > MAX_DEPTH:
            raise RecursionError
        return _Reader(source).node(tree.body)
    except SyntaxError as exc:
        raise EpilogueError(f"epilogue {quote(spelled)} is not an expression ({exc.msg}, column "
                            f"{exc.offset})") from None
    except (RecursionError, MemoryError):
        raise too_deep(spelled) from None


def too_deep(spelled: str) -> EpilogueError:
    return EpilogueError(f"epilogue {quote(spelled)} nests too deep: at most {MAX_DEPTH} terms "
                         f"in a sum or product, and calls at most {MAX_DEPTH} deep")


def _depth(root: ast.AST) -> int:
    """How deep expressions nest under ``root`` (counted without recursion)."""
    deepest, todo = 0, [(root, 1)]
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        todo += [(c, depth + 1) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    return deepest


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, e: ast.AST, what: str, hint: str = "") -> EpilogueError:
        token = ast.get_source_segment(self.source, e) or type(e).__name__
        col = getattr(e, "col_offset", 0) + 1
        return EpilogueError(f"epilogue {quote(self.source)}: {what} {quote(token)} at column {col}"
                             + (f"; {hint}" if hint else ""))

    def node(self, e: ast.AST) -> Node:
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            return Node("add", (self.node(e.left), self.node(e.right)))
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
            return self.product(e)
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, (ast.BinOp, ast.UnaryOp)):
            op = _OPERATORS.get(type(e.op), type(e.op).__name__)
            raise self.fail(e, f"operator {op!r} is not supported in", "use + and *")
        if isinstance(e, ast.Constant):
            raise self.fail(e, "constant", "scale through alpha, row_scale or col_scale")
        raise self.fail(e, "unsupported syntax")

    def name(self, e: ast.Name) -> Node:
        if e.id in ("beta", "C"):
            raise self.fail(e, "name", "C is read only as the product beta*C")
        if e.id not in NAMES:
            raise self.fail(e, "unknown name", f"known: {', '.join(NAMES)}, beta*C")
        return epilogue_tree.residual() if e.id == "R" else Node(NAMES[e.id])

    def product(self, e: ast.BinOp) -> Node:
        """A chain of ``*``: its factors, with ``beta`` and ``C`` joined into beta*C."""
        factors: list[ast.AST] = []

        def gather(x: ast.AST) -> None:
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult):
                gather(x.left)
                gather(x.right)
            else:
                factors.append(x)
        gather(e)
        named = [f for f in factors if isinstance(f, ast.Name) and f.id in ("beta", "C")]
        betas = sum(f.id == "beta" for f in named)
        if betas * 2 != len(named):
            lone = "beta" if betas * 2 > len(named) else "C"
            raise self.fail(next(f for f in named if f.id == lone), "name",
                            "C is read only as the product beta*C")
        nodes = [self.node(f) for f in factors if f not in named]
        nodes += [Node("beta_c")] * betas
        out = nodes[0]
        for n in nodes[1:]:
            out = Node("mul", (out, n))
        return out

    def call(self, e: ast.Call) -> Node:
        fn = e.func.id if isinstance(e.func, ast.Name) else None
        if fn == "R":
            return self.residual(e)
        if fn == "cast":
            return self.cast(e)
        if fn not in epilogue_tree.ACTIVATIONS and fn not in epilogue_tree.RECORDERS:
            known = ", ".join([*epilogue_tree.ACTIVATIONS, *epilogue_tree.RECORDERS, "cast", "R"])
            raise self.fail(e.func, "unknown function", f"known: {known}")
        if len(e.args) != 1 or e.keywords:
            raise self.fail(e, "call", f"{fn} takes one argument")
        return Node(fn, (self.node(e.args[0]),))

    def word(self, e: ast.AST) -> str:
        """A dtype or layout argument, written bare (e4m3) or quoted ('e4m3')."""
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return e.value
        raise self.fail(e, "argument", "expected a dtype or layout name")

    def cast(self, e: ast.Call) -> Node:
        if len(e.args) != 2 or e.keywords:
            raise self.fail(e, "call", "cast takes an expression and a dtype: cast(x, e4m3)")
        dtype = self.word(e.args[1])
        if dtype not in epilogue_tree.CAST_DTYPES:
            known = ", ".join(epilogue_tree.CAST_DTYPES)
            raise self.fail(e.args[1], "cast dtype", f"one of {known}")
        return epilogue_tree.cast(self.node(e.args[0]), dtype)

    def residual(self, e: ast.Call) -> Node:
        if e.args:
            raise self.fail(e, "call", "R takes keywords: R(layout='c', dtype='bf16')")
        given = {}
        for kw in e.keywords:
            if kw.arg not in ("layout", "dtype") or kw.arg in given:
                raise self.fail(kw.value, f"R keyword {kw.arg!r} with value", "layout, dtype")
            given[kw.arg] = self.word(kw.value)
        try:
            return epilogue_tree.residual(**given)
        except EpilogueError as exc:
            raise self.fail(e, "residual", str(exc)) from None
