"""nvcc against the Python model on variants: random configs near the presets (the verdicts
agree), every layout and epilogue of a few presets, specialized shapes, and the register
estimate against ptxas on a sample. (Split from test_nvcc.py so that pytest-xdist can run the
two files side by side.)"""
from concurrent.futures import ThreadPoolExecutor

import pytest
from breakers import pairwise_variants
from hypothesis import HealthCheck, event, given, settings, strategies as st

from gemmgen import PRESETS, SimtConfig, render
from gemmgen.compile.nvcc import (BuildError, compile_many, compile_source)
from gemmgen.model.config import LAYOUTS
from gemmgen.model.families.wmma import SHAPES, WmmaConfig

ARCHS = ("sm_80", "sm_90")

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


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=near_presets(WmmaConfig, WMMA_VALUES))
def test_python_verdict_equals_nvcc_verdict_wmma(nvcc, cfg):
    assert_nvcc_agrees(cfg)


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.slow) for p in
                                    ("warptile_tuned", "wmma_pipeline", "wmma_tf32")])
def test_every_layout_and_epilogue_compiles(nvcc, preset):
    """One preset per family and dtype, each layout and each epilogue, as one translation unit
    (make test-all: CI's compile budget keeps the presets' own compiles only)."""
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


@pytest.mark.slow
def test_register_estimate_agrees_with_ptxas_on_a_sample(nvcc):

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
