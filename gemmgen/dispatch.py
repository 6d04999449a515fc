"""Dispatch: ``gemmgen.gemm`` picks a kernel for the operands and launches it.

The choice, per (GPU, dtype, shape, layout, epilogue): the tuning database's winner for the
shape, else for the nearest tuned shape, else the default preset of the fastest family that
runs on this GPU and can take the layout (wgmma on sm_90 for fp16/bf16/tf32, mma on older
GPUs or where wgmma cannot read the layout, SIMT for fp32).

For the wgmma family the default preset is then shaped to the problem (``decide``): a small M
is moved to wgmma's narrow N by computing C^T = B^T A^T (swapped operands), a small N narrows
the tile, the tile with the fewest idle SMs in its last wave is taken, K is split when the
tiles fill less than a quarter of the SMs, and a C that TMA cannot store to gets direct
stores. Operands TMA cannot read are repacked or sent to the fallback kernel at launch
(``gemmgen.launch_tma``). ``explain`` says all of this for one problem.

Device operands take a fast path: the first call with a given operand signature (kind, shape,
strides, dtype, device; not the pointer) runs every check and builds a launch plan; later
calls with the same signature only read the pointers and launch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import cost
from .dtypes import ELEM_BYTES, dtype_name_of, stored_as
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


FLIP = {"r": "c", "c": "r"}
MATHS = ("native", "3xtf32")
"""``gemm(math=...)``: the dtype's own products, or 3xTF32 on float32 data."""


@dataclass
class Choice:
    """What ``gemm`` runs for one problem: the kernel ``config``, ``how`` it was found
    ("exact", "nearest", "default" or "default, shaped"), ``swap`` (the kernel computes
    C^T = B^T A^T: its M is the caller's N) and the ``reasons``, one line each."""

    config: object
    how: str
    swap: bool = False
    reasons: list = field(default_factory=list)


def math_dtype(dtype: str, math_: str) -> str:
    """The dtype a ``math_`` choice runs on float32 data of ``dtype``: tf32 for "3xtf32",
    ``dtype`` itself for "native". Raises ``ValueError`` for an unknown ``math_`` or 3xTF32 on
    data that is not float32."""
    if math_ not in MATHS:
        raise ValueError(f"unknown math {math_!r}; known: {', '.join(MATHS)}")
    if math_ == "native":
        return dtype
    if dtype not in ("tf32", "fp32"):
        raise ValueError(f"math='3xtf32' takes float32 data; got dtype {dtype!r}")
    return "tf32"


def tight_lds(layout: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """lda, ldb, ldc of contiguous M x K, K x N and M x N matrices laid out as ``layout``."""
    return ((k if layout[0] == "r" else m), (n if layout[1] == "r" else k),
            (n if layout[2] == "r" else m))


def decide(db: TuneDB | None, gpu: str, dtype: str, m: int, n: int, k: int,
           cc: int | None = None, layout: str = "rrr", epilogue: str = "none",
           c_aligned: bool = True, math_: str = "native", batch: int = 1) -> Choice:
    """The ``Choice`` for one problem: ``choose``'s kernel (a tuned winner is taken as it
    is), then, for a default wgmma preset, the shape rules of this module's docstring.
    ``c_aligned``: C's address and leading dimension are multiples of 16 bytes (else a TMA
    store cannot take it). ``math_="3xtf32"`` (dtype tf32) takes preset wgmma_3xtf32 where
    wgmma runs, else the SIMT fp32 kernel (IEEE float32 is at least as accurate). Raises
    ``ValueError`` as ``choose`` does, or for an unknown ``math_``."""
    math_dtype(dtype, math_)  # the checks
    if math_ == "3xtf32":
        if "wgmma" in {f.name for f in families_for("tf32", cc)}:
            cfg = PRESETS["wgmma_3xtf32"].config.replace(layout=layout, epilogue=epilogue)
            why = ["3xTF32: float32 operands split into tf32 big + small parts, three tensor-"
                   "core products per element, FP32-level accuracy (preset wgmma_3xtf32)"]
            if not c_aligned:
                why.append("C is not 16-byte aligned: direct stores (the preset's own)")
            return Choice(cfg, "default", False, why)
        dtype = "fp32"
    cfg, how = choose(db, gpu, dtype, m, n, k, cc, layout, epilogue)
    reasons = [f"{cfg.family} family, " + {"exact": "tuned for this shape",
                                           "nearest": "tuned for the nearest shape",
                                           "default": "its default preset"}[how]]
    if cfg.family != "wgmma" or how != "default":
        if cfg.family == "wgmma" and not c_aligned and cfg.store == "tma":
            cfg = cfg.replace(store="direct")
            reasons.append("C is not 16-byte aligned: direct stores instead of the TMA store")
        return Choice(cfg, how, False, reasons)
    return _shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons)


