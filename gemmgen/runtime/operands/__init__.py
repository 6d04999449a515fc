"""Launch arguments: describe and check A, B, C and bias (NumPy, PyCUDA GPUArray, PyTorch,
__cuda_array_interface__): dtypes, shapes, layouts, leading dimensions and batch strides.

Pure Python: nothing here touches the GPU, so the checks are tested without one.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ...model.dtypes import FP8_DTYPES
from ..arrays import dtype_name, numpy_dtype, torch_dtype_name

LAYOUT_NAMES = {"r": "row-major", "c": "column-major"}


class OperandError(ValueError):
    """A launch argument has the wrong kind, dtype, rank, shape or layout; the message names it."""


FLOAT32_MAX = float(np.finfo(np.float32).max)
INT32_MAX = 2 ** 31 - 1
"""The largest extent, leading dimension or batch the kernels' ``int`` parameters hold."""


def check_int32(**sizes: int) -> None:
    """Raise ``OperandError`` naming the first of ``sizes`` ({argument name: value}, e.g.
    M=..., lda=...) outside the kernels' 32-bit int parameters (0..2^31 - 1)."""
    for name, value in sizes.items():
        if not 0 <= value <= INT32_MAX:
            raise OperandError(f"{name} = {value} does not fit the kernels' 32-bit int "
                               f"parameter (0..{INT32_MAX}, 2^31 - 1)")


def is_number(x) -> bool:
    """A real number (Python or NumPy scalar, bool excluded), not an array: alpha, beta, or an
    FP8 scale given as one value."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def check_scalar(value, name: str) -> float:
    """``value`` as the kernel's float32 scalar argument ``name`` (alpha or beta).

    Takes a real number: int, float, or a NumPy real scalar (bool excluded). NaN and inf pass
    (BLAS allows them). Raises ``OperandError`` naming ``name`` for a string, a complex
    number, another type, or a finite value beyond float32's range (about 3.4e38).
    """
    if not is_number(value):
        complex_ = isinstance(value, numbers.Complex) and not isinstance(value, (bool, np.bool_))
        kind = "a complex number" if complex_ else type(value).__name__
        raise OperandError(f"{name} must be a real number (float); got {kind} {value!r}")
    out = float(value)
    if math.isfinite(out) and abs(out) > FLOAT32_MAX:
        raise OperandError(f"{name} = {out:g} does not fit the kernel's float32 (at most "
                           f"{FLOAT32_MAX:.3g} in magnitude)")
    return out


def check_scalars(alpha, beta) -> tuple[float, float]:
    """(alpha, beta) as floats for the launch; raises ``OperandError`` naming alpha or beta
    (see ``check_scalar``)."""
    return check_scalar(alpha, "alpha"), check_scalar(beta, "beta")


@dataclass(frozen=True)
class Operand:
    """One matrix argument, 2-D or a 3-D batch. ``kind`` is "numpy" (host, copied), "gpuarray"
    (PyCUDA), "torch" or "cai" (``__cuda_array_interface__``: CuPy, Numba). ``shape`` is the
    (rows, cols) of one matrix; ``lds`` maps each layout the strides allow ("r", "c") to its
    leading dimension in elements; ``batch`` is None for a 2-D operand, and ``batch_stride``
    the elements between matrices (0 broadcasts)."""

    name: str
    kind: str
    obj: object
    shape: tuple[int, int]
    dtype: np.dtype
    lds: dict
    batch: int | None = None
    batch_stride: int = 0
    ptr: int = 0
    readonly: bool = False
    stream: int | None = None


def _raw(x, name: str, dtype: str):
    """(kind, shape, dtype, byte strides, pointer, read-only, stream) of any accepted array."""
    want = numpy_dtype(dtype)
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr"):
        if not x.is_cuda:
            raise OperandError(f"{name} is a CPU torch tensor: move it to the GPU or pass "
                               f"{name}.numpy()")
        if torch_dtype_name(x.dtype) != dtype_name(want):  # tf32: float32 storage
            raise OperandError(f"{name} has dtype {x.dtype}; this kernel takes {dtype}")
        item = x.element_size()
        return ("torch", tuple(x.shape), want, tuple(s * item for s in x.stride()),
                x.data_ptr(), False, None)
    if isinstance(x, np.ndarray):
        got = x.dtype
        out = ("numpy", x.shape, got, x.strides, 0, not x.flags.writeable, None)
    elif hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        shape, got = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides = cai.get("strides") or contiguous_strides(shape, got.itemsize)
        out = ("cai", shape, got, strides, int(cai["data"][0] or 0), bool(cai["data"][1]),
               cai.get("stream"))
    elif type(x).__name__ == "GPUArray" and hasattr(x, "gpudata"):
        got = x.dtype
        out = ("gpuarray", x.shape, got, x.strides, int(x.gpudata) if x.size else 0, False, None)
    else:
        raise OperandError(f"{name}: expected a NumPy array, a PyCUDA GPUArray, a PyTorch "
                           f"tensor or an object with __cuda_array_interface__ (CuPy); got "
                           f"{type(x).__name__}")
    opaque_bf16 = dtype == "bf16" and got.kind == "V" and got.itemsize == 2  # PyCUDA's view
    fp8_bytes = dtype in FP8_DTYPES and got == np.uint8  # CuPy has no float8: bytes, named by dtype=
    if got != want and not opaque_bf16 and not fp8_bytes:
        raise OperandError(f"{name} has dtype {got}; this kernel takes {dtype} ({want}): "
                           f"convert explicitly, e.g. {name}.astype(...)")
    return out


def _layouts(shape, strides, item: int) -> dict:
    """{layout: leading dimension} for every layout that one matrix's strides allow."""
    rows, cols = shape
    s0, s1 = strides
    if rows == 0 or cols == 0:
        return {"r": max(cols, 1), "c": max(rows, 1)}
    out = {}
    if (cols == 1 or s1 == item) and (rows == 1 or (s0 % item == 0 and s0 >= cols * item)):
        out["r"] = s0 // item if rows > 1 else max(cols, 1)
    if (rows == 1 or s0 == item) and (cols == 1 or (s1 % item == 0 and s1 >= rows * item)):
        out["c"] = s1 // item if cols > 1 else max(rows, 1)
    return out


