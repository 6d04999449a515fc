"""Epilogue trees in wgmma kernels without a GPU: every node rendered in every layout, the header's
tree, the static_asserts of the epilogue and feature rules (nvcc, sm_90a), the EpilogueArgs ABI
read back from a cubin, the SASS (no local memory; two accumulator sets in the dual GEMM), and
the overlap's deferred passes emulated over the staged tile."""
import re

import pytest

from gemmgen import PRESETS, BuildError, render
from gemmgen.compile.nvcc import compile_source, tool_path
from gemmgen.model.config import LAYOUTS
from gemmgen.model.epilogue import Epilogue
from gemmgen.model.epilogue_rules import EPILOGUE_ARGS, EPILOGUE_ARGS_BYTES
from gemmgen.model.families.hopper.wgmma import WgmmaConfig

ARCH = "sm_90a"
BASE = PRESETS["wgmma_tma_store"].config
TREES = [
    "silu(acc*row_scale*col_scale + bias) + R",
    "gelu_erf(alpha*acc + beta*C + row_bias) + R(layout='c', dtype='fp32')",
    "cast(amax(aux(acc*col_scale + bias)), e4m3)",
    "relu(alpha*acc + beta*C) + R(layout='r', dtype='bf16')",
    "gelu(cast(acc, bf16) + identity(row_bias)) + cast(R, fp16)",
]
NODE_CALLS = {"row_scale": "epi.row_scale", "col_scale": "epi.col_scale",
              "row_bias": "epi.row_bias", "bias": "epi_ld2(bias,", "R": "epi.R +",
              "beta_c": "epi_splat(beta)", "alpha": "epi_splat(alpha)", "relu": "epi_relu(",
              "gelu": "epi_gelu(", "gelu_erf": "epi_gelu_erf(", "silu": "epi_silu(",
              "aux": "epi.aux +", "amax": "epi_amax(", "add": "epi_add(", "mul": "epi_mul("}
DUAL = dict(dual=True, bn=128, stages=4, layout="rcr", epilogue="silu(gate)*up")


def test_every_node_is_rendered_in_every_layout():
    seen = set()
    for i, layout in enumerate(LAYOUTS):
        for tree in TREES:
            cfg = BASE.replace(layout=layout, epilogue=tree, store="tma" if i % 2 else "direct")
            src = render(cfg, ARCH)
            staged = {v.leaf for v in cfg.vectors}  # read from shared memory, copied at tile start
            for op in Epilogue.parse(tree).ops():
                if op in staged:
                    assert "epi_vec2(reinterpret_cast" in src and f"VEC_{op.upper()}_AT)" in src
                    assert f"VEC_{op.upper()}_AT, {NODE_CALLS[op].rstrip(',')}" in src or (
                        op == "bias" and f"VEC_BIAS_AT, bias," in src), (layout, tree, op)
                elif op == "cast":
                    for n in Epilogue.parse(tree).root.walk():
                        if n.op == "cast":
                            assert f"epi_cast_{n.attr('dtype')}(" in src
                elif op != "acc":
                    assert NODE_CALLS[op] in src, (layout, tree, op)
                seen.add(op)
    assert seen == set(NODE_CALLS) | {"acc", "cast"}


def test_the_header_lists_the_tree_and_the_asserts_cover_the_feature_rules():
    cfg = BASE.replace(epilogue=TREES[0])
    src = render(cfg, ARCH)
    head = src.split("namespace", 1)[0]
    assert f"// epilogue tree (gemmgen.model.epilogue): {TREES[0]}" in head
    assert "//           row_scale        epi.row_scale[m], fp32, one per row of C" in head
    assert src.count("static_assert(") == len(cfg.rendered_rules()) + len(EPILOGUE_ARGS) + 1
    for rule in cfg.rendered_rules():
        assert src.count(f'"{rule.id} {rule.name}:') == 1
    plain = render(BASE.replace(epilogue="bias_gelu"), ARCH)
    assert "epilogue tree" not in plain and "EpilogueArgs" not in plain


def test_the_header_line_rebuilds_the_config():
    from gemmgen import config_from_source
    for cfg in (BASE.replace(epilogue="R + silu(bias + col_scale*row_scale*acc)"),
                BASE.replace(**DUAL), PRESETS["wgmma_overlap"].config):
        assert config_from_source(render(cfg, ARCH)) == cfg


def test_a_tree_without_device_arguments_keeps_the_parameter_list():
    src = render(BASE.replace(epilogue="silu(alpha*acc + bias)"), ARCH)
    assert "EpilogueArgs" not in src and "int batch)" in src
    src = render(BASE.replace(epilogue=TREES[0]), ARCH)
    assert "EpilogueArgs epi)" in src


def test_a_tree_without_alpha_does_not_skip_the_main_loop_on_alpha_zero():
    assert "alpha == 0.f ? 0 :" not in render(BASE.replace(epilogue=TREES[0]), ARCH)
    assert "alpha == 0.f ? 0 :" in render(BASE.replace(epilogue=TREES[1]), ARCH)
    split = dict(store="direct", split_k=3)  # the reduction sums the slices all the same
    assert "if (alpha != 0.f) {" not in render(BASE.replace(epilogue=TREES[0], **split), ARCH)
    assert "if (alpha != 0.f) {" in render(BASE.replace(epilogue=TREES[1], **split), ARCH)


