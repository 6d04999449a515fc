"""The op ``gemmgen::scaled_grouped_mm``: FP8 experts with DeepSeek-V3 block scales, the forms
of ``torch._grouped_mm`` (and of PyTorch's scaled grouped GEMM) with blockwise scales:

    torch.ops.gemmgen.scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, out_dtype=None)

- a [T, K] float8_e4m3fn (or e5m2), b [G, K, N] (the experts' [G, N, K] weights as
  ``w.transpose(-2, -1)``: K-major, no copy), offs [G] int32 cumulative row ends: rows
  offs[g-1]..offs[g] of a times b[g] -> [T, N] (rows past offs[G-1] are zeros);
  scale_a [T, ceil(K/128)] (one per row and 128 elements of K, any strides: the M-major
  layout ``gemmgen.torch.quantize`` writes), scale_b [G, ceil(N/128), ceil(K/128)] (one per
  128 x 128 block of each [N, K] weight), float32.
- a [G, M, K], b [G, K, N], no offs: batched -> [G, M, N]; scale_a [G, M, ceil(K/128)].

C = (a * scale_a) @ (b * scale_b) per group, accumulated in float32 (promoted every 128
elements of K with the scales applied, as DeepGEMM's m-grouped kernels do), written as
``out_dtype`` (bfloat16 by default; float16 or float32). CUDA tensors run the grouped kernel's
FP8 axis (one launch, the offsets read on the device: a call on a captured stream becomes part
of a CUDA graph), a repeated call from the compiled launcher without Python (as
``gemmgen::grouped_mm``); everything else (CPU tensors, a B that is not K-major, strides TMA cannot
read) runs the reference: the dequantized operands multiplied in float32. No autograd (FP8
training quantizes its gradients separately). Raises ``OperandError`` naming the argument.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.grouped import grouped_gemm, plan_grouped
from ..runtime.operands import OperandError
from . import launcher
from .fp8 import dequantize
from .grouped import group_bounds
from .ops import _LIB, _REFERENCE, LAUNCHER, _warn_once

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT = (torch.bfloat16, torch.float16, torch.float32)


def check_scaled(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, offs: Tensor | None,
                 out_dtype) -> tuple:
    """The output's shape after the op's checks; ``OperandError`` naming the argument."""
    if a.dtype not in FP8 or b.dtype != a.dtype:
        raise OperandError(f"a and b must both be float8_e4m3fn or float8_e5m2; got {a.dtype} "
                           f"and {b.dtype}")
    if out_dtype is not None and out_dtype not in OUT:
        raise OperandError(f"out_dtype {out_dtype}: torch.bfloat16, float16 or float32")
    if b.dim() != 3 or a.dim() not in (2, 3) or (a.dim() == 2) != (offs is not None):
        raise OperandError(f"scaled_grouped_mm takes a [T, K] with offs or a [G, M, K] without, "
                           f"and b [G, K, N]; got a {tuple(a.shape)}, b {tuple(b.shape)}, offs "
                           f"{None if offs is None else tuple(offs.shape)}")
    g, k, n = b.shape
    if a.shape[-1] != k or (a.dim() == 3 and a.shape[0] != g):
        raise OperandError(f"a {tuple(a.shape)} and b {tuple(b.shape)} do not multiply per group")
    if offs is not None and (offs.dim() != 1 or offs.dtype != torch.int32 or len(offs) != g):
        raise OperandError(f"offs must be {g} int32 cumulative row ends; got {offs.dtype} of "
                           f"shape {tuple(offs.shape)}")
    kb, nb = -(-k // 128), -(-n // 128)
    want_a = (*a.shape[:-1], kb)
    for name, s, want in (("scale_a", scale_a, want_a), ("scale_b", scale_b, (g, nb, kb))):
        if s.dtype != torch.float32 or tuple(s.shape) != want:
            raise OperandError(f"{name} must be float32 of shape {want} (block scales of 128 "
                               f"elements of K); got {s.dtype} {tuple(s.shape)}")
    return (*a.shape[:-1], n)


def scaled_reference(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                     offs: Tensor | None = None, out_dtype=None) -> Tensor:
    """The op by PyTorch: the dequantized operands (``gemmgen.torch.fp8.dequantize``)
    multiplied per group in float32, rounded to ``out_dtype``."""
    shape = check_scaled(a, b, scale_a, scale_b, offs, out_dtype)
    w = dequantize(b.transpose(1, 2), scale_b, (128, 128))     # the experts' [G, N, K]
    x = dequantize(a, scale_a, (1, 128))
    if a.dim() == 3:
        out = torch.bmm(x, w.transpose(1, 2))
    else:
        out = torch.zeros(shape, dtype=torch.float32, device=a.device)
        for i, (begin, end) in enumerate(group_bounds(offs, a.shape[0])):
            out[begin:end] = x[begin:end] @ w[i].t()
    return out.to(out_dtype or torch.bfloat16).contiguous()


@torch.library.impl(_LIB, "scaled_grouped_mm", "CPU")
def _scaled_cpu(a, b, scale_a, scale_b, offs=None, out_dtype=None):
    return scaled_reference(a, b, scale_a, scale_b, offs, out_dtype)


@torch.library.register_fake("gemmgen::scaled_grouped_mm")
def _scaled_fake(a, b, scale_a, scale_b, offs=None, out_dtype=None):
    shape = check_scaled(a, b, scale_a, scale_b, offs, out_dtype)
    return a.new_empty(shape, dtype=out_dtype or torch.bfloat16)


@torch.library.impl(_LIB, "_scaled_grouped_reference", "CompositeExplicitAutograd")
def _scaled_grouped_reference(a, b, scale_a, scale_b, offs=None, out_dtype=None):
    return scaled_reference(a, b, scale_a, scale_b, offs, out_dtype)


NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _takes(a, b, scale_a, scale_b, offs) -> bool:
    """The kernel's operands: every tensor on one CUDA device."""
    return a.is_cuda and len({x.device for x in (a, b, scale_a, scale_b, offs)
                              if x is not None}) == 1


