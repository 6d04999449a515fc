"""nvcc agrees with the Python model: presets compile cleanly, and a config compiles if and
only if validate() finds nothing, with the same rules firing as static_asserts."""
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from breakers import ALL_RULES, breaker

from gemmgen import FAMILIES, PRESETS, SimtConfig, render
from gemmgen.compile.nvcc import (BuildError, _run_nvcc, compile_source,
                                  parse_ptxas)

ARCHS = ("sm_80", "sm_90")


def _parallel(fn, items) -> dict:
    """fn(item) for every item in as many nvcc processes as there are cores (the exception
    when it raises), so the per-item tests below only read their result."""
    def one(item):
        try:
            return fn(item)
        except BuildError as exc:
            return exc
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        return dict(zip(items, pool.map(one, items)))


NON_TMA_PRESETS = [n for n, p in PRESETS.items()
                   if p.config.family not in ("wgmma", "mma", "fp8", "grouped")]  # own tests
RULE_CASES = [(f, r) for f, r in ALL_RULES if f != "mma"]
TEMPLATED = ("simt", "wmma")
"""Families whose static_asserts sit in templates, so that most of their breakers compile one
by one (``breaker_errors``): make test takes every third of their rules, make test-all all."""


def _rule_param(family, rule, i):
    slow = family in TEMPLATED and i % 3
    return pytest.param(family, rule, marks=pytest.mark.slow if slow else (),
                        id=f"{family}-{rule.id}")


RULE_PARAMS = [_rule_param(f, r, i) for f in sorted({f for f, _ in RULE_CASES})
               for i, r in enumerate(r for g, r in RULE_CASES if g == f)]


def preset_archs(name: str) -> tuple[str, ...]:
    """The archs a preset's static evidence is taken on in make test: sm_90, sm_80 for the wmma
    family (Ampere's tensor-core path; its sm_90 build is make test-all's, as CI has two cores;
    SIMT kernels assemble alike on both)."""
    return ("sm_80",) if PRESETS[name].config.family == "wmma" else ("sm_90",)


@pytest.fixture(scope="module")
def preset_reports(nvcc):
    """{preset: {arch: ptxas report}}: per arch, the presets as one translation unit per core
    (``tests/batched.py``), so nvcc's start-up (about 0.7 s a process) is paid per unit and not
    per preset; a unit that fails is compiled preset by preset, so each names its own error."""
    from batched import compile_batched
    out: dict = {}
    for arch in ARCHS:
        names = [n for n in NON_TMA_PRESETS if arch in preset_archs(n)]
        for n, done in zip(names, compile_batched([PRESETS[n].config for n in names], arch)):
            if isinstance(done, BuildError):
                out[n] = done
            elif not isinstance(out.get(n), BuildError):
                out.setdefault(n, {})[arch] = done[1]
    return out


def _fired_in_one_call(family: str, rules, tmp: Path) -> dict:
    """Every breaker of ``family`` in one translation unit and one nvcc call: {rule id: the
    BuildError, restricted to the static_asserts that fired on that breaker's lines}. EDG
    stops instantiating templates after the first error, so a breaker whose assert sits in a
    template may fire nothing here; the caller compiles those alone."""
    arch = FAMILIES[family].arch_for(90)  # sm_90a for wgmma
    cfgs = {rule.id: breaker(family, rule.name) for rule in rules}
    sources = [render(c, arch) for c in cfgs.values()]
    src = tmp / f"{family}_breakers.cu"
    src.write_text("\n".join(sources))
    try:
        _run_nvcc(["-cubin", f"-arch={arch}", "-std=c++17", "-o", str(tmp / "k.cubin")], src, 600)
        return {}
    except BuildError as exc:
        log = exc.log
    spans, line = [], 1  # (first line, last line, rule id) of each breaker's source
    for rid, text in zip(cfgs, sources):
        n = text.count("\n") + 1
        spans.append((line, line + n - 1, rid))
        line += n
    lines: dict[str, list] = {}
    for m in re.finditer(r"^.*\((\d+)\): error: static assertion failed.*$", log, re.M):
        owner = next(rid for lo, hi, rid in spans if lo <= int(m[1]) <= hi)
        lines.setdefault(owner, []).append(m[0].replace(str(src), f"{cfgs[owner].name}.cu"))
    return {rid: BuildError(f"{cfgs[rid].name}.cu", "\n".join(ls)) for rid, ls in lines.items()}