def _variants() -> list:
    """Every node, both store paths, split-K, ping-pong, the dual GEMM and the overlap in both C
    layouts, in as few kernels as cover them (each layout is rendered above)."""
    return [
        BASE.replace(epilogue=TREES[0]),
        BASE.replace(layout="ccc", store="direct", epilogue=TREES[1]),
        BASE.replace(layout="rcr", epilogue=TREES[2]),
        BASE.replace(store="direct", split_k=3, layout="crc", epilogue=TREES[4]),
        # 64-row ping-pong consumers: a column-major C staged for the TMA store by a
        # 128-row consumer spills (rule H52)
        BASE.replace(pingpong=True, bm=64, bn=128, stages=4, layout="rrc", epilogue=TREES[3]),
        BASE.replace(**DUAL),
        PRESETS["wgmma_overlap"].config,
        PRESETS["wgmma_bf16"].config.replace(layout="rrc", overlap=True, epilogue=TREES[0]),
    ]


@pytest.fixture(scope="module")
def compiled(nvcc):
    from batched import compile_batched
    configs = _variants()
    out = {}
    for cfg, done in zip(configs, compile_batched(configs, arch=ARCH)):
        if isinstance(done, BuildError):
            pytest.fail(f"{cfg.name}: {done}")
        out[cfg.name] = (cfg, done[0], done[1])
    return out


def test_no_spills_and_the_epilogue_args_sit_last_in_the_parameter_block(compiled):
    from gemmgen.runtime.tma import param_layout
    for name, (cfg, cubin, res) in compiled.items():
        assert res.spills == 0 and res.stack_bytes == 0, (name, res)
        layout = param_layout(cubin, name)
        wants_args = cfg.env()["EPI_ARGS"] == 1
        assert len(layout.offsets) == 19 + wants_args, name
        if wants_args:
            assert layout.sizes[-1] == EPILOGUE_ARGS_BYTES and layout.offsets[-1] % 8 == 0
        if cfg.split_apart:
            reduce = param_layout(cubin, name + "_reduce")
            assert reduce.sizes[-1] == EPILOGUE_ARGS_BYTES and len(reduce.offsets) == 13


def test_sass_has_no_local_memory_and_the_dual_gemm_two_accumulator_sets(compiled):
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import sass_of
    for name, (cfg, cubin, _) in compiled.items():
        text = sass_of(cubin, name)
        assert not re.search(r"\b(LDL|STL)\b", text), f"{name} uses local memory"
        main = text.split(f"Function : {name}\n")[1].split("Function :")[0]
        sets = set(re.findall(r"HGMMA\.\S+ (R\d+),", main))
        assert len(sets) == (2 if cfg.dual else 1) * cfg.m_iters, (name, sets)
        if cfg.overlap or (cfg.store == "tma" and cfg.out_bytes == 2 and cfg.layout[2] == "r"):
            assert "STSM" in main or cfg.layout[2] == "c", name
        if cfg.overlap:
            assert "UTMASTG" in main and "LDS.128" in main and "STS.128" in main, name


@pytest.mark.parametrize("rule_id, changes", [
    ("E11", dict(epilogue="amax(acc)")),
    ("E08", dict(epilogue="acc + R(dtype='e4m3')")),
    ("H42", dict(DUAL, layout="rrr")),
    ("H49", dict(overlap=True, epilogue="bias")),
])
def test_the_static_assert_of_a_broken_feature_rule_fires(nvcc, rule_id, changes):
    values = {**BASE.as_dict(), **changes}
    values.pop("family")
    cfg = WgmmaConfig.unchecked(**values)
    assert [v.rule.id for v in cfg.violations()] == [rule_id]
    with pytest.raises(BuildError) as info:
        compile_source(render(cfg, ARCH), (ARCH,), name=cfg.name)
    assert rule_id in info.value.static_assert_ids()


# ---- the overlap's deferred passes, emulated from the rendered source ---------------------------
def _py(expr: str, env: dict) -> int:
    expr = " ".join(expr.split()).replace("/", "//")
    return eval(expr, {}, dict(env))  # noqa: S307 - expressions of the rendered kernel, ints only


@pytest.mark.parametrize("layout, out", [("rrr", "fp16"), ("rrc", "bf16"), ("rcc", "fp16")])
def test_deferred_passes_visit_every_staged_element_once_where_it_was_staged(layout, out):
    cfg = PRESETS["wgmma_overlap"].config.replace(
        layout=layout, out=out, dtype=out, epilogue=TREES[0])
    src, k = render(cfg, ARCH), cfg.template_constants()
    staged = re.search(r"auto staged = \[&\]\(int r, int c\) -> uint32_t \{\s*return cs_addr \+ "
                       r"(.*?);\s*\};", src, re.S)[1]
    body = src[src.index("auto defer_step"):]
    idx = re.search(r"const int chunk = (.*?), row = (.*?), u = (.*?);", body).groups()
    gm, gn = re.search(r"const int gm = dtile\.m0 \+ drow0 \+ (.*?), gn = dtile\.n0 \+ (.*?);",
                       body).groups()
    col = cfg.layout[2] == "c"
    seen = set()
    for q in range(k["DEFER_UNITS_TOTAL"]):
        env = {**k, "q": q}
        env["chunk"], env["row"] = _py(idx[0], env), _py(idx[1], env)
        env["u"] = _py(idx[2], env)
        m0, n0 = _py(gm, env), _py(gn, env)
        for e in range(8):  # the unit's 8 elements, along M (column-major C) or N
            r, c = (m0 + e, n0) if col else (m0, n0 + e)
            assert _py(staged, {**k, "r": r, "c": c}) == q * 16 + 2 * e, (q, e)
            seen.add((r, c))
    assert seen == {(r, c) for r in range(k["CONSUMER_ROWS"]) for c in range(cfg.bn)}
    passes = k["DEFER_PASSES"] * k["DEFER_UNITS"] * k["WARPGROUP"]
    assert passes == k["DEFER_UNITS_TOTAL"]
