"""Launch plans: the fast path of ``gemmgen.gemm`` for device arrays (PyTorch, CuPy).

The first call with an operand signature runs every check ``launch`` makes and keeps what
follows from them (kernel, extents, leading dimensions, batch strides, how to make C); a later
call with the same signature reads the pointers and launches.
"""
from __future__ import annotations

from dataclasses import dataclass

from .launch import DEFAULT_STREAMS, allocator, batch_stride, check_launch
from .operands import check_gemm, describe


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
class Plan:
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
        return out if C is not None or not self.swap else transposed(out)


def _sync_cupy_producers(*ops) -> None:
    """__cuda_array_interface__ v3: wait for the device when a CuPy operand was exported on a
    stream other than the default ones (it may still be being written there)."""
    for x in ops:
        if x is not None and type(x).__module__.startswith("cupy"):
            if x.__cuda_array_interface__.get("stream") not in DEFAULT_STREAMS:
                import pycuda.driver as drv
                drv.Context.synchronize()
                return


def make_plan(kernel, how, A, B, C, bias, beta: float) -> Plan:
    """Every check ``launch`` makes (operands, specialization, grid limits), once per
    signature, and the launch that follows from them."""
    cfg = kernel.config
    args = check_gemm(A, B, C, beta=beta, dtype=cfg.dtype, out=cfg.out, layout=cfg.layout,
                      bias=bias, needs_bias=cfg.epilogue.startswith("bias"))
    check_launch(kernel, args)
    shape = (args.batch, args.m, args.n) if args.batch else (args.m, args.n)
    col_c = cfg.layout[2] == "c"
    make_c = None if C is not None else allocator(A, shape, cfg.out, col_c)  # C's in the key
    c = args.c or describe(make_c(), "C", cfg.out)
    kinds = {type(x).__module__.split(".")[0] for x in (A, B, C, bias) if x is not None}
    return Plan(kernel, how, args.m, args.n, args.k, args.batch or 1,
                 (args.ld(args.a, 0), args.ld(args.b, 1), c.lds[cfg.layout[2]]),
                 (batch_stride(args.a), batch_stride(args.b), batch_stride(c)), make_c, "cupy" in kinds,
                 (_reader(A), _reader(B), _reader(C if C is not None else A), _reader(bias)))
