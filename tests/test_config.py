"""The configuration model: every rule, all-violations errors, suggestions, derived figures."""
import pytest
from breakers import ALL_RULES, BREAKERS, FAMILIES, NEVER_ALONE, breaker
from hypothesis import given, settings, strategies as st

from gemmgen import PRESETS, SIMT_RULES, ConfigError, SimtConfig
from gemmgen.model.families.wmma import WmmaConfig
from gemmgen.model.rules import violations


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_rule_has_a_breaker(family):
    rules = FAMILIES[family].rules
    assert {r.name for r in rules} == set(BREAKERS[family]) | set(NEVER_ALONE.get(family, {}))
    assert not set(BREAKERS[family]) & set(NEVER_ALONE.get(family, {}))
    assert len({r.id for r in rules}) == len(rules)


@pytest.mark.parametrize("family, name", [(f, n) for f, d in NEVER_ALONE.items() for n in d])
def test_a_hopper_rule_the_family_fixes_is_never_broken_alone(family, name):
    """Over the family's presets with random changes from its search domain and edge values,
    a config that breaks the rule always breaks another one too (and the presets keep it)."""
    import random
    cls = FAMILIES[family]
    presets = [p.config for p in PRESETS.values() if p.config.family == family]
    domain = {**cls.choices, **cls.search_domain, "bm": (0, 64, 96, 128, 192, 256),
              "bn": (0, 8, 12, 40, 64, 100, 128, 136, 256, 264), "stages": (0, 1, 4, 17)}
    rng, broke = random.Random(3), 0
    for _ in range(400):
        values = presets[rng.randrange(len(presets))].as_dict()
        values.pop("family")
        for key in rng.sample(sorted(k for k in domain if k in values), 3):
            values[key] = rng.choice(domain[key])
        cfg = cls.unchecked(**values)
        found = [v.rule.name for v in violations(cfg.rule_table(), cfg.env())]
        if name in found:
            broke += 1
            assert len(found) > 1, (name, values)
    assert all(name not in [v.rule.name for v in c.violations()] for c in presets)


@pytest.mark.parametrize("family, rule", ALL_RULES, ids=lambda x: getattr(x, "id", x))
def test_config_breaking_only_one_rule_is_rejected_with_its_message(family, rule):
    cfg = breaker(family, rule.name)
    found = violations(cfg.rule_table(), cfg.env())
    assert [v.rule.id for v in found] == [rule.id]
    with pytest.raises(ConfigError) as info:
        cfg.replace()  # the checked constructor
    message = str(info.value)
    assert f"{rule.id} {rule.name}:" in message
    assert rule.why in message


def test_all_violations_are_listed_with_numbers():
    with pytest.raises(ConfigError) as info:
        SimtConfig(128, 128, 16, 8, 7)
    ids = [v.rule.name for v in info.value.violations]
    assert ids == ["bn-tn", "a-tile-loads", "b-tile-loads", "tn-vec"]
    text = str(info.value)
    assert "BN = 128 is not a multiple of TN = 7" in text
    assert "BM*BK = 128*16 = 2048 is not a multiple of THREADS*VEC = 288*4 = 1152" in text


def test_suggestions_are_valid_nearest_first():
    with pytest.raises(ConfigError) as info:
        SimtConfig(128, 128, 16, 8, 7)
    sugg = info.value.suggestions
    assert 1 <= len(sugg) <= 3
    for s in sugg:
        assert violations(SIMT_RULES, s.env()) == []
    assert [s.tn for s in sugg] == [8, 4, 16]  # only TN changes; |log2| distance from 7
    assert "tn=8: gemm_simt_f32_128x128x16" in str(info.value)


def test_suggestions_may_change_several_fields():
    with pytest.raises(ConfigError) as info:
        SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, stages=0)
    assert info.value.suggestions, "a valid neighbour exists within three changes"
    for s in info.value.suggestions:
        assert violations(SIMT_RULES, s.env()) == []


def test_wrong_types_are_type_errors():
    with pytest.raises(TypeError, match="bm must be int"):
        SimtConfig("128", 128, 16, 8, 8)
    with pytest.raises(TypeError, match="thread_order"):
        SimtConfig(128, 128, 16, 8, 8, thread_order="x")


def test_rule_renders_as_cpp_and_formula():
    rule = next(r for r in SIMT_RULES if r.name == "a-tile-loads")
    assert rule.cpp() == "!(STAGES >= 1) || ((THREADS*VEC) == 0 || (BM*BK) % (THREADS*VEC) == 0)"
    assert rule.static_assert().startswith('static_assert(!(STAGES >= 1)')
    assert "R22 a-tile-loads: (BM*BK) % (THREADS*VEC) == 0 when STAGES >= 1" in rule.static_assert()


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_valid_and_named_uniquely(name):
    cfg = PRESETS[name].config
    assert cfg.violations() == []
    assert cfg.name.startswith(f"gemm_{cfg.family}_")
    assert len({p.config.name for p in PRESETS.values()}) == len(PRESETS)


