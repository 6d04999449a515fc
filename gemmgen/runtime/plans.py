"""Launch plans: the fast path of every call on device arrays (PyTorch, CuPy), one ``Plan``
for every family.

The first call with an operand signature runs every check and keeps what follows from them
(kernel, extents, leading dimensions, strides, scales, how to make the output) as a recipe
whose operand addresses are ``Ref``s; a later call with the same signature reads the
addresses and launches. ``plan_gemm`` makes the plan of a 16-bit or fp32 ``gemm``,
with an epilogue tree or the dual GEMM too, ``plan_scaled`` that of an FP8 one
(``gemmgen.runtime.grouped`` makes the grouped ones).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import driver
from .epilogue_args import EXTRA, UP_INDEX, check_epilogue
from .launch import DEFAULT_STREAMS, allocator, batch_stride, check_launch, check_up, needs_bias
from .operands import OperandError, check_gemm, describe, is_number
from .operands.scales import Fp8Args
from .recipe import KernelArgs, Recipe, Ref, Scale


def transposed(x):
    """The transpose of a matrix or of each matrix of a batch, as a view (None stays None)."""
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        return x.transpose(-2, -1)
    return x.swapaxes(-1, -2)


_SCALARS: dict[tuple, object] = {}
SCALAR_CACHE = 256
ABSENT = ("absent",)
"""The signature of an operand that was not given (C or bias)."""


def signature(x):
    """What the checks and the launches of a device operand depend on (not its address): its
    kind, shape, strides, dtype, device and whether the address is a multiple of 16 bytes (TMA
    needs that). ``ABSENT`` for None; None for every other kind (NumPy arrays, GPUArrays),
    which then take the full path on every call."""
    if x is None:
        return ABSENT
    mod = type(x).__module__
    if mod.startswith("torch"):
        return ("torch", x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0)
    if mod.startswith("cupy"):
        return ("cupy", x.shape, x.strides, x.dtype.str, x.device.id, x.data.ptr % 16 == 0)
    return None


def reader(x, like=None, device: int = 0):
    """How to read the device address of an operand of ``x``'s kind on each call: 0 for an
    absent one, ``tensor.data_ptr()`` for PyTorch, ``array.data.ptr`` for CuPy, the
    ``__cuda_array_interface__`` address otherwise; a number (an FP8 scale) becomes a cached
    one-element float32 array of ``like``'s library on ``device``."""
    if x is None:
        return lambda _: 0
    if is_number(x):
        return lambda v: address(device_scalar(float(v), like, device))
    mod = type(x).__module__
    if mod.startswith("torch"):
        return lambda t: t.data_ptr()
    if mod.startswith("cupy"):
        return lambda a: a.data.ptr
    return address


def address(x) -> int:
    """The device address of an array of any kind (0 for None)."""
    if x is None:
        return 0
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.data_ptr()
    if mod.startswith("cupy"):
        return x.data.ptr
    return int(x.__cuda_array_interface__["data"][0] or 0)


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


@dataclass
class Plan:
    """A checked call for one operand signature, of any family: the ``kernel`` (whose
    ``last_path`` each run sets), its ``recipe``, whose operands are, in order, A, B, the
    output (C or D), then bias (or the grouped offsets or counts), then FP8's scale_a and
    scale_b; ``readers``, how to read each operand's address (``reader``); ``new_out``, how to
    make the output when none is given; ``choice``, the dispatch's ``Choice`` (None when the
    kernel was given). ``swap``: B^T is the kernel's A (16-bit ``gemm`` for a small M).
    ``cupy``: some operand is a CuPy array, whose ``__cuda_array_interface__`` stream is
    honoured on every call."""

    kernel: object
    recipe: Recipe
    readers: tuple
    new_out: object = None
    choice: object = None
    cupy: bool = False
    swap: bool = False

    def run(self, a, b, out=None, extra=None, scale_a=None, scale_b=None, *quant, stream=None):
        """Launch on the operands in the recipe's order (``out`` None: a new one; ``extra``
        the bias or the grouped offsets or counts; the scales FP8's, then an e4m3 D's scale_d
        and amax) on ``stream`` (None, a PyTorch, CuPy or PyCUDA stream or a raw handle) and
        return the output."""
        given = out
        if out is None:
            out = self.new_out()
        if self.swap:           # a transpose keeps the address
            a, b = b, a
        self._launch((a, b, out, extra, scale_a, scale_b, *quant), stream)
        return out if given is not None or not self.swap else transposed(out)

    def run_tree(self, a, b, out=None, bias=None, tree=None, *, stream=None):
        """Launch a plan of ``plan_gemm`` with ``tree``: A, B, C (None: a new one), bias and the tree's
        operands (``tree``: name -> array, as ``gemm``'s keywords) on ``stream``; returns C."""
        if out is None:
            out = self.new_out()
        tree = tree or {}
        self._launch((a, b, out, bias, *(tree.get(name) for name in EXTRA)), stream)
        return out

    def _launch(self, ops: tuple, stream) -> None:
        """The recipe's launches on ``ops`` (its operands in order) on ``stream``."""
        if self.cupy:
            _sync_cupy_producers(*ops)
        ptrs = tuple(read(x) for read, x in zip(self.readers, ops))
        with driver.on_device(self.recipe.device):
            self.recipe.run(ptrs, driver.stream_handle(stream))
        self.kernel.last_path = self.recipe.path


