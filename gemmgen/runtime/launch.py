"""Launching: checked operands -> device pointers, leading dimensions, batch strides -> one launch."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .arrays import numpy_dtype
from . import driver
from .device import pycuda_context
from .epilogue_args import EXTRA, check_epilogue, tree_of
from .operands import (GemmArgs, OperandError, check_gemm, check_one_device, check_scalars,
                       describe)
from .recipe import GRID_LIMIT_YZ, KernelArgs

DEFAULT_STREAMS = (None, 0, 1, 2)  # CUDA array interface: none, legacy, per-thread default


def launch(kernel, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
           stream=None, **extra):
    """C = act(alpha * A @ B + beta * C + bias) with ``kernel``, in the kernel's layout and dtypes.

    A (M x K), B (K x N), C (M x N), or 3-D batches of them (a 2-D operand is broadcast over
    the batch); bias (N values) when the kernel's epilogue has one. All NumPy arrays (copied
    to the GPU in the kernel's layout and back; C, if given, is updated in place and returned,
    else a new array is returned), or all device arrays: PyCUDA ``GPUArray``, PyTorch tensors
    or objects with ``__cuda_array_interface__`` (CuPy), used without a copy; the result stays
    on the GPU and the call returns without waiting for it. Leading dimensions and batch
    strides come from the arrays' strides; ``beta == 0`` never reads C.

    Raises ``OperandError`` naming a bad argument (alpha and beta must be real numbers), a
    shape that differs from the kernel's specialization, operands on different GPUs, or a
    grid beyond CUDA's limits.

    An epilogue tree's operands come as keywords (``row_scale``, ``col_scale``, ``row_bias``,
    ``R``, ``aux``, ``amax``; ``up``: the dual GEMM's second weight, laid out as B), of the
    operands' kind (``gemmgen.runtime.epilogue_args``); NumPy ones are copied to the GPU in
    the layout the kernel reads, and the outputs ``aux`` and ``amax`` copied back.
    """
    cfg = kernel.config
    alpha, beta = check_scalars(alpha, beta)
    unknown = set(extra) - set(EXTRA)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out, layout=cfg.layout,
                      bias=bias, needs_bias=needs_bias(cfg))
    check_launch(kernel, args)
    if args.a.kind in ("gpuarray", "cai"):  # no device attribute: ask the driver
        check_one_device({"A": A, "B": B, "C": C, "bias": bias}, driver.device_of)
    host = args.a.kind == "numpy"
    given = packed_tree_operands(cfg, extra) if host else extra
    epi = check_epilogue(cfg, given, args.m, args.n, args.batch, host=host)
    up = check_up(cfg, given.get("up"), args)
    if host:
        with pycuda_context():
            out = _launch_host(kernel, args, alpha, beta, C, bias, epi, up)
        for name in ("aux", "amax"):  # the kernel's other outputs, back into the caller's
            if extra.get(name) is not None:
                extra[name][...] = given[name]
        return out
    shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
    with pycuda_context() if args.a.kind == "gpuarray" else nullcontext():
        out = C if C is not None else _empty_like(args.a.obj, shape, cfg.out,
                                                  cfg.layout[2] == "c")
    c = args.c or describe(out, "C", cfg.out)
    if args.m and args.n:
        with driver.on_device(driver.device_of(c.ptr)):
            _wait_for_producers(args)
            kernel.launch_raw(KernelArgs(
                args.m, args.n, args.k, args.a.ptr, args.ld(args.a, 0), args.b.ptr,
                args.ld(args.b, 1), c.ptr, c.lds[cfg.layout[2]], alpha, beta,
                batch_stride(args.a), batch_stride(args.b), batch_stride(c),
                args.bias.ptr if args.bias else 0, args.batch or 1, **_tree_fields(epi, up)),
                stream)
    return out


def needs_bias(cfg) -> bool:
    """The kernel reads the bias parameter: a name starting with "bias", or a tree's bias."""
    tree = tree_of(cfg)
    return bool(tree.count("bias")) if tree is not None else cfg.epilogue.startswith("bias")


