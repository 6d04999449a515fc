"""Benchmark suites as data: find and read ``benchmarks/suites/<name>.toml``, check it (every
key and value, naming the file and the key), and name the suite's results file.

The format is documented in ``benchmarks/suites/README.md``; ``gemmgen.tune.suite_cases``
expands a suite into cases and ``gemmgen.tune.suite_run`` runs them. Nothing here needs a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..files import read_document
from .suite_cases import (
    AXES,
    KINDS,
    PLOTS,
    TOP_KEYS,
    Case,
    SuiteError,
    expand,
    is_extent,
    linear_gemm,
    select,
)

__all__ = ["Case", "Suite", "SuiteError", "expand", "known_suites", "linear_gemm", "load",
           "resolve", "results_path", "select"]


@dataclass
class Suite:
    """A parsed suite file: ``name`` (the file's stem), ``kind``, ``baseline``, ``plot``,
    ``budget_s`` (seconds of timed launches per measurement), its ``problems`` tables,
    ``models`` (name -> {"source", "layers": {layer: (N, K)}}) and ``quick`` (axis ->
    allowed values)."""

    name: str
    path: Path
    kind: str
    baseline: str
    description: str = ""
    plot: str = "lines"
    budget_s: float = 0.1
    problems: list = field(default_factory=list)
    models: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)

    @property
    def suite_file(self) -> str:
        """The file as the results header names it: benchmarks/suites/<name>.toml when it
        lives there, else the path given."""
        p = self.path
        if p.parent.name == "suites" and p.parent.parent.name == "benchmarks":
            return f"benchmarks/suites/{p.name}"
        return str(p)

    @property
    def results_dir(self) -> Path:
        """benchmarks/results beside the suites folder the file lives in, else
        benchmarks/results under the current directory."""
        if self.path.parent.name == "suites":
            return self.path.parent.parent / "results"
        return Path("benchmarks/results")


def search_dirs() -> list[Path]:
    """Where suite names are looked up: benchmarks/suites under the current directory, then
    under the checkout gemmgen was imported from."""
    here = Path("benchmarks/suites")
    repo = Path(__file__).resolve().parents[2] / "benchmarks" / "suites"
    return [here] + ([repo] if repo.resolve() != here.resolve() else [])


def known_suites() -> list[str]:
    """Names of the suites in ``search_dirs()``, sorted."""
    return sorted({p.stem for d in search_dirs() if d.is_dir() for p in d.glob("*.toml")})


def resolve(name_or_path: str) -> Path:
    """The suite file for a name (benchmarks/suites/NAME.toml, see ``search_dirs``) or a path
    to a .toml file. Raises ``SuiteError`` listing the known suites."""
    given = Path(name_or_path)
    if given.suffix == ".toml" or len(given.parts) > 1:
        if given.is_file():
            return given
        raise SuiteError(f"no suite file {name_or_path}")
    for d in search_dirs():
        if (d / f"{name_or_path}.toml").is_file():
            return d / f"{name_or_path}.toml"
    raise SuiteError(f"unknown suite {name_or_path!r}: no benchmarks/suites/{name_or_path}.toml;"
                     f" known: {', '.join(known_suites()) or 'none'}")


def load(name_or_path: str) -> Suite:
    """Read, check and return a suite. Raises ``SuiteError`` naming the file and the key for
    an unreadable file, TOML syntax, an unknown key, a bad kind, baseline or value, or an
    empty problem list."""
    path = resolve(name_or_path)
    data = read_document(path, SuiteError, toml=True)
    models = data.get("models")
    if isinstance(models, str):  # another suite's [models] tables, e.g. models = "llm"
        other = path.parent / f"{models}.toml"
        if other.resolve() == path.resolve() or not other.is_file():
            raise SuiteError(f"{path}: models: {models!r} names no other suite file beside it")
        data = {**data, "models": load(str(other)).models}
    return from_dict(data, path)


def from_dict(data: dict, path: Path) -> Suite:
    """A ``Suite`` from a parsed TOML document (``path`` names it in errors); checked as
    ``load`` says, the problems expanded once to check their values."""
    _unknown(data, TOP_KEYS, path, "")
    kind = data.get("kind")
    if kind not in KINDS:
        raise SuiteError(f"{path}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    baseline = data.get("baseline", KINDS[kind][0])
    if baseline not in KINDS[kind]:
        raise SuiteError(f"{path}: baseline: {baseline!r} is not one of "
                         f"{', '.join(KINDS[kind])} (for kind {kind!r})")
    plot = data.get("plot", PLOTS[kind])
    if plot not in ("bars", "lines", "heatmap", "none"):
        raise SuiteError(f"{path}: plot: {plot!r} is not one of bars, lines, heatmap, none")
    budget = data.get("budget_s", 0.1)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 5:
        raise SuiteError(f"{path}: budget_s: {budget!r} is not a number of seconds in (0, 5]")
    problems = data.get("problems")
    if not isinstance(problems, list) or not problems:
        raise SuiteError(f"{path}: problems: the suite needs a non-empty [[problems]] list")
    suite = Suite(path.stem, path, kind, baseline, str(data.get("description", "")), plot,
                  float(budget), problems, _models(data.get("models", {}), path),
                  data.get("quick", {}))
    for i, table in enumerate(problems):
        if not isinstance(table, dict):
            raise SuiteError(f"{path}: problems[{i}] is not a table")
        _unknown(table, AXES[kind], path, f"problems[{i}].")
    if not isinstance(suite.quick, dict):
        raise SuiteError(f"{path}: quick: expected a table of axis = [values]")
    _unknown(suite.quick, AXES[kind], path, "quick.")
    for quick in (False, True):
        if not expand(suite, quick):
            raise SuiteError(f"{path}: problems: the tables expand to no case"
                             + (" under [quick]" if quick else ""))
    return suite


def _unknown(table: dict, known, path: Path, where: str) -> None:
    extra = [k for k in table if k not in known]
    if extra:
        raise SuiteError(f"{path}: {where}{extra[0]}: unknown key (known: {', '.join(known)})")


def _models(models, path: Path) -> dict:
    """{name: {"source": str, "layers": {layer: (N, K)}, "experts": int, "top_k": int}} from
    the [models] tables (experts and top_k: a mixture-of-experts model, for the moe kind)."""
    if not isinstance(models, dict):
        raise SuiteError(f"{path}: models: expected tables [models.NAME] or a suite's name")
    out = {}
    for name, spec in models.items():
        if isinstance(spec, dict) and isinstance(spec.get("layers"), dict) and all(
                isinstance(v, tuple) for v in spec["layers"].values()):
            out[name] = spec  # already checked (another suite's)
            continue
        where = f"{path}: models.{name}"
        if not isinstance(spec, dict):
            raise SuiteError(f"{where}: expected a table with source and layers")
        _unknown(spec, ("source", "layers", "experts", "top_k"), path, f"models.{name}.")
        for key in ("experts", "top_k"):
            if key in spec and not is_extent(spec[key]):
                raise SuiteError(f"{where}.{key}: {spec[key]!r} is not a positive integer")
        if not isinstance(spec.get("source"), str) or not isinstance(spec.get("layers"), dict) \
                or not spec["layers"]:
            raise SuiteError(f"{where}: needs source (a string) and layers (a non-empty table)")
        layers = {}
        for layer, nk in spec["layers"].items():
            if not (isinstance(nk, list) and len(nk) == 2 and all(is_extent(x) for x in nk)):
                raise SuiteError(f"{where}.layers.{layer}: {nk!r} is not [N, K] (out_features, "
                                 f"in_features)")
            layers[layer] = tuple(nk)
        out[name] = {"source": spec["source"], "layers": layers,
                     **{key: spec[key] for key in ("experts", "top_k") if key in spec}}
    return out


def results_path(suite: Suite, gpu: str, ext: str = "json", folder: Path | None = None) -> Path:
    """<folder, default the suite's results_dir>/<suite>_<GPU name as a file name>.<ext>,
    e.g. benchmarks/results/ladder_NVIDIA_H200.json."""
    from .results import file_stem
    return Path(folder or suite.results_dir) / f"{suite.name}_{file_stem(gpu)}.{ext}"
