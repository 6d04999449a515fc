"""``gemmgen.gemm``: pick a kernel for the operands (``gemmgen.heuristics``), build it once per
process, and launch it.

Device operands take a fast path (``gemmgen.runtime.plans``): the first call with a given
operand signature (kind, shape, strides, dtype, device; not the pointer) runs every check and
builds a launch plan; later calls with the same signature only read the pointers and launch.
Operands TMA cannot read are repacked or sent to the fallback kernel at launch
(``gemmgen.runtime.hopper``).
"""
from __future__ import annotations

import numpy as np

from ..heuristics.fp8 import choose_fp8
from ..heuristics.select import decide, math_dtype
from ..heuristics.tunedb import TuneDB
from ..model.dtypes import ELEM_BYTES, FP8_DTYPES, stored_as
from .arrays import array_dtype, dtype_name_of
from ..model.families import get_family
from . import driver
from .build import build
from .calls import device_of, launch_fp8
from .device import device_identity, operands_device, require_gpu, sm_count
from .epilogue_args import EXTRA, parse_epilogue
from .operands import OperandError, check_int32, check_scalars, describe, is_number
from .operands.scales import Fp8Args, check_fp8
from .plans import address, plan_gemm, plan_scaled, signature, transposed
from .tree_api import tree_gemm, tree_plan

_KERNELS: dict[tuple, tuple] = {}
_PLANS: dict[tuple, object] = {}
_DBS: dict[str, TuneDB] = {}
PLAN_CACHE = 4096  # launch plans kept (one per operand signature, alpha and beta)


def layout_of(A, B, C=None, dtype: str = "fp32") -> str:
    """The layout string of the operands: each row-major (r) if its strides allow, else c."""
    ops = [describe(A, "A", dtype), describe(B, "B", dtype)]
    lay = "".join("r" if "r" in op.lds else "c" for op in ops)
    if C is None:
        return lay + "r"
    return lay + ("r" if "r" in describe(C, "C", _c_dtype(C, dtype)).lds else "c")


def _c_dtype(C, dtype: str) -> str:
    """C's own dtype where it has a known one (an fp32 C of fp16 inputs), else the inputs'."""
    return array_dtype(C) or stored_as(dtype)


def _tune_db(db) -> TuneDB:
    """The tuning database at ``db`` (None: the default), opened once per process."""
    path = str(db) if db else ""
    if path not in _DBS:
        _DBS[path] = TuneDB(db)
    return _DBS[path]


def _kernel_for(dt: str, m: int, n: int, k: int, db, lay: str, epi: str, c_aligned: bool = True,
                math_: str = "native", batch: int = 1, device: int = 0):
    """(Kernel, Choice) for one problem on ``device``, built once per process and kind of GPU
    (the Kernel loads its module on each device that runs it)."""
    gpu, cc = device_identity(device)
    key = (dt, m, n, k, db, lay, epi, c_aligned, math_, batch, gpu, cc)
    if key not in _KERNELS:
        choice = decide(_tune_db(db), gpu, dt, m, n, k, cc, lay, epi, c_aligned, math_, batch)
        with driver.on_device(device):
            _KERNELS[key] = (build(choice.config), choice)
    return _KERNELS[key]


def operand_device(A, B, C=None, bias=None) -> int:
    """The one device of the operands (a PyTorch tensor's or CuPy array's own, else the
    device owning a pointer); 0 for host (NumPy) operands, which go through PyCUDA's context
    on device 0 (``ImportError`` with the install hint without PyCUDA). Raises
    ``OperandError`` naming two operands on different devices."""
    if any(isinstance(x, np.ndarray) for x in (A, B, C)):
        require_gpu()
        return 0
    return operands_device({k: v for k, v in (("A", A), ("B", B), ("C", C), ("bias", bias))
                            if not isinstance(v, np.ndarray)})  # a NumPy bias: refused later


def _problem(A, B, dtype: str | None, math_: str) -> tuple:
    """(dtype the kernel runs, M, N, K, batch) of ``gemm``'s operands: the dtype is
    ``dtype`` or A's, through ``math_dtype``; the batch is the larger leading extent of 3-D
    operands (1 for matrices). Raises ``OperandError`` for a rank other than 2 or 3 or an
    extent beyond 2^31 - 1."""
    for name, x in (("A", A), ("B", B)):
        if getattr(x, "ndim", 2) not in (2, 3):
            raise OperandError(f"{name} must be a 2-D matrix or a 3-D batch; got shape "
                               f"{tuple(getattr(x, 'shape', ()))}")
    dt = math_dtype(dtype or dtype_name_of(A), math_)
    batch = max(x.shape[0] if getattr(x, "ndim", 2) == 3 else 1 for x in (A, B))
    check_int32(M=A.shape[-2], N=B.shape[-1], K=A.shape[-1], batch=batch)
    return dt, A.shape[-2], B.shape[-1], A.shape[-1], batch


