"""nvcc agrees with the Python model: presets compile cleanly, and a config compiles if and
only if validate() finds nothing, with the same rules firing as static_asserts."""
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from breakers import ALL_RULES, breaker, pairwise_variants
from hypothesis import HealthCheck, event, given, settings, strategies as st

from gemmgen import FAMILIES, PRESETS, SimtConfig, render
from gemmgen.compile.nvcc import (BuildError, _run_nvcc, compile_many, compile_source,
                                  parse_ptxas)
from gemmgen.model.config import LAYOUTS
from gemmgen.model.families.wmma import SHAPES, WmmaConfig

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


@pytest.fixture(scope="module")
def preset_reports(nvcc):
    return _parallel(lambda n: compile_source(render(PRESETS[n].config), ARCHS,
                                              name=PRESETS[n].config.name), NON_TMA_PRESETS)


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
def breaker_errors(nvcc, tmp_path_factory):
    """{(family, rule): what nvcc said of the config that breaks only that rule}: each family's
    breakers in one nvcc call, then alone the ones that fired nothing there."""
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
    return {**out, **_parallel(build, [c for c in RULE_CASES if c not in out])}


# wgmma, mma and grouped presets: tests/test_wgmma.py, tests/test_mma.py (all four archs at
# once) and tests/test_grouped.py.
@pytest.mark.parametrize("name", NON_TMA_PRESETS)
def test_preset_compiles_without_spills_and_with_the_model_smem(preset_reports, name):
    cfg = PRESETS[name].config
    report = preset_reports[name]
    assert not isinstance(report, BuildError), report
    for arch in ARCHS:
        res = report[arch]
        assert res.spills == 0, f"{arch}: {res}"
        assert res.stack_bytes == 0, f"{arch}: local-memory stack frame {res}"
        assert res.smem_bytes == cfg.static_smem_bytes
        assert 0 < res.registers <= 255


# mma rules: tests/test_mma.py fires every breaker in one nvcc call.
@pytest.mark.parametrize("family, rule", RULE_CASES, ids=lambda x: getattr(x, "id", x))
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
FIELD_VALUES = {
    "bm": [16, 32, 48, 64, 128], "bn": [16, 32, 64, 96, 128], "bk": [1, 2, 4, 8, 16],
    "tm": [1, 2, 3, 4, 8], "tn": [1, 2, 4, 6, 8], "wm": [None, 16, 32, 64],
    "wn": [None, 16, 32, 64], "vec": [1, 2, 3, 4], "skew": [0, 1, 2, 4],
    "stages": [0, 1, 2], "transpose_a": [False, True], "thread_order": ["n", "n", "m"],
    "min_blocks": [1, 1, 2, 0], "layout": ["rrr", "rrr", "ccr", "crc", "rcc"],
    "epilogue": ["none", "none", "bias_gelu", "relu"],
    "store": ["direct", "direct", "smem"], "swizzle_a": [False, False, True],
    "frag_db": [False, True], "peel": [False, False, True], "align": ["matrix", "row"],
}


def near_presets(cls, values: dict):
    """Configs of ``cls``: half perturb one or two fields of one of its presets (often valid),
    half draw every field from ``values`` (usually invalid)."""
    @st.composite
    def strategy(draw):
        if draw(st.booleans()):
            own = [p.config for p in PRESETS.values() if isinstance(p.config, cls)]
            base = draw(st.sampled_from(own)).as_dict()
            base.pop("family")
            for field in draw(st.lists(st.sampled_from(list(values)), min_size=1, max_size=2)):
                base[field] = draw(st.sampled_from(values[field]))
            return cls.unchecked(**base)
        return cls.unchecked(**{f: draw(st.sampled_from(v)) for f, v in values.items()})
    return strategy()


def assert_nvcc_agrees(cfg) -> None:
    """nvcc compiles ``cfg`` exactly when the model finds no violation, the static_asserts that
    fire are the model's rules, and the static shared memory matches."""
    found = {v.rule.id for v in cfg.violations()}
    event("invalid" if found else "valid")
    try:
        report = compile_source(render(cfg), ("sm_90",), name=cfg.name)
    except BuildError as err:
        assert found, f"valid by the model but nvcc failed:\n{err.log[-2000:]}"
        assert err.static_assert_ids() == found
    else:
        assert not found, f"nvcc accepted a config the model rejects: {sorted(found)}"
        assert report["sm_90"].smem_bytes == cfg.static_smem_bytes


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=near_presets(SimtConfig, FIELD_VALUES))
def test_python_verdict_equals_nvcc_verdict(nvcc, cfg):
    assert_nvcc_agrees(cfg)


