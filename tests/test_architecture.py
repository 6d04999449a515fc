"""The package's shape, pinned: the public API, the stages and which stages each may import,
no import circle, and the size budgets (modules <= 400 lines, functions <= 60)."""
import ast
from pathlib import Path

import pytest

import gemmgen

ROOT = Path(__file__).resolve().parents[1] / "gemmgen"

PUBLIC = ["gemm", "grouped_gemm", "BuildError", "Kernel", "OperandError", "build", "load", "ConfigError",
          "FAMILIES", "SimtConfig", "SIMT_RULES", "WmmaConfig", "WMMA_RULES", "PRESETS",
          "config_from_dict", "config_from_source", "emit", "get_preset", "render",
          "__version__"]

MAY_IMPORT = {
    "_version": set(),
    "files": set(),
    "model": {"model"},
    "heuristics": {"model", "heuristics"},
    "codegen": {"model", "codegen", "_version"},
    "compile": {"model", "codegen", "compile", "_version"},
    "runtime": {"model", "heuristics", "codegen", "compile", "runtime"},
    "tune": {"model", "heuristics", "codegen", "compile", "runtime", "tune"},
    "cli": {"model", "heuristics", "codegen", "compile", "runtime", "tune", "cli", "_version",
            "torch"},  # the torch suite kind runs gemmgen.torch's op (imported only then)
    "torch": {"model", "heuristics", "codegen", "compile", "runtime", "torch"},
}
"""Stage -> the stages its modules may import (gemmgen/__init__.py and __main__.py may import
any). Each stage knows only the stages below it; ``files`` (reading and writing documents)
lies below them all."""
for _stage_imports in MAY_IMPORT.values():
    if _stage_imports:
        _stage_imports.add("files")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """gemmgen modules ``path`` imports, anywhere in the file (function-local ones too)."""
    mod = _module(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("gemmgen"):
                for alias in node.names:  # `from . import tunedb` names a module
                    sub = f"{target}.{alias.name}"
                    out.add(sub if (ROOT.parent / sub.replace(".", "/")).with_suffix(".py").exists()
                            or (ROOT.parent / sub.replace(".", "/")).is_dir() else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("gemmgen")}
    return out - {mod}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


FILES = sorted(ROOT.rglob("*.py"))
GRAPH = {_module(p): _imports(p) for p in FILES}


def test_public_api_is_pinned():
    assert gemmgen.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(gemmgen, name) is not None


def test_every_stage_imports_only_the_stages_below_it():
    bad = []
    for mod, targets in GRAPH.items():
        stage = _stage(mod)
        if stage in ("", "__main__"):
            continue
        allowed = MAY_IMPORT[stage]
        bad += [f"{mod} -> {t}" for t in targets if _stage(t) not in allowed]  # "" is the face
    assert not bad, bad


def test_no_import_circle():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in GRAPH.get(m, ()):
            if t not in GRAPH:
                continue
            if state.get(t) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2
    for m in GRAPH:
        if m not in state:
            visit(m)


def test_size_budgets():
    long_modules = [f"{p}: {n}" for p in FILES if (n := p.read_text().count("\n")) > 400]
    long_functions = []
    for p in FILES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > 60:
                    long_functions.append(f"{p}:{node.name}: {n}")
    assert not long_modules and not long_functions, long_modules + long_functions


def test_every_package_is_shipped():
    """pyproject.toml lists its packages (the templates folder maps to one): a new subpackage
    missing there would be left out of the installed wheel."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {_module(p) for p in ROOT.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
    assert "gemmgen.templates" in listed


def test_the_wgmma_wrappers_are_written_once():
    """Every Hopper kernel (wgmma, FP8, grouped) takes its wgmma PTX wrappers (descriptor,
    fence, commit, wait, the instruction) from one template file."""
    templates = ROOT.parent / "templates"
    for ptx in ("wgmma.mma_async.sync", "wgmma.fence.sync", "wgmma.commit_group",
                "wgmma.wait_group", "make_desc(uint32_t"):
        holders = sorted(p.name for p in templates.glob("*.j2") if ptx in p.read_text())
        assert holders == ["_wgmma_ptx.cu.j2"], (ptx, holders)


def test_the_hopper_rules_are_written_once():
    """The wgmma, FP8 and grouped families check one table of Hopper rules (each rule once,
    by id and by name), then the rules of their own axes; no rule of a family's table repeats
    a Hopper rule's name."""
    from gemmgen.model.families import get_family
    from gemmgen.model.families.hopper import HOPPER_RULES
    shared = {r.name for r in HOPPER_RULES}
    for name in ("wgmma", "fp8", "grouped"):
        table = get_family(name).config.rules
        assert table[:len(HOPPER_RULES)] == HOPPER_RULES, name
        own = [r.name for r in table[len(HOPPER_RULES):]]
        assert not shared & set(own) and len(set(own)) == len(own), (name, own)
        assert len({r.id for r in table}) == len(table), name


def test_hopper_kernel_parameters_are_declared_once():
    """A Hopper kernel's parameter list is its config's ``params()``: the template writes the
    signature from it (no template spells a tensor-map parameter) and the runtime packs the
    launch block from it."""
    from gemmgen import PRESETS
    from gemmgen.codegen.render import render
    templates = ROOT.parent / "templates"
    assert not [p.name for p in templates.glob("*.j2") if "CUtensorMap tmap_" in p.read_text()]
    for preset in PRESETS.values():
        cfg = preset.config
        if cfg.family not in ("wgmma", "fp8", "grouped"):
            continue
        source = render(cfg, "sm_90a")
        assert cfg.kernel_signature(cfg.name, f"{cfg.name}_cfg") in source, preset.name


def test_every_family_is_one_kernel_class_with_its_launcher_from_one_table(monkeypatch):
    """One Kernel class; how a family's calls become launches is its ``Launcher``, taken from
    kernel.LAUNCHERS (the Hopper families: tensor maps and helper kernels), else the direct
    launch; the fallback contract is the Kernel's."""
    from gemmgen import PRESETS
    from gemmgen.model.families import FAMILIES
    from gemmgen.runtime.kernel import LAUNCHERS, DirectLaunch, Kernel
    from gemmgen.runtime.recipe import Launcher
    assert set(LAUNCHERS) == {"wgmma", "fp8", "grouped"} <= set(FAMILIES)
    assert all(issubclass(c, Launcher) for c in (*LAUNCHERS.values(), DirectLaunch))
    assert Kernel.__subclasses__() == []
    plain = Kernel(PRESETS["naive"].config, "sm_80", b"")
    with pytest.raises(RuntimeError, match="no fallback kernel"):
        plain.fallback
    built = []
    import gemmgen.runtime.kernel as kernel_module
    monkeypatch.setattr(kernel_module, "fallback_config", lambda cfg: ("fallback of", cfg.name))
    made = Kernel(PRESETS["naive"].config, "sm_80", b"",
                  builder=lambda cfg: built.append(cfg) or plain)
    assert made.fallback is plain and made.fallback is plain
    assert built == [("fallback of", made.name)]  # built once, from the family's fallback


def test_the_runtime_is_staged_not_stacked_per_family():
    """The runtime has one module per stage of a call, the operand and grouping kinds being
    data or modules of a stage (operands/scales.py, operands/groups.py), not a stack per
    family: no ``fp8_*`` or ``grouped_*`` module, and one ``Plan`` class for every family.
    The Hopper families are one model package (families/hopper/ with wgmma, fp8, grouped)."""
    import gemmgen.runtime.plans as plans
    runtime = ROOT / "runtime"
    stacked = sorted(str(p.relative_to(runtime)) for p in runtime.rglob("*.py")
                     if p.name.startswith(("fp8_", "grouped_")))
    assert not stacked, stacked
    plan_classes = [(str(p.relative_to(runtime)), line.split("(")[0].split(":")[0])
                    for p in sorted(runtime.rglob("*.py")) for line in p.read_text().splitlines()
                    if line.startswith("class ") and "Plan" in line.split("(")[0]]
    assert plan_classes == [("plans.py", "class Plan")] and hasattr(plans, "Plan"), plan_classes
    hopper = ROOT / "model" / "families" / "hopper"
    assert {p.name for p in hopper.iterdir() if (p / "__init__.py").exists()} == {
        "wgmma", "fp8", "grouped"}
    assert not [p for p in (ROOT / "model" / "families").iterdir()
                if p.name in ("wgmma", "fp8", "grouped", "hopper.py")]
