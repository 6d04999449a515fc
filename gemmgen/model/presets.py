"""Presets: every family's optimization ladder, one config per step, in ladder order."""
from __future__ import annotations

from .config import Preset
from .families import FAMILIES

PRESETS: dict[str, Preset] = {p.name: p for fam in FAMILIES.values() for p in fam.presets}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``KeyError`` listing the known names."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


__all__ = ["PRESETS", "Preset", "get_preset"]
