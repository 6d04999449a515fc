"""Configuration model, family-independent: the base class of every kernel family and ConfigError."""
from __future__ import annotations

import dataclasses
import functools
import json
import numbers
from dataclasses import dataclass, field, fields
from typing import Callable, ClassVar

from .arch import get_arch
from .epilogue import Epilogue, EpilogueError
from .epilogue_rules import FOREIGN_RULES, epilogue_env
from .rules import Rule, Violation, violations
from .suggest import nearest

WARP_SIZE = 32
MAX_THREADS_PER_SM = 2048
INT32_MAX = 2 ** 31 - 1
"""Largest M, N or K: the kernels take extents and leading dimensions as 32-bit ints."""


LAYOUTS = tuple(a + b + c for a in "rc" for b in "rc" for c in "rc")
"""A, B, C each row-major (r) or column-major (c): "rrr" is C = A @ B on C-ordered arrays."""
EPILOGUES = ("none", "bias", "relu", "gelu", "bias_relu", "bias_gelu")
"""Applied in registers before the store: D = act(alpha*A@B + beta*C + bias[col]). Every
family takes these names; the wgmma family also takes epilogue trees
(``gemmgen.model.epilogue``), written as expressions."""


def tile_intensity(m: int, n: int, elem_bytes: int) -> float:
    """FLOP per byte of an m x n output tile fed by m rows of A and n columns of B per k:
    2 m n / (elem_bytes (m + n)); 0 for an empty tile."""
    return 2 * m * n / (elem_bytes * (m + n)) if m + n > 0 else 0.0


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