@torch.library.impl(_LIB, "_scaled_grouped_plan", "CUDA")
def _scaled_grouped_plan(a, b, scale_a, scale_b, offs, out_dtype, out) -> Tensor:
    """The launch recipe of one operand signature for the compiled launcher (operands 0 a,
    1 b, 2 out, 3 offs, 4 scale_a, 5 scale_b), as a CPU uint8 tensor; the "reference" recipe
    for operands the kernel does not take. Raises ``OperandError`` for bad arguments."""
    check_scaled(a, b, scale_a, scale_b, offs, out_dtype)
    if not _takes(a, b, scale_a, scale_b, offs):
        return _REFERENCE
    try:
        plan = plan_grouped(a, b, offs, out, None, NAMES[out_dtype or torch.bfloat16],
                            scale_a=scale_a, scale_b=scale_b)
    except OperandError:  # checked above: a layout or alignment the kernel refuses
        return _REFERENCE
    launcher.keep_alive(plan)
    return torch.frombuffer(bytearray(plan.recipe.to_bytes()), dtype=torch.uint8)


def _scaled_cuda_python(a, b, scale_a, scale_b, offs=None, out_dtype=None):
    """The CUDA implementation where the compiled launcher is not loaded: the grouped
    kernel's FP8 axis on PyTorch's current stream; the reference for operands it does not
    take (a B that is not K-major, tensors on two devices, strides TMA refuses)."""
    shape = check_scaled(a, b, scale_a, scale_b, offs, out_dtype)
    dt = out_dtype or torch.bfloat16
    if _takes(a, b, scale_a, scale_b, offs):
        _warn_once()
        out = torch.empty(shape, dtype=dt, device=a.device)
        try:
            return grouped_gemm(a if a.stride(-1) == 1 else a.contiguous(), b,
                                None if offs is None else offs.contiguous(), out,
                                scale_a=scale_a, scale_b=scale_b, out_dtype=NAMES[dt],
                                stream=torch.cuda.current_stream(a.device).cuda_stream)
        except OperandError:
            pass
    return scaled_reference(a, b, scale_a, scale_b, offs, out_dtype)


if not LAUNCHER:
    _LIB.impl("scaled_grouped_mm", _scaled_cuda_python, "CUDA")


def scaled_grouped_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                      offs: Tensor | None = None, out_dtype=None) -> Tensor:
    """``torch.ops.gemmgen.scaled_grouped_mm`` (see the module docstring); also reached as
    ``gemmgen.torch.grouped_mm(a, b, offs, out_dtype, scale_a=..., scale_b=...)``."""
    return torch.ops.gemmgen.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype)
