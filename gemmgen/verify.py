"""Verifying: float64 NumPy reference, relative error against a K-dependent bound, shape sweep."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

UNIT_ROUNDOFF = {"fp32": float(np.finfo(np.float32).eps) / 2}

# (M, N, K, alpha, beta): tiny, prime, tall, skinny, ragged, K = 0, and beta = 0 over NaN.
CASES: tuple[tuple[int, int, int, float, float], ...] = (
    (1, 1, 1, 1.0, 0.0),
    (127, 129, 131, 1.0, 0.0),
    (127, 129, 131, 1.5, -0.75),
    (4099, 3, 257, 1.0, 0.0),
    (3, 4099, 257, -2.0, 1.0),
    (1, 1000, 70, 0.5, 0.0),
    (256, 256, 255, 1.0, 0.5),
    (200, 300, 17, 1.0, 0.0),
    (64, 64, 0, 1.0, 0.0),
    (64, 64, 0, 1.0, 2.0),
    (513, 1025, 1023, 0.25, 0.0),
    (1024, 1024, 1024, 1.0, 1.0),
)

Runner = Callable[[np.ndarray, np.ndarray, np.ndarray, float, float], np.ndarray]
"""``run(A, B, C, alpha, beta) -> C``: computes on a device copy of the given C (which holds
NaN where beta == 0, so unwritten elements fail) and returns the result as a NumPy array."""


def tolerance(k: int, dtype: str = "fp32") -> float:
    """Bound on ||C - ref|| / ||ref||: 8 u sqrt(K + 1), u the unit roundoff of ``dtype``.

    Random-sign sums of K products have an error that grows like sqrt(K) u (Higham, Accuracy
    and Stability of Numerical Algorithms, 2nd ed., section 3.5); the factor 8 covers alpha,
    beta and the blocked summation order. fp32 at K = 4096: 3.1e-5; a missing K tile or
    a wrong element gives errors of 1e-2 and more.
    """
    return 8 * UNIT_ROUNDOFF[dtype] * math.sqrt(k + 1)


@dataclass(frozen=True)
class CaseResult:
    """One verification case. ``rel_error`` is ||C - ref||_F / ||ref||_F (inf when C holds a
    non-finite value); ``worst`` the (row, col) of the largest absolute difference."""

    kernel: str
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    rel_error: float
    tol: float
    worst: tuple[int, int] | None
    passed: bool

    def as_dict(self) -> dict:
        return asdict(self)


def reference(A: np.ndarray, B: np.ndarray, C: np.ndarray | None, alpha: float,
              beta: float) -> np.ndarray:
    """alpha * A @ B + beta * C in float64; C is not read when beta == 0 (BLAS semantics)."""
    out = alpha * (A.astype(np.float64) @ B.astype(np.float64))
    if beta != 0:
        out += beta * C.astype(np.float64)
    return out


def compare(out: np.ndarray, ref: np.ndarray) -> tuple[float, tuple[int, int] | None]:
    """(relative Frobenius error, index of the worst element); NaN or inf anywhere gives inf
    and the first non-finite index. An all-zero reference needs an all-zero result."""
    if out.shape != ref.shape:
        raise ValueError(f"result shape {out.shape} differs from reference {ref.shape}")
    if out.size == 0:
        return 0.0, None
    bad = ~np.isfinite(out)
    if bad.any():
        return math.inf, tuple(int(i) for i in np.argwhere(bad)[0])
    diff = np.abs(out.astype(np.float64) - ref)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))
    norm = float(np.linalg.norm(ref))
    err = float(np.linalg.norm(diff))
    if norm == 0:
        return (0.0 if err == 0 else math.inf), worst
    return err / norm, worst


def random_operands(rng: np.random.Generator, m: int, n: int, k: int, beta: float):
    """Fresh standard-normal float32 A, B and C; C is all NaN when beta == 0 (poison)."""
    A = rng.standard_normal((m, k), dtype=np.float32)
    B = rng.standard_normal((k, n), dtype=np.float32)
    if beta == 0:
        C = np.full((m, n), np.nan, dtype=np.float32)
    else:
        C = rng.standard_normal((m, n), dtype=np.float32)
    return A, B, C


def check(name: str, run: Runner, m: int, n: int, k: int, alpha: float, beta: float,
          rng: np.random.Generator, dtype: str = "fp32") -> CaseResult:
    """Run one case on fresh random inputs and compare with the float64 reference."""
    A, B, C = random_operands(rng, m, n, k, beta)
    ref = reference(A, B, C, alpha, beta)
    out = run(A, B, C.copy(), alpha, beta)
    err, worst = compare(np.asarray(out), ref)
    tol = tolerance(k, dtype)
    return CaseResult(name, m, n, k, alpha, beta, err, tol, worst, bool(err <= tol))


def sweep(name: str, run: Runner, cases=CASES, seed: int | None = None) -> list[CaseResult]:
    """``check`` every case of ``cases`` with a generator seeded by ``seed`` (random if None)."""
    rng = np.random.default_rng(seed)
    return [check(name, run, *case, rng) for case in cases]


def device_runner(kernel) -> Runner:
    """A Runner for a built ``Kernel``: operands go to the GPU as PyCUDA GPUArrays, C (poisoned
    or random) included, so the kernel's own writes are what comes back."""
    def run(A, B, C, alpha, beta):
        from pycuda import gpuarray
        a, b, c = (gpuarray.to_gpu(x) for x in (A, B, C))
        kernel(a, b, c, alpha=alpha, beta=beta)
        return c.get()
    return run