def _c_aligned(C, dt: str, m: int, n: int) -> bool:
    """Whether a TMA store can take C: its address and leading dimension are multiples of 16
    bytes (for C=None, the C ``gemm`` allocates: contiguous, N per row)."""
    item = ELEM_BYTES[stored_as(dt)]
    if C is None:
        return n * item % 16 == 0
    try:
        item = ELEM_BYTES[_c_dtype(C, dt)]
        op = describe(C, "C", _c_dtype(C, dt))
    except Exception:  # noqa: BLE001 - the launch's own checks report a bad C
        return True
    return op.ptr % 16 == 0 and all(ld * item % 16 == 0 for ld in op.lds.values())


def gemm(A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
         epilogue: str | None = None, dtype: str | None = None, db: str | None = None,
         math: str = "native", stream=None, scale_a=None, scale_b=None, out_dtype=None,
         fast_accum: bool = False, **tree):
    """C = act(alpha * A @ B + beta * C + bias) with the best known gemmgen kernel for this
    GPU and shape.

    A (M x K) and B (K x N), or 3-D batches, as the kernels take them (NumPy, GPUArray, CuPy,
    PyTorch; see ``Kernel.__call__``), each row- or column-major: the kernel's layout follows
    the operands. ``epilogue`` (one of ``gemmgen.model.config.EPILOGUES``; default "bias" when
    ``bias`` is given, else "none") is fused. ``dtype`` defaults to A's (float32 -> fp32,
    float16 -> fp16, bfloat16 -> bf16); pass "tf32" to run float32 data on tensor cores. The
    kernel is the tuning database's winner (``db``, default ``gemmgen.heuristics.tunedb.default_path()``)
    for this exact shape, else for the nearest tuned shape, else the default preset of the
    fastest family for the dtype on this GPU, fitted to the shape (swapped operands for a
    small M, split-K, tile by wave; see ``gemmgen.heuristics.select.decide`` and ``gemmgen explain``). ``math="3xtf32"``
    on float32 operands runs FP32-accurate 3xTF32 on tensor cores (Hopper; elsewhere the
    IEEE fp32 kernel); the default keeps IEEE float32 for float32 data. ``stream``: None
    (the legacy default stream), a PyCUDA ``Stream``, a PyTorch or CuPy stream, or a raw
    ``CUstream`` handle (int), e.g. ``torch.cuda.current_stream().cuda_stream`` (then the
    launch goes through ``gemmgen.runtime.driver`` and may be captured into a CUDA graph). With
    alpha == 0, A and B are not read (BLAS). PyTorch and CuPy operands whose signature (kind,
    shape, strides, dtype, device; not the pointer) was seen before are launched without
    repeating the checks.

    FP8 (Hopper; A and B float8, ``scale_a``, ``scale_b``, ``out_dtype``, ``fast_accum``):
    see ``fp8_gemm``.

    Epilogue trees and the dual GEMM (operands as keywords): ``gemmgen.runtime.tree_api``.
    Raises ``OperandError`` for bad arguments, ``ValueError`` for an unknown epilogue or an
    unsupported dtype, ``BuildError`` when a kernel does not compile, ``ImportError`` without
    PyCUDA and ``RuntimeError`` without a CUDA driver or device.
    """
    if scale_a is not None or scale_b is not None or is_fp8(A, dtype):
        return fp8_gemm(A, B, C, scale_a=1.0 if scale_a is None else scale_a,
                        scale_b=1.0 if scale_b is None else scale_b, out_dtype=out_dtype,
                        bias=bias, fast_accum=fast_accum, epilogue=epilogue, dtype=dtype, db=db,
                        stream=stream, alpha=alpha, beta=beta)
    alpha, beta = check_scalars(alpha, beta)
    if (epi := parse_epilogue(epilogue)) and (epi.is_tree or tree.get("up") is not None):
        return _tree_call(A, B, C, epi, alpha, beta, bias, dtype, db, math, stream, tree)
    epilogue = _plain_epilogue(epi, tree)
    sigs = (signature(A), signature(B), signature(C), signature(bias))
    if None not in sigs:  # the fast path
        plan = _cached_plan((*sigs, alpha, beta, epilogue, dtype, db, math), C, beta,
                            lambda: plan_for(A, B, C, bias, alpha, beta, epilogue, dtype, db,
                                             math))
        return plan.run(A, B, C, bias, stream=stream)
    kernel, choice, _ = _choice(A, B, C, bias, epilogue, dtype, db, math)
    ops = (transposed(B), transposed(A), transposed(C)) if choice.swap else (A, B, C)
    out = kernel(*ops, alpha=alpha, beta=beta, bias=bias, stream=stream)
    if choice.swap:
        return C if C is not None else transposed(out)
    return out


