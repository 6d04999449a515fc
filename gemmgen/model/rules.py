"""Validation rules: one table gives the Python check, the error message and the C++ static_assert.

A rule compares two products of named quantities (``BM*BK`` against ``THREADS*VEC``).
The names are the constants the rendered kernel declares, so the same rule renders as a
``static_assert`` and evaluates in Python over the config's environment (a dict of
name -> int built by the config model). Nothing is evaluated from strings.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

Factor = str | int
Term = tuple[Factor, ...]

_CPP_OPS = {"==": "==", "!=": "!=", "<=": "<=", ">=": ">="}


def _term(x: Factor | Term) -> Term:
    return x if isinstance(x, tuple) else (x,)


def _text(term: Term) -> str:
    return "*".join(str(f) for f in term)


def _value(term: Term, env: dict[str, int]) -> int:
    return prod(env[f] if isinstance(f, str) else f for f in term)


def _shown(term: Term, env: dict[str, int]) -> str:
    """``BM*BK = 128*16 = 2048``; a single name shows ``BM = 128``."""
    value = _value(term, env)
    if len(term) == 1:
        return f"{_text(term)} = {value}" if isinstance(term[0], str) else str(value)
    parts = "*".join(str(env[f]) if isinstance(f, str) else str(f) for f in term)
    return f"{_text(term)} = {parts} = {value}"


@dataclass(frozen=True)
class Cmp:
    """``lhs op rhs`` over products of names; op is one of ==, !=, <=, >=, 'multiple of', 'in'."""

    lhs: Term
    op: str
    rhs: Term  # for 'in': the allowed values

    def holds(self, env: dict[str, int]) -> bool:
        lv = _value(self.lhs, env)
        if self.op == "in":
            return lv in self.rhs
        rv = _value(self.rhs, env)
        if self.op == "multiple of":
            return rv == 0 or lv % rv == 0  # a zero divisor is another rule's failure
        return {"==": lv == rv, "!=": lv != rv, "<=": lv <= rv, ">=": lv >= rv}[self.op]

    def cpp(self) -> str:
        lhs = _text(self.lhs)
        if self.op == "in":
            return "(" + " || ".join(f"{lhs} == {v}" for v in self.rhs) + ")"
        rhs = _text(self.rhs)
        if self.op == "multiple of":
            guard = "" if all(isinstance(f, int) for f in self.rhs) else f"({rhs}) == 0 || "
            return f"({guard}({lhs}) % ({rhs}) == 0)"
        return f"({lhs} {_CPP_OPS[self.op]} {rhs})"

    def formula(self) -> str:
        lhs = _text(self.lhs)
        if self.op == "in":
            return f"{lhs} in {{{', '.join(map(str, self.rhs))}}}"
        if self.op == "multiple of":
            def paren(term: Term) -> str:
                return f"({_text(term)})" if len(term) > 1 else _text(term)
            return f"{paren(self.lhs)} % {paren(self.rhs)} == 0"
        return f"{lhs} {self.op} {_text(self.rhs)}"

    def explain(self, env: dict[str, int]) -> str:
        """Why the comparison fails, with numbers: ``BM = 128 is not a multiple of TN = 7``."""
        lhs = _shown(self.lhs, env)
        if self.op == "in":
            return f"{lhs} is not one of {{{', '.join(map(str, self.rhs))}}}"
        rhs = _shown(self.rhs, env)
        verb = {"multiple of": "is not a multiple of", "==": "should equal", "!=": "must not equal",
                "<=": "exceeds", ">=": "is less than"}[self.op]
        return f"{lhs} {verb} {rhs}"


def multiple_of(lhs: Factor | Term, rhs: Factor | Term) -> Cmp:
    return Cmp(_term(lhs), "multiple of", _term(rhs))


def at_most(lhs: Factor | Term, rhs: Factor | Term) -> Cmp:
    return Cmp(_term(lhs), "<=", _term(rhs))


def at_least(lhs: Factor | Term, rhs: Factor | Term) -> Cmp:
    return Cmp(_term(lhs), ">=", _term(rhs))


def equal(lhs: Factor | Term, rhs: Factor | Term) -> Cmp:
    return Cmp(_term(lhs), "==", _term(rhs))


def not_equal(lhs: Factor | Term, rhs: Factor | Term) -> Cmp:
    return Cmp(_term(lhs), "!=", _term(rhs))


def one_of(lhs: Factor | Term, values: tuple[int, ...]) -> Cmp:
    return Cmp(_term(lhs), "in", tuple(values))


@dataclass(frozen=True)
class Rule:
    """One named constraint. ``when`` limits it to configs where that comparison holds."""

    id: str
    name: str
    check: Cmp
    why: str
    when: Cmp | None = None

    def applies(self, env: dict[str, int]) -> bool:
        return self.when is None or self.when.holds(env)

    def formula(self) -> str:
        suffix = f" when {self.when.formula()}" if self.when else ""
        return self.check.formula() + suffix

    def cpp(self) -> str:
        if self.when is None:
            return self.check.cpp()
        return f"!{self.when.cpp()} || {self.check.cpp()}"

    def static_assert(self) -> str:
        message = f"{self.id} {self.name}: {self.formula()}".replace('"', "'")
        return f'static_assert({self.cpp()}, "{message}");'


@dataclass(frozen=True)
class Violation:
    """A broken rule and the numbers that break it."""

    rule: Rule
    detail: str

    def __str__(self) -> str:
        return f"{self.rule.id} {self.rule.name}: {self.detail} ({self.rule.why})"


def violations(rules: tuple[Rule, ...], env: dict[str, int]) -> list[Violation]:
    """Every rule of ``rules`` that ``env`` breaks, in table order (never only the first)."""
    found = []
    for rule in rules:
        if rule.applies(env) and not rule.check.holds(env):
            detail = rule.check.explain(env)
            if rule.when is not None:
                detail += f", required when {rule.when.formula()}"
            found.append(Violation(rule, detail))
    return found
