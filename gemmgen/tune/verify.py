"""Verifying: float64 NumPy reference, relative error against a K-dependent bound, shape sweep."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable

import numpy as np

from ..model.dtypes import FP8_DTYPES, UNIT_ROUNDOFF
from ..runtime.arrays import numpy_dtype
from .fp8_verify import fp8_tolerance

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
    # Ragged in M, N and K but with 16-byte-aligned rows (multiples of 8 elements), so kernels
    # that read through TMA take their fast path on them; the last case has alpha = 0.
    (200, 136, 104, 1.0, 0.0),
    (264, 520, 200, 1.5, -0.75),
    (8, 8, 8, 1.0, 0.0),
    (136, 72, 40, 0.0, 2.0),
)
ALIGNED_CASES = CASES[12:]
"""The cases whose leading dimensions are multiples of 8 elements (16 bytes for fp16)."""

# (batch, M, N, K, alpha, beta, broadcast B): batches of odd shapes; B may be one 2-D matrix.
BATCH_CASES: tuple[tuple, ...] = (
    (3, 127, 65, 33, 1.0, 0.0, False),
    (4, 65, 129, 70, 0.5, 1.5, True),
    (3, 200, 136, 104, 1.0, 0.5, True),
)

Runner = Callable[..., np.ndarray]
"""``run(A, B, C, alpha, beta, bias) -> C``: computes on a device copy of the given C (which
holds NaN where beta == 0, so unwritten elements fail) and returns the result as NumPy."""


def tolerance(k: int, dtype: str = "fp32", acc: str = "fp32", out: str = "fp32",
              math_: str = "native") -> float:
    """Bound on ||C - ref|| / ||ref||: 8 u_acc sqrt(K + 1) + 4 u_in + 2 u_out.

    Random-sign sums of K products have an error that grows like sqrt(K) u_acc (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.5); the factor 8 covers
    alpha, beta and the blocked summation order. u_in counts inputs the kernel rounds but the
    reference does not (tf32: float32 data rounded to 10 bits); u_out the rounding of C to fp16
    or bf16. fp32 at K = 4096: 3.1e-5; tf32: 2e-3; bf16 out: 7.8e-3. A missing K tile or a
    wrong element gives errors of 1e-2 and more. ``math_="3xtf32"`` (big + small tf32 parts)
    claims float32 accuracy: it is held to the fp32 bound (u_in = 0). FP8 dtypes take
    ``gemmgen.tune.fp8_verify.fp8_tolerance`` (``math_``: the kernel's accumulation, "fast"
    or "promoted every ...").
    """
    if dtype in FP8_DTYPES:  # FP8 products are exact in fp32: fp8_verify's bound
        return fp8_tolerance(k, out, math_ == "fast")
    u_in = UNIT_ROUNDOFF["tf32"] if dtype == "tf32" and math_ != "3xtf32" else 0.0
    u_out = UNIT_ROUNDOFF[out] if out != "fp32" else 0.0
    return 8 * UNIT_ROUNDOFF[acc] * math.sqrt(k + 1) + 4 * u_in + 2 * u_out


TANH_APPROX_ERROR = 2.0 ** -16
"""Bound on the absolute error of ``tanh.approx.f32``, which the kernels' GELU uses when C is
fp16 or bf16 (``EPI_FAST_TANH``): measured over every float on sm_75 and later, 1.113e-5
relative (N. Juffa, NVIDIA forums, "Hardware-accelerated tanh() on Turing", 2021), and
|tanh| <= 1; 2^-16 = 1.53e-5 leaves 37% above that. The PTX ISA promises only 2^-11, which
would let a missing bias pass on a lone x = -7."""
HALF_SUBNORMAL = {"fp16": 2.0 ** -25, "bf16": 2.0 ** -134}
"""Half the smallest subnormal of a 16-bit C: the absolute rounding error of a value that
underflows (GELU of a large negative x, about -1e-11 at x = -7, is stored as 0 in fp16)."""


def activation_slack(epilogue: str, out: str, pre, ref) -> float:
    """What a 16-bit C's fast GELU adds to ``tolerance``'s relative bound, given the float64
    pre-activation ``pre`` (alpha A B + beta C + bias) and the reference ``ref`` = gelu(pre).

    Per element, gelu(x) = 0.5 x (1 + tanh(u)) is off by at most 0.5 |x| TANH_APPROX_ERROR, and
    a result below the smallest normal by up to HALF_SUBNORMAL[out]; in norm, relative to
    ||ref||: (0.5 TANH_APPROX_ERROR ||pre|| + sqrt(size) HALF_SUBNORMAL) / ||ref||. This is
    small for any matrix with positive values (||pre|| / ||ref|| is about 1.4 for random
    normal data: +1.1e-5) and large for a lone negative pre-activation (x = -3.4: ref = -9.1e-4,
    where the approximation leaves 4e-3 relative). 0 for other epilogues, an fp32 C and an
    all-zero reference (``compare`` then needs an exact zero). NaN never passes: ``compare``
    gives it inf, which ``check`` fails whatever the bound.
    """
    if not epilogue.endswith("gelu") or out not in HALF_SUBNORMAL or pre.size == 0:
        return 0.0
    xp = _xp(ref)
    norm = float(xp.linalg.norm(ref))
    slack = 0.5 * TANH_APPROX_ERROR * float(xp.linalg.norm(pre)) + \
        math.sqrt(pre.size) * HALF_SUBNORMAL[out]
    return slack / norm if norm else 0.0  # an all-zero ref is held to an all-zero result


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
    path: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _xp(x):
    """NumPy, or CuPy for CuPy arrays (references and comparisons then stay on the GPU)."""
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        import cupy
        return cupy
    return np


def reference(A, B, C, alpha: float, beta: float, bias=None, epilogue: str = "none"):
    """act(alpha * A @ B + beta * C + bias) in float64, batched like np.matmul, with BLAS
    semantics: A and B are not read when alpha == 0 and C is not read when beta == 0; bias is
    added per column when the epilogue has one; act (``activation``) is ReLU or GELU (tanh
    form) when the epilogue names it. NumPy arrays, or CuPy arrays (computed on the GPU)."""
    xp = _xp(A)
    shape = (*np.broadcast_shapes(A.shape[:-2], B.shape[:-2]), A.shape[-2], B.shape[-1])
    if alpha == 0:
        out = xp.zeros(shape)
    else:
        out = alpha * xp.matmul(A.astype(xp.float64), B.astype(xp.float64))
    if beta != 0:
        out = out + beta * C.astype(xp.float64)
    if epilogue.startswith("bias"):
        out = out + bias.astype(xp.float64)
    return activation(out, epilogue)


def activation(x, epilogue: str):
    """The epilogue's activation of the float64 pre-activation ``x`` (alpha A B + beta C +
    bias): ReLU, GELU (tanh form), or ``x`` itself. NumPy or CuPy."""
    xp = _xp(x)
    if epilogue.endswith("relu"):
        return xp.maximum(x, 0.0)
    if epilogue.endswith("gelu"):
        return 0.5 * x * (1 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return x


def in_layout(x: np.ndarray, col: bool) -> np.ndarray:
    """The same values with each matrix stored column-major (Fortran order) when ``col``."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2) if col else x


