"""FP8 launch arguments: describe and check A, B, the scales, D and bias of an FP8 GEMM, and the
scaling the scales' shapes imply. Every error is an ``OperandError`` naming the argument.

Shapes follow the operands: A is M x K and B is K x N (B column-major, K x N, is the transpose
of an N x K row-major weight, as ``torch._scaled_mm`` takes it). A scale is

- a scalar (a Python number or a one-element array): one scale for the whole operand;
- a vector: A's M values ((M,) or (M, 1)), B's N values ((N,) or (1, N)): row-wise;
- a block grid of the operand's shape in 128-blocks: A's (M, ceil(K/128)) for 1 x 128 blocks,
  B's (ceil(K/128), ceil(N/128)) for 128 x 128 blocks (DeepSeek-V3's N x K weight scales
  ``weight_scale_inv`` of shape (ceil(N/128), ceil(K/128)) are passed transposed, ``.t()``).

Both scalars: tensor scaling. A block grid for B: block scaling (A's scale may be a grid, a
vector or a scalar). Otherwise row scaling (a scalar broadcast with stride 0). Scales are
float32 dequantization factors: D = sum_k (A sa)(B sb). Nothing here touches the GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...model.dtypes import FP8_DTYPES
from ..arrays import array_dtype, dtype_name, numpy_dtype
from . import (Operand, OperandError, check_int32, check_one_device, contiguous_strides,
               describe, is_number)

WIDE_OUT_DTYPES = ("bf16", "fp16", "fp32")
"""D's dtypes that hold the GEMM's values as they are (the grouped FP8 kernels write these)."""
OUT_DTYPES = (*WIDE_OUT_DTYPES, "e4m3")
BLOCK = 128


@dataclass(frozen=True)
class ScaleArg:
    """One scale argument: ``kind`` "number" (a Python real), "numpy", "torch" or "cai";
    its shape, strides (elements) and device address (0 for numbers and host arrays)."""

    name: str
    kind: str
    obj: object
    shape: tuple
    strides: tuple
    ptr: int = 0

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def describe_scale(x, name: str, max_dims: int = 2) -> ScaleArg:
    """Check that ``x`` is a real number or a float32 array of at most ``max_dims`` dimensions
    (NumPy, PyTorch CUDA tensor, or ``__cuda_array_interface__``). Raises ``OperandError``
    naming ``name``."""
    if is_number(x):
        if not math.isfinite(float(x)):
            raise OperandError(f"{name} = {x!r} is not finite")
        return ScaleArg(name, "number", float(x), (), ())
    kind, ptr = None, 0
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr"):
        if str(x.dtype) != "torch.float32":
            raise OperandError(f"{name} has dtype {x.dtype}; scales are torch.float32")
        if not x.is_cuda:
            raise OperandError(f"{name} is a CPU tensor: move it to the GPU with the operands")
        kind, shape, strides, ptr = "torch", tuple(x.shape), tuple(x.stride()), x.data_ptr()
    elif isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise OperandError(f"{name} has dtype {x.dtype}; scales are float32")
        x = np.ascontiguousarray(x)  # uploaded as it is read
        kind, shape, strides = "numpy", x.shape, tuple(s // 4 for s in x.strides)
    elif hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        if np.dtype(cai["typestr"]) != np.float32:
            raise OperandError(f"{name} has dtype {np.dtype(cai['typestr'])}; scales are float32")
        shape = tuple(cai["shape"])
        raw = cai.get("strides") or contiguous_strides(shape, 4)
        kind, strides, ptr = "cai", tuple(s // 4 for s in raw), int(cai["data"][0] or 0)
    else:
        raise OperandError(f"{name}: expected a number or a float32 array (NumPy, PyTorch, "
                           f"CuPy); got {type(x).__name__}")
    if len(shape) > max_dims:
        what = "a scalar, a vector or a 2-D block grid" if max_dims == 2 else \
            f"at most {max_dims}-D"
        raise OperandError(f"{name} must be {what}; got shape {shape}")
    return ScaleArg(name, kind, x, tuple(shape), strides, ptr)


@dataclass(frozen=True)
class ScaleLayout:
    """How the kernel reads one scale: strides (elements) ``s0`` (per row of A; per column of
    B for row scaling, per 128-column block of B for block scaling) and ``s1`` (per K block)."""

    s0: int = 0
    s1: int = 0


def _one_stride(arg: ScaleArg) -> int:
    """The stride along a vector's (or a 1 x L / L x 1 matrix's) values."""
    if len(arg.shape) == 1:
        return arg.strides[0]
    return arg.strides[0] if arg.shape[1] == 1 else arg.strides[1]


def scaling_of(sa: ScaleArg, sb: ScaleArg, m: int, n: int, k: int) -> tuple:
    """(scaling, ScaleLayout of scale_a, ScaleLayout of scale_b) the two scales imply (see the
    module docstring). Raises ``OperandError`` naming the scale whose shape fits none."""
    kb, nb = max(1, math.ceil(k / BLOCK)), math.ceil(n / BLOCK)
    a_kind, a_lay = _a_kind(sa, m, kb)
    b_kind, b_lay = _b_kind(sb, n, kb, nb, m, k)
    if b_kind == "block":
        return "block", a_lay, b_lay
    if a_kind == "block" and kb > 1:
        raise OperandError(f"scale_a is a 1 x 128 block grid {sa.shape}, but scale_b is not a "
                           f"128 x 128 block grid: blockwise scaling needs scale_b of shape "
                           f"(ceil(K/128), ceil(N/128)) = ({kb}, {nb}); got {sb.shape}")
    if a_kind == "one" and b_kind == "one":
        return "tensor", ScaleLayout(), ScaleLayout()
    return "row", ScaleLayout(a_lay.s0), b_lay


def _a_kind(sa: ScaleArg, m: int, kb: int) -> tuple:
    if sa.size == 1:
        return "one", ScaleLayout()
    if sa.shape in ((m,), (m, 1)):
        return "row", ScaleLayout(_one_stride(sa), 0)
    if sa.shape == (m, kb):
        return "block", ScaleLayout(sa.strides[0], sa.strides[1])
    raise OperandError(f"scale_a has shape {sa.shape}; for A of {m} x K it must be a scalar, "
                       f"M = {m} values ((M,) or (M, 1): row-wise) or (M, ceil(K/128)) = "
                       f"({m}, {kb}) (1 x 128 blocks)")


def _b_kind(sb: ScaleArg, n: int, kb: int, nb: int, m: int, k: int) -> tuple:
    if sb.size == 1:
        return "one", ScaleLayout()
    if sb.shape in ((n,), (1, n)):
        return "row", ScaleLayout(_one_stride(sb), 0)
    if sb.shape == (kb, nb):
        return "block", ScaleLayout(sb.strides[1], sb.strides[0])
    raise OperandError(f"scale_b has shape {sb.shape}; for B of K x N = {k} x {n} it must be "
                       f"a scalar, N = {n} values ((N,) or (1, N): row-wise) or "
                       f"(ceil(K/128), ceil(N/128)) = ({kb}, {nb}) (128 x 128 blocks; a "
                       f"(ceil(N/128), ceil(K/128)) weight scale is passed as its .t())")


@dataclass(frozen=True)
class Fp8Args:
    """Checked operands of D = act(dequant(A @ B) + bias): A (M x K) and B (K x N) FP8, with
    their dtypes and whether each is K-major; the scales and the scaling they imply; D and bias
    (or None) in ``out``."""

    a: Operand
    b: Operand
    a_dtype: str
    b_dtype: str
    m: int
    n: int
    k: int
    a_k_major: bool
    b_k_major: bool
    scale_a: ScaleArg
    scale_b: ScaleArg
    scaling: str
    a_layout: ScaleLayout
    b_layout: ScaleLayout
    d: Operand | None
    bias: Operand | None
    out: str

    @property
    def lda(self) -> int:
        return self.a.lds["r" if self.a_k_major else "c"]

    @property
    def ldb(self) -> int:
        return self.b.lds["c" if self.b_k_major else "r"]


def fp8_dtype_of(x, name: str, given: str | None) -> str:
    """The FP8 dtype of operand ``x``: its own (torch float8, ml_dtypes float8), else
    ``given`` (for uint8 bytes: CuPy has no float8). Raises ``OperandError`` naming ``name``."""
    own = array_dtype(x)
    if own in FP8_DTYPES:
        if given and given != own:
            raise OperandError(f"{name} holds {own}, but dtype={given!r} was given")
        return own
    is_bytes = getattr(x, "dtype", None) is not None and str(x.dtype) in ("uint8", "torch.uint8")
    if is_bytes and given in FP8_DTYPES:
        return given
    hint = " (uint8 bytes need dtype='e4m3' or 'e5m2')" if is_bytes else ""
    raise OperandError(f"{name} has dtype {getattr(x, 'dtype', type(x).__name__)}; FP8 GEMMs take "
                       f"float8_e4m3fn or float8_e5m2{hint}")


def check_fp8(A, B, scale_a, scale_b, D=None, bias=None, out: str | None = None,
              dtype=None) -> Fp8Args:
    """Describe and cross-check an FP8 GEMM's arguments. ``dtype``: the FP8 dtype of uint8
    operands ("e4m3", "e5m2", or a pair (A's, B's)); ``out``: D's dtype (bf16, fp16, fp32;
    default D's, else bf16). Raises ``OperandError`` naming the argument (PyTorch or CuPy
    arguments on different GPUs, sizes beyond 2^31 - 1 too)."""
    da, db = (dtype if isinstance(dtype, (tuple, list)) else (dtype, dtype))
    a_dt, b_dt = fp8_dtype_of(A, "A", da), fp8_dtype_of(B, "B", db)
    a, b = describe(A, "A", a_dt), describe(B, "B", b_dt)
    for op in (a, b):
        if op.batch is not None:
            raise OperandError(f"{op.name} must be a 2-D matrix (FP8 GEMMs take no batch); got "
                               f"a batch of {op.batch}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise OperandError(f"A is {m}x{k} and B is {k2}x{n}: A's columns ({k}) must equal "
                           f"B's rows ({k2})")
    sa, sb = describe_scale(scale_a, "scale_a"), describe_scale(scale_b, "scale_b")
    scaling, a_lay, b_lay = scaling_of(sa, sb, m, n, k)
    out = _out_dtype(D, out)
    d = None
    if D is not None:
        d = describe(D, "D", out)
        if d.shape != (m, n) or d.batch is not None:
            raise OperandError(f"D has shape {d.shape}; A @ B is {m}x{n}")
        if "r" not in d.lds:
            raise OperandError("D must be row-major (the FP8 kernels store rows of N)")
        if d.readonly:
            raise OperandError("D is read-only; the kernel writes its result there")
    bias_op = None
    if bias is not None:
        bias_dt = "bf16" if out == "e4m3" else out  # an e4m3 D's bias is bf16
        bias_op = describe(bias.reshape(1, -1) if hasattr(bias, "reshape") else bias, "bias",
                           bias_dt)
        if bias_op.shape != (1, n):
            raise OperandError(f"bias must hold N = {n} values of {bias_dt}; got shape "
                               f"{bias_op.shape}")
    kinds = {op.kind == "numpy" for op in (a, b, d, bias_op) if op is not None}
    kinds |= {s.kind == "numpy" for s in (sa, sb) if s.kind != "number"}
    if len(kinds) > 1:
        raise OperandError("A, B, the scales, D and bias must all be NumPy arrays (copied for "
                           "you) or all device arrays")
    check_one_device({"A": A, "B": B, "scale_a": scale_a, "scale_b": scale_b, "D": D,
                      "bias": bias})
    args = Fp8Args(a, b, a_dt, b_dt, m, n, k, "r" in a.lds, "c" in b.lds, sa, sb, scaling,
                   a_lay, b_lay, d, bias_op, out)
    check_int32(M=m, N=n, K=k, lda=args.lda, ldb=args.ldb,
                **({"ldd": d.lds["r"]} if d is not None else {}))
    return args


def _out_dtype(D, out: str | None) -> str:
    """D's dtype: ``out`` (bf16, fp16, fp32, or e4m3 for a quantized D; torch dtypes and NumPy
    names accepted), else D's own, else bf16. Raises ``OperandError`` naming the one that is
    none of these."""
    if out is None and D is None:
        return "bf16"
    name = dtype_name(out) if out is not None else array_dtype(D)
    if name not in OUT_DTYPES:
        raise OperandError(
            f"out_dtype must be one of bf16, fp16, fp32, e4m3 (or the torch dtypes); got {out!r}"
            if out is not None else
            f"D has dtype {getattr(D, 'dtype', None)}; FP8 GEMMs write bf16, fp16, fp32 or "
            f"e4m3")
    return name


def host_scale(arg: ScaleArg) -> np.ndarray:
    """A host scale as the float32 array the kernel reads (a number: one element)."""
    if arg.kind == "number":
        return np.array([arg.obj], dtype=np.float32)
    return np.ascontiguousarray(arg.obj, dtype=np.float32)


def as_bytes(x: np.ndarray) -> np.ndarray:
    """A host FP8 array as uint8 bytes (the layout kept)."""
    return x.view(np.uint8) if x.dtype != np.uint8 else x


__all__ = ["Fp8Args", "OperandError", "ScaleArg", "ScaleLayout", "check_fp8",
           "describe_scale", "fp8_dtype_of", "host_scale", "numpy_dtype", "scaling_of"]