def _tree_call(A, B, C, epi, alpha, beta, bias, dtype, db, math, stream, tree: dict):
    """``gemm`` with an epilogue tree or the dual GEMM (``tree_api``): device operands take
    the fast path, a plan per signature (the tree operands' too, and where ``up`` lies from
    B, which the dual GEMM's recipe may encode), as plain ``gemm`` calls do."""
    if math != "native":
        raise ValueError("epilogue trees run in the inputs' own precision (math='native')")
    unknown = set(tree) - set(EXTRA)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    sigs = (signature(A), signature(B), signature(C), signature(bias),
            *(signature(tree.get(name)) for name in EXTRA))
    if None in sigs:
        return tree_gemm(A, B, C, epi, tree_problem(A, B, C, bias, dtype), alpha=alpha,
                         beta=beta, bias=bias, db=db, stream=stream, **tree)
    up = tree.get("up")
    key = ("tree", *sigs, address(up) - address(B) if up is not None else 0, alpha, beta,
           epi.spelling, dtype, db)
    plan = _cached_plan(key, C, beta, lambda: tree_plan(
        A, B, C, epi, tree_problem(A, B, C, bias, dtype), alpha=alpha, beta=beta, bias=bias,
        db=db, **tree))
    return plan.run_tree(A, B, C, bias, tree, stream=stream)


def _cached_plan(key: tuple, C, beta: float, make):
    """The plan of ``key`` (an operand signature with its arguments), made by ``make()`` (every
    check, the kernel's choice and build) the first time and kept (``PLAN_CACHE`` plans, then
    cleared whole). A kept plan checks only what its signature cannot hold: C is required
    when beta != 0."""
    plan = _PLANS.get(key)
    if plan is None:
        plan = make()
        if len(_PLANS) >= PLAN_CACHE:
            _PLANS.clear()
        _PLANS[key] = plan
    elif C is None and beta != 0:
        raise OperandError("C is required when beta != 0 (beta scales the existing C)")
    return plan


def tree_problem(A, B, C, bias, dtype) -> tuple:
    """``tree_api``'s problem tuple: (dtype, M, N, K, batch, layout, C aligned, device)."""
    dt, m, n, k, batch = _problem(A, B, dtype, "native")
    return (dt, m, n, k, batch, layout_of(A, B, C, dt), _c_aligned(C, dt, m, n),
            operand_device(A, B, C, bias))


def _plain_epilogue(epi, tree: dict) -> str | None:
    """One of EPILOGUES (perhaps written as its expression), or None; ``OperandError`` for
    tree operands it does not read."""
    given = [k for k, v in tree.items() if v is not None]
    if given:
        raise OperandError(f"{', '.join(given)} given, but epilogue "
                           f"{epi.spelling if epi else None!r} reads none of them (an epilogue "
                           f"tree does: e.g. 'acc*row_scale + R')")
    return epi.spelling if epi is not None else None


def _choice(A, B, C, bias, epilogue, dtype, db, math) -> tuple:
    """(Kernel, Choice, device) for ``gemm``'s operands (built once per process and kind of
    GPU)."""
    dt, m, n, k, batch = _problem(A, B, dtype, math)
    lay = layout_of(A, B, C, dt)
    epi = epilogue or ("bias" if bias is not None else "none")
    device = operand_device(A, B, C, bias)
    return (*_kernel_for(dt, m, n, k, db, lay, epi, _c_aligned(C, dt, m, n), math, batch,
                         device), device)


def plan_for(A, B, C, bias, alpha: float, beta: float, epilogue: str | None = None,
             dtype: str | None = None, db: str | None = None, math: str = "native"):
    """The launch plan (``gemmgen.runtime.plans.Plan``) of ``gemm`` for device operands
    (PyTorch tensors, CuPy arrays) with this signature: every check, the kernel's choice and
    build, and its recipe. Raises as ``gemm`` does."""
    kernel, choice, device = _choice(A, B, C, bias, epilogue, dtype, db, math)
    ops = (transposed(B), transposed(A), transposed(C)) if choice.swap else (A, B, C)
    return plan_gemm(kernel, *ops, bias, alpha, beta, device, choice, choice.swap)


def chosen(A, B, dtype: str | None = None, db: str | None = None, epilogue: str = "none",
           math: str = "native"):
    """(Kernel, how) that ``gemm`` used for these operands (with C=None), or None if not
    called yet; ``chosen_choice`` gives the whole ``Choice``."""
    found = chosen_choice(A, B, dtype, db, epilogue, math)
    return None if found is None else (found[0], found[1].how)


