"""The kernel families. Each module defines its config dataclass, rule table, search space,
presets and a ``FAMILY`` descriptor (``gemmgen.model.Family``); this registry lists them.

Adding a family: a module here, a template under ``templates/`` and one line below.
"""
from __future__ import annotations

from dataclasses import MISSING, fields

from ..config import Family
from . import mma, simt, wmma
from .hopper import fp8, grouped, wgmma

FAMILIES: dict[str, Family] = {f.name: f for f in (simt.FAMILY, wmma.FAMILY, mma.FAMILY,
                                             wgmma.FAMILY, fp8.FAMILY, grouped.FAMILY)}
"""Every family, in ladder order (the order ``gemmgen list`` shows them)."""


def get_family(name: str) -> Family:
    """The family called ``name``; raises ``ValueError`` naming the known families."""
    if name not in FAMILIES:
        raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def families_for(dtype: str, cc: int | None = None) -> list[Family]:
    """The GEMM families (``problem`` "gemm") that take A and B of ``dtype`` (fp32, tf32, fp16,
    bf16, e4m3, e5m2), fastest first; with ``cc`` (compute capability, major*10+minor) only
    those that run on that device."""
    out = [f for f in reversed(FAMILIES.values()) if dtype in f.dtypes and f.problem == "gemm"]
    if cc is not None:
        out = [f for f in out if f.min_cc <= cc and (f.max_cc is None or cc <= f.max_cc)]
    return out


def default_family(dtype: str, cc: int | None = None) -> Family:
    """The fastest family for ``dtype`` on a device of compute capability ``cc`` (any device
    when None). Raises ``ValueError`` when no family takes ``dtype`` there."""
    found = families_for(dtype, cc)
    if not found:
        known = sorted({d for f in FAMILIES.values() for d in f.dtypes})
        raise ValueError(f"no kernel family takes dtype {dtype!r}"
                         + (f" on sm_{cc}" if cc is not None else "")
                         + f"; dtypes: {', '.join(known)}")
    return found[0]


def fallback_config(cfg):
    """A configuration of another family that computes what ``cfg`` computes (dtypes, layout,
    epilogue, specialization) without TMA: the family's ``fallback``, for operands a tensor
    map cannot describe. Raises ``ValueError`` for a family that has none."""
    family = get_family(cfg.family)
    if family.fallback is None:
        raise ValueError(f"the {family.name} family has no fallback family")
    return family.fallback(cfg)


def config_from_dict(data: dict):
    """Rebuild a config from ``as_dict()`` output (the emitted header's JSON line).

    Raises ``ValueError`` for an unknown family, an unknown or missing field, or a value of the
    wrong type; ``ConfigError`` (a ValueError) if the values break a rule.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a config is a JSON object of fields; got {type(data).__name__}")
    data = dict(data)
    family = get_family(data.pop("family", "simt"))
    cls = family.config
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {family.name} config fields: {', '.join(sorted(unknown))}")
    missing = [f.name for f in fields(cls) if f.name not in data
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ValueError(f"{family.name} config lacks required fields: {', '.join(missing)}")
    return cls(**data)
