"""Dispatch: ``gemmgen.gemm`` picks a kernel for the operands and launches it.

The choice, per (GPU, dtype, shape, layout, epilogue): the tuning database's winner for the
shape, else for the nearest tuned shape, else the default preset of the fastest family that
runs on this GPU and can take the layout (wgmma on sm_90 for fp16/bf16/tf32, mma on older
GPUs or where wgmma cannot read the layout, SIMT for fp32).

Device operands take a fast path: the first call with a given operand signature (kind, shape,
strides, dtype, device; not the pointer) runs every check and builds a launch plan; later
calls with the same signature only read the pointers and launch.
"""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import dtype_name_of
from .families import config_from_dict, families_for
from .model import EPILOGUES
from .operands import OperandError, check_gemm, check_scalars
from .presets import PRESETS
from .tunedb import TuneDB

_KERNELS: dict[tuple, tuple] = {}
_PLANS: dict[tuple, "_Plan"] = {}
_DBS: dict[str, TuneDB] = {}
_DEVICE: dict[str, object] = {}


def choose(db: TuneDB | None, gpu: str, dtype: str, m: int, n: int, k: int,
           cc: int | None = None, layout: str = "rrr", epilogue: str = "none"):
    """(config, how) for one problem: how is "exact" or "nearest" (a tuned winner) or
    "default" (a family's preset), the config already in ``layout`` with ``epilogue``.
    Families are tried fastest first among those that run on compute capability ``cc``; one
    whose rules reject the layout (tf32 wgmma reads no row-major B) is passed over.
    Raises ``ValueError`` for a dtype no family takes there."""
    fams = families_for(dtype, cc)
    names = None if cc is None else [f.name for f in fams]
    row, how = db.lookup(gpu, dtype, m, n, k, layout, names) if db is not None else (None, None)
    if row is None and db is not None and layout != "rrr":
        row, how = db.lookup(gpu, dtype, m, n, k, "rrr", names)  # re-laid out below
    candidates = []
    if row is not None:
        candidates.append((config_from_dict(row["config"]), how))
    if not fams:
        raise ValueError(f"no kernel family takes dtype {dtype!r}"
                         + (f" on sm_{cc}" if cc is not None else ""))
    candidates += [(PRESETS[f.defaults[dtype]].config, "default") for f in fams]
    for cfg, how_ in candidates:
        if cc is not None and cfg.family not in {f.name for f in fams}:
            continue  # tuned on another kind of GPU
        trial = cfg.replace(layout=layout, epilogue=epilogue, check=False)
        problems = trial._type_problems()  # e.g. an unknown epilogue name
        if problems:
            raise ValueError("; ".join(problems))
        if not trial.violations():
            return trial, how_
    raise ValueError(f"no {dtype} kernel takes layout {layout!r} with epilogue {epilogue!r}")


def layout_of(A, B, C=None, dtype: str = "fp32") -> str:
    """The layout string of the operands: each row-major (r) if its strides allow, else c."""
    from .operands import describe
    ops = [describe(A, "A", dtype), describe(B, "B", dtype)]
    lay = "".join("r" if "r" in op.lds else "c" for op in ops)
    if C is None:
        return lay + "r"
    out = "fp32" if dtype in ("fp32", "tf32") else dtype
    return lay + ("r" if "r" in describe(C, "C", out).lds else "c")


def _device() -> tuple[str, int]:
    """(name, compute capability) of the current GPU, read once."""
    if not _DEVICE:
        from .build import pycuda_modules
        drv, _ = pycuda_modules()
        dev = drv.Context.get_device()
        major, minor = dev.compute_capability()
        _DEVICE.update(name=dev.name(), cc=10 * major + minor)
    return _DEVICE["name"], _DEVICE["cc"]


def _kernel_for(dt: str, m: int, n: int, k: int, db, lay: str, epi: str):
    """(Kernel, how) for one problem, built once per process."""
    key = (dt, m, n, k, db, lay, epi)
    if key not in _KERNELS:
        from .build import build
        gpu, cc = _device()
        path = str(db) if db else ""
        if path not in _DBS:
            _DBS[path] = TuneDB(db)
        cfg, how = choose(_DBS[path], gpu, dt, m, n, k, cc, lay, epi)
        _KERNELS[key] = (build(cfg), how)
    return _KERNELS[key]


# ---- the fast path for device arrays ------------------------------------------------------
ABSENT = ("absent",)
"""The signature of an operand that was not given (C or bias)."""


def _signature(x):
    """What the checks of a device operand depend on (not its pointer): its kind, shape,
    strides, dtype and device. ``ABSENT`` for None; None for every other kind (NumPy arrays,
    GPUArrays), which then take the full path on every call."""
    if x is None:
        return ABSENT
    mod = type(x).__module__
    if mod.startswith("torch"):
        return ("torch", x.shape, x.stride(), x.dtype, x.device)
    if mod.startswith("cupy"):
        return ("cupy", x.shape, x.strides, x.dtype.str, x.device.id)
    return None


def _reader(x):
    """How to read the device address of an operand of ``x``'s kind (the first element of the
    view): ``tensor.data_ptr()`` for PyTorch, ``array.data.ptr`` for CuPy; 0 for an absent one."""
    if x is None:
        return lambda _: 0
    if type(x).__module__.startswith("torch"):
        return lambda t: t.data_ptr()
    return lambda a: a.data.ptr


