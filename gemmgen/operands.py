"""Launch arguments: describe and check A, B, C (NumPy, PyCUDA GPUArray, __cuda_array_interface__).

Pure Python: nothing here touches the GPU, so the checks are tested without one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import numpy_dtype, torch_dtype_name


class OperandError(ValueError):
    """A launch argument has the wrong kind, dtype, rank, shape or layout; the message names it."""


@dataclass(frozen=True)
class Operand:
    """One matrix argument. ``kind`` is "numpy" (host, copied), "gpuarray" (PyCUDA) or "cai"
    (any object with ``__cuda_array_interface__``: CuPy, PyTorch, Numba). ``ld`` is the leading
    dimension in elements (row stride of a row-major matrix); ``ptr`` the device address (0 for
    host arrays)."""

    name: str
    kind: str
    obj: object
    shape: tuple[int, ...]
    dtype: np.dtype
    ld: int
    ptr: int = 0
    readonly: bool = False
    stream: int | None = None


def describe(x, name: str, dtype: str = "fp32") -> Operand:
    """Check that ``x`` is a 2-D row-major matrix holding gemmgen dtype ``dtype`` (fp32, tf32,
    fp16, bf16) and return its description. PyTorch CUDA tensors are read directly (their
    bfloat16 has no __cuda_array_interface__).

    Raises ``OperandError`` naming ``name`` for an unsupported type, a wrong dtype or rank, or a
    layout that is not row-major with unit stride along columns.
    """
    want = numpy_dtype(dtype)
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr"):
        if not x.is_cuda:
            raise OperandError(f"{name} is a CPU torch tensor: move it to the GPU or pass "
                               f"{name}.numpy()")
        got_name = torch_dtype_name(x.dtype)
        if got_name != ("fp32" if dtype == "tf32" else dtype):
            raise OperandError(f"{name} has dtype {x.dtype}; this kernel takes {dtype}")
        item = x.element_size()
        kind, shape, got, ptr, ro, stream = "torch", tuple(x.shape), want, x.data_ptr(), False, None
        strides = tuple(st * item for st in x.stride())
    elif isinstance(x, np.ndarray):
        kind, shape, got, strides, ptr, ro, stream = (
            "numpy", x.shape, x.dtype, x.strides, 0, not x.flags.writeable, None)
    elif hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        kind, shape, got = "cai", tuple(cai["shape"]), np.dtype(cai["typestr"])
        ptr, ro = int(cai["data"][0] or 0), bool(cai["data"][1])
        strides = cai.get("strides") or _contiguous_strides(shape, got.itemsize)
        stream = cai.get("stream")
    elif type(x).__name__ == "GPUArray" and hasattr(x, "gpudata"):
        kind, shape, got, strides = "gpuarray", x.shape, x.dtype, x.strides
        ptr, ro, stream = int(x.gpudata) if x.size else 0, False, None
    else:
        raise OperandError(f"{name}: expected a NumPy array, a PyCUDA GPUArray or an object with "
                           f"__cuda_array_interface__ (CuPy, PyTorch); got {type(x).__name__}")
    opaque_bf16 = dtype == "bf16" and got.kind == "V" and got.itemsize == 2  # PyCUDA's view
    if got != want and not opaque_bf16:
        raise OperandError(f"{name} has dtype {got}; this kernel takes {dtype} ({want}): "
                           f"convert explicitly, e.g. {name}.astype(...)")
    if len(shape) != 2:
        raise OperandError(f"{name} must be a 2-D matrix; got shape {tuple(shape)}")
    rows, cols = shape
    item = got.itemsize
    empty = rows == 0 or cols == 0  # any strides will do: nothing is read
    if not empty and (cols > 1 and strides[1] != item
                      or rows > 1 and (strides[0] % item or strides[0] < 0)):
        raise OperandError(f"{name} must be row-major with unit stride along columns; got strides "
                           f"{tuple(strides)} bytes for shape {tuple(shape)} (a transposed or "
                           f"Fortran-ordered array: make it contiguous first)")
    ld = strides[0] // item if rows > 1 and not empty else max(cols, 1)
    if ld < cols:
        raise OperandError(f"{name}: leading dimension {ld} is smaller than its {cols} columns")
    return Operand(name, kind, x, tuple(shape), got, max(ld, 1), ptr, ro, stream)


def _contiguous_strides(shape, item: int) -> tuple[int, ...]:
    strides, acc = [], item
    for extent in reversed(shape):
        strides.append(acc)
        acc *= max(extent, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class GemmArgs:
    """Checked operands of C[M,N] = alpha * A[M,K] @ B[K,N] + beta * C."""

    a: Operand
    b: Operand
    c: Operand | None
    m: int
    n: int
    k: int


def check_gemm(A, B, C=None, *, beta: float = 0.0, dtype: str = "fp32",
               out: str | None = None) -> GemmArgs:
    """Describe and cross-check the three operands: A and B of ``dtype``, C of ``out``
    (default ``dtype``; tf32 kernels take and give float32). ``C`` may be None only when
    ``beta == 0``.

    Raises ``OperandError`` naming the argument: wrong kind/dtype/rank/layout, inner dimensions
    that differ, a C of the wrong shape, a read-only C, or host and device arrays mixed.
    """
    a, b = describe(A, "A", dtype), describe(B, "B", dtype)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise OperandError(f"A is {m}x{k} and B is {k2}x{n}: A's columns ({k}) must equal "
                           f"B's rows ({k2})")
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
    on_host = {op.name: op.kind == "numpy" for op in (a, b, c) if op is not None}
    if len(set(on_host.values())) > 1:
        host = [k_ for k_, v in on_host.items() if v]
        raise OperandError(f"{', '.join(host)} on the host but the others on the GPU: pass all "
                           f"NumPy arrays (copied for you) or all device arrays")
    return GemmArgs(a, b, c, m, n, k)