def compare(out, ref) -> tuple[float, tuple[int, int] | None]:
    """(relative Frobenius error, index of the worst element); NaN or inf anywhere gives inf
    and the first non-finite index. An all-zero reference needs an all-zero result. NumPy or
    CuPy arrays (both of one kind)."""
    if out.shape != ref.shape:
        raise ValueError(f"result shape {out.shape} differs from reference {ref.shape}")
    if out.size == 0:
        return 0.0, None
    xp = _xp(ref)
    out = xp.asarray(out).astype(xp.float64)
    bad = ~xp.isfinite(out)
    if bool(bad.any()):
        return math.inf, tuple(int(i) for i in xp.argwhere(bad)[0])
    diff = xp.abs(out - ref)
    worst = tuple(int(i) for i in np.unravel_index(int(xp.argmax(diff)), diff.shape))
    norm = float(xp.linalg.norm(ref))
    err = float(xp.linalg.norm(diff))
    if norm == 0:
        return (0.0 if err == 0 else math.inf), worst
    return err / norm, worst


def random_operands(rng: np.random.Generator, m: int, n: int, k: int, beta: float,
                    dtype: str = "fp32", out: str = "fp32", batch: int | None = None,
                    broadcast_b: bool = False, b_dtype: str | None = None):
    """Fresh standard-normal A stored as ``dtype`` and B as ``b_dtype`` (default ``dtype``),
    rounded from float32, and C as ``out``, 3-D when ``batch`` (B 2-D when ``broadcast_b``);
    C is all NaN when beta == 0."""
    a_t, b_t, c = numpy_dtype(dtype), numpy_dtype(b_dtype or dtype), numpy_dtype(out)
    lead = (batch,) if batch else ()
    A = rng.standard_normal((*lead, m, k), dtype=np.float32).astype(a_t)
    B = rng.standard_normal((k, n) if broadcast_b else (*lead, k, n), dtype=np.float32).astype(b_t)
    if beta == 0:
        C = np.full((*lead, m, n), np.nan, dtype=np.float32).astype(c)
    else:
        C = rng.standard_normal((*lead, m, n), dtype=np.float32).astype(c)
    return A, B, C


