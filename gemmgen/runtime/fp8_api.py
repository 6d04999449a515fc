"""``gemmgen.gemm`` on FP8 operands: pick the kernel (``gemmgen.heuristics.fp8``), build it once
per process, and launch it; device operands (PyTorch, CuPy) take launch plans, as the other
dtypes do (the checks and the recipe once per operand signature, then only the addresses).

NumPy operands (``ml_dtypes.float8_e4m3fn`` / ``float8_e5m2``, or uint8 bytes with
``dtype=``) are copied to the GPU through PyCUDA and D comes back as NumPy (bf16 as
``ml_dtypes.bfloat16``).
"""
from __future__ import annotations

from ..heuristics.fp8 import choose_fp8
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import FP8_DTYPES, array_dtype
from ..model.families import get_family
from . import driver
from .build import build
from .device import device_identity, sm_count
from .fp8_launch import device_of, is_number, launch_fp8, make_plan
from .operands.scales import Fp8Args, check_fp8
from .operands import OperandError
from .plans import signature

_KERNELS: dict[tuple, tuple] = {}
_PLANS: dict[tuple, object] = {}
_DBS: dict[str, TuneDB] = {}
PLAN_CACHE = 4096


def is_fp8(A, dtype=None) -> bool:
    """Whether ``gemm`` should take the FP8 path for A (its dtype, or ``dtype``)."""
    if isinstance(dtype, (tuple, list)) or dtype in FP8_DTYPES:
        return True
    return array_dtype(A) in FP8_DTYPES


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


def _sig(x):
    """A scale's signature: "number" for a Python number (made a device scalar per call)."""
    if x is None or is_number(x):
        return ("number",)
    return signature(x)


def fp8_gemm(A, B, D=None, *, scale_a=1.0, scale_b=1.0, out_dtype=None, bias=None,
             fast_accum: bool = False, epilogue: str | None = None, dtype=None, db=None,
             stream=None, alpha: float = 1.0, beta: float = 0.0):
    """``gemmgen.gemm`` on FP8 operands (Hopper): D = act(dequant(A @ B) + bias).

    A (M x K) and B (K x N) of ``torch.float8_e4m3fn`` / ``float8_e5m2`` (NumPy: ``ml_dtypes``;
    CuPy: uint8 bytes with ``dtype="e4m3"`` or a pair ``("e5m2", "e4m3")``); ``scale_a`` and
    ``scale_b`` fp32 dequantization factors (default 1): scalars (per-tensor), vectors of M and
    N values (row-wise), or block grids of the operands' shapes in 128-blocks, (M, ceil(K/128))
    and (ceil(K/128), ceil(N/128)) (DeepSeek-V3 blockwise); ``out_dtype`` bf16 (default), fp16
    or fp32; ``fast_accum`` lets the tensor core sum all of K (tensor and row scaling) instead
    of promoting every 128 K elements to fp32. A row-major and B column-major (the transpose of
    an N x K weight) are read as they are; other layouts are repacked first. No alpha or beta
    (fold alpha into a scale). Returns D (a new array of A's library unless given); see
    ``gemmgen.runtime.operands.scales`` for the checks (``OperandError`` naming the argument)."""
    if alpha != 1.0 or beta != 0.0:
        raise OperandError("FP8 GEMMs take no alpha or beta: fold alpha into scale_a; beta "
                           "(accumulating into C) is not supported")
    epi = epilogue or ("bias" if bias is not None else "none")
    sigs = (signature(A), signature(B), signature(D), signature(bias), _sig(scale_a),
            _sig(scale_b))
    if None not in sigs and sigs[0][0] != "numpy":
        key = (*sigs, str(out_dtype), fast_accum, epi, str(dtype), db)
        plan = _PLANS.get(key)
        if plan is None:
            args = check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype)
            device = device_of(args)
            kernel, _ = kernel_for(args, fast_accum, epi, db, device)
            plan = make_plan(kernel, args, device)
            if len(_PLANS) >= PLAN_CACHE:
                _PLANS.clear()
            _PLANS[key] = plan
        return plan.run(A, B, D, bias, scale_a, scale_b, stream)
    args = check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype)
    kernel, _ = kernel_for(args, fast_accum, epi, db, device_of(args))
    return launch_fp8(kernel, A, B, scale_a, scale_b, D, bias=bias, stream=stream, args=args)


def chosen_fp8(A, B, scale_a=1.0, scale_b=1.0, out_dtype=None, fast_accum: bool = False,
               epilogue: str = "none", dtype=None, db=None):
    """(Kernel, Choice) ``gemm`` used for these FP8 operands, or None if not called yet."""
    args = check_fp8(A, B, scale_a, scale_b, None, None, out_dtype, dtype)
    gpu, cc = device_identity(device_of(args))
    key = (args.a_dtype, args.b_dtype, args.out, args.scaling, fast_accum, args.m, args.n,
           args.k, epilogue, db, gpu, cc)
    return _KERNELS.get(key)


