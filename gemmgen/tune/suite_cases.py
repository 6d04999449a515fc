"""Benchmark suites, their cases: a suite's ``[[problems]]`` tables expanded into ``Case``s
(cross-products of each table's lists; a model's linear layers times token counts), checked
value by value, and the cases a run asks for (``select``). Nothing here needs a GPU."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..heuristics.grouped import row_counts
from ..heuristics.select import MATHS
from ..model.config import EPILOGUES, INT32_MAX, LAYOUTS
from ..model.dtypes import ELEM_BYTES, FP8_DTYPES
from ..model.families import FAMILIES
from ..model.presets import GEMM_PRESETS, PRESETS

DTYPES = tuple(d for d in ELEM_BYTES if d not in FP8_DTYPES)
"""dtypes of the presets, dispatch, torch and moe kinds (FP8 runs in the fp8 kind)."""
GEMM_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.problem == "gemm" and name != "fp8")
"""Families whose presets the presets kind runs (the fp8 family's: the fp8 kind; the grouped
family's: the moe kind)."""
TORCH_MODES = ("eager", "graph", "host")
KINDS = {"presets": ("torch", "cublas"), "dispatch": ("torch", "cublas", "none"),
         "torch": ("torch",),
         "fp8": ("scaled_mm",), "moe": ("grouped_mm",)}
"""Each kind (which runner) and the baselines it can compare against, its default first
(presets, dispatch: "torch" is F.linear / torch.matmul, or cublasGemmEx through CuPy where
PyTorch with CUDA is absent; "cublas" asks for cublasGemmEx through CuPy)."""
PLOTS = {"presets": "bars", "dispatch": "lines", "torch": "heatmap", "fp8": "bars", "moe": "bars"}
"""The plot each kind draws unless the suite says otherwise (``plot = ...``)."""
AXES = {"presets": ("preset", "family", "size"),
        "dispatch": ("dtype", "size", "model", "layer", "m", "layout", "epilogue", "math"),
        "torch": ("dtype", "size", "model", "layer", "m", "mode"),
        "fp8": ("dtype", "size", "model", "layer", "m", "scaling", "accum", "preset"),
        "moe": ("dtype", "model", "layer", "m", "routing")}
"""The keys a ``[[problems]]`` table of each kind may hold."""
SCALINGS = ("tensor", "row", "block")
ACCUMS = ("fast", "promoted")
"""The fp8 kind's scalings and accumulations (block with fast accumulation is skipped: its
scales are applied at promotions)."""
TOP_KEYS = ("description", "kind", "baseline", "plot", "budget_s", "problems", "models", "quick")
LINEAR = {"rcr": "forward: y = x W^T, (T, N, K)", "rrr": "dgrad: dx = dy W, (T, K, N)",
          "crr": "wgrad: dW^T = x^T dy, (K, N, T)"}
"""A linear layer of T tokens, N outputs and K inputs: the GEMM each layout names, as
``gemmgen.torch``'s forward and backward run it (``gemmgen.torch.linear_problems``)."""


class SuiteError(ValueError):
    """A suite that cannot be read or is not valid; the message names the file and the key."""


@dataclass(frozen=True)
class Case:
    """One problem of a suite: C (M x N, ``layout``) = A (M x K) B (K x N) in ``dtype``, with
    ``epilogue`` and ``math``; ``preset`` for the presets kind (and an fp8 preset for the fp8
    kind); ``mode`` for the torch kind (``kernel`` elsewhere); ``scaling`` and ``accum`` for
    the fp8 kind; ``model``, ``layer`` and ``tokens`` (the layer's M) for a model's linear
    layer, ``aliases`` the other model.layer names with the very same problem; for the moe
    kind ``groups`` (experts) and ``routing`` (the rows' distribution over them,
    ``gemmgen.heuristics.grouped.row_counts``), M being the routed rows (tokens x top-k)."""

    dtype: str
    m: int
    n: int
    k: int
    layout: str = "rrr"
    epilogue: str = "none"
    math: str = "native"
    preset: str = ""
    mode: str = "kernel"
    model: str = ""
    layer: str = ""
    tokens: int | None = None
    aliases: tuple[str, ...] = ()
    scaling: str = ""
    accum: str = ""
    groups: int = 0
    routing: str = ""

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def label(self) -> str:
        """What ``--only`` matches: e.g. ``llama3_8b.q_proj fp16 rcr T=16 16x4096x4096``."""
        parts = [self.preset] if self.preset else []
        parts += [f"{self.model}.{self.layer}"] if self.model else []
        parts += [self.dtype, self.layout] + ([f"T={self.tokens}"] if self.model else [])
        parts += [f"G={self.groups} {self.routing}"] if self.groups else []
        parts += [self.shape] + [x for x in (self.epilogue, self.math, self.scaling, self.accum)
                                 if x not in ("none", "native", "")]
        return " ".join(parts + ([self.mode] if self.mode != "kernel" else []))

    def key(self) -> tuple:
        """The problem itself, without the names it goes by."""
        return (self.preset, self.dtype, self.m, self.n, self.k, self.layout, self.epilogue,
                self.math, self.mode, self.scaling, self.accum, self.groups, self.routing)


def is_extent(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= INT32_MAX


def _size(x):
    """N, "MxNxK" or [M, N, K] -> (M, N, K), or None when it is none of these."""
    if isinstance(x, str):
        parts = x.lower().split("x")
        x = [int(p) for p in parts] if len(parts) == 3 and all(p.isdigit() for p in parts) \
            else None
    if is_extent(x):
        return (x, x, x)
    if isinstance(x, list) and len(x) == 3 and all(is_extent(v) for v in x):
        return tuple(x)
    return None


_CHECKS = {
    "preset": (lambda v: v == "*" or v in PRESETS, "a preset name or \"*\""),
    "family": (lambda v: v in FAMILIES, f"one of {', '.join(FAMILIES)}"),
    "dtype": (lambda v: v in ELEM_BYTES, f"one of {', '.join(ELEM_BYTES)}"),
    "scaling": (lambda v: v in SCALINGS, f"one of {', '.join(SCALINGS)}"),
    "accum": (lambda v: v in ACCUMS, f"one of {', '.join(ACCUMS)}"),
    "layout": (lambda v: v in LAYOUTS, f"one of {', '.join(LAYOUTS)}"),
    "epilogue": (lambda v: v in EPILOGUES, f"one of {', '.join(EPILOGUES)}"),
    "math": (lambda v: v in MATHS, f"one of {', '.join(MATHS)}"),
    "mode": (lambda v: v in TORCH_MODES, f"one of {', '.join(TORCH_MODES)}"),
    "m": (is_extent, "an extent from 1 to 2^31 - 1"),
    "size": (lambda v: _size(v) is not None, "N, \"MxNxK\" or [M, N, K]"),
    "model": (lambda v: isinstance(v, str), "a model of [models]"),
    "layer": (lambda v: isinstance(v, str), "a layer name"),
    "routing": (lambda v: isinstance(v, str) and _routing_ok(v),
                "uniform, random, empty or skew<percent> (e.g. skew90)"),
}


def _routing_ok(name: str) -> bool:
    try:
        row_counts(name, 4, 2)
    except ValueError:
        return False
    return True


def _axis(suite, where: str, table: dict, axis: str, default, quick: bool) -> list:
    """The values of one axis of a problems table (a scalar is one value; ``default`` when
    absent), checked, and restricted to ``[quick]``'s values when ``quick``."""
    raw = table.get(axis, default)
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise SuiteError(f"{suite.path}: {where}{axis}: empty list")
    ok, what = _CHECKS[axis]
    for v in values:
        if v is not None and not ok(v):
            raise SuiteError(f"{suite.path}: {where}{axis}: {v!r} is not {what}")
    if axis == "size":
        values = [_size(v) for v in values]
    if quick and axis in suite.quick:
        allowed = suite.quick[axis] if isinstance(suite.quick[axis], list) else [suite.quick[axis]]
        allowed = [_size(v) for v in allowed] if axis == "size" else allowed
        values = [v for v in values if v in allowed]
    return values


def expand(suite, quick: bool = False) -> list[Case]:
    """Every case of the suite, in the order of its tables and their axes (a cross-product of
    each table's lists), duplicates merged (the later names go to ``aliases``); ``quick``
    keeps only the values ``[quick]`` lists. Raises ``SuiteError`` naming the file and key of
    a bad value."""
    cases: dict[tuple, Case] = {}
    for i, table in enumerate(suite.problems):
        where = f"problems[{i}]."
        make = {"presets": _presets_cases, "fp8": _fp8_cases, "moe": _moe_cases}.get(
            suite.kind, _gemm_cases)
        for case in make(suite, where, table, quick):
            old = cases.get(case.key())
            if old is None:
                cases[case.key()] = case
            elif case.model and f"{case.model}.{case.layer}" not in old.aliases:
                name = f"{case.model}.{case.layer}"
                cases[case.key()] = Case(**{**old.__dict__, "aliases": (*old.aliases, name)})
    return list(cases.values())


def _presets_cases(suite, where: str, table: dict, quick: bool) -> list[Case]:
    names = _axis(suite, where, table, "preset", None if "family" in table else "*", quick)
    fams = _axis(suite, where, table, "family", None, quick)
    chosen = list(GEMM_PRESETS) if "*" in names else [n for n in names if n]
    chosen += [n for n in GEMM_PRESETS if PRESETS[n].config.family in fams and n not in chosen]
    other = [n for n in chosen if n not in GEMM_PRESETS]
    if other:
        fam = PRESETS[other[0]].config.family
        kind = "fp8\" (beside torch._scaled_mm)" if fam == "fp8" else "moe\""
        raise SuiteError(f"{suite.path}: {where}preset: {other[0]!r} is a {fam} preset: it "
                         f"runs in a suite of kind \"{kind}")
    if "size" not in table:
        raise SuiteError(f"{suite.path}: {where}size: required")
    out = []
    for (m, n, k), name in itertools.product(_axis(suite, where, table, "size", None, quick),
                                             chosen):
        cfg = PRESETS[name].config
        math_ = getattr(cfg, "math", "native")  # 3xTF32 multiplies fp32 data: beside SGEMM
        out.append(Case("fp32" if math_ == "3xtf32" else cfg.dtype, m, n, k, cfg.layout,
                        cfg.epilogue, math_, preset=name))
    return out


def _gemm_cases(suite, where: str, table: dict, quick: bool) -> list[Case]:
    """Cases of a dispatch or torch table: sizes, or a model's layers times token counts."""
    ax = {a: _axis(suite, where, table, a, d, quick) if a in AXES[suite.kind] else [d]
          for a, d in (("dtype", None), ("epilogue", "none"), ("math", "native"))}
    ax["mode"] = (_axis(suite, where, table, "mode", list(TORCH_MODES), quick)
                  if suite.kind == "torch" else ["kernel"])
    if ax["dtype"] == [None]:
        raise SuiteError(f"{suite.path}: {where}dtype: required")
    fp8 = [d for d in ax["dtype"] if d in FP8_DTYPES]
    if fp8:
        raise SuiteError(f"{suite.path}: {where}dtype: {fp8[0]!r} runs in a suite of kind "
                         f"\"fp8\" (beside torch._scaled_mm), not {suite.kind!r}")
    if "3xtf32" in ax["math"] and set(ax["dtype"]) != {"fp32"}:
        raise SuiteError(f"{suite.path}: {where}math: 3xtf32 runs on fp32 data; give "
                         f"dtype = \"fp32\" in its own table")
    if ("size" in table) == ("model" in table):
        raise SuiteError(f"{suite.path}: {where}size: give either size or model (with m)")
    base = "rcr" if "model" in table or suite.kind == "torch" else "rrr"
    layouts = _axis(suite, where, table, "layout", base, quick) if suite.kind != "torch" \
        else ["rcr"]
    shapes = _shapes(suite, where, table, layouts, quick)
    out = []
    for (m, n, k, lay, names), dt, epi, mth, mode in itertools.product(
            shapes, ax["dtype"], ax["epilogue"], ax["math"], ax["mode"]):
        model, layer, tokens = names
        out.append(Case(dt, m, n, k, lay, epi, mth, mode=mode, model=model, layer=layer,
                        tokens=tokens))
    return out


def _shapes(suite, where: str, table: dict, layouts: list, quick: bool) -> list:
    """(M, N, K, layout, (model, layer, tokens)) of a table's sizes or model layers."""
    if "size" in table:
        return [(*s, lay, ("", "", None)) for s in _axis(suite, where, table, "size", None, quick)
                for lay in layouts]
    models = _axis(suite, where, table, "model", None, quick)
    for name in models:
        if name not in suite.models:
            raise SuiteError(f"{suite.path}: {where}model: {name!r} is not in [models] "
                             f"({', '.join(suite.models) or 'none defined'})")
    if "m" not in table:
        raise SuiteError(f"{suite.path}: {where}m: required with model (the token counts)")
    bad = [lay for lay in layouts if lay not in LINEAR]
    if bad:
        raise SuiteError(f"{suite.path}: {where}layout: {bad[0]!r} is not a linear layer's "
                         f"GEMM; use " + "; ".join(f"{k} ({v})" for k, v in LINEAR.items()))
    wanted = _axis(suite, where, table, "layer", None, quick)
    known = {lay for name in models for lay in suite.models[name]["layers"]}
    missing = [w for w in wanted if w is not None and w not in known]
    if missing:
        raise SuiteError(f"{suite.path}: {where}layer: {missing[0]!r} is not a layer of "
                         f"{', '.join(models)}")
    out = []
    for name in models:
        for layer, (n, k) in suite.models[name]["layers"].items():
            if wanted != [None] and layer not in wanted:
                continue
            for tokens, lay in itertools.product(_axis(suite, where, table, "m", None, quick),
                                                 layouts):
                out.append((*linear_gemm(tokens, n, k, lay), lay, (name, layer, tokens)))
    return out


def _fp8_cases(suite, where: str, table: dict, quick: bool) -> list[Case]:
    """Cases of an fp8 table: sizes or a model's forward layers (T, N, K), times dtype,
    scaling and accumulation (block with fast skipped), or fp8 presets as they are."""
    dtypes = _axis(suite, where, table, "dtype", "e4m3", quick)
    bad = [d for d in dtypes if d not in FP8_DTYPES]
    if bad:
        raise SuiteError(f"{suite.path}: {where}dtype: {bad[0]!r} is not one of "
                         f"{', '.join(FP8_DTYPES)}")
    if ("size" in table) == ("model" in table):
        raise SuiteError(f"{suite.path}: {where}size: give either size or model (with m)")
    shapes = _shapes(suite, where, table, ["rcr"], quick)
    presets = _axis(suite, where, table, "preset", None, quick)
    fp8_presets = [n for n, p in PRESETS.items() if p.config.family == "fp8"]
    if presets != [None]:
        wrong = [n for n in presets if n not in fp8_presets]
        if wrong or "scaling" in table or "accum" in table:
            raise SuiteError(f"{suite.path}: {where}preset: fp8 presets only ("
                             f"{', '.join(fp8_presets)}), with no scaling or accum (a "
                             f"preset has its own)" + (f"; got {wrong[0]!r}" if wrong else ""))
        runs = [(n, PRESETS[n].config.scaling, "promoted" if PRESETS[n].config.promote else
                 "fast") for n in presets]
    else:
        runs = [("", sc, acc) for sc in _axis(suite, where, table, "scaling", "tensor", quick)
                for acc in _axis(suite, where, table, "accum", "fast", quick)
                if not (sc == "block" and acc == "fast")]
    out = []
    for (m, n, k, lay, names), dt, (preset, sc, acc) in itertools.product(shapes, dtypes, runs):
        model, layer, tokens = names
        out.append(Case(dt, m, n, k, lay, preset=preset, model=model, layer=layer,
                        tokens=tokens, scaling=sc, accum=acc))
    return out


def _moe_cases(suite, where: str, table: dict, quick: bool) -> list[Case]:
    """Cases of a moe table: each model's expert layers x token counts x routings; M is the
    routed rows (tokens x the model's top_k), the groups its experts."""
    for key in ("model", "m"):
        if key not in table:
            raise SuiteError(f"{suite.path}: {where}{key}: required for the moe kind")
    out = []
    for name in _axis(suite, where, table, "model", None, quick):
        spec = suite.models.get(name)
        if spec is None or not spec.get("experts") or not spec.get("top_k"):
            raise SuiteError(f"{suite.path}: {where}model: {name!r} needs [models.{name}] with "
                             f"experts and top_k")
        wanted = _axis(suite, where, table, "layer", None, quick)
        for layer, (n, k) in spec["layers"].items():
            if wanted != [None] and layer not in wanted:
                continue
            for tokens, routing, dt in itertools.product(
                    _axis(suite, where, table, "m", None, quick),
                    _axis(suite, where, table, "routing", "uniform", quick),
                    _axis(suite, where, table, "dtype", "bf16", quick)):
                out.append(Case(dt, tokens * spec["top_k"], n, k, "rcr", model=name,
                                layer=layer, tokens=tokens, groups=spec["experts"],
                                routing=routing))
    return out


def linear_gemm(tokens: int, n: int, k: int, layout: str) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM ``layout`` names (see ``LINEAR``) for a linear layer of
    ``tokens`` rows, N outputs and K inputs."""
    return {"rcr": (tokens, n, k), "rrr": (tokens, k, n), "crr": (k, n, tokens)}[layout]


def select(cases: list[Case], only: str | None = None, max_rows: int | None = None) -> list:
    """The cases whose label or aliases contain ``only`` (case-insensitive), at most
    ``max_rows`` of them (the first, in suite order)."""
    if only:
        low = only.lower()
        cases = [c for c in cases if low in c.label.lower()
                 or any(low in a.lower() for a in c.aliases)]
    return cases[:max_rows] if max_rows else cases