def check_up(cfg, up, args: GemmArgs):
    """The dual GEMM's second weight: required exactly for a dual kernel, with B's dtype,
    shape and layout; (Operand, leading dimension, batch stride) or None."""
    if not getattr(cfg, "dual", False):
        if up is not None:
            raise OperandError("up given, but this kernel is not a dual GEMM")
        return None
    if up is None:
        raise OperandError("up is required: a dual GEMM multiplies A by B (gate) and by up")
    op = describe(up, "up", cfg.dtype)
    if op.shape != args.b.shape:
        raise OperandError(f"up has shape {op.shape}; B (gate) is {args.b.shape}")
    if cfg.layout[1] not in op.lds:
        raise OperandError("up must be laid out as B: K x N column-major (an nn.Linear "
                           "weight's transpose)")
    if op.batch and args.batch and op.batch not in (1, args.batch):
        raise OperandError(f"up holds a batch of {op.batch}; the GEMM's is {args.batch}")
    return op, op.lds[cfg.layout[1]], batch_stride(op)


def _tree_fields(epi, up) -> dict:
    """The ``KernelArgs`` fields of the tree's struct (``epi``) and the dual's ``up``."""
    out = {}
    if epi is not None:
        out["epi"] = epi.block(False)
    if up is not None:
        op, ld, stride = up
        out["up"] = (op.ptr, ld, stride)
    return out


def check_launch(kernel, args: GemmArgs) -> None:
    """What the operands must meet beyond their own checks: the kernel's specialized extents
    and CUDA's grid limits (a persistent kernel loops over rows and batches itself). Raises
    ``OperandError`` naming the mismatch."""
    cfg = kernel.config
    for size, fixed, what in ((args.m, cfg.m, "A has {} rows"), (args.n, cfg.n, "B has {} columns"),
                              (args.k, cfg.k, "A has {} columns")):
        if fixed is not None and size != fixed:
            raise OperandError(f"{what.format(size)}; this kernel is specialized for "
                               f"M, N, K = {cfg.m}, {cfg.n}, {cfg.k} (None: any)")
    if getattr(cfg, "persistent", False):
        return
    split = getattr(cfg, "split_k", 1)  # a non-persistent split-K launches batch x slices in z
    if -(-args.m // cfg.bm) > GRID_LIMIT_YZ or (args.batch or 1) * split > GRID_LIMIT_YZ:
        raise OperandError(f"{args.m} rows in blocks of {cfg.bm}, or a batch of {args.batch}"
                           + (f" in {split} split-K slices" if split > 1 else "")
                           + f", exceeds the grid limit of {GRID_LIMIT_YZ}")


def batch_stride(op) -> int:
    return op.batch_stride if op.batch and op.batch > 1 else 0


def to_device(x: np.ndarray, col: bool):
    """(GPUArray, leading dimension, batch stride): each matrix of ``x`` laid out row- or
    column-major and packed. A Fortran-ordered array or a transposed view uploads as is."""
    from pycuda import gpuarray
    packed = np.ascontiguousarray(np.swapaxes(x, -1, -2) if col else x)
    rows, cols = x.shape[-2:]
    stride = rows * cols if x.ndim == 3 and x.shape[0] > 1 else 0
    return gpuarray.to_gpu(packed), max(rows if col else cols, 1), stride


def packed_tree_operands(cfg, extra: dict) -> dict:
    """NumPy tree operands as packed arrays in the order the kernel reads them (R in its
    layout, aux in C's, up in B's, vectors contiguous): each one's memory is then what the GPU
    gets."""
    from ..model.epilogue_rules import residual_col
    epi = tree_of(cfg)
    col = {"aux": cfg.layout[2] == "c", "up": cfg.layout[1] == "c",
           "R": epi is not None and residual_col(epi, cfg.layout[2])}
    return {name: x if not isinstance(x, np.ndarray) else
            np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)
            if col.get(name) and x.ndim >= 2 else np.ascontiguousarray(x)
            for name, x in extra.items()}


