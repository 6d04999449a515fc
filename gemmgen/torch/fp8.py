"""FP8 in PyTorch: the op ``gemmgen::scaled_mm`` (``torch._scaled_mm``'s semantics) and the
quantization helpers ``quantize`` / ``dequantize``.

    torch.ops.gemmgen.scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None,
                                use_fast_accum=False) -> Tensor

computes ``(a * scale_a) @ (b * scale_b) + bias`` for a (M x K, row-major) and b (K x N,
column-major: the transpose of an N x K row-major weight), both ``float8_e4m3fn`` or
``float8_e5m2``, with float32 scales shaped as ``torch._scaled_mm`` takes them: scalars
(per-tensor), scale_a (M, 1) and scale_b (1, N) (row-wise), or scale_a (M, ceil(K/128)) and
scale_b (ceil(K/128), ceil(N/128)) (DeepSeek-V3 blockwise; as PyTorch 2.11 takes them: scale_a
M-major, strides (1, M), and scale_b the ``.t()`` view of an (N/128, K/128) row-major grid;
other strides are read as they are). ``out_dtype``: bfloat16 (default), float16 or float32;
``bias``: N values of out_dtype. ``use_fast_accum`` lets the tensor core sum all of K (tensor
and row scaling); otherwise partial sums are promoted to fp32 every 128 K elements, and always
with blockwise scales (they change every 128). Other layouts of a and b are repacked first.

On CUDA tensors on a Hopper GPU (sm_90) the compiled launcher (``gemmgen.torch.launcher``)
runs it without Python after the first call of an operand signature; that first call runs the
planner ``gemmgen::_scaled_mm_plan``. Elsewhere (CPU, other GPUs) ``gemmgen::_scaled_mm_reference``
computes the same formula with PyTorch (float32 products). A fake implementation gives the
output's shape and dtype for ``torch.compile``.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..runtime import quantize as quant_kernels
from ..runtime.device import device_identity
from ..runtime.api import fp8_gemm, kernel_for
from ..runtime.plans import plan_scaled
from ..runtime.operands.scales import check_fp8
from ..runtime.hopper import FP8_ORDER
from ..runtime.operands import OperandError
from . import launcher
from .ops import _LIB, _REFERENCE, LAUNCHER, _warn_once

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8_NAMES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def check_scaled(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                 bias: Tensor | None, out_dtype) -> torch.dtype:
    """The op's checks (device-independent); the output dtype. Raises ``OperandError``
    naming the argument."""
    for name, x in (("a", a), ("b", b)):
        if x.dim() != 2:
            raise OperandError(f"{name} must be a 2-D matrix; got shape {tuple(x.shape)}")
        if x.dtype not in FP8_DTYPES:
            raise OperandError(f"{name} has dtype {x.dtype}; scaled_mm takes float8_e4m3fn or "
                               f"float8_e5m2")
    if a.shape[1] != b.shape[0]:
        raise OperandError(f"a is {a.shape[0]}x{a.shape[1]} and b is {b.shape[0]}x{b.shape[1]}:"
                           f" a's columns must equal b's rows")
    out = out_dtype if out_dtype is not None else torch.bfloat16
    if out not in OUT_DTYPES:
        raise OperandError(f"out_dtype must be torch.bfloat16, float16 or float32; got {out}")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.dtype != torch.float32:
            raise OperandError(f"{name} has dtype {s.dtype}; scales are torch.float32")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    expand_scale(scale_a, "scale_a", m, k, n)
    expand_scale(scale_b, "scale_b", m, k, n)
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != n or bias.dtype != out):
        raise OperandError(f"bias must hold N = {n} values of {out} (1-D); got "
                           f"{tuple(bias.shape)} {bias.dtype}")
    return out


def expand_scale(s: Tensor, name: str, m: int, k: int, n: int) -> Tensor:
    """A scale broadcast to its operand's shape (scale_a: M x K, scale_b: K x N). Raises
    ``OperandError`` naming ``name`` for a shape scaled_mm does not take."""
    kb, nb = max(1, math.ceil(k / 128)), math.ceil(n / 128)
    if s.numel() == 1:
        return s.reshape(())
    if name == "scale_a":
        if tuple(s.shape) in ((m, 1), (m,)):
            return s.reshape(m, 1)
        if tuple(s.shape) == (m, kb):
            return s.repeat_interleave(128, dim=1)[:, :k]
        raise OperandError(f"scale_a has shape {tuple(s.shape)}; it must be a scalar, (M, 1) = "
                           f"({m}, 1) (row-wise) or (M, ceil(K/128)) = ({m}, {kb}) (blockwise)")
    if tuple(s.shape) in ((1, n), (n,)):
        return s.reshape(1, n)
    if tuple(s.shape) == (kb, nb):
        return s.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:k, :n]
    raise OperandError(f"scale_b has shape {tuple(s.shape)}; it must be a scalar, (1, N) = "
                       f"(1, {n}) (row-wise) or (ceil(K/128), ceil(N/128)) = ({kb}, {nb}) "
                       f"(blockwise: the .t() of an (N/128, K/128) grid)")


def scaled_mm_reference(a, b, scale_a, scale_b, bias=None, out_dtype=None,
                        use_fast_accum=False) -> Tensor:
    """``(a * scale_a) @ (b * scale_b) + bias`` by PyTorch in float32, cast to out_dtype: the
    op's path where the kernels do not run, and a reference for tests."""
    out = check_scaled(a, b, scale_a, scale_b, bias, out_dtype)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    af = a.float() * expand_scale(scale_a.float(), "scale_a", m, k, n)
    bf = b.float() * expand_scale(scale_b.float(), "scale_b", m, k, n)
    z = af @ bf
    if bias is not None:
        z = z + bias.float()
    return z.to(out)