class ConfigTypeError(ConfigError, TypeError):
    """A field holds a value of the wrong type or outside its choices (``layout='xyz'``,
    ``bm='128'``). Both a ConfigError (so a ValueError) and a TypeError."""

    def __init__(self, problems: list[str]):
        self.violations, self.suggestions, self.problems = [], [], list(problems)
        ValueError.__init__(self, "; ".join(self.problems))


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
    quiet: ClassVar[dict[str, object]] = {}
    """Fields left out of the emitted header and its JSON line while they hold these values
    (features added later, so the sources of kernels without them stay byte for byte)."""
    pdl: ClassVar[bool] = False
    """Whether the kernel is launched with programmatic dependent launch (the Hopper families:
    ``HopperTile.pdl``)."""

    def __post_init__(self) -> None:
        self._coerce_integers()
        self._canonical_epilogue()
        problems = self._type_problems()
        if problems:
            raise ConfigTypeError(problems)
        found = self.violations()
        if found:
            raise ConfigError(found, nearest(self), base=self)

    def violations(self) -> list[Violation]:
        """Every rule of the family's table (and of the features it uses) this config breaks
        (empty when valid)."""
        return violations(self.rule_table(), self.env())

    def rule_table(self) -> tuple[Rule, ...]:
        """The rules this config obeys and its kernel asserts: the family's table, plus the
        tables of the features it uses (``feature_rules``)."""
        return self.rules + self.feature_rules()

    def feature_rules(self) -> tuple[Rule, ...]:
        """Rules of the features this config uses beyond the family's table: here, a family
        that renders only today's epilogues refuses a tree (E00)."""
        return FOREIGN_RULES if self.epilogue_tree else ()

    @property
    def epilogue_tree(self) -> bool:
        """The epilogue is a tree, not one of today's six names."""
        try:
            return Epilogue.parse(self.epilogue).is_tree
        except EpilogueError:
            return False

    def _canonical_epilogue(self) -> None:
        """Store the epilogue in its canonical spelling (a shorthand where the tree is one);
        a family whose epilogue is a class constant (grouped) has nothing to store."""
        if "epilogue" not in self.__dataclass_fields__:
            return
        try:
            object.__setattr__(self, "epilogue", Epilogue.parse(self.epilogue).spelling)
        except (EpilogueError, TypeError):
            pass  # reported by _type_problems

    def rendered_rules(self) -> tuple[Rule, ...]:
        """The rules the rendered source checks as static_asserts: the whole ``rule_table`` (a
        family may leave out one its config cannot break, so that adding the rule keeps older
        sources)."""
        return self.rule_table()

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

    def _coerce_integers(self) -> None:
        """NumPy integers (``np.int64(128)``) count as ints: store them as Python ints."""
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, numbers.Integral) and not isinstance(v, (int, bool)):
                object.__setattr__(self, f.name, int(v))

    def _type_problems(self) -> list[str]:
        out = []
        for dim in ("m", "n", "k"):
            v = getattr(self, dim)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1
                                  or v > INT32_MAX):
                out.append(f"{dim} (shape specialization) must be an int from 1 to {INT32_MAX} "
                           f"(the kernels index with 32-bit ints) or None, got {v!r}")
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
            elif f.name == "epilogue":
                try:
                    Epilogue.parse(v)
                except EpilogueError as exc:
                    out.append(f"epilogue must be one of {', '.join(EPILOGUES)} or an epilogue "
                               f"expression: {exc}")
        return out

    def as_dict(self) -> dict:
        return {"family": self.family, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def header_dict(self) -> dict:
        """``as_dict()`` without the ``quiet`` fields that hold their quiet value: what the
        emitted header lists and its JSON line holds."""
        return {k: v for k, v in self.as_dict().items()
                if not (k in self.quiet and v == self.quiet[k])}

    def to_json(self) -> str:
        return json.dumps(self.header_dict(), sort_keys=False, separators=(", ", ": "))

    def env(self) -> dict[str, int]:
        raise NotImplementedError

    def tile_shape(self) -> tuple:
        """The block tile and how it is split among warps (``tune`` spreads its picks over
        these before trying a second variant of any)."""
        return (self.bm, self.bn, self.bk, getattr(self, "wm", None), getattr(self, "wn", None))

    def brief(self) -> str:
        """One line on the tiling, for ``gemmgen list``."""
        return f"block {self.bm}x{self.bn}x{self.bk}  stages {self.stages}"

    def blocks_per_sm(self, arch: str = "sm_90") -> int:
        """Resident blocks per SM that threads and shared memory allow (registers not counted)."""
        a = get_arch(arch)
        by_smem = div(a.smem_per_sm, max(self.smem_bytes, 0) + a.smem_reserved_per_block)
        return min(a.blocks_per_sm, div(a.threads_per_sm, self.threads), by_smem)

    def _blocks_per_sm(self, arch: str) -> int:
        """``blocks_per_sm`` as ``figures`` reports it: 0 for an unchecked config whose shared
        memory comes out negative (render() must work on any config; the static_asserts
        reject it)."""
        return self.blocks_per_sm(arch) if self.smem_bytes >= 0 else 0

    @property
    def static_smem_bytes(self) -> int:
        """Shared memory the kernel declares statically (what ptxas reports as ``smem``):
        none, unless the family says otherwise (simt)."""
        return 0

    @property
    def dynamic_smem_bytes(self) -> int:
        """Dynamic shared memory passed at launch: all of ``smem_bytes``, unless the family
        says otherwise (simt)."""
        return self.smem_bytes

    def launch_summary(self) -> str:
        """How the kernel is launched, for the emitted header."""
        return (f"grid = (ceil(N/BN), ceil(M/BM), 1) = (ceil(N/{self.bn}), ceil(M/{self.bm}), 1), "
                f"block = ({self.threads}, 1, 1)")

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """Launch grid for an M x N output: (ceil(N/BN), ceil(M/BM), batch set at launch);
        block = (threads, 1, 1)."""
        return (-(-n // self.bn), -(-m // self.bm), 1)

    # ---- features every family shares: layouts, fused epilogue, shape specialization ------
    def feature_suffix(self) -> str:
        """Name suffix for non-default features: _l<layout>, _e<epilogue>, _s<M>x<N>x<K>."""
        out = "" if self.layout == "rrr" else f"_l{self.layout}"
        epi = Epilogue.parse(self.epilogue).name
        out += "" if epi == "none" else f"_e{epi}"
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
        epi = Epilogue.parse(self.epilogue)
        short = epi.shorthand or ""
        act = 2 if short.endswith("gelu") else 1 if short.endswith("relu") else 0
        env = {"LAYOUT_A_COL": int(self.layout[0] == "c"), "LAYOUT_B_COL": int(self.layout[1] == "c"),
               "LAYOUT_C_COL": int(self.layout[2] == "c"),
               "EPI_BIAS": int(short.startswith("bias")), "EPI_ACT": act,
               "EPI_FAST_TANH": int(self.out in ("fp16", "bf16", "e4m3"))}
        for dim, tile in (("m", self.bm), ("n", self.bn), ("k", self.bk)):
            v = getattr(self, dim)
            env[f"{dim.upper()}_SPEC"] = v or 0
            env[f"{dim.upper()}_FULL"] = int(bool(v) and tile > 0 and v % tile == 0)
        if self.feature_rules():
            env.update(epilogue_env(epi, self.out, int(getattr(self, "dual", False))))
        return env


@dataclass(frozen=True)
class Preset:
    """A named step of a family's ladder: its config, the technique it adds and its source."""

    name: str
    config: ConfigBase
    technique: str
    source: str


@dataclass(frozen=True)
class Family:
    """What the rest of gemmgen needs to know about one kernel family; each family module
    (``gemmgen/families/<name>.py``) defines one ``FAMILY`` and the registry lists it.

    ``config``: the frozen config dataclass; ``dtypes``: A/B dtypes it takes; ``presets``: its
    ladder, in order; ``defaults``: dtype -> preset that ``gemmgen.gemm`` and ``tune`` start
    from; ``flag_defaults``: field values ``emit`` starts from without a preset;
    ``field_help``: one line per field for the command line; ``space(dtype)``: the
    configurations ``tune`` searches (each valid); ``min_cc``: lowest compute capability
    (major*10+minor) it compiles for; ``arch_suffix``: "a" when it needs the arch-specific
    target (sm_90a for wgmma); ``adjust(values, given)``: fills fields that depend on others
    (e.g. the TF32 WMMA shape) before the config is built; ``tma``: its kernels take tensor
    maps (launched by ``gemmgen.runtime.hopper``); ``fallback(cfg)``: a config of
    another family computing the same thing, for operands this family's kernels cannot read;
    ``problem``: what its kernels compute: "gemm" (one C = A @ B per launch: ``gemm`` and
    ``tune`` choose among these families) or "grouped" (``gemmgen.grouped_gemm``: many
    products in one launch, launched by ``gemmgen.runtime.hopper.GroupedLaunch``).
    """

    name: str
    config: type
    summary: str
    dtypes: tuple[str, ...]
    presets: tuple[Preset, ...]
    defaults: dict[str, str]
    flag_defaults: dict
    field_help: dict[str, str]
    space: Callable[[str], list]
    min_cc: int = 70
    max_cc: int | None = None
    arch_suffix: str = ""
    tma: bool = False
    fallback: Callable | None = None
    problem: str = "gemm"
    adjust: Callable[[dict, set], dict] = field(default=lambda values, given: values)

    def __post_init__(self):
        object.__setattr__(self, "space", _cached_space(self.space))

    def arch_for(self, cc: int) -> str:
        """The nvcc target for a device of compute capability ``cc`` (major*10+minor), e.g.
        ``sm_90a`` for the wgmma family on an H100. Raises ``ValueError`` naming the arch the
        family needs when the device cannot run it."""
        if cc < self.min_cc or (self.max_cc is not None and cc > self.max_cc):
            need = f"sm_{self.min_cc}{self.arch_suffix}"
            need += " exactly" if self.max_cc == self.min_cc else " or newer"
            raise ValueError(f"the {self.name} family needs {need}; sm_{cc} cannot run it")
        return f"sm_{cc}{self.arch_suffix}"


def _cached_space(space: Callable) -> Callable:
    """``space`` enumerated once per argument list (configs are frozen): a new list each call.
    The SIMT space alone takes seconds to check against its rules."""
    if getattr(space, "cached", False):
        return space
    once = functools.lru_cache(maxsize=None)(lambda *args, **kw: tuple(space(*args, **kw)))

    @functools.wraps(space)
    def cached(*args, **kw):
        return list(once(*args, **kw))
    cached.cached = True
    return cached