def describe(x, name: str, dtype: str = "fp32") -> Operand:
    """Check that ``x`` is a 2-D matrix, or a 3-D batch of them, holding gemmgen dtype ``dtype``
    (fp32, tf32, fp16, bf16) with a row- or column-major layout, and describe it.

    Raises ``OperandError`` naming ``name`` for an unsupported type, a wrong dtype or rank, or
    strides that are neither row- nor column-major.
    """
    kind, shape, got, strides, ptr, ro, stream = _raw(x, name, dtype)
    if len(shape) not in (2, 3):
        raise OperandError(f"{name} must be a 2-D matrix or a 3-D batch; got shape {tuple(shape)}")
    item = got.itemsize
    batch, batch_stride = None, 0
    if len(shape) == 3:
        batch = shape[0]
        if batch > 1:
            if strides[0] % item or strides[0] < 0:
                raise OperandError(f"{name}: batch stride {strides[0]} bytes is not a "
                                   f"non-negative multiple of {item}")
            batch_stride = strides[0] // item
        shape, strides = shape[1:], strides[1:]
    lds = _layouts(tuple(shape), tuple(strides), item)
    if not lds:
        raise OperandError(f"{name} is neither row- nor column-major: strides {tuple(strides)} "
                           f"bytes for a {shape[0]}x{shape[1]} matrix (make it contiguous)")
    return Operand(name, kind, x, tuple(shape), got, lds, batch, batch_stride, ptr, ro, stream)