def kernel_takes(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                 bias: Tensor | None) -> bool:
    """Whether gemmgen's FP8 kernels run these operands: CUDA tensors on one Hopper (sm_90)
    device."""
    tensors = [t for t in (a, b, scale_a, scale_b, bias) if t is not None]
    if not all(t.is_cuda and t.device == a.device for t in tensors):
        return False
    return device_identity(a.device.index or 0)[1] == 90


@torch.library.impl(_LIB, "scaled_mm", "CPU")
def _scaled_mm_cpu(a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


@torch.library.impl(_LIB, "_scaled_mm_reference", "CompositeExplicitAutograd")
def _scaled_mm_reference_impl(a, b, scale_a, scale_b, bias=None, out_dtype=None,
                              use_fast_accum=False):
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


@torch.library.register_fake("gemmgen::scaled_mm")
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
    out = check_scaled(a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out)


def _fast(scale_b: Tensor, use_fast_accum: bool, n: int) -> bool:
    """Fast accumulation unless the scales are blockwise (promoted there, whatever asked)."""
    blockwise = scale_b.numel() > 1 and tuple(scale_b.shape) not in ((1, n), (n,))
    return bool(use_fast_accum) and not blockwise


@torch.library.impl(_LIB, "_scaled_mm_plan", "CUDA")
def _scaled_mm_plan(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, out) -> Tensor:
    """The launch recipe of one operand signature for the compiled launcher, as bytes (operands
    0 a, 1 b, 2 out, 3 bias, 4 scale_a, 5 scale_b); the reference marker for operands the
    kernels do not take. Raises ``OperandError`` for bad arguments."""
    check_scaled(a, b, scale_a, scale_b, bias, out_dtype)
    if not kernel_takes(a, b, scale_a, scale_b, bias):
        return _REFERENCE
    args = check_fp8(a, b, scale_a, scale_b, out, bias)
    fast = _fast(scale_b, use_fast_accum, args.n)
    device = a.device.index or 0
    kernel, _ = kernel_for(args, fast, "bias" if bias is not None else "none", None, device)
    plan = plan_scaled(kernel, args, device)
    launcher.keep_alive(plan)
    return torch.frombuffer(bytearray(plan.recipe.to_bytes(FP8_ORDER)), dtype=torch.uint8)


def _scaled_mm_cuda_python(a, b, scale_a, scale_b, bias=None, out_dtype=None,
                           use_fast_accum=False):
    """The CUDA implementation where the compiled launcher is not loaded: the same plans,
    launched from Python on PyTorch's current stream."""
    out_dt = check_scaled(a, b, scale_a, scale_b, bias, out_dtype)
    if not kernel_takes(a, b, scale_a, scale_b, bias):
        return scaled_mm_reference(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)
    _warn_once()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dt, device=a.device)
    fast = _fast(scale_b, use_fast_accum, b.shape[1])
    return fp8_gemm(a, b, out, scale_a=scale_a, scale_b=scale_b, bias=bias, fast_accum=fast,
                    stream=torch.cuda.current_stream(a.device).cuda_stream)


