"""``gemmgen.gemm`` on FP8 operands: pick the kernel (``gemmgen.heuristics.fp8``), build it once
per process, and launch it; device operands (PyTorch, CuPy) take launch plans, as the other
dtypes do (the checks and the recipe once per operand signature, then only the addresses).

NumPy operands (``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2``, or uint8 bytes with
``dtype=``) are copied to the GPU through PyCUDA and D comes back as NumPy (bf16 as
``ml_dtypes.bfloat16``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..heuristics.fp8 import choose_fp8
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import FP8_DTYPES, dtype_name_of, numpy_dtype
from ..model.families import get_family
from . import driver
from .build import build
from .device import device_identity, pycuda_context, sm_count
from .fp8_kernel import Matrix, Scale
from .fp8_operands import Fp8Args, as_bytes, check_fp8, host_scale
from .launch import allocator
from .operands import OperandError
from .plans import signature
from .recipe import Ref

_KERNELS: dict[tuple, tuple] = {}
_PLANS: dict[tuple, object] = {}
_SCALARS: dict[tuple, object] = {}
_DBS: dict[str, TuneDB] = {}
PLAN_CACHE = 4096
SCALAR_CACHE = 256
COMPATIBLE = {"tensor": ("tensor",), "row": ("tensor", "row"), "block": ("block",)}
"""Kernel scaling -> the scalings of arguments it computes (a row kernel broadcasts scalars)."""


def is_fp8(A, dtype=None) -> bool:
    """Whether ``gemm`` should take the FP8 path for A (its dtype, or ``dtype``)."""
    if isinstance(dtype, (tuple, list)) or dtype in FP8_DTYPES:
        return True
    try:
        return dtype_name_of(A) in FP8_DTYPES
    except ValueError:
        return False


def kernel_for(args: Fp8Args, fast: bool, epilogue: str, db, device: int) -> tuple:
    """(Kernel, Choice) for checked arguments on ``device`` (built once per process and kind
    of GPU). Raises ``ValueError`` on a GPU the fp8 family cannot run on (sm_90a only)."""
    gpu, cc = device_identity(device)
    get_family("fp8").arch_for(cc)
    key = (args.a_dtype, args.b_dtype, args.out, args.scaling, fast, args.m, args.n, args.k,
           epilogue, db, gpu, cc)
    if key not in _KERNELS:
        path = str(db) if db else ""
        if path not in _DBS:
            _DBS[path] = TuneDB(db)
        choice = choose_fp8(args.m, args.n, args.k, args.scaling, fast, args.a_dtype,
                            args.b_dtype, args.out, epilogue, sm_count(device), _DBS[path], gpu)
        with driver.on_device(device):
            _KERNELS[key] = (build(choice.config), choice)
    return _KERNELS[key]


def _device_of(args: Fp8Args) -> int:
    if args.a.kind == "numpy":
        return 0
    obj = args.a.obj
    if type(obj).__module__.startswith("torch"):
        return obj.device.index or 0
    if type(obj).__module__.startswith("cupy"):
        return obj.device.id
    return driver.device_of(args.a.ptr)


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
        sa = _address(device_scalar(float(scale_a), A, self.device)) \
            if not hasattr(scale_a, "shape") else _address(scale_a)
        sb = _address(device_scalar(float(scale_b), A, self.device)) \
            if not hasattr(scale_b, "shape") else _address(scale_b)
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
    if args.scaling not in COMPATIBLE[cfg.scaling]:
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
        recipe = kernel.launches(
            args.m, args.n, args.k, Matrix(refs[0], args.lda, args.a_k_major),
            Matrix(refs[1], args.ldb, args.b_k_major), refs[2], ldd,
            Scale(refs[4], args.a_layout.s0, args.a_layout.s1),
            Scale(refs[5], args.b_layout.s0, args.b_layout.s1),
            refs[3] if args.bias else 0, device=device)
    return Fp8Plan(kernel, recipe, new_d, device, args.out)


def _sig(x):
    """A scale's signature: "number" for a Python number (made a device scalar per call)."""
    if x is None or (not hasattr(x, "shape") and isinstance(x, (int, float))):
        return ("number",)
    return signature(x)


def fp8_gemm(A, B, D=None, *, scale_a=1.0, scale_b=1.0, out_dtype=None, bias=None,
             fast_accum: bool = False, epilogue: str | None = None, dtype=None, db=None,
             stream=None):
    """D = act(dequant(A @ B) + bias) for FP8 A (M x K) and B (K x N); see
    ``gemmgen.runtime.api.gemm``. Returns D (a new array of A's library unless given)."""
    epi = epilogue or ("bias" if bias is not None else "none")
    sigs = (signature(A), signature(B), signature(D), signature(bias), _sig(scale_a),
            _sig(scale_b))
    if None not in sigs and sigs[0][0] != "numpy":
        key = (*sigs, str(out_dtype), fast_accum, epi, str(dtype), db)
        plan = _PLANS.get(key)
        if plan is None:
            args = check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype)
            device = _device_of(args)
            kernel, _ = kernel_for(args, fast_accum, epi, db, device)
            plan = make_plan(kernel, args, device)
            if len(_PLANS) >= PLAN_CACHE:
                _PLANS.clear()
            _PLANS[key] = plan
        return plan.run(A, B, D, bias, scale_a, scale_b, stream)
    args = check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype)
    kernel, _ = kernel_for(args, fast_accum, epi, db, _device_of(args))
    return launch_fp8(kernel, A, B, scale_a, scale_b, D, bias=bias, stream=stream, args=args)


def chosen_fp8(A, B, scale_a=1.0, scale_b=1.0, out_dtype=None, fast_accum: bool = False,
               epilogue: str = "none", dtype=None, db=None):
    """(Kernel, Choice) ``gemm`` used for these FP8 operands, or None if not called yet."""
    args = check_fp8(A, B, scale_a, scale_b, None, None, out_dtype, dtype)
    gpu, cc = device_identity(_device_of(args))
    key = (args.a_dtype, args.b_dtype, args.out, args.scaling, fast_accum, args.m, args.n,
           args.k, epilogue, db, gpu, cc)
    return _KERNELS.get(key)


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
    device = _device_of(args)
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
        kernel.launch_raw(args.m, args.n, args.k, Matrix(int(a.gpudata), max(args.k, 1)),
                          Matrix(int(b.gpudata), max(args.k, 1)), int(d.gpudata), args.n,
                          Scale(int(sa.gpudata), lay_a.s0, lay_a.s1),
                          Scale(int(sb.gpudata), lay_b.s0, lay_b.s1),
                          int(bias.gpudata) if bias is not None else 0)
    result = d.get()[:args.m * args.n * item].view(numpy_dtype(args.out)).reshape(args.m, args.n)
    if D is not None:
        D[...] = result
        return D
    return result
