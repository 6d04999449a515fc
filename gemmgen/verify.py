"""Verifying: float64 NumPy reference, relative error against a K-dependent bound, shape sweep."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from .dtypes import UNIT_ROUNDOFF, numpy_dtype

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


def tolerance(k: int, dtype: str = "fp32", acc: str = "fp32", out: str = "fp32") -> float:
    """Bound on ||C - ref|| / ||ref||: 8 u_acc sqrt(K + 1) + 4 u_in + 2 u_out.

    Random-sign sums of K products have an error that grows like sqrt(K) u_acc (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.5); the factor 8 covers
    alpha, beta and the blocked summation order. u_in counts inputs the kernel rounds but the
    reference does not (tf32: float32 data rounded to 10 bits); u_out the rounding of C to fp16
    or bf16. fp32 at K = 4096: 3.1e-5; tf32: 2e-3; bf16 out: 7.8e-3. A missing K tile or a
    wrong element gives errors of 1e-2 and more.
    """
    u_in = UNIT_ROUNDOFF["tf32"] if dtype == "tf32" else 0.0
    u_out = UNIT_ROUNDOFF[out] if out != "fp32" else 0.0
    return 8 * UNIT_ROUNDOFF[acc] * math.sqrt(k + 1) + 4 * u_in + 2 * u_out


@dataclass(frozen=True)
class CaseResult:
    """One verification case. ``rel_error`` is ||C - ref||_F / ||ref||_F (inf when C holds a
    non-finite value); ``worst`` the (row, col) of the largest absolute difference."""

    kernel: str
    dtype: str
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
    out = np.asarray(out).astype(np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        return math.inf, tuple(int(i) for i in np.argwhere(bad)[0])
    diff = np.abs(out - ref)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))
    norm = float(np.linalg.norm(ref))
    err = float(np.linalg.norm(diff))
    if norm == 0:
        return (0.0 if err == 0 else math.inf), worst
    return err / norm, worst


def random_operands(rng: np.random.Generator, m: int, n: int, k: int, beta: float,
                    dtype: str = "fp32", out: str = "fp32"):
    """Fresh standard-normal A and B stored as ``dtype`` (rounded from float32) and C as
    ``out``; C is all NaN when beta == 0 (poison)."""
    ab, c = numpy_dtype(dtype), numpy_dtype(out)
    A = rng.standard_normal((m, k), dtype=np.float32).astype(ab)
    B = rng.standard_normal((k, n), dtype=np.float32).astype(ab)
    if beta == 0:
        C = np.full((m, n), np.nan, dtype=np.float32).astype(c)
    else:
        C = rng.standard_normal((m, n), dtype=np.float32).astype(c)
    return A, B, C


def check(name: str, run: Runner, m: int, n: int, k: int, alpha: float, beta: float,
          rng: np.random.Generator, dtype: str = "fp32", acc: str = "fp32",
          out: str = "fp32") -> CaseResult:
    """Run one case on fresh random inputs and compare with the float64 reference computed
    on the same (rounded) inputs."""
    A, B, C = random_operands(rng, m, n, k, beta, dtype, out)
    ref = reference(A, B, C, alpha, beta)
    result = run(A, B, C.copy(), alpha, beta)
    err, worst = compare(np.asarray(result), ref)
    tol = tolerance(k, dtype, acc, out)
    return CaseResult(name, dtype, m, n, k, alpha, beta, err, tol, worst, bool(err <= tol))


def sweep(name: str, run: Runner, cases=CASES, seed: int | None = None, dtype: str = "fp32",
          acc: str = "fp32", out: str = "fp32") -> list[CaseResult]:
    """``check`` every case of ``cases`` with a generator seeded by ``seed`` (random if None)."""
    rng = np.random.default_rng(seed)
    return [check(name, run, *case, rng, dtype, acc, out) for case in cases]


def sweep_kernel(name: str, kernel, cases=CASES, seed: int | None = None) -> list[CaseResult]:
    """``sweep`` a built Kernel with the dtypes of its config."""
    c = kernel.config
    return sweep(name, device_runner(kernel), cases, seed, c.dtype, c.acc, c.out)


def device_runner(kernel) -> Runner:
    """A Runner for a built ``Kernel``: operands go to the GPU as PyCUDA GPUArrays, C (poisoned
    or random) included, so the kernel's own writes are what comes back."""
    def run(A, B, C, alpha, beta):
        from pycuda import gpuarray
        a, b, c = (gpuarray.to_gpu(x) for x in (A, B, C))
        kernel(a, b, c, alpha=alpha, beta=beta)
        return c.get().view(C.dtype)  # PyCUDA hands bfloat16 back as opaque 2-byte values
    return run
