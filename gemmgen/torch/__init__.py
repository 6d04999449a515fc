"""gemmgen inside PyTorch: the op ``gemmgen::gemm`` (``ops``), the grouped op
``gemmgen::grouped_mm`` for mixture-of-experts (``grouped``: ``torch._grouped_mm``'s
conventions), their compiled launcher (``launcher``), a drop-in ``Linear`` and ``patch(model)`` (``modules``), and the GEMMs of a
model (``problems``).

Importing this module imports PyTorch (``import gemmgen`` alone does not). The op

    torch.ops.gemmgen.gemm(a, b, bias=None, epilogue="none") -> Tensor

computes ``act(a @ b + bias)`` for a (M x K) and b (K x N), float16, bfloat16 or float32 CUDA
tensors of one dtype, each row- or column-major (a transposed view is passed as it is: the
kernel's layout follows the strides; any other strides are made contiguous first). ``bias``
holds N values of the same dtype; ``epilogue`` is one of ``gemmgen.model.config.EPILOGUES`` ("none",
"bias", "relu", "gelu", "bias_relu", "bias_gelu"; gelu is the tanh approximation) and is fused
into the kernel. The result is a new row-major M x N tensor of a's dtype.

- The kernel is ``gemmgen.gemm``'s choice for the shape (tuned winner, nearest tuned shape, or
  the fastest family's default preset); compiled cubins come from gemmgen's disk cache.
- A compiled launcher (``gemmgen.torch.launcher``, built once per machine with the host C++
  compiler) runs a repeated call without Python: it looks the operand signature up, patches
  the addresses into the recipe of launches and calls ``cuLaunchKernel`` on
  ``torch.cuda.current_stream()``. No allocation but the output's (by PyTorch's allocator),
  no synchronization, so a call is captured by ``torch.cuda.graph``. Warm up once before
  capture (as PyTorch asks for any graph): the first call for a shape may compile and loads
  the kernel. Where the launcher cannot be built, the same recipes launch from Python (a
  warning says so once).
- A fake (meta) implementation gives the output's shape, dtype and strides, so
  ``torch.compile(fullgraph=True)`` traces the op without a graph break.
- Autograd: dA = dC' @ B^T and dB = A^T @ dC' through the same op on transposed views (no
  copies), dbias = dC' summed over rows, where dC' is dC times the activation's derivative at
  the pre-activation: for ReLU taken from the output's sign (output > 0 exactly where the
  pre-activation is), for GELU recomputed by one more GEMM with the "bias" epilogue (nothing
  extra is kept from the forward pass).
- Every GPU of the process: a kernel loads on each device that runs it, from any thread.
  Operands the kernels do not take (CPU tensors, float64, other dtypes, operands on two
  devices) are computed by PyTorch with the same formula, so every valid input works.

FP8 (Hopper): ``scaled_mm(a, b, scale_a, scale_b, out_dtype=..., bias=None,
use_fast_accum=False)`` is the op ``gemmgen::scaled_mm`` with ``torch._scaled_mm``'s semantics
(per-tensor, row-wise and DeepSeek-V3 blockwise scales), and ``quantize(x, block=(1, 128))``
makes its inputs on the GPU in one call (per token 1 x 128, per block 128 x 128, per row or per
tensor, with amax); see ``gemmgen.torch.fp8``. ``scaled_mm_quantized`` writes an e4m3 output
with its 1 x 128 or per-tensor scales and amax from the GEMM's epilogue, ready for the next FP8
GEMM (``gemmgen.torch.quantized``). FP8 experts with block scales:
``grouped_mm(a, b, offs, scale_a=..., scale_b=...)``, the op ``gemmgen::scaled_grouped_mm``
(``gemmgen.torch.scaled_grouped``).

Errors: ``OperandError`` (a ``ValueError``) naming the argument for a wrong rank, mismatched
inner dimensions, mixed dtypes, a bias of the wrong length or an epilogue that does not match
the bias.
"""
from . import launcher
from .fp8 import dequantize, quantize, quantize_reference, scaled_mm, scaled_mm_reference
from .grouped import grouped_mm
from .modules import Linear, PatchSummary, patch, unpatch
from .ops import KERNEL_DTYPES, LAUNCHER, activate, gemm, linear, reference
from .problems import linear_problems, precompile
from .record import record, save_problems
from .scaled_grouped import scaled_grouped_mm, scaled_reference as scaled_grouped_reference
from .mlp import swiglu
from .quantized import scaled_mm_quantized, scaled_mm_quantized_reference

__all__ = ["KERNEL_DTYPES", "LAUNCHER", "Linear", "PatchSummary", "activate", "dequantize",
           "gemm", "grouped_mm", "launcher", "linear", "linear_problems", "patch", "precompile",
           "quantize", "quantize_reference", "record", "reference", "save_problems",
           "scaled_grouped_mm", "scaled_grouped_reference", "scaled_mm", "scaled_mm_quantized",
           "scaled_mm_quantized_reference", "scaled_mm_reference", "swiglu", "unpatch"]
