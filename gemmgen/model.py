"""Configuration model, family-independent: the base class of every kernel family and ConfigError."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import fields

from .rules import Rule, Violation, violations

WARP_SIZE = 32
MAX_THREADS_PER_SM = 2048


LAYOUTS = tuple(a + b + c for a in "rc" for b in "rc" for c in "rc")
"""A, B, C each row-major (r) or column-major (c): "rrr" is C = A @ B on C-ordered arrays."""
EPILOGUES = ("none", "bias", "relu", "gelu", "bias_relu", "bias_gelu")
"""Applied in registers before the store: D = act(alpha*A@B + beta*C + bias[col])."""


def div(a: int, b: int) -> int:
    """a // b, or 0 when b is 0 (derived figures of invalid configs stay computable)."""
    return a // b if b else 0


class ConfigError(ValueError):
    """An invalid configuration: ``violations`` lists every broken rule, ``suggestions``
    up to three nearest valid configurations (possibly empty)."""

    def __init__(self, violations: list[Violation], suggestions: list = (), base=None):
        self.violations = list(violations)
        self.suggestions = list(suggestions)
        lines = [f"invalid configuration: {len(self.violations)} rule(s) broken"]
        lines += [f"  {v}" for v in self.violations]
        if self.suggestions:
            lines.append("nearest valid configurations:")
            for s in self.suggestions:
                change = ", ".join(f"{k}={v}" for k, v in s.as_dict().items()
                                   if base is not None and getattr(base, k, v) != v)
                lines.append(f"  {change + ': ' if change else ''}{s.name}")
        super().__init__("\n".join(lines))


class ConfigBase:
    """Behaviour shared by the frozen config dataclasses of every family.

    A family sets ``family``, ``template``, ``rules`` (its rule table), ``field_types`` (fields
    that are not plain ints), ``choices`` (allowed values of enumerated fields), ``optional``
    (fields that may be None) and ``search_domain`` (values tried for suggestions), and
    defines ``env()`` and ``name``.
    """

    __slots__ = ()
    family = ""
    template = ""
    rules: tuple[Rule, ...] = ()
    field_types: dict[str, type] = {}
    choices: dict[str, tuple] = {}
    optional: frozenset[str] = frozenset()
    search_domain: dict[str, tuple] = {}

    def __post_init__(self) -> None:
        problems = self._type_problems()
        if problems:
            raise TypeError("; ".join(problems))
        found = self.violations()
        if found:
            from .suggest import nearest  # local: suggest uses the config classes
            raise ConfigError(found, nearest(self), base=self)

    def violations(self) -> list[Violation]:
        """Every rule of the family's table this config breaks (empty when valid)."""
        return violations(self.rules, self.env())

    @classmethod
    def unchecked(cls, **values):
        """Build without validation (for tests and for rendering invalid configs on purpose)."""
        names = [f.name for f in fields(cls)]
        unknown = set(values) - set(names)
        missing = [f.name for f in fields(cls) if f.name not in values
                   and f.default is dataclasses.MISSING]
        if unknown or missing:
            raise TypeError(f"{cls.__name__}: unknown fields {sorted(unknown)}, "
                            f"missing {missing}")
        cfg = object.__new__(cls)
        for f in fields(cls):
            object.__setattr__(cfg, f.name, values.get(f.name, f.default))
        return cfg

    def replace(self, *, check: bool = True, **changes):
        """A copy with ``changes``; validated unless ``check`` is False."""
        values = {**self.as_dict(), **changes}
        values.pop("family")
        return type(self)(**values) if check else type(self).unchecked(**values)

    def _type_problems(self) -> list[str]:
        out = []
        for dim in ("m", "n", "k"):
            v = getattr(self, dim)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                out.append(f"{dim} (shape specialization) must be a positive int or None, got {v!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in self.optional and v is None:
                continue
            want = self.field_types.get(f.name, int)
            if not isinstance(v, want) or (want is int and isinstance(v, bool)):
                out.append(f"{f.name} must be {want.__name__}, got {v!r}")
            elif f.name in self.choices and v not in self.choices[f.name]:
                allowed = ", ".join(map(repr, self.choices[f.name]))
                out.append(f"{f.name} must be one of {allowed}, got {v!r}")
        return out

    def as_dict(self) -> dict:
        return {"family": self.family, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=False, separators=(", ", ": "))

    def env(self) -> dict[str, int]:
        raise NotImplementedError

    def blocks_per_sm(self, arch: str = "sm_90") -> int:
        """Resident blocks per SM that threads and shared memory allow (registers not counted)."""
        from .arch import get_arch
        a = get_arch(arch)
        by_smem = a.smem_per_sm // (self.smem_bytes + a.smem_reserved_per_block)
        return min(a.blocks_per_sm, div(a.threads_per_sm, self.threads), by_smem)

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """Launch grid for an M x N output: (ceil(N/BN), ceil(M/BM), batch set at launch);
        block = (threads, 1, 1)."""
        return (-(-n // self.bn), -(-m // self.bm), 1)

    # ---- features every family shares: layouts, fused epilogue, shape specialization ------
    def feature_suffix(self) -> str:
        """Name suffix for non-default features: _l<layout>, _e<epilogue>, _s<M>x<N>x<K>."""
        out = "" if self.layout == "rrr" else f"_l{self.layout}"
        out += "" if self.epilogue == "none" else f"_e{self.epilogue}"
        if self.specialized:
            out += "_s" + "x".join(str(v) if v else d for v, d in
                                   ((self.m, "M"), (self.n, "N"), (self.k, "K")))
        return out

    @property
    def specialized(self) -> bool:
        return any(v is not None for v in (self.m, self.n, self.k))

    def feature_env(self) -> dict[str, int]:
        """Constants of the shared features: layout flags, epilogue, specialized extents and
        whether each extent is a whole number of tiles (then its bounds checks vanish)."""
        act = 2 if self.epilogue.endswith("gelu") else 1 if self.epilogue.endswith("relu") else 0
        env = {"LAYOUT_A_COL": int(self.layout[0] == "c"), "LAYOUT_B_COL": int(self.layout[1] == "c"),
               "LAYOUT_C_COL": int(self.layout[2] == "c"),
               "EPI_BIAS": int(self.epilogue.startswith("bias")), "EPI_ACT": act}
        for dim, tile in (("m", self.bm), ("n", self.bn), ("k", self.bk)):
            v = getattr(self, dim)
            env[f"{dim.upper()}_SPEC"] = v or 0
            env[f"{dim.upper()}_FULL"] = int(bool(v) and tile > 0 and v % tile == 0)
        return env