WMMA_VALUES = {
    "bm": [32, 64, 96, 128], "bn": [32, 64, 128], "bk": [8, 16, 32], "wm": [16, 32, 48, 64],
    "wn": [8, 16, 32, 64], "shape": list(SHAPES), "dtype": ["fp16", "bf16", "tf32"],
    "acc": ["fp32", "fp32", "fp16"], "out": ["fp32", "fp16", "bf16"], "skew": [0, 4, 8, 12],
    "stages": [1, 2, 3, 7], "min_blocks": [1, 1, 2], "layout": ["rrr", "rrr", "ccc", "crr"],
    "epilogue": ["none", "bias_relu"],
}


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=near_presets(WmmaConfig, WMMA_VALUES))
def test_python_verdict_equals_nvcc_verdict_wmma(nvcc, cfg):
    assert_nvcc_agrees(cfg)


def test_build_error_survives_pickling():
    import pickle
    err = pickle.loads(pickle.dumps(BuildError("/tmp/k.cu", 'static assertion failed with "R07 x"')))
    assert err.path == "/tmp/k.cu" and err.static_assert_ids() == {"R07"}



@pytest.mark.parametrize("preset", ["warptile_tuned", "wmma_pipeline", "wmma_tf32"])
def test_every_layout_and_epilogue_compiles(nvcc, preset):
    """One preset per family and dtype, each layout and each epilogue, as one translation unit."""
    configs = pairwise_variants(PRESETS[preset].config)
    assert len(configs) == len(LAYOUTS)
    report = compile_many([render(c) for c in configs], "sm_90")
    for c in configs:
        res = report[(c.name, "sm_90")]
        assert res.smem_bytes == c.static_smem_bytes
        assert res.registers <= 255


def test_specialized_shape_becomes_constexpr_and_drops_bounds_checks(nvcc):
    cfg = PRESETS["warptile_tuned"].config.replace(m=4096, n=4096, k=4096)
    src = render(cfg)
    assert "constexpr int M = M_SPEC;" in src and "constexpr int M_FULL = 1;" in src
    assert cfg.name.endswith("_s4096x4096x4096")
    ragged = PRESETS["warptile_tuned"].config.replace(m=4095, k=4096)
    env = ragged.feature_env()
    assert (env["M_FULL"], env["N_FULL"], env["K_FULL"]) == (0, 0, 1)
    report = compile_many([src, render(ragged)], "sm_90")
    assert (cfg.name, "sm_90") in report and (ragged.name, "sm_90") in report


# The register estimate against ptxas: configurations whose verdict (spills or not) is clear,
# one of each kind per family, plus the presets at the edge and the spilling
# suggestion. Kept small for CI; the calibration sample (518 kernels) is in the docstrings.
SPILL_SAMPLE = [
    (True, SimtConfig(256, 256, 8, 8, 8, vec=2, skew=4)),  # 1024 threads: a 64-register cap
    (True, SimtConfig(128, 256, 32, 4, 8, wm=32, wn=64, skew=0, stages=1, min_blocks=2)),
    (True, SimtConfig(256, 128, 8, 4, 4, wm=64, wn=64, skew=4, min_blocks=2, layout="crc",
                      epilogue="bias_relu")),
    (False, SimtConfig(128, 256, 16, 8, 4, wm=64, wn=32, skew=0, stages=1)),
    (False, SimtConfig(64, 128, 32, 8, 4, skew=0, stages=1, layout="crr", epilogue="bias_relu")),
    (False, PRESETS["warptile_tuned"].config),  # 128 registers at a cap of 128
    (True, WmmaConfig(256, 256, 16, 64, 32, shape="m16n16k8", dtype="tf32", skew=4, stages=4)),
    (False, WmmaConfig(128, 64, 32, 64, 64, out="fp16", stages=1)),
    (False, PRESETS["wmma_pipeline"].config),
]


def test_register_estimate_agrees_with_ptxas_on_a_sample(nvcc):
    from concurrent.futures import ThreadPoolExecutor

    from gemmgen.model.registers import register_cap, registers_needed, spill_risk
    groups = [[c for _, c in SPILL_SAMPLE if c.family == f] for f in ("simt", "wmma")]
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda cs: compile_many([render(c) for c in cs], "sm_90"), groups))
    report = {k: v for r in reports for k, v in r.items()}
    for spills, cfg in SPILL_SAMPLE:
        res = report[(cfg.name, "sm_90")]
        measured = res.spills + res.stack_bytes > 0
        assert measured == spills, f"ptxas changed its mind on {cfg.name}: {res}"
        assert bool(spill_risk(cfg)) == spills, (
            f"{cfg.name}: estimate {registers_needed(cfg)} vs cap {register_cap(cfg)}, "
            f"ptxas {res.registers} registers, {res.spills} bytes spilled")
        if not spills:
            assert res.registers <= register_cap(cfg)