def _uploaded(epi, up):
    """The tree's NumPy operands (packed by ``packed_tree_operands``) and up on the GPU:
    (EpiOperands with device addresses, up, [(device array, host array) of each])."""
    from dataclasses import replace

    from pycuda import gpuarray

    from .epilogue_args import EpiOperands
    held = []

    def dev(op):
        if op.kind != "numpy":
            return op
        host = op.obj
        base = host if host.flags.c_contiguous else np.swapaxes(host, -1, -2)
        g = gpuarray.to_gpu(np.ascontiguousarray(base))
        held.append((g, host, base))
        return replace(op, kind="gpuarray", ptr=_ptr(g))
    if epi is not None:
        epi = EpiOperands({k: dev(op) for k, op in epi.ops.items()}, epi.fields)
    if up is not None:
        up = (dev(up[0]), *up[1:])
    return epi, up, held


def _launch_host(kernel, args: GemmArgs, alpha: float, beta: float, C, bias, epi=None,
                 up=None):
    from pycuda import gpuarray
    cfg = kernel.config
    epi, up, held = _uploaded(epi, up)
    a, lda, sa = to_device(args.a.obj, cfg.layout[0] == "c")
    b, ldb, sb = to_device(args.b.obj, cfg.layout[1] == "c")
    c_col = cfg.layout[2] == "c"
    if C is not None:  # uploaded even when beta == 0, so a poisoned C reaches the kernel
        c, ldc, sc = to_device(C, c_col)
    else:
        shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
        c, ldc, sc = to_device(np.empty(shape, numpy_dtype(cfg.out)), c_col)
    bias_dev = gpuarray.to_gpu(np.ascontiguousarray(bias)) if bias is not None else None
    if args.m and args.n:
        kernel.launch_raw(KernelArgs(
            args.m, args.n, args.k, _ptr(a), lda, _ptr(b), ldb, _ptr(c), ldc, alpha, beta, sa,
            sb, sc, _ptr(bias_dev) if bias_dev is not None else 0, args.batch or 1,
            **_tree_fields(epi, up)))
    for g, host, base in held:  # aux and amax are written: their packed copies come back
        base[...] = g.get()
    result = c.get().view(numpy_dtype(cfg.out))
    result = np.swapaxes(result, -1, -2) if c_col else result
    if C is None:
        return np.ascontiguousarray(result)
    C[...] = result
    return C


def _ptr(array) -> int:
    return int(array.gpudata) if array.size else 0


def _empty_like(template, shape, dtype: str, col: bool):
    """A new device array of gemmgen dtype ``dtype`` from the library of ``template``
    (GPUArray, CuPy, torch); column-major matrices when ``col``."""
    return allocator(template, shape, dtype, col)()


def allocator(template, shape, dtype: str, col: bool):
    """A function of no arguments making new device arrays like ``_empty_like`` does: the
    library and device of ``template``, dtype ``dtype``, ``shape`` (column-major matrices as
    transposed views when ``col``). Resolved once, so a launch plan allocates cheaply."""
    swapped = (*shape[:-2], shape[-1], shape[-2]) if col else shape
    module = type(template).__module__.split(".")[0]
    if module == "cupy":
        import cupy
        np_dtype = numpy_dtype(dtype)
        if col:
            return lambda: cupy.swapaxes(cupy.empty(swapped, dtype=np_dtype), -1, -2)
        return lambda: cupy.empty(shape, dtype=np_dtype)
    if module == "torch":
        import torch
        torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(dtype, torch.float32)
        device = template.device
        if col:
            return lambda: torch.empty(swapped, dtype=torch_dtype, device=device).transpose(-1, -2)
        return lambda: torch.empty(shape, dtype=torch_dtype, device=device)
    from pycuda import gpuarray
    if col:
        raise OperandError("pass C for a column-major-C kernel on GPUArrays (PyCUDA cannot "
                           "allocate a transposed view); CuPy and PyTorch inputs get one")
    return lambda: gpuarray.empty(shape, numpy_dtype(dtype))


def _wait_for_producers(args: GemmArgs) -> None:
    """Honour __cuda_array_interface__ v3: an array exported on a non-default stream may still
    be being written there, so wait for the device before reading it."""
    streams = {op.stream for op in (args.a, args.b, args.c, args.bias) if op is not None}
    if streams - set(DEFAULT_STREAMS):
        driver.synchronize()