def _shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons) -> Choice:
    """The wgmma default preset fitted to an M x N x K problem (see the module docstring)."""
    swap = False
    changes: dict = {}
    if m <= SWAP_M and n > m and not epilogue.startswith("bias"):
        swap = True
        m, n = n, m
        layout = FLIP[layout[1]] + FLIP[layout[0]] + FLIP[layout[2]]
        changes["layout"] = layout
        reasons.append(f"M = {n} is small: computing C^T = B^T A^T puts it on wgmma's N, which "
                       f"can be as narrow as 8 (wgmma's M is 64 per warpgroup); layout {layout}")
    elif m <= SWAP_M and epilogue.startswith("bias"):
        reasons.append(f"M = {m} is small, but the bias runs along N: operands not swapped")
    bn_small = max(8, -(-n // 8) * 8)
    if bn_small < cfg.bn:
        tiles = [(cfg.bm, bn_small), (64, bn_small)]  # 64 rows: twice the CTAs to stream A
        reasons.append(f"N = {n}: one {bn_small}-column tile (wgmma N in steps of 8)")
    elif m <= 64:
        tiles = [(64, cfg.bn)]
        reasons.append(f"M = {m}: one 64-row tile computed by one consumer warpgroup")
    else:
        tiles = [(cfg.bm, cfg.bn)] + [t for t in ALT_TILES if t != (cfg.bm, cfg.bn)]
    eff = {t: cost.wave_efficiency(cost.tiles_of(m, n, *t, batch)) for t in tiles}
    best = max(tiles, key=eff.get)
    if best != (cfg.bm, cfg.bn):
        changes.update(bm=best[0], bn=best[1])
        if len(tiles) > 1 and eff[best] > eff[tiles[0]]:
            reasons.append(
                f"tile {best[0]}x{best[1]}: its last wave leaves {100 * (1 - eff[best]):.0f}% "
                f"of the SMs idle against {100 * (1 - eff[tiles[0]]):.0f}% for "
                f"{tiles[0][0]}x{tiles[0][1]}")
    if best[0] == 64 and cfg.consumers == 2:  # one 64-row wgmma tile: one consumer
        changes.update(consumers=1, regs_producer=0, regs_consumer=0)
    tiles_n = cost.tiles_of(m, n, *best, batch)
    split = cost.split_k_for(m, n, k, batch, best[0], best[1], cfg.bk)
    if split > 1:
        changes["split_k"] = split
        reasons.append(f"{tiles_n} tiles fill {100 * tiles_n / cost.SMS:.0f}% of {cost.SMS} SMs: "
                       f"K split into {split} slices, fp32 partial sums reduced by a second "
                       f"kernel (deterministic)")
    else:
        reasons.append(f"{tiles_n} tiles: {tiles_n / cost.SMS:.2f} waves on {cost.SMS} SMs, "
                       f"K not split")
    if cfg.store == "tma" and (swap or split > 1 or not c_aligned or best[1] < 64):
        changes["store"] = "direct"
        why = ("split-K stores partial sums" if split > 1 else
               "C is not 16-byte aligned" if not c_aligned else "a narrow or transposed C tile")
        reasons.append(f"direct stores: {why}")
    if tiles_n < cost.SMS:  # under one wave: memory-bound, keep as many loads in flight as fit
        deepest = next((st for st in range(MAX_STAGES, cfg.stages, -1)
                        if not cfg.replace(check=False, **{**changes, "stages": st}).violations()),
                       cfg.stages)
        if deepest != cfg.stages:
            changes["stages"] = deepest
            reasons.append(f"{deepest} stages: under one wave the SMs stream operands, so the "
                           f"ring is as deep as shared memory allows")
    shaped = cfg.replace(check=False, **changes)
    broken = shaped.violations()
    if broken and "bn" in changes:  # e.g. a row-major B loads whole 128-byte blocks
        sw = shaped.sw_elems
        shaped = shaped.replace(check=False, bn=min(cfg.bn, -(-shaped.bn // sw) * sw))
        reasons.append(f"tile N rounded up to {shaped.bn}: "
                       f"{', '.join(v.rule.name for v in broken)}")
    if shaped.violations():
        broken = ", ".join(f"{v.rule.id} {v.rule.name}" for v in shaped.violations())
        reasons.append(f"shaping the preset broke {broken}: the preset runs as it is")
        return Choice(cfg.replace(layout=layout) if swap else cfg, "default", swap, reasons)
    return Choice(shaped, "default, shaped" if changes else "default", swap, reasons)


MAX_STAGES = 8
"""The deepest ring the shape rules ask for (decode shapes measured 6 against 3 stages: 363
against 220 TFLOP/s at 128 x 8192 x 8192 swapped; a 64-row tile with 8 stages, 128 CTAs,
409 TFLOP/s; paths_NVIDIA_H200.json)."""
SWAP_M = 128
"""Swap operands when M is at most this (and N is larger): measured at M = 1..128 x 8192 x
8192 (decode rows of paths_NVIDIA_H200.json)."""
ALT_TILES = ((256, 128), (128, 256))
"""Tiles weighed against the preset's by their last wave's idle SMs."""


def explain(dtype: str, m: int, n: int, k: int, layout: str = "rrr", epilogue: str = "none",
            lds: tuple | None = None, math_: str = "native", cc: int = 90,
            gpu: str = "NVIDIA H200", db: str | None = None, batch: int = 1) -> str:
    """Text: the kernel ``gemm`` would run for this problem on a GPU of compute capability
    ``cc`` and why: family, tile, waves, split, swap, store, and the path of operands TMA
    cannot read (``lds``: lda, ldb, ldc; default tight, i.e. K, N and N for rrr)."""
    item = ELEM_BYTES[dtype]
    lda, ldb, ldc = lds or tight_lds(layout, m, n, k)
    c_ok = ldc * ELEM_BYTES[stored_as(dtype)] % 16 == 0
    tdb = TuneDB(db) if db else None
    ch = decide(tdb, gpu, dtype, m, n, k, cc, layout, epilogue, c_ok, math_, batch)
    cfg = ch.config
    lines = [f"{m}x{n}x{k} {dtype} layout {layout} epilogue {epilogue}"
             f"{f' batch {batch}' if batch > 1 else ''} on sm_{cc}:",
             f"  kernel  {cfg.name}", f"  how     {ch.how}",
             f"  config  {cfg.brief()}"]
    lines += [f"  - {r}" for r in ch.reasons]
    if cfg.family == "wgmma" and getattr(cfg, "math", "native") != "3xtf32":
        km, kn = (n, m) if ch.swap else (m, n)
        bad = [name for name, ld in (("A", lda), ("B", ldb)) if ld * item % 16]
        if bad:
            packs = {name: (*cost.stored_shape(name, layout, m, n, k), 1) for name in bad}
            est = cost.unaligned(km, kn, k, batch, dtype, packs)
            lines.append(f"  - {' and '.join(bad)}: rows not a multiple of 16 bytes, which TMA "
                         f"needs; predicted: " + "; ".join(str(e) for e in est)
                         + f" -> {est[0].path}")
        else:
            lines.append("  - A and B rows are multiples of 16 bytes: TMA reads them as they are")
    flops = 2.0 * m * n * k * batch
    rate = cost.RATE.get((cfg.family, cfg.dtype))
    if rate:
        three = getattr(cfg, "math", "") == "3xtf32"
        lines.append(f"  compute at the family's sustained {rate / 1e12:.0f} TFLOP/s"
                     f"{' (three products per element)' if three else ''}: "
                     f"{flops * (3 if three else 1) / rate * 1e6:.1f} us"
                     + ("" if flops >= 1e9 else " (small problems are bound by launch and "
                                                "memory, not by this)"))
    return "\n".join(lines)


def layout_of(A, B, C=None, dtype: str = "fp32") -> str:
    """The layout string of the operands: each row-major (r) if its strides allow, else c."""
    from .operands import describe
    ops = [describe(A, "A", dtype), describe(B, "B", dtype)]
    lay = "".join("r" if "r" in op.lds else "c" for op in ops)
    if C is None:
        return lay + "r"
    return lay + ("r" if "r" in describe(C, "C", stored_as(dtype)).lds else "c")


def _device() -> tuple[str, int]:
    """(name, compute capability) of the current GPU, read once."""
    if not _DEVICE:
        from .build import pycuda_modules
        drv, _ = pycuda_modules()
        dev = drv.Context.get_device()
        major, minor = dev.compute_capability()
        _DEVICE.update(name=dev.name(), cc=10 * major + minor)
    return _DEVICE["name"], _DEVICE["cc"]


def _kernel_for(dt: str, m: int, n: int, k: int, db, lay: str, epi: str, c_aligned: bool = True,
                math_: str = "native", batch: int = 1):
    """(Kernel, Choice) for one problem, built once per process."""
    key = (dt, m, n, k, db, lay, epi, c_aligned, math_, batch)
    if key not in _KERNELS:
        from .build import build
        gpu, cc = _device()
        path = str(db) if db else ""
        if path not in _DBS:
            _DBS[path] = TuneDB(db)
        choice = decide(_DBS[path], gpu, dt, m, n, k, cc, lay, epi, c_aligned, math_, batch)
        _KERNELS[key] = (build(choice.config), choice)
    return _KERNELS[key]


def _problem(A, B, dtype: str | None, math_: str) -> tuple:
    """(dtype the kernel runs, M, N, K, batch) of ``gemm``'s operands: the dtype is
    ``dtype`` or A's, through ``math_dtype``; the batch is the larger leading extent of 3-D
    operands (1 for matrices)."""
    dt = math_dtype(dtype or dtype_name_of(A), math_)
    batch = max(x.shape[0] if getattr(x, "ndim", 2) == 3 else 1 for x in (A, B))
    return dt, A.shape[-2], B.shape[-1], A.shape[-1], batch


def _t(x):
    """The transpose of a matrix or of each matrix of a batch, as a view (None stays None)."""
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        return x.transpose(-2, -1)
    return x.swapaxes(-1, -2)


def _c_aligned(C, dt: str, m: int, n: int) -> bool:
    """Whether a TMA store can take C: its address and leading dimension are multiples of 16
    bytes (for C=None, the C ``gemm`` allocates: contiguous, N per row)."""
    item = ELEM_BYTES[stored_as(dt)]
    if C is None:
        return n * item % 16 == 0
    from .operands import describe
    try:
        op = describe(C, "C", stored_as(dt))
    except Exception:  # noqa: BLE001 - the launch's own checks report a bad C
        return True
    return op.ptr % 16 == 0 and all(ld * item % 16 == 0 for ld in op.lds.values())


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
    swap: bool = False  # the kernel computes C^T = B^T A^T: B's pointer goes first

    def run(self, A, B, C, alpha: float, beta: float, bias, stream=None):
        out = C if C is not None else self.new_c()
        if self.cupy:
            _sync_cupy_producers(A, B, C, bias)
        if self.m and self.n:
            lda, ldb, ldc = self.lds
            sa, sb, sc = self.strides
            pa, pb, pc, pbias = self.ptrs
            first, second = (B, A) if self.swap else (A, B)  # a transpose keeps the address
            self.kernel.launch_raw(self.m, self.n, self.k, alpha, pa(first), lda, pb(second), ldb,
                                   beta, pc(out), ldc, sa, sb, sc, pbias(bias), self.batch,
                                   stream)
        return out if C is not None or not self.swap else _t(out)


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
         epilogue: str | None = None, dtype: str | None = None, db: str | None = None,
         math: str = "native", stream=None):
    """C = act(alpha * A @ B + beta * C + bias) with the best known gemmgen kernel for this
    GPU and shape.

    A (M x K) and B (K x N), or 3-D batches, as the kernels take them (NumPy, GPUArray, CuPy,
    PyTorch; see ``Kernel.__call__``), each row- or column-major: the kernel's layout follows
    the operands. ``epilogue`` (one of ``gemmgen.model.EPILOGUES``; default "bias" when
    ``bias`` is given, else "none") is fused. ``dtype`` defaults to A's (float32 -> fp32,
    float16 -> fp16, bfloat16 -> bf16); pass "tf32" to run float32 data on tensor cores. The
    kernel is the tuning database's winner (``db``, default ``gemmgen.tunedb.default_path()``)
    for this exact shape, else for the nearest tuned shape, else the default preset of the
    fastest family for the dtype on this GPU, fitted to the shape (swapped operands for a
    small M, split-K, tile by wave; see ``decide`` and ``gemmgen explain``). ``math="3xtf32"``
    on float32 operands runs FP32-accurate 3xTF32 on tensor cores (Hopper; elsewhere the
    IEEE fp32 kernel); the default keeps IEEE float32 for float32 data. ``stream``: None
    (the legacy default stream), a PyCUDA ``Stream``, a PyTorch or CuPy stream, or a raw
    ``CUstream`` handle (int), e.g. ``torch.cuda.current_stream().cuda_stream`` (then the
    launch goes through ``gemmgen.cudrv`` and may be captured into a CUDA graph). With
    alpha == 0, A and B are not read (BLAS). PyTorch and CuPy operands whose signature (kind,
    shape, strides, dtype, device; not the pointer) was seen before are launched without
    repeating the checks.

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
        key = (*sigs, epilogue, dtype, db, math)
        plan = _PLANS.get(key)
        if plan is not None:
            if C is None and beta != 0:
                raise OperandError("C is required when beta != 0 (beta scales the existing C)")
            return plan.run(A, B, C, alpha, beta, bias, stream)
    for name, x in (("A", A), ("B", B)):
        if getattr(x, "ndim", 2) not in (2, 3):
            raise OperandError(f"{name} must be a 2-D matrix or a 3-D batch; got shape "
                               f"{tuple(getattr(x, 'shape', ()))}")
    dt, m, n, k, batch = _problem(A, B, dtype, math)
    lay = layout_of(A, B, C, dt)
    epi = epilogue or ("bias" if bias is not None else "none")
    kernel, choice = _kernel_for(dt, m, n, k, db, lay, epi, _c_aligned(C, dt, m, n), math,
                                 batch)
    if choice.swap:
        if fast:
            plan = _make_plan(kernel, choice.how, _t(B), _t(A), _t(C), bias, beta)
            plan.swap = True
            _PLANS[key] = plan
            return plan.run(A, B, C, alpha, beta, bias, stream)
        out = kernel(_t(B), _t(A), _t(C), alpha=alpha, beta=beta, bias=bias, stream=stream)
        return C if C is not None else _t(out)
    if fast:
        plan = _make_plan(kernel, choice.how, A, B, C, bias, beta)
        _PLANS[key] = plan
        return plan.run(A, B, C, alpha, beta, bias, stream)
    return kernel(A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream)


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
           math, batch)
    return _KERNELS.get(key)
