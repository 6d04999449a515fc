"""Launch plans: the fast path of ``gemmgen.gemm`` for device arrays (PyTorch, CuPy).

The first call with an operand signature runs every check ``launch`` makes and keeps what
follows from them (kernel, extents, leading dimensions, batch strides, how to make C); a later
call with the same signature reads the pointers and launches.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import driver
from .launch import DEFAULT_STREAMS, allocator, batch_stride, check_launch
from .operands import check_gemm, describe
from .recipe import KernelArgs, Recipe, Ref


def transposed(x):
    """The transpose of a matrix or of each matrix of a batch, as a view (None stays None)."""
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        return x.transpose(-2, -1)
    return x.swapaxes(-1, -2)


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


def _reader(x):
    """How to read the device address of an operand of ``x``'s kind (the first element of the
    view): ``tensor.data_ptr()`` for PyTorch, ``array.data.ptr`` for CuPy; 0 for an absent one."""
    if x is None:
        return lambda _: 0
    if type(x).__module__.startswith("torch"):
        return lambda t: t.data_ptr()
    return lambda a: a.data.ptr


@dataclass
class Plan:
    """A checked call for one operand signature: the ``kernel`` (whose ``last_path`` each run
    sets), its ``recipe`` (launches with the places the operands' addresses go: 0 A, 1 B, 2 C,
    3 bias; with ``swap`` B^T is the kernel's A),
    how to read each address, and how to make C. ``cupy``: some operand is a CuPy array,
    whose ``__cuda_array_interface__`` stream is honoured on every call."""

    kernel: object
    how: str
    recipe: Recipe
    new_c: object
    cupy: bool
    ptrs: tuple  # address readers of A, B, C (or the new C) and bias
    swap: bool = False

    def run(self, A, B, C, bias, stream=None):
        out = C if C is not None else self.new_c()
        if self.cupy:
            _sync_cupy_producers(A, B, C, bias)
        pa, pb, pc, pbias = self.ptrs
        first, second = (B, A) if self.swap else (A, B)  # a transpose keeps the address
        with driver.on_device(self.recipe.device):
            self.recipe.run((pa(first), pb(second), pc(out), pbias(bias)),
                            driver.stream_handle(stream))
        self.kernel.last_path = self.recipe.path
        return out if C is not None or not self.swap else transposed(out)


def _sync_cupy_producers(*ops) -> None:
    """__cuda_array_interface__ v3: wait for the device when a CuPy operand was exported on a
    stream other than the default ones (it may still be being written there)."""
    for x in ops:
        if x is not None and type(x).__module__.startswith("cupy"):
            if x.__cuda_array_interface__.get("stream") not in DEFAULT_STREAMS:
                driver.synchronize()
                return


def make_plan(kernel, how, A, B, C, bias, alpha: float, beta: float, device: int) -> Plan:
    """Every check ``launch`` makes (operands, specialization, grid limits), once per
    signature, and the recipe that follows from them: the operands' addresses are ``Ref``s,
    patched in on each call. ``alpha`` and ``beta`` are part of the signature (they decide
    whether A, B and C are read); ``device`` is the operands' GPU."""
    cfg = kernel.config
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out, layout=cfg.layout,
                      bias=bias, needs_bias=cfg.epilogue.startswith("bias"))
    check_launch(kernel, args)
    shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
    col_c = cfg.layout[2] == "c"
    make_c = None if C is not None else allocator(A, shape, cfg.out, col_c)  # C's in the key
    c = args.c or describe(make_c(), "C", cfg.out)
    kinds = {type(x).__module__.split(".")[0] for x in (A, B, C, bias) if x is not None}
    refs = [Ref(i, p) for i, p in enumerate((args.a.ptr, args.b.ptr, c.ptr,
                                             args.bias.ptr if args.bias else 0))]
    with driver.on_device(device):
        recipe = kernel.launches(KernelArgs(
            args.m, args.n, args.k, refs[0], args.ld(args.a, 0), refs[1], args.ld(args.b, 1),
            refs[2], c.lds[cfg.layout[2]], alpha, beta, batch_stride(args.a),
            batch_stride(args.b), batch_stride(c), refs[3] if args.bias else 0,
            args.batch or 1), device)
    return Plan(kernel, how, recipe, make_c, "cupy" in kinds,
                (_reader(A), _reader(B), _reader(C if C is not None else A), _reader(bias)))
