"""The tensor-core family through the WMMA API (mma.sync) for FP16, BF16 and TF32 inputs: its
configuration model, rule table, search space and ladder (Lei Mao v07, gty111's steps).

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config), ``space``
(ladder presets, search space, the ``FAMILY`` descriptor).
"""
from .config import WmmaConfig
from .rules import SHAPES, WMMA_RULES
from .space import FAMILY, PRESETS, space

__all__ = ["WmmaConfig", "WMMA_RULES", "SHAPES", "FAMILY", "PRESETS", "space"]