def contiguous_strides(shape, item: int) -> tuple[int, ...]:
    """The byte strides of a C-contiguous array of ``shape`` with ``item``-byte elements
    (what ``__cuda_array_interface__`` leaves out for one)."""
    strides, acc = [], item
    for extent in reversed(shape):
        strides.append(acc)
        acc *= max(extent, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class GemmArgs:
    """Checked operands of C[b] = act(alpha * A[b] @ B[b] + beta * C[b] + bias) for b < batch."""

    a: Operand
    b: Operand
    c: Operand | None
    bias: Operand | None
    m: int
    n: int
    k: int
    batch: int | None  # None: plain 2-D call
    layout: str

    def ld(self, op: Operand, which: int) -> int:
        return op.lds[self.layout[which]]


def _need_layout(op: Operand, layout: str, which: int) -> None:
    want = layout[which]
    if want not in op.lds:
        have = LAYOUT_NAMES[next(iter(op.lds))]
        raise OperandError(f"{op.name} is {have}, but this kernel takes {LAYOUT_NAMES[want]} "
                           f"{op.name} (layout {layout!r}): build the kernel with layout "
                           f"{layout[:which] + next(iter(op.lds)) + layout[which + 1:]!r} "
                           f"or pass a copy in the other order")


def check_gemm(A, B, C=None, *, beta: float = 0.0, dtype: str = "fp32",
               out: str | None = None, layout: str = "rrr", bias=None,
               needs_bias: bool = False) -> GemmArgs:
    """Describe and cross-check the operands: A and B of ``dtype``, C and bias of ``out``
    (default ``dtype``; tf32 kernels take and give float32), each in ``layout`` (A, B, C:
    r or c). 3-D operands are batches; a 2-D operand, or a batch of 1, is broadcast over the
    batch. ``C`` may be None only when ``beta == 0``; ``bias`` (N values) is required exactly
    when ``needs_bias``.

    Raises ``OperandError`` naming the argument: kind, dtype, rank, layout, inner dimensions,
    a C or bias of the wrong shape, batch sizes that differ, a read-only C, host and device
    arrays mixed, PyTorch or CuPy operands on different GPUs (``check_one_device``), an
    extent, leading dimension or batch beyond 2^31 - 1 (``check_int32``), or a beta that is
    not a real number.
    """
    beta = check_scalar(beta, "beta")
    a, b = describe(A, "A", dtype), describe(B, "B", dtype)
    check_one_device({"A": A, "B": B, "C": C, "bias": bias})
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise OperandError(f"A is {m}x{k} and B is {k2}x{n}: A's columns ({k}) must equal "
                           f"B's rows ({k2})")
    _need_layout(a, layout, 0)
    _need_layout(b, layout, 1)
    c = None
    if C is None:
        if beta != 0:
            raise OperandError("C is required when beta != 0 (beta scales the existing C)")
    else:
        c = describe(C, "C", out or dtype)
        if c.shape != (m, n):
            raise OperandError(f"C has shape {c.shape}; A @ B is {m}x{n}")
        if c.readonly:
            raise OperandError("C is read-only; the kernel writes its result there")
        _need_layout(c, layout, 2)
    batch = _batch_of(a, b, c)
    bias_op = None
    if needs_bias:
        if bias is None:
            raise OperandError("bias is required: this kernel's epilogue adds a bias per column")
        bias_op = describe(_as_row(bias), "bias", out or dtype)
        if bias_op.shape != (1, n):
            raise OperandError(f"bias must hold N = {n} values; got shape {bias_op.shape}")
    elif bias is not None:
        raise OperandError("bias given, but this kernel's epilogue has no bias")
    _check_host_or_device([op for op in (a, b, c, bias_op) if op is not None])
    args = GemmArgs(a, b, c, bias_op, m, n, k, batch, layout)
    check_int32(M=m, N=n, K=k, lda=args.ld(a, 0), ldb=args.ld(b, 1),
                **({"ldc": args.ld(c, 2)} if c is not None else {}), batch=batch or 1)
    return args


def _batch_of(a: Operand, b: Operand, c: Operand | None) -> int | None:
    """The batch of the operands (None: all 2-D); ``OperandError`` for sizes that differ or
    a C that does not hold the whole batch."""
    sizes = {op.name: op.batch for op in (a, b, c) if op is not None and op.batch}
    batch = max(sizes.values(), default=None)
    bad = {nm: s for nm, s in sizes.items() if s not in (1, batch)}
    if bad:
        raise OperandError(f"batch sizes differ: {sizes} (each must be {batch} or 1)")
    if c is not None and batch and c.batch != batch:
        raise OperandError(f"C must hold the whole batch of {batch} results; it has "
                           f"{c.batch or 'no'} batch dimension")
    return batch


def _check_host_or_device(ops: list) -> None:
    """``OperandError`` naming the host operands when host and device ones are mixed."""
    on_host = {op.name: op.kind == "numpy" for op in ops}
    if len(set(on_host.values())) > 1:
        host = [k_ for k_, v in on_host.items() if v]
        raise OperandError(f"{', '.join(host)} on the host but the others on the GPU: pass all "
                           f"NumPy arrays (copied for you) or all device arrays")


def _as_row(bias):
    """A 1-D device vector seen as a 1 x N matrix (for the checks)."""
    if hasattr(bias, "reshape"):
        return bias.reshape(1, -1)
    raise OperandError(f"bias: expected a 1-D array; got {type(bias).__name__}")


def device_index(x, device_of=None) -> int | None:
    """The CUDA device ``x`` lives on: a PyTorch tensor's or CuPy array's own; for another
    device array (PyCUDA GPUArray, ``__cuda_array_interface__``) ``device_of(address)`` when
    given (the driver's pointer query), else None. None for host arrays, numbers and None."""
    mod = type(x).__module__.split(".")[0]
    if mod == "torch" and hasattr(x, "device"):
        return (x.device.index or 0) if x.device.type == "cuda" else None
    if mod == "cupy" and hasattr(x, "device"):
        return x.device.id
    if device_of is None:
        return None
    if hasattr(x, "__cuda_array_interface__"):
        ptr = int(x.__cuda_array_interface__["data"][0] or 0)
    elif type(x).__name__ == "GPUArray" and hasattr(x, "gpudata"):
        ptr = int(x.gpudata) if x.size else 0
    else:
        return None
    return device_of(ptr) if ptr else None


def check_one_device(named: dict, device_of=None) -> int | None:
    """The one CUDA device of the operands ``named`` ({argument name: array or None}), or None
    when none says (see ``device_index``). Raises ``OperandError`` naming two arguments on
    different devices, e.g. "A is on cuda:0, B on cuda:1"."""
    seen: dict[int, str] = {}
    for name, x in named.items():
        if x is None:
            continue
        dev = device_index(x, device_of)
        if dev is None:
            continue
        if seen and dev not in seen:
            first_dev, first = next(iter(seen.items()))
            raise OperandError(f"{first} is on cuda:{first_dev}, {name} on cuda:{dev}: every "
                               f"operand must be on one GPU (copy them to one device first)")
        seen.setdefault(dev, name)
    return next(iter(seen), None)