@dataclass
class _Plan:
    """A checked launch for one operand signature: the kernel, extents, leading dimensions,
    batch strides, and how to make C. ``cupy``: some operand is a CuPy array, whose
    ``__cuda_array_interface__`` stream is honoured on every call."""

    kernel: object
    how: str
    m: int
    n: int
    k: int
    batch: int
    lds: tuple[int, int, int]
    strides: tuple[int, int, int]
    new_c: object
    cupy: bool
    ptrs: tuple  # address readers of A, B, C (or the new C) and bias

    def run(self, A, B, C, alpha: float, beta: float, bias):
        out = C if C is not None else self.new_c()
        if self.cupy:
            _sync_cupy_producers(A, B, C, bias)
        if self.m and self.n:
            lda, ldb, ldc = self.lds
            sa, sb, sc = self.strides
            pa, pb, pc, pbias = self.ptrs
            self.kernel.launch_raw(self.m, self.n, self.k, alpha, pa(A), lda, pb(B), ldb, beta,
                                   pc(out), ldc, sa, sb, sc, pbias(bias), self.batch)
        return out


def _sync_cupy_producers(*ops) -> None:
    """__cuda_array_interface__ v3: wait for the device when a CuPy operand was exported on a
    stream other than the default ones (it may still be being written there)."""
    from .launch import _DEFAULT_STREAMS
    for x in ops:
        if x is not None and type(x).__module__.startswith("cupy"):
            if x.__cuda_array_interface__.get("stream") not in _DEFAULT_STREAMS:
                import pycuda.driver as drv
                drv.Context.synchronize()
                return


def _make_plan(kernel, how, A, B, C, bias, beta: float) -> _Plan:
    """Every check ``launch`` makes (operands, specialization, grid limits), once per
    signature, and the launch that follows from them."""
    from .launch import _bstride, allocator, check_launch
    from .operands import describe
    cfg = kernel.config
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out, layout=cfg.layout,
                      bias=bias, needs_bias=cfg.epilogue.startswith("bias"))
    check_launch(kernel, args)
    shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
    col_c = cfg.layout[2] == "c"
    make_c = None if C is not None else allocator(A, shape, cfg.out, col_c)  # C's in the key
    c = args.c or describe(make_c(), "C", cfg.out)
    kinds = {type(x).__module__.split(".")[0] for x in (A, B, C, bias) if x is not None}
    return _Plan(kernel, how, args.m, args.n, args.k, args.batch or 1,
                 (args.ld(args.a, 0), args.ld(args.b, 1), c.lds[cfg.layout[2]]),
                 (_bstride(args.a), _bstride(args.b), _bstride(c)), make_c, "cupy" in kinds,
                 (_reader(A), _reader(B), _reader(C if C is not None else A), _reader(bias)))


def gemm(A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
         epilogue: str | None = None, dtype: str | None = None, db: str | None = None):
    """C = act(alpha * A @ B + beta * C + bias) with the best known gemmgen kernel for this
    GPU and shape.

    A (M x K) and B (K x N), or 3-D batches, as the kernels take them (NumPy, GPUArray, CuPy,
    PyTorch; see ``Kernel.__call__``), each row- or column-major: the kernel's layout follows
    the operands. ``epilogue`` (one of ``gemmgen.model.EPILOGUES``; default "bias" when
    ``bias`` is given, else "none") is fused. ``dtype`` defaults to A's (float32 -> fp32,
    float16 -> fp16, bfloat16 -> bf16); pass "tf32" to run float32 data on tensor cores. The
    kernel is the tuning database's winner (``db``, default ``gemmgen.tunedb.default_path()``)
    for this exact shape, else for the nearest tuned shape, else the default preset of the
    fastest family for the dtype on this GPU (see ``choose``). With alpha == 0, A and B are
    not read (BLAS). PyTorch and CuPy operands whose signature (kind, shape, strides, dtype,
    device; not the pointer) was seen before are launched without repeating the checks.

    Raises ``OperandError`` for bad arguments, ``ValueError`` for an unknown epilogue or an
    unsupported dtype, ``BuildError`` when a kernel does not compile, ``ImportError`` without
    PyCUDA and ``RuntimeError`` without a CUDA driver or device.
    """
    alpha, beta = check_scalars(alpha, beta)
    if epilogue is not None and epilogue not in EPILOGUES:
        raise ValueError(f"unknown epilogue {epilogue!r}; known: {', '.join(EPILOGUES)}")
    sigs = (_signature(A), _signature(B), _signature(C), _signature(bias))
    fast = None not in sigs
    if fast:
        key = (*sigs, epilogue, dtype, db)
        plan = _PLANS.get(key)
        if plan is not None:
            if C is None and beta != 0:
                raise OperandError("C is required when beta != 0 (beta scales the existing C)")
            return plan.run(A, B, C, alpha, beta, bias)
    for name, x in (("A", A), ("B", B)):
        if getattr(x, "ndim", 2) not in (2, 3):
            raise OperandError(f"{name} must be a 2-D matrix or a 3-D batch; got shape "
                               f"{tuple(getattr(x, 'shape', ()))}")
    dt = dtype or dtype_name_of(A)
    m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
    lay = layout_of(A, B, C, dt)
    epi = epilogue or ("bias" if bias is not None else "none")
    kernel, how = _kernel_for(dt, m, n, k, db, lay, epi)
    if fast:
        plan = _make_plan(kernel, how, A, B, C, bias, beta)
        _PLANS[key] = plan
        return plan.run(A, B, C, alpha, beta, bias)
    return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias)


def chosen(A, B, dtype: str | None = None, db: str | None = None, epilogue: str = "none"):
    """(Kernel, how) that ``gemm`` used for these operands, or None if not called yet."""
    dt = dtype or dtype_name_of(A)
    key = (dt, A.shape[-2], B.shape[-1], A.shape[-1], db, layout_of(A, B, None, dt), epilogue)
    return _KERNELS.get(key)
