"""The Hopper FP8 family: ``wgmma.mma_async`` on e4m3/e5m2 operands read K-major by TMA through
an mbarrier ring, with per-tensor, row-wise or DeepSeek-V3 blockwise (1x128 A, 128x128 B)
scales, fast or promoted accumulation, split-K reduced in the kernel, 2-CTA multicast clusters
and a TMA-store epilogue. sm_90a only.

Ported from the standalone prototype measured on an H200 (``docs/families/hopper/fp8.md``), whose
sources are DeepGEMM (promotion every 128 K elements with the block scales, BK = 128 bytes),
CUTLASS's sm90 FP8 kernels (warp specialization, ``mma_promotion_interval``, multicast) and
the DeepSeek-V3 report (section 3.3.2).

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config and its
geometry), ``env`` (what the template and header read), ``space`` (ladder presets, search
space, the fallback, the ``FAMILY`` descriptor).
"""
from .config import Fp8Config
from .rules import FP8_RULES
from .space import FAMILY, PRESETS, fallback, space

__all__ = ["FAMILY", "FP8_RULES", "PRESETS", "Fp8Config", "fallback", "space"]