if not LAUNCHER:
    _LIB.impl("scaled_mm", _scaled_mm_cuda_python, "CUDA")


def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
              out_dtype: torch.dtype = torch.bfloat16, bias: Tensor | None = None,
              use_fast_accum: bool = False) -> Tensor:
    """``torch.ops.gemmgen.scaled_mm`` with ``torch._scaled_mm``'s argument order (see the
    module docstring)."""
    return torch.ops.gemmgen.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


# ---- quantization ---------------------------------------------------------------------------
BLOCKS = {(1, 128): "1x128", (128, 128): "128x128", "row": "row", (1, None): "row",
          None: "tensor", "tensor": "tensor"}
"""``quantize``'s ``block`` values: (1, 128) per token, (128, 128) per block, "row" or
(1, None) per row, None or "tensor" per tensor."""


def _group(block) -> str:
    key = tuple(block) if isinstance(block, list) else block
    if key not in BLOCKS:
        raise OperandError(f"block must be (1, 128), (128, 128), 'row' or None (per tensor); "
                           f"got {block!r}")
    return BLOCKS[key]


def _scale_shape(group: str, rows: int, cols: int) -> tuple:
    kb, rb = math.ceil(cols / 128), math.ceil(rows / 128)
    return {"1x128": (rows, kb), "128x128": (rb, kb), "row": (rows, 1), "tensor": ()}[group]


def new_scales(group: str, rows: int, cols: int, device) -> Tensor:
    """An uninitialized float32 scale tensor of a rows x cols matrix quantized by ``group``,
    in the layout ``quantize`` returns: 1 x 128 (rows, ceil(cols/128)) M-major (strides (1,
    rows)), the others row-major."""
    shape = _scale_shape(group, rows, cols)
    if group == "1x128":
        return torch.empty(shape[::-1], dtype=torch.float32, device=device).t()
    return torch.empty(shape, dtype=torch.float32, device=device)