def chosen_choice(A, B, dtype: str | None = None, db: str | None = None,
                  epilogue: str = "none", math: str = "native"):
    """(Kernel, Choice) that ``gemm`` used for these operands (with C=None), or None."""
    dt, m, n, k, batch = _problem(A, B, dtype, math)
    key = (dt, m, n, k, db, layout_of(A, B, None, dt), epilogue, _c_aligned(None, dt, m, n),
           math, batch, *device_identity(operand_device(A, B)))
    return _KERNELS.get(key)


# ---- FP8 operands ------------------------------------------------------------------------

def is_fp8(A, dtype=None) -> bool:
    """Whether ``gemm`` should take the FP8 path for A (its dtype, or ``dtype``)."""
    if isinstance(dtype, (tuple, list)) or dtype in FP8_DTYPES:
        return True
    return array_dtype(A) in FP8_DTYPES


def _fp8_key(args: Fp8Args, fast: bool, epilogue: str, db, gpu: str, cc: int,
             quant: str = "none") -> tuple:
    """The key of an FP8 kernel's choice: the operands' dtypes, scaling, accumulation,
    extents, epilogue, an e4m3 D's quantization, tuning database and kind of GPU."""
    return (args.a_dtype, args.b_dtype, args.out, args.scaling, fast, args.m, args.n, args.k,
            epilogue, db, gpu, cc, quant)


def kernel_for(args: Fp8Args, fast: bool, epilogue: str, db, device: int,
               quant: str = "none") -> tuple:
    """(Kernel, Choice) for checked arguments on ``device`` (built once per process and kind
    of GPU); ``quant``: an e4m3 D's "tensor" or "1x128" scaling. Raises ``ValueError`` on a
    GPU the fp8 family cannot run on (sm_90a only)."""
    gpu, cc = device_identity(device)
    get_family("fp8").arch_for(cc)
    key = _fp8_key(args, fast, epilogue, db, gpu, cc, quant)
    if key not in _KERNELS:
        choice = choose_fp8(args.m, args.n, args.k, args.scaling, fast, args.a_dtype,
                            args.b_dtype, args.out, epilogue, sm_count(device), _tune_db(db), gpu,
                            quant=quant)
        with driver.on_device(device):
            _KERNELS[key] = (build(choice.config), choice)
    return _KERNELS[key]


def _scale_signature(x):
    """A scale's signature: "number" for a Python number (made a device scalar per call)."""
    if x is None or is_number(x):
        return ("number",)
    return signature(x)


def _wide_out(args: Fp8Args) -> Fp8Args:
    """``args``, whose D is bf16, fp16 or fp32. Raises ``OperandError`` for an e4m3 D: its
    scales and amax come with ``gemmgen.torch.scaled_mm_quantized``."""
    if args.out == "e4m3":
        raise OperandError("out_dtype e4m3: an FP8 D is quantized with scales and an amax, "
                           "which gemmgen.torch.scaled_mm_quantized writes; gemm writes bf16, "
                           "fp16 or fp32")
    return args


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
    sigs = (signature(A), signature(B), signature(D), signature(bias), _scale_signature(scale_a),
            _scale_signature(scale_b))
    if None not in sigs and sigs[0][0] != "numpy":
        key = (*sigs, str(out_dtype), fast_accum, epi, str(dtype), db)
        plan = _PLANS.get(key)
        if plan is None:
            args = _wide_out(check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype))
            device = device_of(args)
            kernel, _ = kernel_for(args, fast_accum, epi, db, device)
            plan = plan_scaled(kernel, args, device)
            if len(_PLANS) >= PLAN_CACHE:
                _PLANS.clear()
            _PLANS[key] = plan
        return plan.run(A, B, D, bias, scale_a, scale_b, stream=stream)
    args = _wide_out(check_fp8(A, B, scale_a, scale_b, D, bias, out_dtype, dtype))
    kernel, _ = kernel_for(args, fast_accum, epi, db, device_of(args))
    return launch_fp8(kernel, A, B, scale_a, scale_b, D, bias=bias, stream=stream, args=args)


def chosen_fp8(A, B, scale_a=1.0, scale_b=1.0, out_dtype=None, fast_accum: bool = False,
               epilogue: str = "none", dtype=None, db=None):
    """(Kernel, Choice) ``gemm`` used for these FP8 operands, or None if not called yet."""
    args = check_fp8(A, B, scale_a, scale_b, None, None, out_dtype, dtype)
    return _KERNELS.get(_fp8_key(args, fast_accum, epilogue, db,
                                 *device_identity(device_of(args))))


