"""Launching: checked operands -> device pointers -> one kernel launch."""
from __future__ import annotations

import numpy as np

from .dtypes import numpy_dtype
from .operands import GemmArgs, OperandError, check_gemm

GRID_Y_LIMIT = 65535
_DEFAULT_STREAMS = (None, 0, 1, 2)  # CUDA array interface: none, legacy, per-thread default


def launch(kernel, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, stream=None):
    """C = alpha * A @ B + beta * C with ``kernel``, row-major; A and B of the kernel's dtype
    (float32 for fp32 and tf32, float16, ml_dtypes.bfloat16 or torch.bfloat16), C of its
    output dtype.

    A (M x K), B (K x N), C (M x N): all NumPy arrays (copied to the GPU and back; C, if given,
    is updated in place and returned; otherwise a new array is returned), or all device arrays:
    PyCUDA ``GPUArray`` or objects with ``__cuda_array_interface__`` (CuPy, PyTorch), used
    without a copy; the result stays on the GPU and the call returns without waiting for it.
    Leading dimensions come from the row strides. ``beta == 0`` never reads C.

    Raises ``OperandError`` naming a bad argument (dtype, rank, shape, layout, mixed host and
    device arrays, missing C with beta != 0) and when M / BM exceeds the grid's y limit.
    """
    cfg = kernel.config
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out)
    if -(-args.m // kernel.config.bm) > GRID_Y_LIMIT:
        raise OperandError(f"A has {args.m} rows: more than {GRID_Y_LIMIT} blocks of "
                           f"BM={kernel.config.bm} rows")
    if args.a.kind == "numpy":
        return _launch_host(kernel, args, alpha, beta, C)
    out = C if C is not None else _empty_like(args.a.obj, (args.m, args.n), cfg.out)
    c = args.c or check_gemm(A, B, out, dtype=cfg.dtype, out=cfg.out).c
    _wait_for_producers(args)
    if args.m and args.n:
        kernel.launch_raw(args.m, args.n, args.k, alpha, args.a.ptr, args.a.ld, args.b.ptr,
                          args.b.ld, beta, c.ptr, c.ld, stream)
    return out


def _launch_host(kernel, args: GemmArgs, alpha: float, beta: float, C):
    from pycuda import gpuarray
    a = gpuarray.to_gpu(np.ascontiguousarray(args.a.obj))
    b = gpuarray.to_gpu(np.ascontiguousarray(args.b.obj))
    if beta != 0:
        c = gpuarray.to_gpu(np.ascontiguousarray(C))
    else:
        c = gpuarray.empty((args.m, args.n), numpy_dtype(kernel.config.out))
    if args.m and args.n:
        kernel.launch_raw(args.m, args.n, args.k, alpha, _ptr(a), max(args.k, 1), _ptr(b),
                          max(args.n, 1), beta, _ptr(c), max(args.n, 1))
    result = c.get().view(numpy_dtype(kernel.config.out))
    if C is None:
        return result
    C[...] = result
    return C


def _ptr(array) -> int:
    return int(array.gpudata) if array.size else 0


def _empty_like(template, shape, dtype: str):
    """A new device matrix of gemmgen dtype ``dtype`` from the library of ``template``
    (GPUArray, CuPy, torch)."""
    module = type(template).__module__.split(".")[0]
    if module == "cupy":
        import cupy
        return cupy.empty(shape, dtype=numpy_dtype(dtype))
    if module == "torch":
        import torch
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(dtype, torch.float32)
        return torch.empty(shape, dtype=torch_dtype, device=template.device)
    from pycuda import gpuarray
    return gpuarray.empty(shape, numpy_dtype(dtype))


def _wait_for_producers(args: GemmArgs) -> None:
    """Honour __cuda_array_interface__ v3: an array exported on a non-default stream may still
    be being written there, so wait for the device before reading it."""
    streams = {op.stream for op in (args.a, args.b, args.c) if op is not None}
    if streams - set(_DEFAULT_STREAMS):
        import pycuda.driver as drv
        drv.Context.synchronize()
