"""A kernel's call, ``kernel(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None, stream=None,
...)`` (``Kernel.__call__``), for the families whose kernels compute something other than
C = act(alpha * A @ B + beta * C + bias) (``build.CALLS`` maps a family to its call here).

**FP8** (``call_fp8``): the kernels write D = act(dequant(A @ B) + bias) and read no C; the
call computes C = act(alpha * scale_a * scale_b * (A @ B) + beta * C + bias):

- ``alpha`` multiplies ``scale_a`` (a number, or a new array of the scale's library);
- ``alpha == 0`` or ``K == 0``: A and B are not read (BLAS), the product is zero, and the result
  is act(beta * C + bias) computed with C's library;
- ``beta != 0``: D goes into C, then the old C times beta is added in a second pass with C's
  library (NumPy on the host; PyTorch or CuPy on the device, on ``stream``). The second pass
  comes after the activation, so a kernel with ReLU or GELU refuses beta != 0;
- 3-D A (and B, or a 2-D B broadcast): one call per matrix of the batch;
- NumPy operands are copied to the GPU through PyCUDA and D comes back as NumPy
  (``launch_fp8``).

**Grouped** (``call_grouped``): ``gemmgen.grouped_gemm`` with the kernel's configuration.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np

from .arrays import numpy_dtype
from . import driver
from .build import CALLS
from .device import operands_device, pycuda_context
from .grouped import grouped_gemm
from .launch import allocator
from .operands import OperandError, check_scalars
from .operands.scales import Fp8Args, as_bytes, check_fp8, host_scale
from .plans import check_scaled_kernel, plan_scaled
from .recipe import KernelArgs, Scale


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


def device_of(args: Fp8Args) -> int:
    """The one device of the arguments (0 for NumPy ones); ``OperandError`` naming two on
    different devices (pointers of GPUArrays and other arrays are asked of the driver)."""
    if args.a.kind == "numpy":
        return 0
    return operands_device({"A": args.a.obj, "B": args.b.obj, "scale_a": args.scale_a.obj,
                            "scale_b": args.scale_b.obj, "D": args.d.obj if args.d else None,
                            "bias": args.bias.obj if args.bias else None})


def launch_fp8(kernel, A, B, scale_a=1.0, scale_b=1.0, D=None, *, bias=None, stream=None,
               args: Fp8Args | None = None):
    """One call of an fp8-family ``kernel`` (its dtypes, scaling and epilogue must fit the
    arguments): NumPy operands are copied to the GPU and D comes back as NumPy; device
    operands are used in place, D returned without waiting. Raises ``OperandError``."""
    cfg = kernel.config
    args = args or check_fp8(A, B, scale_a, scale_b, D, bias, cfg.out)
    check_scaled_kernel(kernel, args)
    if args.a.kind == "numpy":
        with pycuda_context():
            return _launch_host(kernel, args, D)
    device = device_of(args)
    return plan_scaled(kernel, args, device).run(A, B, D, bias, scale_a, scale_b,
                                                 stream=stream)


def _launch_host(kernel, args: Fp8Args, D):
    """Upload A (row-major) and B^T (row-major: B K-major), the scales and bias as bytes, run,
    and return D as NumPy (into ``D`` when given)."""
    from pycuda import gpuarray
    a = gpuarray.to_gpu(np.ascontiguousarray(as_bytes(args.a.obj)))
    b = gpuarray.to_gpu(np.ascontiguousarray(as_bytes(args.b.obj).T))
    sa, sb = (gpuarray.to_gpu(host_scale(s)) for s in (args.scale_a, args.scale_b))
    item = np.dtype(numpy_dtype(args.out)).itemsize
    d = gpuarray.empty(max(args.m * args.n * item, 1), np.uint8)
    bias = None
    if args.bias is not None:
        bias = gpuarray.to_gpu(np.ascontiguousarray(args.bias.obj).reshape(-1).view(np.uint8))
    if args.m and args.n:
        lay_a, lay_b = args.a_layout, args.b_layout
        kernel.launch_raw(KernelArgs(
            args.m, args.n, args.k, int(a.gpudata), max(args.k, 1), int(b.gpudata),
            max(args.k, 1), int(d.gpudata), args.n,
            bias=int(bias.gpudata) if bias is not None else 0,
            scale_a=Scale(int(sa.gpudata), lay_a.s0, lay_a.s1),
            scale_b=Scale(int(sb.gpudata), lay_b.s0, lay_b.s1)))
    result = d.get()[:args.m * args.n * item].view(numpy_dtype(args.out)).reshape(args.m, args.n)
    if D is not None:
        D[...] = result
        return D
    return result


def call_grouped(kernel, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None, offs=None, counts=None, out_dtype=None, scale_a=None,
                 scale_b=None):
    """A grouped-family kernel's call (``Kernel.__call__``): ``grouped_gemm(A, B, offs, C,
    counts=counts, config=kernel.config)``, C the output. The grouped kernels compute A @ B
    alone: alpha other than 1, beta other than 0 or a bias raise ``OperandError`` naming it."""
    alpha, beta = check_scalars(alpha, beta)
    for name, shown, plain in (("alpha", alpha, alpha == 1.0), ("beta", beta, beta == 0.0),
                               ("bias", f"a {type(bias).__name__}", bias is None)):
        if not plain:
            raise OperandError(f"{name} = {shown}: a grouped kernel computes A @ B per group "
                               f"(alpha 1, beta 0, no bias)")
    return grouped_gemm(A, B, offs, C, counts=counts, out_dtype=out_dtype,
                        config=kernel.config, stream=stream, scale_a=scale_a, scale_b=scale_b)


CALLS.update(fp8=call_fp8, grouped=call_grouped)
