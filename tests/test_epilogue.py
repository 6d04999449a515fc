"""Epilogue trees without a GPU: the parser, the builder, canonical names and expressions, the
transpose, and each epilogue and wgmma feature rule failing alone."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemmgen import PRESETS, ConfigError
from gemmgen.model import epilogue as E
from gemmgen.model.config import EPILOGUES
from gemmgen.model.epilogue import Epilogue, EpilogueError
from gemmgen.model.epilogue_rules import EPILOGUE_RULES, deferral
from gemmgen.model.families.hopper.wgmma import WgmmaConfig
from gemmgen.model.families.hopper.wgmma.rules import WGMMA_FEATURE_RULES

BASE = PRESETS["wgmma_tma_store"].config
DUAL = dict(dual=True, bn=128, stages=4, layout="rcr", epilogue="silu(gate)*up")


def test_todays_names_are_shorthands_of_their_trees():
    for name in EPILOGUES:
        epi = Epilogue.parse(name)
        assert epi.name == name and epi.spelling == name and not epi.is_tree
        assert Epilogue.parse(epi.expr).name == name
    assert Epilogue.parse("gelu(bias + C*beta + acc*alpha)").name == "bias_gelu"
    cfg = BASE.replace(epilogue="relu(beta*C + alpha*acc + bias)")
    assert cfg.epilogue == "bias_relu" and cfg.name.endswith("_ebias_relu")


def test_a_tree_has_a_canonical_expression_and_name():
    epi = Epilogue.parse("R + silu(bias + col_scale*row_scale*acc)")
    assert epi.expr == "silu(acc*row_scale*col_scale + bias) + R"
    assert epi.name == "add2_silu_add2_mul3_acc_rs_cs_b_R"
    cfg = BASE.replace(epilogue="R + silu(bias + col_scale*row_scale*acc)")
    assert cfg.epilogue == epi.expr and cfg.name.endswith("_e" + epi.name)


def test_the_builder_makes_the_parsed_tree():
    built = E.silu(E.acc * E.row_scale * E.col_scale + E.bias) + E.R
    assert Epilogue.of(built) == Epilogue.parse("silu(acc*row_scale*col_scale + bias) + R")
    assert Epilogue.of(E.silu(E.gate) * E.up).expr == "silu(gate)*up"
    assert Epilogue.of(E.amax(E.cast(E.acc, "e4m3"))).name == "amax_caste4m3_acc"
    with pytest.raises(EpilogueError, match="not 2"):
        E.acc * 2
    with pytest.raises(EpilogueError, match="layout is 'r' or 'c'"):
        E.residual(layout="x")


@pytest.mark.parametrize("text, token", [
    ("acc - R", "'-'"), ("acc*2", "'2'"), ("foo(acc)", "'foo'"), ("acc + C", "'C'"),
    ("beta*acc", "'beta'"), ("cast(acc, fp8)", "'fp8'"), ("acc[0]", "'acc[0]'"),
    ("relu(acc, R)", "relu takes one argument"), ("__import__('os')", "'__import__'"),
    ("acc +", "not an expression"), ("R(shape=1) + acc", "'shape'"),
])
def test_the_parser_names_the_token_it_refuses(text, token):
    with pytest.raises(EpilogueError, match=token.replace("[", r"\[").replace("]", r"\]")):
        Epilogue.parse(text)


def test_transpose_swaps_rows_and_columns():
    epi = Epilogue.parse("silu(acc*row_scale*col_scale + bias) + R(layout='c', dtype='bf16')")
    t = epi.transposed()
    assert t.expr == "silu(acc*row_scale*col_scale + row_bias) + R(layout='r', dtype='bf16')"
    assert t.transposed() == epi
    assert Epilogue.parse("bias_gelu").transposed().expr == "gelu(alpha*acc + beta*C + row_bias)"
    with pytest.raises(EpilogueError, match="dual-GEMM"):
        Epilogue.parse("silu(gate)*up").transposed()


LEAF = st.sampled_from([E.acc, E.alpha, E.beta_c, E.row_scale, E.col_scale, E.row_bias, E.bias,
                        E.R, E.residual("c", "fp32")])


def _trees(leaf):
    def extend(children):
        unary = st.sampled_from([E.relu, E.gelu, E.gelu_erf, E.silu, E.identity, E.aux, E.amax])
        return st.one_of(
            st.builds(lambda f, x: f(x), unary, children),
            st.builds(lambda x, d: E.cast(x, d), children, st.sampled_from(E.CAST_DTYPES)),
            st.builds(lambda x, y: x + y, children, children),
            st.builds(lambda x, y: x * y, children, children))
    return st.recursive(leaf, extend, max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(tree=_trees(LEAF))
def test_expression_and_name_round_trip(tree):
    epi = Epilogue.of(tree)
    again = Epilogue.parse(epi.expr)
    assert again == epi and again.name == epi.name
    assert epi.name.replace("_", "").isalnum()
    assert Epilogue.of(E.transposed(E.transposed(tree))) == epi


def test_the_deferred_cut_is_the_argument_of_the_lowest_activation():
    z, rest = deferral(Epilogue.parse("silu(acc*row_scale*col_scale + bias) + R"))
    assert E.text(z) == "acc*row_scale*col_scale + bias"
    assert E.text(rest) == "silu(staged) + R"
    z, _ = deferral(Epilogue.parse("gelu(relu(aux(alpha*acc + bias)))"))
    assert E.text(z) == "aux(alpha*acc + bias)"
    assert deferral(Epilogue.parse("acc + relu(acc)")) is None
    assert deferral(Epilogue.parse("silu(gate)*up")) is None
    assert deferral(Epilogue.parse("alpha*acc + bias")) is None


# ---- each rule fails alone ---------------------------------------------------------------------
_BREAKERS = {
    "E01": dict(epilogue="bias + R"),
    "E02": dict(DUAL, epilogue="silu(gate)*gate"),
    "E03": dict(DUAL, epilogue="bias + R"),
    "E04": dict(DUAL, epilogue="silu(gate)*up + acc"),
    "E05": dict(epilogue="gate*up + acc"),
    "E06": dict(epilogue="acc + R + R"),
    "E07": dict(epilogue="acc + beta*C + beta*C"),
    "E08": dict(epilogue="acc + R(dtype='e4m3')"),
    "E09": dict(epilogue="aux(aux(acc))"),
    "E10": dict(out="fp32", bn=128, epilogue="amax(amax(acc))"),
    "E11": dict(epilogue="amax(acc)"),
    "H42": dict(DUAL, layout="rrr"),
    "H43": dict(DUAL, split_k=2, store="direct"),
    "H44": dict(PRESETS["wgmma_3xtf32"].config.as_dict(), dual=True, layout="rcr", stages=3,
                epilogue="silu(gate)*up"),
    "H45": dict(overlap=True, persistent=False, epilogue="bias_gelu"),
    "H46": dict(overlap=True, store="direct", epilogue="bias_gelu"),
    "H47": dict(overlap=True, out="fp32", bn=128, stages=2, epilogue="bias_gelu"),
    "H48": dict(overlap=True, pingpong=True, bn=128, stages=4, epilogue="bias_gelu"),
    "H49": dict(overlap=True, epilogue="bias"),
    "H50": dict(overlap=True, layout="rcc", bn=200, epilogue="bias_gelu"),
    "H51": dict(split_k=2, split_inline=True, store="direct", epilogue="relu(acc) + R"),
}
_RULES = {r.id: r for r in EPILOGUE_RULES + WGMMA_FEATURE_RULES}


def _config(**changes) -> WgmmaConfig:
    values = {**BASE.as_dict(), **changes}
    values.pop("family")
    return WgmmaConfig.unchecked(**values)


def test_every_feature_rule_has_a_breaker():
    assert set(_BREAKERS) == set(_RULES)


@pytest.mark.parametrize("rule_id", sorted(_BREAKERS))
def test_each_feature_rule_fails_alone_and_passes_once(rule_id):
    cfg = _config(**_BREAKERS[rule_id])
    assert [v.rule.id for v in cfg.violations()] == [rule_id]
    assert f"{rule_id} {_RULES[rule_id].name}:" in str(ConfigError(cfg.violations()))
    passing = [c for c in _PASSING if _RULES[rule_id].applies(c.env())]
    assert passing, f"no valid config exercises {rule_id}"


_PASSING = [BASE.replace(epilogue="silu(acc*row_scale*col_scale + bias) + R"),
            BASE.replace(**DUAL), BASE.replace(overlap=True, epilogue="bias_gelu"),
            BASE.replace(out="fp32", bn=128, epilogue="amax(aux(acc*col_scale) + R)"),
            BASE.replace(epilogue="cast(amax(relu(acc) + R(dtype='fp32')), e4m3)")]


def test_the_checked_constructor_refuses_a_broken_tree():
    with pytest.raises(ConfigError, match="E11 amax-target:"):
        BASE.replace(epilogue="amax(acc)")


def test_other_families_take_only_todays_names():
    simt = PRESETS["warptile_tuned"].config
    assert simt.replace(epilogue="gelu(beta*C + alpha*acc + bias)").epilogue == "bias_gelu"
    with pytest.raises(ConfigError, match="E00 tree-needs-wgmma"):
        simt.replace(epilogue="relu(acc) + R")
    with pytest.raises(TypeError, match="unknown name 'nope'"):
        simt.replace(epilogue="nope")


def test_features_leave_the_header_of_other_kernels_alone():
    assert "dual" not in BASE.header_dict() and "overlap" not in BASE.header_dict()
    cfg = BASE.replace(**DUAL)
    assert cfg.header_dict()["dual"] is True and cfg.rule_table()[-1].id == "H51"
    assert BASE.rule_table() == BASE.rules