@pytest.fixture(scope="module")
def breaker_errors(nvcc, tmp_path_factory, request):
    """{(family, rule): what nvcc said of the config that breaks only that rule}: each family's
    breakers in one nvcc call, then alone the ones that fired nothing there, of the rules this
    session's tests ask for (make test leaves most of TEMPLATED's to make test-all)."""
    asked = {(i.callspec.params["family"], i.callspec.params["rule"].id)
             for i in request.session.items if hasattr(i, "callspec")
             and i.originalname == "test_each_rule_fires_alone_as_a_static_assert"}
    tmp = tmp_path_factory.mktemp("breakers")
    families = sorted({f for f, _ in RULE_CASES})
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        fired = dict(zip(families, pool.map(
            lambda f: _fired_in_one_call(f, [r for g, r in RULE_CASES if g == f], tmp),
            families)))
    out = {(f, r): fired[f][r.id] for f, r in RULE_CASES if r.id in fired[f]}

    def build(case):
        family, rule = case
        cfg = breaker(family, rule.name)
        arch = FAMILIES[family].arch_for(90)
        compile_source(render(cfg, arch), (arch,), name=cfg.name)
        return None
    return {**out, **_parallel(build, [c for c in RULE_CASES if c not in out
                                       and (c[0], c[1].id) in asked])}


# wgmma, mma and grouped presets: tests/test_wgmma.py, tests/test_mma.py (all four archs at
# once) and tests/test_grouped.py.
@pytest.mark.parametrize("name", NON_TMA_PRESETS)
def test_preset_compiles_without_spills_and_with_the_model_smem(preset_reports, name):
    cfg = PRESETS[name].config
    report = preset_reports[name]
    assert not isinstance(report, BuildError), report
    for arch in preset_archs(name):
        _assert_clean(cfg, report[arch], arch)


def _assert_clean(cfg, res, arch) -> None:
    """A preset's ptxas report on ``arch``: no spills, no stack, the model's static shared
    memory, 1 to 255 registers."""
    assert res.spills == 0, f"{arch}: {res}"
    assert res.stack_bytes == 0, f"{arch}: local-memory stack frame {res}"
    assert res.smem_bytes == cfg.static_smem_bytes
    assert 0 < res.registers <= 255


@pytest.mark.slow
def test_wmma_presets_also_assemble_for_hopper(nvcc):
    from batched import compile_batched
    names = [n for n in NON_TMA_PRESETS if PRESETS[n].config.family == "wmma"]
    for n, done in zip(names, compile_batched([PRESETS[n].config for n in names], "sm_90")):
        assert not isinstance(done, BuildError), done
        _assert_clean(PRESETS[n].config, done[1], f"{n} sm_90")


# mma rules: tests/test_mma.py fires every breaker in one nvcc call.
@pytest.mark.parametrize("family, rule", RULE_PARAMS)
def test_each_rule_fires_alone_as_a_static_assert(breaker_errors, family, rule):
    err = breaker_errors[(family, rule)]
    assert isinstance(err, BuildError), "nvcc accepted a config that breaks " + rule.id
    assert err.static_assert_ids() == {rule.id}
    assert breaker(family, rule.name).name in err.path


def test_build_error_names_the_file_and_shows_nvcc(nvcc, tmp_path):
    cfg = SimtConfig.unchecked(bm=128, bn=128, bk=16, tm=8, tn=7)
    with pytest.raises(BuildError) as info:
        compile_source(render(cfg), ("sm_90",), name=cfg.name, keep_dir=tmp_path)
    err = info.value
    assert err.path == str(tmp_path / f"{cfg.name}.cu")
    assert "static assertion failed" in str(err) and err.path in str(err)
    assert err.static_assert_ids() == {v.rule.id for v in cfg.violations()}


def test_parse_ptxas_reads_each_arch():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 33792 bytes smem, 412 bytes cmem[0]
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""
    rep = parse_ptxas(log)
    assert (rep["sm_80"].registers, rep["sm_80"].smem_bytes, rep["sm_80"].spills) == (255, 33792, 16)
    assert (rep["sm_90"].registers, rep["sm_90"].smem_bytes, rep["sm_90"].stack_bytes) == (40, 0, 0)


# Random configs around the presets; sizes stay small enough for CI.
def test_build_error_survives_pickling():
    import pickle
    err = pickle.loads(pickle.dumps(BuildError("/tmp/k.cu", 'static assertion failed with "R07 x"')))
    assert err.path == "/tmp/k.cu" and err.static_assert_ids() == {"R07"}


