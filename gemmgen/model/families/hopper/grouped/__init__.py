"""The Hopper grouped-GEMM family for mixture-of-experts: G products that share N and K (or M
and N) in one persistent launch. A tile scheduler walks the group offsets on the device, TMA
reads every group through one tensor map per operand by offset arithmetic, and the epilogue
masks the rows past each group's end. sm_90a only.

The main loop is the wgmma family's (``templates/_wgmma_consumer.cu.j2``'s ``mma_stage`` and
``release``, ``_hopper_ptx.cu.j2``); the scheduler, producer and epilogue are this family's
(``templates/_grouped_*.cu.j2``), so the wgmma kernel can change its epilogue freely. Designs
from DeepGEMM's m-grouped contiguous/masked and k-grouped kernels, CUTLASS's grouped GEMM
(example 57) and ``torch._grouped_mm``'s argument conventions (see
``../shared/reference/fp8-moe-epilogue-notes.md`` section 2).

Layout: ``rules`` (constants and the rule table), ``config`` (the frozen config and its
geometry), ``env`` (what the template and header read), ``space`` (ladder presets, search
space, the ``FAMILY`` descriptor).
"""
from .config import GroupedConfig
from .rules import GROUPED_RULES, GROUPINGS
from .space import FAMILY, PRESETS, space

__all__ = ["FAMILY", "GROUPED_RULES", "GROUPINGS", "PRESETS", "GroupedConfig", "space"]
