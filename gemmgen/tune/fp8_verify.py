"""Verifying FP8 kernels: inputs with a wide dynamic range quantized per the scaling (NumPy,
ml_dtypes), the float64 reference on the dequantized inputs, the error bound, and a sweep of
odd shapes through ``gemmgen.gemm``'s FP8 path (``gemmgen verify --dtype e4m3``).

The bound is ||D - ref|| / ||ref|| <= 2 u_out + PROMOTED_ERROR (+ FAST_ERROR sqrt(K) with fast
accumulation): FP8 products are exact in fp32, so what remains is the tensor core's
accumulation (about 14 bits, within 128 K elements when promoted, over all of K when fast)
and D's rounding. Measured on an H200 with the prototype (fp32 D): promoted 1.0e-4 at every K,
fast 1.8e-4 at K = 300 up to 3.0e-3 at K = 16384 (about 2.3e-5 sqrt(K)).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..model.dtypes import FP8_MAX, UNIT_ROUNDOFF
from ..runtime.arrays import numpy_dtype

PROMOTED_ERROR = 2e-3
FAST_ERROR = 1e-4
"""Per sqrt(K): four times the measured 2.3e-5 sqrt(K) of fast accumulation."""
BLOCK = 128

# (M, N, K): odd and ragged (K neither a multiple of 128 nor of 16), M = 1, decode, square.
CASES = ((257, 131, 300), (1, 2112, 1024), (64, 2112, 7168), (513, 1031, 777), (128, 256, 512),
         (1, 1, 1))


def fp8_tolerance(k: int, out: str, fast: bool) -> float:
    """The bound on the relative error (module docstring)."""
    u_out = UNIT_ROUNDOFF[out] if out != "fp32" else 0.0
    return 2 * u_out + PROMOTED_ERROR + (FAST_ERROR * math.sqrt(k) if fast else 0.0)


def wide_range(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Standard normals times 2^a per row (a in [-2, 2]) and 2^b per 128 columns (b in [-1, 1]):
    a dynamic range that per-tensor scales handle worse than blockwise ones."""
    x = rng.standard_normal((rows, cols))
    a = rng.uniform(-2, 2, (rows, 1))
    b = np.repeat(rng.uniform(-1, 1, (1, -(-cols // BLOCK))), BLOCK, axis=1)[:, :cols]
    return x * np.exp2(a + b)


def quantize_np(x: np.ndarray, groups: tuple, dtype: str = "e4m3") -> tuple:
    """(q, scale) of float64 ``x`` with one scale per group of ``groups`` = (rows, cols) per
    group (None: the whole extent): q = saturate(x / s) in ml_dtypes FP8, s = amax / FP8_MAX,
    float32; scale has one entry per group (shape (ceil(rows/gr), ceil(cols/gc)))."""
    rows, cols = x.shape
    gr, gc = (g or e for g, e in zip(groups, (rows, cols)))
    nr, nc = -(-rows // gr), -(-cols // gc)
    pad = np.zeros((nr * gr, nc * gc))
    pad[:rows, :cols] = np.abs(x)
    amax = pad.reshape(nr, gr, nc, gc).max(axis=(1, 3))
    scale = (np.maximum(amax, np.finfo(np.float32).tiny) / FP8_MAX[dtype]).astype(np.float32)
    full = np.repeat(np.repeat(scale.astype(np.float64), gr, 0), gc, 1)[:rows, :cols]
    q = np.clip(x / full, -FP8_MAX[dtype], FP8_MAX[dtype]).astype(numpy_dtype(dtype))
    return q, scale


def dequantize_np(q: np.ndarray, scale: np.ndarray, groups: tuple) -> np.ndarray:
    rows, cols = q.shape
    gr, gc = (g or e for g, e in zip(groups, (rows, cols)))
    full = np.repeat(np.repeat(scale.astype(np.float64), gr, 0), gc, 1)[:rows, :cols]
    return q.astype(np.float64) * full


GROUPS = {"tensor": ((None, None), (None, None)), "row": ((1, None), (None, 1)),
          "block": ((1, BLOCK), (BLOCK, BLOCK))}
"""Scaling -> (A's groups, B's groups), B as K x N."""


def operands(rng, m: int, n: int, k: int, scaling: str, a_dtype: str = "e4m3",
             b_dtype: str = "e4m3") -> tuple:
    """(A, B, scale_a, scale_b, reference) for ``gemmgen.gemm``: A (M x K) and B (K x N) FP8
    of wide range, the scales in the shapes gemm takes (tensor: numbers; row: (M, 1) and
    (1, N); block: (M, ceil(K/128)) and (ceil(K/128), ceil(N/128))), and the float64
    product of the dequantized inputs."""
    ga, gb = GROUPS[scaling]
    qa, sa = quantize_np(wide_range(rng, m, k), ga, a_dtype)
    qb, sb = quantize_np(wide_range(rng, n, k).T, gb, b_dtype)
    ref = dequantize_np(qa, sa, ga) @ dequantize_np(qb, sb, gb)
    if scaling == "tensor":
        sa, sb = float(sa[0, 0]), float(sb[0, 0])
    return qa, qb, sa, sb, ref


def compare(out: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """(relative Frobenius error, count of non-finite values); inf when any is non-finite."""
    out = np.asarray(out).astype(np.float64)
    bad = int((~np.isfinite(out)).sum())
    if bad:
        return math.inf, bad
    norm = float(np.linalg.norm(ref))
    err = float(np.linalg.norm(out - ref))
    return (err / norm if norm else (0.0 if err == 0 else math.inf)), 0


@dataclass(frozen=True)
class Fp8Result:
    """One verification case of an FP8 kernel."""

    kernel: str
    scaling: str
    accumulation: str
    m: int
    n: int
    k: int
    rel_error: float
    tol: float
    passed: bool
    path: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def sweep_fp8(label: str, kernel, cases=CASES, seed: int | None = None) -> list[Fp8Result]:
    """Each case on fresh wide-range data through ``kernel`` (NumPy operands, D poisoned:
    a non-finite value fails), against the float64 reference."""
    cfg = kernel.config
    rng = np.random.default_rng(seed)
    out = []
    for m, n, k in cases:
        A, B, sa, sb, ref = operands(rng, m, n, k, cfg.scaling, cfg.dtype, cfg.b_dtype)
        D = np.full((m, n), np.nan, dtype=numpy_dtype(cfg.out))
        kernel(A, B, D, scale_a=sa, scale_b=sb)
        err, _ = compare(D, ref)
        tol = fp8_tolerance(k, cfg.out, not cfg.promote)
        out.append(Fp8Result(label, cfg.scaling, cfg.accumulation, m, n, k, err, tol,
                             bool(err <= tol), kernel.last_path))
    return out
