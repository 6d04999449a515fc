"""Dispatch: gemmgen.gemm picks the tuned kernel for a shape, else the nearest tuned shape, else a default."""
from __future__ import annotations

from .dtypes import dtype_name_of
from .families import config_from_dict, default_family
from .presets import PRESETS
from .tunedb import TuneDB
_KERNELS: dict[tuple, tuple] = {}
_DBS: dict[str, TuneDB] = {}


def choose(db: TuneDB | None, gpu: str, dtype: str, m: int, n: int, k: int,
           cc: int | None = None):
    """(config, how): how is "exact" or "nearest" (a tuned winner) or "default" (the preset
    of the fastest family for ``dtype`` on a device of compute capability ``cc``).
    Raises ``ValueError`` for a dtype no family takes."""
    row, how = db.lookup(gpu, dtype, m, n, k) if db is not None else (None, None)
    if row is not None:
        return config_from_dict(row["config"]), how
    fam = default_family(dtype, cc)
    return PRESETS[fam.defaults[dtype]].config, "default"


def layout_of(A, B, C=None, dtype: str = "fp32") -> str:
    """The layout string of the operands: each row-major (r) if its strides allow, else c."""
    from .operands import describe
    ops = [describe(A, "A", dtype), describe(B, "B", dtype)]
    lay = "".join("r" if "r" in op.lds else "c" for op in ops)
    if C is None:
        return lay + "r"
    out = "fp32" if dtype in ("fp32", "tf32") else dtype
    return lay + ("r" if "r" in describe(C, "C", out).lds else "c")


def gemm(A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
         epilogue: str | None = None, dtype: str | None = None, db: str | None = None):
    """C = alpha * A @ B + beta * C with the best known gemmgen kernel for this GPU and shape.

    A (M x K) and B (K x N), or 3-D batches, as the kernels take them (NumPy, GPUArray, CuPy,
    PyTorch; see ``Kernel.__call__``), each row- or column-major: the kernel's layout follows
    the operands. ``epilogue`` (default "bias" when ``bias`` is given, else "none") is fused.
    ``dtype`` defaults to A's (float32 -> fp32, float16 -> fp16, bfloat16 -> bf16); pass
    "tf32" to run float32 data on tensor cores. The kernel comes from
    the tuning database ``db`` (default ``gemmgen.tunedb.default_path()``): the winner for
    this exact shape, else for the nearest tuned shape, else the dtype's default preset.
    Choices and compiled modules are cached per process, so a repeated call costs a launch.
    Raises ``OperandError`` for bad arguments, ``ValueError`` for an unsupported dtype.
    """
    dt = dtype or dtype_name_of(A)
    m, k = A.shape[-2], A.shape[-1]
    n = B.shape[-1]
    lay = layout_of(A, B, C, dt)
    epi = epilogue or ("bias" if bias is not None else "none")
    cache_key = (dt, m, n, k, db, lay, epi)
    if cache_key not in _KERNELS:
        from .build import build, pycuda_modules
        drv, _ = pycuda_modules()
        gpu = drv.Context.get_device().name()
        path = str(db) if db else ""
        if path not in _DBS:
            _DBS[path] = TuneDB(db)
        cfg, how = choose(_DBS[path], gpu, dt, m, n, k)
        if (cfg.layout, cfg.epilogue) != (lay, epi):
            cfg = cfg.replace(layout=lay, epilogue=epi)
        _KERNELS[cache_key] = (build(cfg), how)
    kernel, _ = _KERNELS[cache_key]
    return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias)


def chosen(A, B, dtype: str | None = None, db: str | None = None, epilogue: str = "none"):
    """(Kernel, how) that ``gemm`` used for these operands, or None if not called yet."""
    dt = dtype or dtype_name_of(A)
    key = (dt, A.shape[-2], B.shape[-1], A.shape[-1], db, layout_of(A, B, None, dt), epilogue)
    return _KERNELS.get(key)
