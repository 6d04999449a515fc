"""The call contract every kernel keeps, on an fp8-family kernel:
``kernel(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None, stream=None, scale_a=1.0,
scale_b=1.0)`` computes C = act(alpha * scale_a * scale_b * (A @ B) + beta * C + bias).

The FP8 kernels themselves write D = act(dequant(A @ B) + bias) and read no C
(``gemmgen.runtime.fp8_launch``); this module maps the rest of the contract onto them:

- ``alpha`` multiplies ``scale_a`` (a number, or a new array of the scale's library);
- ``alpha == 0`` or ``K == 0``: A and B are not read (BLAS), the product is zero, and the result
  is act(beta * C + bias) computed with C's library;
- ``beta != 0``: D goes into C, then the old C times beta is added in a second pass with C's
  library (NumPy on the host; PyTorch or CuPy on the device, on ``stream``). The second pass
  comes after the activation, so a kernel with ReLU or GELU refuses beta != 0;
- 3-D A (and B, or a 2-D B broadcast): one call per matrix of the batch.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np

from ..model.dtypes import numpy_dtype
from . import driver
from .fp8_launch import launch_fp8
from .launch import allocator
from .operands import OperandError, check_scalars


def call_fp8(kernel, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
             stream=None, scale_a=1.0, scale_b=1.0):
    """An fp8-family kernel's call (``Kernel.__call__``): see the module docstring. Returns C
    (a new array of A's library when C is None). Raises ``OperandError`` naming a bad argument, and for beta != 0 on a
    kernel whose epilogue has an activation."""
    alpha, beta = check_scalars(alpha, beta)
    epilogue = kernel.config.epilogue
    if beta != 0 and epilogue.endswith(("relu", "gelu")):
        raise OperandError(f"beta = {beta}: this FP8 kernel's epilogue {epilogue!r} applies its "
                           f"activation before C could be added; use an epilogue without one")
    if beta != 0 and C is None:
        raise OperandError("C is required when beta != 0 (beta scales the existing C)")
    if getattr(A, "ndim", 2) == 3:
        return _batched(kernel, A, B, C, alpha, beta, bias, stream, scale_a, scale_b)
    if alpha == 0 or A.shape[-1] == 0:
        return _no_product(kernel, A, B, C, beta, bias, stream)
    with _on(stream, A):  # made on the stream the kernel reads them on
        scale_a = scale_a * alpha if alpha != 1.0 else scale_a
        old = _f32(C, copy=True) if beta != 0 else None
    out = launch_fp8(kernel, A, B, scale_a, scale_b, C, bias=bias, stream=stream)
    if beta != 0:
        with _on(stream, out):
            _store(out, _f32(out) + beta * old)
    return out


def _batched(kernel, A, B, C, alpha, beta, bias, stream, scale_a, scale_b):
    """One call per matrix of a 3-D batch (B 2-D: the same B for each)."""
    if C is None:
        if _lib(A) != "numpy":
            raise OperandError("pass C for a batch of FP8 device operands (one D per matrix)")
        C = _empty_like(A, (A.shape[0], A.shape[1], B.shape[-1]), kernel.config.out)
    for i in range(A.shape[0]):
        b = B[i] if getattr(B, "ndim", 2) == 3 else B
        call_fp8(kernel, A[i], b, C[i], alpha=alpha, beta=beta, bias=bias, stream=stream,
                 scale_a=scale_a, scale_b=scale_b)
    return C


def _no_product(kernel, A, B, C, beta, bias, stream):
    """act(beta * C + bias) where A @ B contributes nothing (alpha == 0 or K == 0)."""
    cfg = kernel.config
    m, n = A.shape[-2], B.shape[-1]
    if C is None:
        C = _empty_like(A, (m, n), cfg.out)
    with _on(stream, C):
        value = _f32(C) * beta if beta != 0 else _zeros_like(_f32(C))  # beta == 0: C unread
        if bias is not None:
            value = value + _f32(bias).reshape(1, -1)
        _store(C, _activation(value, cfg.epilogue))
    return C


def _activation(x, epilogue: str):
    """ReLU, or GELU in its tanh form (as the kernels compute it), of ``x``."""
    lib = _module(x)
    if epilogue.endswith("relu"):
        return lib.maximum(x, _zeros_like(x))
    if epilogue.endswith("gelu"):
        return 0.5 * x * (1 + lib.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    return x


def _lib(x) -> str:
    return type(x).__module__.split(".")[0]


def _module(x):
    lib = _lib(x)
    if lib == "torch":
        import torch
        return torch
    if lib == "cupy":
        import cupy
        return cupy
    return np


def _f32(x, copy: bool = False):
    """``x`` as float32 (a copy when ``copy``, else perhaps ``x`` itself)."""
    if _lib(x) == "torch":
        import torch
        return x.to(torch.float32, copy=copy)
    return x.astype(np.float32, copy=copy)


def _zeros_like(x):
    return _module(x).zeros_like(x)


def _store(dst, value) -> None:
    """Write float32 ``value`` into ``dst`` in ``dst``'s dtype (rounded once)."""
    if _lib(dst) == "torch":
        dst.copy_(value)
    else:
        dst[...] = value.astype(dst.dtype)


def _empty_like(template, shape, dtype: str):
    """A new array of ``template``'s library and device (``launch.allocator``; NumPy too)."""
    if _lib(template) == "numpy":
        return np.empty(shape, numpy_dtype(dtype))
    return allocator(template, shape, dtype, False)()


def _on(stream, like):
    """A context running ``like``'s library on ``stream`` (a raw handle or a library stream;
    None: the legacy default stream, which the kernels launch on then), so that its work is
    ordered with the kernel's; NumPy: nothing to do."""
    handle = driver.stream_handle(stream)
    lib = _lib(like)
    if lib == "numpy":
        return nullcontext()
    if lib == "torch":
        import torch
        s = (torch.cuda.default_stream(like.device) if handle is None
             else torch.cuda.ExternalStream(handle, device=like.device))
        return torch.cuda.stream(s)
    import cupy
    return cupy.cuda.Stream.null if handle is None else cupy.cuda.ExternalStream(handle)


__all__ = ["call_fp8"]
