"""Launching the Hopper kernels (the wgmma, fp8 and grouped families): the parameter block
each configuration declares (``params()``), packed at the offsets its cubin records; the
tensor maps of the operands; and, by family, the launches around the GEMM:

- ``WgmmaLaunch``: 3xTF32 splits, repacks of operands TMA cannot describe (or the fallback
  kernel), split-K partials and their reduction, epilogue-tree structs, the dual GEMM's B;
- ``Fp8Launch``: FP8 operands with tensor, row or blockwise scales, transposing packs into
  K-major rows, split-K reduced in the kernel;
- ``GroupedLaunch``: every group of a grouped call in one persistent launch.

Operands are numbered as ``gemmgen.runtime.recipe`` patches them: a GEMM 0 A, 1 B, 2 C,
3 bias; an FP8 GEMM ``FP8_OPERANDS``; a grouped GEMM ``GROUPED_OPERANDS``.
"""
from .base import FP8_OPERANDS, FP8_ORDER, GROUPED_OPERANDS, HopperLaunch
from .fp8 import TRANSPOSE_OFFSETS, Fp8Launch
from .grouped import GroupedLaunch
from .wgmma import HELPER_OFFSETS, HELPER_SIGNATURES, WgmmaLaunch

__all__ = ["HopperLaunch", "WgmmaLaunch", "Fp8Launch", "GroupedLaunch", "FP8_OPERANDS",
           "FP8_ORDER", "GROUPED_OPERANDS", "HELPER_OFFSETS", "HELPER_SIGNATURES",
           "TRANSPOSE_OFFSETS"]