def test_derived_figures_of_the_warp_tiled_preset():
    cfg = PRESETS["warptile_db"].config  # 128x128x16, warp 64x32, thread 4x4, vec 4, skew 4
    assert cfg.threads == 256 and cfg.warps == 8
    assert (cfg.wm_iter, cfg.wn_iter) == (2, 2)
    assert cfg.acc_regs == 4 * 4 * 2 * 2
    assert cfg.smem_bytes == 2 * 4 * (16 * (128 + 4) + 16 * (128 + 4))
    assert cfg.a_loads == 128 * 16 // (256 * 4) and cfg.global_loads_per_thread == 4
    fpb = cfg.flops_per_byte
    assert fpb["global"] == pytest.approx(2 * 128 * 128 / (4 * 256))
    assert fpb["shared"] == pytest.approx(2 * 64 * 32 / (4 * 96))
    assert fpb["register"] == pytest.approx(2 * 8 * 8 / (4 * 16))
    # sm_90: 2048 threads -> 8 blocks; 228 KiB / (33792 + 1024) -> 6 blocks
    assert cfg.blocks_per_sm("sm_90") == 6
    assert cfg.blocks_per_sm("sm_86") == 2  # 100 KiB / 34816
    assert cfg.grid(4095, 4097) == (33, 32, 1)


def test_naive_figures():
    cfg = PRESETS["naive"].config
    assert cfg.threads == 1024 and cfg.smem_bytes == 0
    assert cfg.flops_per_byte["shared"] is None
    assert cfg.blocks_per_sm() == 2


def test_wmma_derived_figures():
    cfg = PRESETS["wmma_pipeline"].config  # fp16 128x128x32, warps 64x64, m16n16k16, skew 8, 4 stages
    assert (cfg.threads, cfg.warps, cfg.vec, cfg.frags) == (128, 4, 8, (4, 4))
    assert cfg.acc_regs == 4 * 4 * 16 * 16 // 32
    stage = (128 * (32 + 8) + (128 // 16) * 32 * (16 + 8)) * 2
    assert cfg.pipeline_bytes == 4 * stage
    assert cfg.smem_bytes == 4 * stage + 4 * 16 * (16 + 4) * 4  # + one fp32 C tile per warp
    assert (cfg.static_smem_bytes, cfg.dynamic_smem_bytes) == (0, cfg.smem_bytes)
    assert cfg.a_loads == 128 * 32 // (128 * 8)
    assert cfg.flops_per_byte["global"] == pytest.approx(2 * 128 * 128 / (2 * 256))
    assert cfg.blocks_per_sm("sm_90") == 228 * 1024 // (cfg.smem_bytes + 1024)
    tf32 = PRESETS["wmma_tf32"].config
    assert (tf32.vec, tf32.mnk, tf32.elem_bytes) == (4, (16, 16, 8), 4)


def test_wmma_enumerated_fields_are_checked():
    with pytest.raises(TypeError, match="dtype must be one of 'fp16', 'bf16', 'tf32'"):
        WmmaConfig(128, 128, 32, 64, 64, dtype="fp8")
    with pytest.raises(ConfigError) as info:
        WmmaConfig(128, 128, 32, 64, 64, dtype="tf32")  # m16n16k16 is not a TF32 shape
    assert [v.rule.name for v in info.value.violations] == ["tf32-shape"]
    assert info.value.suggestions[0].shape == "m16n16k8"


def test_simt_static_smem_pads_the_a_tile_to_16_bytes():
    # ptxas: As (3,480 bytes) is followed by the 16-byte aligned Bs (1,176): 4,664 bytes.
    cfg = SimtConfig(144, 48, 6, 6, 1, wm=48, wn=16, vec=1, skew=1, stages=1)
    assert cfg.smem_bytes == 3488 + 1176 == 4664
    aligned_a = SimtConfig(16, 16, 2, 2, 4, vec=1, skew=1, stages=1, transpose_a=False)
    assert aligned_a.smem_bytes == 192 + 136  # As already a multiple of 16: no padding


unchecked_values = st.sampled_from([-64, -1, 0, 1, 2, 3, 16, 128])


@settings(max_examples=300, deadline=None)
@given(bm=unchecked_values, bn=unchecked_values, bk=unchecked_values, wm=unchecked_values,
       wn=unchecked_values, skew=unchecked_values, stages=st.sampled_from([-1, 0, 1, 3]),
       mb=unchecked_values, family=st.sampled_from(["simt", "wmma"]))
def test_render_works_on_any_unchecked_config(bm, bn, bk, wm, wn, skew, stages, mb, family):
    from gemmgen import render
    from gemmgen.model.families.wmma import WmmaConfig
    if family == "simt":
        cfg = SimtConfig.unchecked(bm=bm, bn=bn, bk=bk, tm=wm, tn=wn, wm=wm, wn=wn, vec=skew,
                                   skew=skew, stages=stages, min_blocks=mb)
    else:
        cfg = WmmaConfig.unchecked(bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, skew=skew, stages=stages,
                                   min_blocks=mb, acc="fp16")
    assert cfg.name in render(cfg)


def test_arch_fit_names_the_arch_and_its_limit():
    from gemmgen.model.arch import fit_problem
    from gemmgen.model.families.wmma import WmmaConfig
    big = WmmaConfig(256, 128, 64, 64, 64, stages=3)
    assert fit_problem(big, "sm_90") is None and big.blocks_per_sm("sm_86") == 0
    assert fit_problem(big, "sm_86") == ("needs 194560 bytes of shared memory per block; "
                                         "sm_86 allows at most 101376 (99 KiB)")
    assert "sm_90" not in " ".join(r.why for r in WmmaConfig.rules)
