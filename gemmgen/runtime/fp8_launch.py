"""Launching an fp8-family kernel on checked arguments: its recipe with the addresses as
``Ref``s (a launch plan, patched per call), one call of it, and NumPy operands through PyCUDA
(D comes back as NumPy). ``gemmgen.runtime.fp8_api`` picks the kernel; this module only runs
it (an fp8 ``Kernel.__call__`` comes here)."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..model.dtypes import numpy_dtype
from . import driver
from .device import pycuda_context
from .operands.scales import Fp8Args, as_bytes, check_fp8, host_scale
from .launch import allocator
from .operands import OperandError, check_one_device
from .recipe import KernelArgs, Ref, Scale

_SCALARS: dict[tuple, object] = {}
SCALAR_CACHE = 256
COMPATIBLE = {"tensor": ("tensor",), "row": ("tensor", "row"), "block": ("block",)}
"""Kernel scaling -> the scalings of arguments it computes (a row kernel broadcasts scalars)."""


def device_of(args: Fp8Args) -> int:
    """The one device of the arguments (0 for NumPy ones); ``OperandError`` naming two on
    different devices (pointers of GPUArrays and other arrays are asked of the driver)."""
    if args.a.kind == "numpy":
        return 0
    named = {"A": args.a.obj, "B": args.b.obj, "scale_a": args.scale_a.obj,
             "scale_b": args.scale_b.obj, "D": args.d.obj if args.d else None,
             "bias": args.bias.obj if args.bias else None}
    found = check_one_device(named, driver.device_of)
    return 0 if found is None else found


def device_scalar(value: float, like, device: int):
    """A one-element float32 device array holding ``value``, of ``like``'s library (PyTorch
    or CuPy), cached per value and device (numbers passed as scales)."""
    lib = type(like).__module__.split(".")[0]
    key = (lib, device, value)
    found = _SCALARS.get(key)
    if found is None:
        if len(_SCALARS) >= SCALAR_CACHE:
            _SCALARS.clear()
        if lib == "torch":
            import torch
            found = torch.tensor([value], dtype=torch.float32, device=f"cuda:{device}")
        else:
            import cupy
            with cupy.cuda.Device(device):
                found = cupy.array([value], dtype=np.float32)
        _SCALARS[key] = found
    return found


def is_number(x) -> bool:
    """A scale given as a number (Python or NumPy scalar), not an array."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _address(x) -> int:
    if x is None:
        return 0
    if type(x).__module__.startswith("torch"):
        return x.data_ptr()
    return x.data.ptr if hasattr(x, "data") and hasattr(x.data, "ptr") else \
        int(x.__cuda_array_interface__["data"][0] or 0)


def _scale_ptr(arg, like, device: int) -> int:
    return _address(device_scalar(arg.obj, like, device)) if arg.kind == "number" else arg.ptr


@dataclass
class Fp8Plan:
    """A checked FP8 call for one operand signature: the kernel, its recipe (operands 0 A,
    1 B, 2 D, 3 bias, 4 scale_a, 5 scale_b), how to make D and the device."""

    kernel: object
    recipe: object
    new_d: object
    device: int
    out: str

    def run(self, A, B, D, bias, scale_a, scale_b, stream=None):
        out = D if D is not None else self.new_d()
        sa, sb = (_address(device_scalar(float(s), A, self.device)) if is_number(s)
                  else _address(s) for s in (scale_a, scale_b))
        with driver.on_device(self.device):
            self.recipe.run((_address(A), _address(B), _address(out), _address(bias), sa, sb),
                            driver.stream_handle(stream))
        self.kernel.last_path = self.recipe.path
        return out


def _check_kernel(kernel, args: Fp8Args) -> None:
    """The kernel computes these arguments: dtypes, D's dtype and scaling. Raises
    ``OperandError`` naming the mismatch."""
    cfg = kernel.config
    if (args.a_dtype, args.b_dtype, args.out) != (cfg.dtype, cfg.b_dtype, cfg.out):
        raise OperandError(f"this kernel takes A {cfg.dtype}, B {cfg.b_dtype}, D {cfg.out}; got "
                           f"A {args.a_dtype}, B {args.b_dtype}, D {args.out}")
    # A block kernel also computes scales whose B part is one value: per-tensor, or row-wise
    # A with a scalar B (the block grids of a problem with one K block and N <= 128 are these).
    one_b = cfg.scaling == "block" and args.scale_b.size == 1
    if args.scaling not in COMPATIBLE[cfg.scaling] and not one_b:
        raise OperandError(f"scale_a and scale_b give {args.scaling} scaling; this kernel takes "
                           f"{cfg.scaling} scales")
    if cfg.epilogue.startswith("bias") != (args.bias is not None):
        raise OperandError("bias " + ("is required by" if args.bias is None else "given, but")
                           + f" this kernel's epilogue {cfg.epilogue!r}")


def make_plan(kernel, args: Fp8Args, device: int) -> Fp8Plan:
    """The recipe of ``kernel`` for checked device arguments, the addresses as ``Ref``s."""
    _check_kernel(kernel, args)
    new_d = None if args.d is not None else allocator(args.a.obj, (args.m, args.n), args.out,
                                                      False)
    d_obj = args.d.obj if args.d is not None else new_d()
    like = args.a.obj
    ptrs = (args.a.ptr, args.b.ptr, _address(d_obj), args.bias.ptr if args.bias else 0,
            _scale_ptr(args.scale_a, like, device), _scale_ptr(args.scale_b, like, device))
    refs = [Ref(i, p) for i, p in enumerate(ptrs)]
    ldd = args.d.lds["r"] if args.d is not None else args.n
    with driver.on_device(device):
        recipe = kernel.launches(KernelArgs(
            args.m, args.n, args.k, refs[0], args.lda, refs[1], args.ldb, refs[2], ldd,
            bias=refs[3] if args.bias else 0, a_k_major=args.a_k_major,
            b_k_major=args.b_k_major, scale_a=Scale(refs[4], args.a_layout.s0, args.a_layout.s1),
            scale_b=Scale(refs[5], args.b_layout.s0, args.b_layout.s1)), device)
    return Fp8Plan(kernel, recipe, new_d, device, args.out)


def launch_fp8(kernel, A, B, scale_a=1.0, scale_b=1.0, D=None, *, bias=None, stream=None,
               args: Fp8Args | None = None):
    """One call of an fp8-family ``kernel`` (its dtypes, scaling and epilogue must fit the
    arguments): NumPy operands are copied to the GPU and D comes back as NumPy; device
    operands are used in place, D returned without waiting. Raises ``OperandError``."""
    cfg = kernel.config
    args = args or check_fp8(A, B, scale_a, scale_b, D, bias, cfg.out)
    _check_kernel(kernel, args)
    if args.a.kind == "numpy":
        with pycuda_context():
            return _launch_host(kernel, args, D)
    device = device_of(args)
    plan = make_plan(kernel, args, device)
    return plan.run(A, B, D, bias, scale_a, scale_b, stream)


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