def check(name: str, run: Runner, m: int, n: int, k: int, alpha: float, beta: float,
          rng: np.random.Generator, dtype: str = "fp32", acc: str = "fp32", out: str = "fp32",
          layout: str = "rrr", epilogue: str = "none", batch: int | None = None,
          broadcast_b: bool = False, math_: str = "native", b_dtype: str | None = None
          ) -> CaseResult:
    """Run one case on fresh random inputs, laid out as ``layout`` says, and compare with the
    float64 reference computed on the same (rounded) inputs with the same epilogue."""
    A, B, C = random_operands(rng, m, n, k, beta, dtype, out, batch, broadcast_b, b_dtype)
    if alpha == 0 and A.size and B.size:  # BLAS: A and B are not read; NaN proves it
        A.reshape(-1)[::7] = np.nan
        B.reshape(-1)[::5] = np.nan
    bias = rng.standard_normal(n, dtype=np.float32).astype(numpy_dtype(out))
    has_bias = epilogue.startswith("bias")
    pre = reference(A, B, C, alpha, beta, bias, "bias" if has_bias else "none")
    ref = activation(pre, epilogue)
    result = run(in_layout(A, layout[0] == "c"), in_layout(B, layout[1] == "c"),
                 in_layout(C.copy(), layout[2] == "c"), alpha, beta, bias if has_bias else None)
    err, worst = compare(np.asarray(result), ref)
    tol = tolerance(k, dtype, acc, out, math_) + activation_slack(epilogue, out, pre, ref)
    label = f"{name}[{layout},{epilogue}{f',b{batch}' if batch else ''}]"
    return CaseResult(label, dtype, m, n, k, alpha, beta, err, tol, worst,
                      bool(math.isfinite(err) and err <= tol))


def sweep(name: str, run: Runner, cases=CASES, seed: int | None = None, dtype: str = "fp32",
          acc: str = "fp32", out: str = "fp32", layout: str = "rrr", epilogue: str = "none",
          batch_cases=(), path_of=None, math_: str = "native", b_dtype: str | None = None
          ) -> list[CaseResult]:
    """``check`` every case of ``cases`` and of ``batch_cases`` with a generator seeded by
    ``seed`` (random if None). ``path_of()``, when given, names the code path the last run
    took (a TMA kernel's "tma" or "fallback: ..."); it is recorded in each result."""
    rng = np.random.default_rng(seed)
    common = dict(dtype=dtype, acc=acc, out=out, layout=layout, epilogue=epilogue, math_=math_,
                  b_dtype=b_dtype)
    res = []
    for case in cases:
        r = check(name, run, *case, rng, **common)
        res.append(replace(r, path=path_of()) if path_of else r)
    for batch, m, n, k, alpha, beta, bcast in batch_cases:
        r = check(name, run, m, n, k, alpha, beta, rng, batch=batch, broadcast_b=bcast, **common)
        res.append(replace(r, path=path_of()) if path_of else r)
    return res


def sweep_kernel(name: str, kernel, cases=CASES, seed: int | None = None,
                 batch_cases=BATCH_CASES) -> list[CaseResult]:
    """``sweep`` a built Kernel with the dtypes, layout and epilogue of its config. A kernel
    specialized to a shape runs that shape (odd values fill unspecialized extents)."""
    c = kernel.config
    if c.specialized:
        cases = [(c.m or 127, c.n or 129, c.k or 131, 1.5, -0.5), (c.m or 65, c.n or 33,
                                                                   c.k or 17, 1.0, 0.0)]
        batch_cases = [(3, c.m or 65, c.n or 33, c.k or 17, 1.0, 0.0, False)]
    path_of = (lambda: kernel.last_path) if hasattr(kernel, "last_path") else None
    math_ = c.accumulation if c.dtype in FP8_DTYPES else getattr(c, "math", "native")
    return sweep(name, device_runner(kernel), cases, seed, c.dtype, c.acc, c.out, c.layout,
                 c.epilogue, batch_cases, path_of, math_, getattr(c, "b_dtype", None))


def device_runner(kernel) -> Runner:
    """A Runner for a built ``Kernel``: NumPy operands through the kernel's host path, which
    copies C (poisoned or random) to the GPU, so the kernel's own writes are what comes back."""
    def run(A, B, C, alpha, beta, bias=None):
        return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias)
    return run