def quantize(x: Tensor, block=(1, 128), dtype: torch.dtype = torch.float8_e4m3fn,
             floor: float | None = None) -> tuple[Tensor, Tensor]:
    """(q, scale): ``x`` (rows x cols, float32, float16 or bfloat16) quantized to ``dtype``
    with one fp32 scale per group, scale = max(amax, floor) / FP8_MAX, q = saturate(x / scale)
    (round to nearest), so that x ~ q * scale. Groups (``block``): (1, 128) gives scale
    (rows, ceil(cols/128)), M-major (strides (1, rows), as ``scaled_mm``'s blockwise scale_a);
    (128, 128) gives (ceil(rows/128), ceil(cols/128)) row-major (a weight's; pass ``.t()`` as
    scale_b); "row" gives (rows, 1); None gives a 0-dim tensor. On CUDA one fused kernel
    (two for "row" and None); elsewhere ``quantize_reference``. ``floor`` defaults to the
    smallest normal float32 (an all-zero group gets scale floor / FP8_MAX and zeros)."""
    group = _group(block)
    if x.dim() != 2 or x.dtype not in OUT_DTYPES:
        raise OperandError(f"x must be a 2-D float32, float16 or bfloat16 tensor; got "
                           f"{tuple(x.shape)} {x.dtype}")
    if dtype not in FP8_DTYPES:
        raise OperandError(f"dtype must be torch.float8_e4m3fn or float8_e5m2; got {dtype}")
    floor = torch.finfo(torch.float32).tiny if floor is None else float(floor)
    if not x.is_cuda:
        return quantize_reference(x, block, dtype, floor)
    x = x if x.stride(1) == 1 else x.contiguous()
    rows, cols = x.shape
    q = torch.empty((rows, cols), dtype=dtype, device=x.device)
    scale = new_scales(group, rows, cols, x.device)
    amax = torch.zeros(rows if group == "row" else 1, dtype=torch.float32, device=x.device)
    ss = scale.stride() if scale.dim() == 2 else (0, 0)
    dev = x.device.index or 0
    quant_kernels.quantize(group, {torch.float32: "fp32", torch.float16: "fp16",
                                   torch.bfloat16: "bf16"}[x.dtype], FP8_NAMES[dtype],
                           x.data_ptr(), x.stride(0), rows, cols, q.data_ptr(), cols,
                           scale.data_ptr(), ss[0], ss[1], amax.data_ptr(), floor, dev,
                           torch.cuda.current_stream(x.device).cuda_stream,
                           f"sm_{device_identity(dev)[1]}")
    return q, scale


def quantize_reference(x: Tensor, block=(1, 128), dtype: torch.dtype = torch.float8_e4m3fn,
                       floor: float | None = None) -> tuple[Tensor, Tensor]:
    """``quantize`` by PyTorch ops (any device): the CPU path and the GPU kernels' test."""
    group = _group(block)
    floor = torch.finfo(torch.float32).tiny if floor is None else float(floor)
    fmax = torch.finfo(dtype).max
    xf = x.float()
    rows, cols = xf.shape
    kb, rb = math.ceil(cols / 128), math.ceil(rows / 128)
    pad = torch.nn.functional.pad(xf.abs(), (0, kb * 128 - cols, 0, rb * 128 - rows))
    if group == "1x128":
        amax = pad[:rows].view(rows, kb, 128).amax(dim=2)
        full = amax.repeat_interleave(128, dim=1)[:, :cols]
    elif group == "128x128":
        amax = pad.view(rb, 128, kb, 128).amax(dim=(1, 3))
        full = amax.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)[:rows, :cols]
    elif group == "row":
        amax = xf.abs().amax(dim=1, keepdim=True)
        full = amax
    else:
        amax = xf.abs().amax()
        full = amax
    # Tensor / tensor: a CUDA tensor divided by a Python number is multiplied by its
    # reciprocal (one ulp off the kernels' IEEE division).
    scale = amax.clamp_min(floor) / torch.full_like(amax, fmax)
    q = (xf / (full.clamp_min(floor) / torch.full_like(full, fmax))).clamp(-fmax, fmax).to(dtype)
    if group == "1x128":
        scale = scale.t().contiguous().t()
    return q, scale


def dequantize(q: Tensor, scale: Tensor, block=(1, 128)) -> Tensor:
    """``q * scale`` broadcast over its groups, in float32 (the inverse of ``quantize``); the
    last two dimensions are the matrix, any before them a batch that ``scale`` has too."""
    group = _group(block)
    rows, cols = q.shape[-2:]
    s = scale.float()
    if group == "1x128":
        s = s.repeat_interleave(128, dim=-1)[..., :cols]
    elif group == "128x128":
        s = s.repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)[..., :rows, :cols]
    return q.float() * s
