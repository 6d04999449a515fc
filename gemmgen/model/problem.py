"""A GEMM problem as a list of them is kept: the shapes file ``gemmgen tune --shapes`` reads and
``gemmgen.torch.record`` writes (a JSON list of objects)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..files import read_document

DTYPES = ("fp16", "bf16", "fp32", "tf32")
LAYOUTS = tuple(a + b + c for a in "rc" for b in "rc" for c in "rc")


class ShapesError(ValueError):
    """A shapes file gemmgen cannot read; the message names the file and the entry."""


@dataclass(frozen=True)
class Problem:
    """One GEMM a model runs: C (M x N) = A (M x K) @ B (K x N), dtype "fp16", "bf16" or
    "fp32", ``layout`` (A, B, C each r or c), ``batch`` (1 for a matrix product) and the
    number of times it ran (``count``)."""

    dtype: str
    m: int
    n: int
    k: int
    layout: str
    batch: int = 1
    count: int = 1

    def __post_init__(self):
        problems = [f"{f.name} must be a positive int" for f in fields(self)
                    if f.name in ("m", "n", "k", "batch", "count")
                    and (not isinstance(getattr(self, f.name), int)
                         or isinstance(getattr(self, f.name), bool) or getattr(self, f.name) < 1)]
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.layout not in LAYOUTS:
            problems.append(f"layout must be three of r/c (e.g. rcr), got {self.layout!r}")
        if problems:
            raise ValueError("; ".join(problems))


def save_problems(problems: list[Problem], path: str | Path) -> Path:
    """Write ``problems`` as the JSON list ``gemmgen tune --shapes`` reads."""
    path = Path(path)
    path.write_text(json.dumps([asdict(p) for p in problems], indent=1) + "\n")
    return path


def load_problems(path: str | Path) -> list[Problem]:
    """The problems of a shapes file: a JSON list of objects with dtype, m, n, k and layout
    (batch and count optional). Raises ``ShapesError`` naming the file and the entry."""
    data = read_document(path, ShapesError, "shapes file")
    if not isinstance(data, list):
        raise ShapesError(f"shapes file {path} must hold a JSON list of problems")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ShapesError(f"{path}: entry {i} is not an object")
        try:
            out.append(Problem(**item))
        except (TypeError, ValueError) as exc:
            raise ShapesError(f"{path}: entry {i}: {exc}") from None
    return out
