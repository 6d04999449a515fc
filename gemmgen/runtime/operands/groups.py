"""Arguments of ``grouped_gemm``: which grouped problem the operands' ranks name, and every
check of A, B, the offsets (or counts) and the output, each failure an ``OperandError`` naming
the argument. Pure Python: nothing here touches the GPU (the CPU tests pass objects with a
``__cuda_array_interface__``).

The problems, as ``torch._grouped_mm`` takes them:

- A 2-D [T, K], B 3-D [G, K, N], ``offs`` [G]: rows offs[g-1]..offs[g] of A times B[g] -> C
  [T, N] (MoE forward and dgrad). B's matrices may be K- or N-contiguous.
- A 3-D [G, M, K], B 3-D [G, K, N]: C[g] = A[g] @ B[g] -> [G, M, N]; with ``counts`` [G]
  only the first counts[g] rows of each (masked: CUDA-graph decode).
- A 2-D [M, T], B 2-D [T, N], ``offs`` [G]: columns offs[g-1]..offs[g] of A times those rows
  of B -> C [G, M, N] (K-grouped: the weight gradient). A column-major (a transposed view of
  a [T, M] tensor), B row-major.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...model.dtypes import FP8_DTYPES
from ..arrays import array_dtype, dtype_name
from ..recipe import KernelArgs, Scale
from . import Operand, OperandError, check_int32, check_one_device, describe
from .scales import BLOCK, WIDE_OUT_DTYPES as FP8_OUT_DTYPES, describe_scale

IN_DTYPES = ("fp16", "bf16", *FP8_DTYPES)


@dataclass(frozen=True)
class GroupedArgs:
    """Checked operands of one grouped call: the problem's ``grouping`` ("m" or "k") and
    ``mode`` ("offs" or "masked"), dtypes, extents (``rows`` is the kernel's M),
    the layout the kernel needs (A, B, C), the described operands and the output's shape."""

    grouping: str
    mode: str
    dtype: str
    out: str
    groups: int
    rows: int
    n: int
    k: int
    layout: str
    a: Operand
    b: Operand
    c: Operand | None
    index_ptr: int
    out_shape: tuple
    scales: tuple = ()
    """FP8: (pointer, strides) of scale_a and of scale_b, the strides in elements as the kernel
    reads them: A's per row, K block and matrix; B's per 128-column block, K block and expert."""

    def problem(self, a, b, c, index, ldc: int, stride_c: int, scale_a=None, scale_b=None
                ) -> KernelArgs:
        """The grouped kernel's ``KernelArgs`` with these pointers (ints or ``Ref``s) for A,
        B, C and the offsets, C's leading dimension and matrix stride, and for FP8 inputs the
        scales' pointers (read with the strides of ``scales``)."""
        lda = self.a.lds[self.layout[0]]
        ldb = self.b.lds[self.layout[1]]
        stride_a = _stride(self.a, self.a.shape[0] * lda)
        stride_b = _stride(self.b, 0)
        scales = {}
        if self.scales:
            (_, *sa), (_, *sb) = self.scales
            scales = {"scale_a": Scale(scale_a, *sa), "scale_b": Scale(scale_b, *sb)}
        return KernelArgs(self.rows, self.n, self.k, a, lda, b, ldb, c, ldc,
                          stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
                          grouping=self.grouping, mode=self.mode, groups=self.groups,
                          offs=index, **scales)


def _stride(op: Operand, default: int) -> int:
    if op.batch is None:
        return 0
    return op.batch_stride if op.batch > 1 else default


def out_dtype_name(out_dtype, dtype: str) -> str:
    """The C dtype: ``dtype`` (bf16 for FP8 inputs) when None, else a name (fp16, bf16,
    fp32), a torch dtype or a NumPy dtype; it must be ``dtype`` or fp32 (for FP8 inputs: bf16,
    fp16 or fp32)."""
    fp8 = dtype in FP8_DTYPES
    if out_dtype is None:
        return "bf16" if fp8 else dtype
    name = dtype_name(out_dtype)
    allowed = FP8_OUT_DTYPES if fp8 else (dtype, "fp32")
    if name not in allowed:
        raise OperandError(f"out_dtype: {out_dtype!r}; a {dtype} grouped GEMM writes "
                           f"{', '.join(allowed)}")
    return name


def index_array(x, name: str, length: int) -> int:
    """The device address of a 1-D int32 array of ``length`` values (``offs`` or
    ``counts``): a CUDA PyTorch tensor or an object with ``__cuda_array_interface__``,
    contiguous. Raises ``OperandError`` naming ``name``."""
    mod = type(x).__module__.split(".")[0]
    if mod == "torch" and hasattr(x, "data_ptr"):
        if not x.is_cuda:
            raise OperandError(f"{name} is a CPU tensor: the offsets stay on the GPU (no host "
                               f"copy, so the call can be captured in a CUDA graph); move it")
        shape, typestr = tuple(x.shape), {"torch.int32": "<i4"}.get(str(x.dtype), str(x.dtype))
        strides, ptr = tuple(s * x.element_size() for s in x.stride()), x.data_ptr()
    elif hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        shape, typestr = tuple(cai["shape"]), cai["typestr"]
        strides, ptr = tuple(cai.get("strides") or (4,) * len(shape)), int(cai["data"][0] or 0)
    else:
        raise OperandError(f"{name}: expected an int32 device array (a CUDA PyTorch tensor or "
                           f"a CuPy array); got {type(x).__name__}")
    if typestr not in ("<i4", "int32"):
        raise OperandError(f"{name} has dtype {typestr}; it must be int32")
    if len(shape) != 1 or shape[0] != length:
        raise OperandError(f"{name} must hold one int32 per group ({length}); got shape "
                           f"{shape}")
    if length > 1 and strides[0] != 4:
        raise OperandError(f"{name} must be contiguous; got a stride of {strides[0]} bytes")
    return ptr


def _operand(x, name: str, dtype: str) -> Operand:
    op = describe(x, name, dtype)
    if op.kind == "numpy":
        raise OperandError(f"{name} is a NumPy array: grouped_gemm takes device arrays "
                           f"(PyTorch CUDA tensors, CuPy arrays)")
    return op


def _need(op: Operand, layout: str, what: str) -> None:
    if layout not in op.lds:
        raise OperandError(f"{op.name} must be {what}; its strides are neither (make it "
                           f"contiguous in that order)")


def _check_out(out, shape: tuple, dtype: str) -> Operand | None:
    if out is None:
        return None
    c = _operand(out, "out", dtype)
    got = (c.batch, *c.shape) if c.batch is not None else c.shape
    if tuple(got) != tuple(shape):
        raise OperandError(f"out has shape {tuple(got)}; the result is {tuple(shape)}")
    if c.readonly:
        raise OperandError("out is read-only; the kernel writes its result there")
    _need(c, "r", "row-major")
    return c


def check_grouped(A, B, offs=None, out=None, counts=None, out_dtype=None, scale_a=None,
                  scale_b=None) -> GroupedArgs:
    """Describe and cross-check a grouped call (see the module docstring; FP8 operands with
    their block scales: ``fp8_scales``). Raises ``OperandError`` naming the argument: kinds,
    dtypes, ranks, shapes, layouts, the offsets' or counts' dtype and length, the output's
    shape and dtype, the scales, PyTorch or CuPy arrays on different GPUs, extents or leading
    dimensions beyond 2^31 - 1."""
    for name, x in (("A", A), ("B", B)):
        if getattr(x, "ndim", len(getattr(x, "shape", ()))) not in (2, 3):
            raise OperandError(f"{name} must be 2-D or 3-D; got shape "
                               f"{tuple(getattr(x, 'shape', ()))}")
    dtype = array_dtype(A)
    if dtype not in IN_DTYPES:
        raise OperandError(f"A has dtype {getattr(A, 'dtype', '?')}; grouped_gemm takes "
                           f"float16, bfloat16, or float8_e4m3fn/float8_e5m2 with scales")
    fp8 = dtype in FP8_DTYPES
    if not fp8 and (scale_a is not None or scale_b is not None):
        raise OperandError(f"scale_a and scale_b are the block scales of FP8 operands; A is "
                           f"{dtype}")
    if fp8 and (scale_a is None or scale_b is None):
        raise OperandError("scale_a and scale_b are required with FP8 operands: A's 1 x 128 "
                           "block scales and B's 128 x 128 ones, float32")
    out_name = out_dtype_name(out_dtype, dtype)
    a, b = _operand(A, "A", dtype), _operand(B, "B", dtype)
    check_one_device({"A": A, "B": B, "offs": offs, "counts": counts, "out": out,
                      "scale_a": scale_a, "scale_b": scale_b})
    ranks = (2 if a.batch is None else 3, 2 if b.batch is None else 3)
    forms = {(2, 3): _m_grouped, (3, 3): _m_grouped, (2, 2): _k_grouped}
    if ranks in forms:
        args = forms[ranks](a, b, offs, out, counts, dtype, out_name)
        check_int32(G=args.groups, rows=args.rows, N=args.n, K=args.k,
                    lda=a.lds[args.layout[0]], ldb=b.lds[args.layout[1]])
        return fp8_scales(args, scale_a, scale_b) if fp8 else args
    raise OperandError("A 3-D with B 2-D (groups along N) is not supported: pass A 2-D with "
                       "B 3-D and offs (M-grouped), both 3-D (batched or masked), or both 2-D "
                       "with offs (K-grouped)")


def _m_grouped(a, b, offs, out, counts, dtype, out_name) -> GroupedArgs:
    """M-grouped: A 2-D with ``offs`` (each group's rows, contiguous) or A 3-D with ``counts``
    or nothing (masked: each group's first rows of its own matrix); B 3-D, one matrix a group."""
    masked = a.batch is not None
    (m, k), (g, (k2, n)) = a.shape, (b.batch, b.shape)
    if masked and a.batch != g:
        raise OperandError(f"A holds {a.batch} matrices and B {g}: one per group each")
    if k != k2:
        a_is = "A's matrices are" if masked else "A is"
        raise OperandError(f"{a_is} {m}x{k} and B's matrices are {k2}x{n}: A's columns ({k}) "
                           f"must equal B's rows ({k2})")
    if masked and offs is not None:
        raise OperandError("offs is for A 2-D (rows grouped by offsets); with A 3-D pass "
                           "counts (rows used per group) or nothing")
    if not masked and (offs is None or counts is not None):
        raise OperandError("offs is required with A 2-D and B 3-D (the groups' cumulative row "
                           "ends, int32, one per group); counts is for 3-D A")
    _need(a, "r", "row-major (K contiguous)")
    lay_b = "c" if "c" in b.lds else "r"
    if masked:
        ptr = index_array(counts, "counts", g) if counts is not None else 0
    else:
        ptr = index_array(offs, "offs", g)
    shape = (g, m, n) if masked else (m, n)
    return GroupedArgs("m", "masked" if masked else "offs", dtype, out_name, g, m, n, k,
                       "r" + lay_b + "r", a, b, c=_check_out(out, shape, out_name),
                       index_ptr=ptr, out_shape=shape)


def fp8_scales(args: GroupedArgs, scale_a, scale_b) -> GroupedArgs:
    """``args`` of FP8 operands with their block scales checked (DeepSeek-V3's, as DeepGEMM
    takes them; float32 device arrays of any strides, kb = ceil(K / 128), nb = ceil(N / 128)):

    - ``scale_a``: [T, kb] for A 2-D [T, K] with ``offs``, [G, M, kb] for A 3-D [G, M, K]:
      one scale per row and 128-element block of K;
    - ``scale_b``: [G, nb, kb]: one scale per 128 x 128 block of each expert's [N, K] weight.

    The problem must be M-grouped with B K-major ([G, K, N] views of [G, N, K] weights, as
    ``W.transpose(1, 2)`` gives). Raises ``OperandError`` naming the argument."""
    if args.grouping != "m":
        raise OperandError("FP8 grouped GEMM is M-grouped: pass A 2-D with offs, or A 3-D "
                           "(masked); the K-grouped weight gradient takes 16-bit operands")
    if args.layout[1] != "c":
        raise OperandError("B must be K-major for FP8: [G, K, N] views of the experts' [G, N, "
                           "K] weights (W.transpose(1, 2)); FP8 wgmma reads B K-major only")
    kb, nb = -(-args.k // BLOCK), -(-args.n // BLOCK)
    masked = args.mode == "masked"
    want_a = (args.groups, args.rows, kb) if masked else (args.rows, kb)
    sa = _block_scale(scale_a, "scale_a", want_a, "[G, M, ceil(K/128)]" if masked else
                      "[T, ceil(K/128)]")
    sb = _block_scale(scale_b, "scale_b", (args.groups, nb, kb), "[G, ceil(N/128), ceil(K/128)]")
    a_strides = sa.strides if masked else (0, *sa.strides)       # (per matrix, row, K block)
    check_int32(sa_m=a_strides[1], sa_k=a_strides[2], sb_n=sb.strides[1], sb_k=sb.strides[2])
    return replace(args, scales=((sa.ptr, a_strides[1], a_strides[2], a_strides[0]),
                                 (sb.ptr, sb.strides[1], sb.strides[2], sb.strides[0])))


def _block_scale(x, name: str, shape: tuple, form: str):
    """A block-scale array: float32, on the device, of ``shape``. Raises ``OperandError``."""
    arg = describe_scale(x, name, max_dims=3)
    if arg.kind not in ("torch", "cai"):
        raise OperandError(f"{name} must be a float32 device array {form}; got "
                           f"{'a number' if arg.kind == 'number' else 'a NumPy array'}")
    if tuple(arg.shape) != tuple(shape):
        raise OperandError(f"{name} has shape {tuple(arg.shape)}; the block scales of these "
                           f"operands are {form} = {tuple(shape)}")
    return arg


def _k_grouped(a, b, offs, out, counts, dtype, out_name) -> GroupedArgs:
    (m, t), (t2, n) = a.shape, b.shape
    if t != t2:
        raise OperandError(f"A is {m}x{t} and B is {t2}x{n}: A's columns ({t}) must equal B's "
                           f"rows ({t2}), the dimension the groups split")
    if offs is None or counts is not None:
        raise OperandError("offs is required with A and B 2-D (the groups' cumulative ends "
                           "along A's columns and B's rows, int32)")
    _need(a, "c", "column-major (a transposed view of a row-major [T, M] tensor)")
    _need(b, "r", "row-major (N contiguous)")
    g = _length(offs)
    if g < 1:
        raise OperandError(f"offs must be 1-D with at least one group; got shape "
                           f"{tuple(getattr(offs, 'shape', ()))}")
    ptr = index_array(offs, "offs", g)
    c = _check_out(out, (g, m, n), out_name)
    return GroupedArgs("k", "offs", dtype, out_name, g, m, n, t, "crr", a, b, c, ptr,
                       (g, m, n))


def _length(x) -> int:
    shape = getattr(x, "shape", None)
    if shape is None and hasattr(x, "__cuda_array_interface__"):
        shape = x.__cuda_array_interface__["shape"]
    return int(shape[0]) if shape is not None and len(shape) == 1 else -1
