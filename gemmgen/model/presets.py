"""Presets: every family's optimization ladder, one config per step, in ladder order."""
from __future__ import annotations

from .config import Preset
from .families import FAMILIES

PRESETS: dict[str, Preset] = {p.name: p for fam in FAMILIES.values() for p in fam.presets}
GEMM_PRESETS: tuple[str, ...] = tuple(p.name for fam in FAMILIES.values()
                                      if fam.problem == "gemm" and fam.name != "fp8"
                                      for p in fam.presets)
"""The presets that compute one GEMM per launch from A, B and C alone (what ``verify``,
``bench`` and the ladder run when no preset is named): the fp8 family's take scales too, the
grouped family's run through ``gemmgen.grouped_gemm``."""


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``KeyError`` listing the known names."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


__all__ = ["GEMM_PRESETS", "PRESETS", "Preset", "get_preset"]
