"""Nearest valid configurations to an invalid one, for ConfigError's suggestions."""
from __future__ import annotations

import itertools
import math

from .registers import spill_risk

# A suggestion changes at most MAX_CHANGES fields, each to a value of the family's search_domain.
MAX_CHANGES = 3


def _distance(field: str, old, new) -> float:
    """How far a change moves: octaves for sizes, 1 for switches."""
    if isinstance(old, int) and isinstance(new, int) and not isinstance(old, bool):
        return abs(math.log2(max(old, 0) + 1) - math.log2(max(new, 0) + 1))
    return 1.0


def nearest(cfg, count: int = 3) -> list:
    """Up to ``count`` valid configs of ``type(cfg)`` that differ from ``cfg`` in the fewest
    fields (at most MAX_CHANGES), closest first, ties broken by name. A config that the
    register estimate says would spill (``gemmgen.model.registers.spill_risk``) is never suggested."""
    base = cfg.as_dict()
    base.pop("family")
    cls = type(cfg)
    domain = cls.search_domain
    fields_ = list(domain)
    found: dict[str, tuple[float, object]] = {}
    # The rules ``cfg`` breaks are checked first: most trials still break one of them, and a
    # trial is refused at its first broken rule (the same trials pass as with every rule).
    broken = [v.rule for v in cfg.violations()]
    for changes in range(1, MAX_CHANGES + 1):
        for chosen in itertools.combinations(fields_, changes):
            options = [[v for v in domain[f] if v != base[f]] for f in chosen]
            for values in itertools.product(*options):
                trial = cls.unchecked(**{**base, **dict(zip(chosen, values))})
                if not _valid(trial, broken) or spill_risk(trial):
                    continue
                dist = sum(_distance(f, base[f], v) for f, v in zip(chosen, values))
                found.setdefault(trial.name, (dist, trial))
        if len(found) >= count:
            break
    ranked = sorted(found.values(), key=lambda item: (item[0], item[1].name))
    return [trial for _, trial in ranked[:count]]


def _valid(trial, first) -> bool:
    """Whether ``trial`` breaks no rule of its table, the rules ``first`` checked first and
    the check stopping at the first broken one."""
    env = trial.env()
    rules = trial.rule_table()
    return not any(rule.applies(env) and not rule.check.holds(env)
                   for rule in (*[r for r in first if r in rules], *rules))


def changed_fields(old, new) -> dict:
    """The fields of ``new`` that differ from ``old`` (for showing a suggestion as flags)."""
    a, b = old.as_dict(), new.as_dict()
    return {k: b[k] for k in b if a[k] != b[k]}
