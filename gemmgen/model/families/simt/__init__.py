"""The FP32 SIMT family: its configuration model, rule table, derived figures, search space and
the optimization ladder of the reference articles (siboehm, Lei Mao, tgautam, gty111).

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config), ``space``
(ladder presets, search space, the ``FAMILY`` descriptor).
"""
from .config import SimtConfig
from .rules import SIMT_RULES
from .space import FAMILY, PRESETS, space

__all__ = ["SimtConfig", "SIMT_RULES", "FAMILY", "PRESETS", "space"]
