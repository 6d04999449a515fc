"""The raw ``mma.sync`` tensor-core family for FP16, BF16 and TF32 inputs on sm_80 and newer:
its configuration model, rule table, search space and gty111's GEMM_MMA ladder.

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config), ``space``
(ladder presets, search space, the ``FAMILY`` descriptor).
"""
from .config import MmaConfig
from .rules import MMA_RULES
from .space import FAMILY, PRESETS, fallback_of, space

__all__ = ["MmaConfig", "MMA_RULES", "FAMILY", "PRESETS", "fallback_of", "space"]
