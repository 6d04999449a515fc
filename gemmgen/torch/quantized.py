"""An FP8 GEMM whose output is FP8: the op ``gemmgen::scaled_mm_quantized``, so that one GEMM
feeds the next FP8 GEMM without a separate quantization pass.

    torch.ops.gemmgen.scaled_mm_quantized(a, b, scale_a, scale_b, bias=None, scale=None,
                                          block="1x128", use_fast_accum=False)
        -> (q, scales, amax)

computes v = (a * scale_a) @ (b * scale_b) + bias as ``gemmgen::scaled_mm`` does (a M x K
row-major, b K x N column-major, FP8; float32 scales per tensor, row-wise or blockwise; bias N
bfloat16 values) and, in the GEMM's epilogue, quantizes v to ``float8_e4m3fn`` (round to
nearest, saturating to +-448):

- ``block="1x128"``: per row and 128 columns, s = max(amax, FLT_MIN) / 448 of the group's
  values and q = v / s, as ``quantize(v, (1, 128))`` computes it; ``scales`` is (M,
  ceil(N/128)) float32, M-major (strides (1, M)), the blockwise ``scale_a`` of the next
  ``scaled_mm`` (DeepSeek-V3's activations).
- ``block="tensor"``: q = v / scale with the caller's ``scale`` (a one-element float32 tensor
  on a's device: delayed scaling, as Transformer Engine keeps one scale per tensor from past
  amaxes); ``scales`` is empty (the scale is the caller's).

``amax`` (one float32) is max |v| over the output, NaN ignored, for the next step's scale.
``scaled_mm_quantized`` below returns the caller's scale in place of the empty one.

On a Hopper GPU (sm_90) the fp8 family's kernel with an e4m3 D (``out="e4m3"``, ``quant``)
computes all three in one launch, through the compiled launcher (planner
``gemmgen::_scaled_mm_quantized_plan``; operands 0 a, 1 b, 2 q, 3 bias, 4 scale_a, 5 scale_b,
6 the scale read or the scales written, 7 amax). Elsewhere the reference
(``scaled_mm_reference`` in float32, then ``quantize_reference``) computes the same formula.
Errors: ``OperandError`` naming the argument.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.api import kernel_for
from ..runtime.operands import OperandError
from ..runtime.operands.scales import check_fp8
from ..runtime.plans import plan_scaled
from ..runtime.hopper import FP8_ORDER
from . import launcher
from .fp8 import (_fast, check_scaled, kernel_takes, new_scales, quantize_reference,
                  scaled_mm_reference)
from .ops import _LIB, _REFERENCE, LAUNCHER, _warn_once

BLOCKS = {"1x128": "1x128", (1, 128): "1x128", "tensor": "tensor", None: "tensor"}
"""``block``'s values: (1, 128) or "1x128" per row and 128 columns; None or "tensor" per
tensor."""
E4M3_MAX = 448.0
QUANT_ORDER = (*FP8_ORDER, 6, 7)
"""The recipe's operands: FP8's six, then the scale read or the scales written, and amax."""


def check_quantized(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                    bias: Tensor | None, scale: Tensor | None, block: str) -> str:
    """The op's checks (device-independent); the block ("1x128" or "tensor"). Raises
    ``OperandError`` naming the argument."""
    check_scaled(a, b, scale_a, scale_b, bias, torch.bfloat16)
    key = tuple(block) if isinstance(block, list) else block
    if key not in BLOCKS:
        raise OperandError(f"block must be (1, 128) or '1x128', or None or 'tensor'; got "
                           f"{block!r}")
    group = BLOCKS[key]
    if group == "tensor":
        if scale is None:
            raise OperandError("scale is required for block='tensor': the output's per-tensor "
                               "dequantization scale (q = v / scale)")
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise OperandError(f"scale must be one float32 value; got {tuple(scale.shape)} "
                               f"{scale.dtype}")
    elif scale is not None:
        raise OperandError("scale is for block='tensor'; with 1 x 128 blocks the kernel "
                           "computes the scales")
    return group


def scaled_mm_quantized_reference(a, b, scale_a, scale_b, bias=None, scale=None,
                                  block="1x128", use_fast_accum=False):
    """The op's formula by PyTorch (any device): v in float32, then quantized."""
    group = check_quantized(a, b, scale_a, scale_b, bias, scale, block)
    v = scaled_mm_reference(a, b, scale_a, scale_b, None, torch.float32)
    if bias is not None:
        v = v + bias.float()
    mag = v.abs()
    amax = torch.where(mag.isnan(), torch.zeros_like(mag), mag).amax().reshape(1) \
        if v.numel() else v.new_zeros(1)
    if group == "1x128":
        q, s = quantize_reference(v, (1, 128))
        return q, s, amax
    q = (v / scale.float().reshape(())).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, v.new_empty(0), amax


@torch.library.impl(_LIB, "scaled_mm_quantized", "CPU")
def _cpu(a, b, scale_a, scale_b, bias=None, scale=None, block="1x128", use_fast_accum=False):
    return scaled_mm_quantized_reference(a, b, scale_a, scale_b, bias, scale, block,
                                         use_fast_accum)