def plan_of(kernel, recipe: Recipe, operands: tuple, new_out=None, choice=None,
            device: int = 0, swap: bool = False) -> Plan:
    """The ``Plan`` of ``recipe`` for example ``operands`` (the recipe's order; the output
    None when ``new_out`` makes it): a reader per operand of its kind, and whether any is a
    CuPy array."""
    like = operands[0]
    kinds = {type(x).__module__.split(".")[0] for x in operands if x is not None}
    readers = tuple(reader(like if i == 2 and x is None else x, like, device)
                    for i, x in enumerate(operands))
    return Plan(kernel, recipe, readers, new_out, choice, "cupy" in kinds, swap)


def _sync_cupy_producers(*ops) -> None:
    """__cuda_array_interface__ v3: wait for the device when a CuPy operand was exported on a
    stream other than the default ones (it may still be being written there)."""
    for x in ops:
        if x is not None and type(x).__module__.startswith("cupy"):
            if x.__cuda_array_interface__.get("stream") not in DEFAULT_STREAMS:
                driver.synchronize()
                return


def plan_gemm(kernel, A, B, C, bias, alpha: float, beta: float, device: int,
              choice=None, swap: bool = False, tree: dict | None = None) -> Plan:
    """Every check ``launch`` makes (operands, specialization, grid limits), once per
    signature, and the recipe that follows from them: the operands' addresses are ``Ref``s,
    patched in on each call. ``alpha`` and ``beta`` are part of the signature (they decide
    whether A, B and C are read); ``device`` is the operands' GPU; ``swap``: A, B and C are
    the caller's transposed (B^T is the kernel's A).

    ``tree``: an epilogue tree's or the dual GEMM's operands (name -> device array or None, as
    ``gemm``'s keywords). Its plan numbers them after A, B, C and bias in ``EXTRA``'s order,
    from 4, and runs by ``Plan.run_tree``. The dual GEMM's recipe may depend on where ``up``
    lies from B (read in place when it follows B, ``gemmgen.runtime.dual``): a caller keying
    plans by signature includes that distance. Raises ``OperandError`` naming a bad operand."""
    cfg = kernel.config
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out, layout=cfg.layout,
                      bias=bias, needs_bias=needs_bias(cfg))
    check_launch(kernel, args)
    fields = {} if tree is None else _tree_fields(cfg, tree, args)
    shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
    col_c = cfg.layout[2] == "c"
    make_c = None if C is not None else allocator(A, shape, cfg.out, col_c)  # C's in the key
    c = args.c or describe(make_c(), "C", cfg.out)
    refs = [Ref(i, p) for i, p in enumerate((args.a.ptr, args.b.ptr, c.ptr,
                                             args.bias.ptr if args.bias else 0))]
    with driver.on_device(device):
        recipe = kernel.launches(KernelArgs(
            args.m, args.n, args.k, refs[0], args.ld(args.a, 0), refs[1], args.ld(args.b, 1),
            refs[2], c.lds[cfg.layout[2]], alpha, beta, batch_stride(args.a),
            batch_stride(args.b), batch_stride(c), refs[3] if args.bias else 0,
            args.batch or 1, **fields), device)
    operands = (A, B, C, bias) + (() if tree is None else tuple(map(tree.get, EXTRA)))
    return plan_of(kernel, recipe, operands, make_c, choice, device, swap)