@torch.library.impl(_LIB, "_scaled_mm_quantized_reference", "CompositeExplicitAutograd")
def _reference(a, b, scale_a, scale_b, bias=None, scale=None, block="1x128",
               use_fast_accum=False):
    return scaled_mm_quantized_reference(a, b, scale_a, scale_b, bias, scale, block,
                                         use_fast_accum)


@torch.library.register_fake("gemmgen::scaled_mm_quantized")
def _fake(a, b, scale_a, scale_b, bias=None, scale=None, block="1x128", use_fast_accum=False):
    return _outputs(a, b, check_quantized(a, b, scale_a, scale_b, bias, scale, block))


@torch.library.impl(_LIB, "_scaled_mm_quantized_plan", "CUDA")
def _plan(a, b, scale_a, scale_b, bias, block, use_fast_accum, out, scale_d, amax) -> Tensor:
    """The recipe of one operand signature for the compiled launcher, as bytes (``QUANT_ORDER``);
    the reference marker for operands the kernels do not take. ``scale_d``: the caller's scale
    (block "tensor") or the scales to write (M x ceil(N/128), any strides). Raises
    ``OperandError`` for bad arguments."""
    group = check_quantized(a, b, scale_a, scale_b, bias,
                            scale_d if block == "tensor" else None, block)
    if not kernel_takes(a, b, scale_a, scale_b, bias) or scale_d.device != a.device:
        return _REFERENCE
    plan = _kernel_plan(a, b, scale_a, scale_b, bias, group, use_fast_accum, out, scale_d, amax)
    launcher.keep_alive(plan)
    return torch.frombuffer(bytearray(plan.recipe.to_bytes(QUANT_ORDER)), dtype=torch.uint8)


def _kernel_plan(a, b, scale_a, scale_b, bias, group, use_fast_accum, out, scale_d, amax):
    """The fp8 family's plan with an e4m3 D quantized by ``group``."""
    args = check_fp8(a, b, scale_a, scale_b, out, bias)
    fast = _fast(scale_b, use_fast_accum, args.n)
    device = a.device.index or 0
    kernel, _ = kernel_for(args, fast, "bias" if bias is not None else "none", None, device,
                           quant=group)
    sd_m, sd_n = scale_d.stride() if group == "1x128" else (0, 0)
    return plan_scaled(kernel, args, device, (scale_d, sd_m, sd_n, amax))


def _outputs(a: Tensor, b: Tensor, group: str) -> tuple[Tensor, Tensor, Tensor]:
    """q, the scales (M-major for 1 x 128, empty per tensor) and amax (zero: the kernel
    overwrites it; an empty output keeps the max over nothing)."""
    m, n = a.shape[0], b.shape[1]
    scales = (new_scales(group, m, n, a.device) if group == "1x128"
              else torch.empty(0, dtype=torch.float32, device=a.device))
    return (torch.empty((m, n), dtype=torch.float8_e4m3fn, device=a.device), scales,
            torch.zeros(1, dtype=torch.float32, device=a.device))


def _cuda_python(a, b, scale_a, scale_b, bias=None, scale=None, block="1x128",
                 use_fast_accum=False):
    """The CUDA implementation where the compiled launcher is not loaded: the same plan,
    launched from Python on PyTorch's current stream."""
    group = check_quantized(a, b, scale_a, scale_b, bias, scale, block)
    if not kernel_takes(a, b, scale_a, scale_b, bias) or (
            scale is not None and scale.device != a.device):
        return scaled_mm_quantized_reference(a, b, scale_a, scale_b, bias, scale, block)
    _warn_once()
    q, scales, amax = _outputs(a, b, group)
    if q.numel():
        scale_d = scales if group == "1x128" else scale
        plan = _kernel_plan(a, b, scale_a, scale_b, bias, group, use_fast_accum, q, scale_d,
                            amax)
        plan.run(a, b, q, bias, scale_a, scale_b, scale_d, amax,
                 stream=torch.cuda.current_stream(a.device).cuda_stream)
    return q, scales, amax


if not LAUNCHER:
    _LIB.impl("scaled_mm_quantized", _cuda_python, "CUDA")


def scaled_mm_quantized(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor,
                        bias: Tensor | None = None, block=(1, 128), scale: Tensor | None = None,
                        use_fast_accum: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(q, scale, amax): ``scaled_mm``'s product quantized to e4m3 in the GEMM's epilogue (see
    the module docstring). ``block`` (1, 128): ``scale`` is None and the kernel's 1 x 128 scales
    come back (M x ceil(N/128), M-major); None or "tensor": ``scale`` is the output's
    per-tensor dequantization scale and comes back as it is. ``(q, scale)`` feed the next
    ``scaled_mm`` as its a and scale_a."""
    group = BLOCKS.get(tuple(block) if isinstance(block, list) else block, block)
    q, scales, amax = torch.ops.gemmgen.scaled_mm_quantized(
        a, b, scale_a, scale_b, bias, scale, group if isinstance(group, str) else str(group),
        use_fast_accum)
    return q, (scale if group == "tensor" else scales), amax