def _tree_fields(cfg, tree: dict, args) -> dict:
    """The ``KernelArgs`` fields of checked tree operands: the ``EpilogueArgs`` struct and the
    dual GEMM's ``up``, their pointers ``Ref``s of the recipe's numbering."""
    fields = {}
    epi = check_epilogue(cfg, tree, args.m, args.n, args.batch)
    if epi is not None:
        fields["epi"] = epi.block(True)
    up = check_up(cfg, tree.get("up"), args)
    if up is not None:
        op, ld, stride = up
        fields["up"] = (Ref(UP_INDEX, op.ptr), ld, stride)
    return fields


COMPATIBLE = {"tensor": ("tensor",), "row": ("tensor", "row"), "block": ("block",)}
"""FP8 kernel scaling -> the scalings of arguments it computes (a row kernel broadcasts
scalars)."""


def check_scaled_kernel(kernel, args: Fp8Args, quant: tuple | None = None) -> None:
    """An fp8-family ``kernel`` computes these arguments: dtypes, D's dtype, scaling and bias,
    an e4m3 D has its ``quant`` operands, and M is at most the kernel's ``a_rows`` where it
    has one. Raises ``OperandError`` naming the mismatch."""
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
    if cfg.out == "e4m3" and quant is None:
        raise OperandError("an e4m3 D needs its scale_d and amax operands "
                           "(gemmgen.torch.scaled_mm_quantized passes them)")
    if cfg.epilogue.startswith("bias") != (args.bias is not None):
        raise OperandError("bias " + ("is required by" if args.bias is None else "given, but")
                           + f" this kernel's epilogue {cfg.epilogue!r}")
    if getattr(cfg, "a_rows", 0) and args.m > cfg.a_rows:
        raise OperandError(f"A has {args.m} rows; this kernel loads {cfg.a_rows} rows of A a "
                           f"tile (a_rows {cfg.a_rows}): M of {cfg.a_rows} or less only")


def plan_scaled(kernel, args: Fp8Args, device: int, quant: tuple | None = None) -> Plan:
    """The plan of an fp8-family ``kernel`` for checked device arguments (operands 0 A, 1 B,
    2 D, 3 bias, 4 scale_a, 5 scale_b; a scale given as a number is a device scalar per call).
    An e4m3 D's ``quant`` = (scale_d, sd_m, sd_n, amax): device float32 arrays, scale_d read
    per tensor or written at [m * sd_m + nb * sd_n] per 1 x 128 (operand 6), amax one element
    (operand 7)."""
    check_scaled_kernel(kernel, args, quant)
    new_d = None if args.d is not None else allocator(args.a.obj, (args.m, args.n), args.out,
                                                      False)
    d_obj = args.d.obj if args.d is not None else new_d()
    like = args.a.obj
    extra = (quant[0], quant[3]) if quant else ()
    ops = (like, args.b.obj, args.d.obj if args.d is not None else None,
           args.bias.obj if args.bias else None, args.scale_a.obj, args.scale_b.obj, *extra)
    ptrs = (args.a.ptr, args.b.ptr, address(d_obj), args.bias.ptr if args.bias else 0,
            *(address(device_scalar(s.obj, like, device)) if s.kind == "number" else s.ptr
              for s in (args.scale_a, args.scale_b)), *(address(x) for x in extra))
    refs = [Ref(i, p) for i, p in enumerate(ptrs)]
    ldd = args.d.lds["r"] if args.d is not None else args.n
    fields = dict(scale_d=Scale(refs[6], quant[1], quant[2]), amax=refs[7]) if quant else {}
    with driver.on_device(device):
        recipe = kernel.launches(KernelArgs(
            args.m, args.n, args.k, refs[0], args.lda, refs[1], args.ldb, refs[2], ldd,
            bias=refs[3] if args.bias else 0, a_k_major=args.a_k_major,
            b_k_major=args.b_k_major, scale_a=Scale(refs[4], args.a_layout.s0, args.a_layout.s1),
            scale_b=Scale(refs[5], args.b_layout.s0, args.b_layout.s1), **fields), device)
    return plan_of(kernel, recipe, ops, new_d, None, device)
