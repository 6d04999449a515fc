"""The fp8 family without a GPU: rules, names, header, scale-shape checks, API errors, and the
static evidence (ptxas and SASS) of every preset for sm_90a (the heuristics: test_fp8_rules)."""
import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import gemmgen
from gemmgen import FAMILIES, PRESETS, BuildError, ConfigError, render
from gemmgen.compile.nvcc import compile_source, tool_path
from gemmgen.runtime.arrays import dtype_name_of, numpy_dtype
from gemmgen.heuristics.fp8 import choose_fp8
from gemmgen.model.families.hopper.fp8 import Fp8Config, space
from gemmgen.runtime.hopper import TRANSPOSE_OFFSETS
from gemmgen.runtime.operands.scales import check_fp8, scaling_of
from gemmgen.runtime.operands import OperandError
from gemmgen.runtime.tma import ParamPacker, param_layout
from gemmgen.tune.fp8_verify import compare, dequantize_np, fp8_tolerance, operands, quantize_np

FP8 = {n: p.config for n, p in PRESETS.items() if p.config.family == "fp8"}
ARCH = "sm_90a"
E4M3 = ml_dtypes.float8_e4m3fn


def test_family_is_registered_for_the_fp8_dtypes_on_sm_90a_only():
    fam = FAMILIES["fp8"]
    assert fam.dtypes == ("e4m3", "e5m2") and fam.arch_for(90) == "sm_90a"
    with pytest.raises(ValueError, match="needs sm_90a exactly"):
        fam.arch_for(89)
    assert numpy_dtype("e4m3") == np.dtype(E4M3)
    assert dtype_name_of(np.zeros(2, ml_dtypes.float8_e5m2)) == "e5m2"


def test_every_preset_is_valid_and_named_by_scaling_and_promotion():
    assert len(FP8) >= 8
    for name, cfg in FP8.items():
        assert not cfg.violations(), name
        assert f"_{cfg.scaling}_" in cfg.name
        assert ("_fast_" in cfg.name) == (cfg.promote == 0), name
        if cfg.promote:
            assert f"_p{cfg.promote}" in cfg.name
    block = FP8["fp8_block_prom2"]
    assert block.name == ("gemm_fp8_e4m3e4m3_block_p128x2_128x128x128_c2_st7_cl1x1_g8_r40x232"
                          "_direct_outbf16")


def test_prototype_figures():
    """Shared memory and live accumulators as the measured prototype had them."""
    fast, prom2, dec = FP8["fp8_tensor_fast"], FP8["fp8_block_prom2"], FP8["fp8_block_decode"]
    assert (fast.smem_bytes, fast.acc_regs, fast.threads) == (197712, 128, 384)
    assert (prom2.smem_bytes, prom2.acc_regs) == (230528, 192)
    assert (dec.smem_bytes, dec.acc_regs, dec.threads, dec.entry_regs) == (222368, 192, 256, 240)
    assert dec.split_slices(7168) == [(i * 8, 8) for i in range(7)]
    assert dec.workspace_bytes(64, 2112, 132) == (17 * 7 * 64 * 128 * 4, 17 * 1 * 4)


@pytest.mark.parametrize("change, rule", [
    (dict(scaling="block", promote=0), "F18"),
    (dict(scaling="block", promote=256, partials=1), "F19"),
    (dict(scaling="block", bn=176, partials=1, stages=5), "F20"),
    (dict(layout="rrr"), "F16"),
    (dict(promote=0, partials=2), "F22"),
    (dict(bk=64), "H07"),
    (dict(cluster_m=2, cluster_n=2), "H22"),
    (dict(stages=9), "H09"),
    (dict(promote=100), "F17"),
    (dict(bn=120, cluster_m=2), "F26"),
    (dict(partials=1, overlap=True), "F30"),
    (dict(store="tma", bn=96, stages=4), "H31"),
    (dict(waiter=True, bm=64, consumers=1, regs_consumer=240), "F32"),
    (dict(waiter=True), "H61"),
    (dict(bm=64, consumers=1, regs_consumer=240, a_rows=24), "F33"),
    (dict(a_rows=16), "F34"),
    (dict(bm=64, consumers=1, regs_consumer=240, a_rows=16, cluster_n=2), "F35"),
    (dict(bm=64, consumers=1, regs_consumer=240, a_rows=16), "F36"),
])
def test_each_rule_names_itself(change, rule):
    with pytest.raises(ConfigError) as info:
        FP8["fp8_block_prom2"].replace(**change)
    assert rule in {v.rule.id for v in info.value.violations}, str(info.value)


def test_a_rows_loads_only_the_rows_of_a_decode_m():
    """Fast decode loads the fewest of 16 or 32 rows of A that hold M (a_rows): the stage
    expects those rows and B, and A's box is that tall; the rows past M, which the stage no
    longer zeroes, stay out of an e4m3 D's amax; a kernel with it refuses a larger M. Nothing
    of it in a kernel that loads the whole tile."""
    from types import SimpleNamespace

    from gemmgen.runtime.plans import check_scaled_kernel
    pick = {m: choose_fp8(m, 4096, 4096, "tensor", True).config for m in (1, 16, 17, 32, 33)}
    assert [c.a_rows for c in pick.values()] == [16, 16, 32, 32, 0]
    assert choose_fp8(16, 4096, 4096, "block", False).config.a_rows == 0  # promoted: unmeasured
    cfg = pick[16]
    assert cfg.name.endswith("_wt_ar16") and "A rows 16" in cfg.brief()
    env = cfg.template_constants()
    assert env["A_BOX_ROWS"] == 16 and env["STAGE_TX_BYTES"] == 16 * 128 + env["B_STAGE_BYTES"]
    assert env["STAGE_BYTES"] == env["A_STAGE_BYTES"] + env["B_STAGE_BYTES"]  # the ring's
    src, whole = render(cfg), render(cfg.replace(a_rows=0))
    assert "mbar_expect_tx(full_bar + 8 * s, STAGE_TX_BYTES);" in src
    assert "mbar_expect_tx(full_bar + 8 * s, STAGE_BYTES);" in whole
    for word in ("A_ROWS", "STAGE_TX_BYTES"):
        assert word in src and word not in whole, word
    out8 = dict(out="e4m3", quant="tensor")
    assert "row < M ? fmaxf(col < N" in render(cfg.replace(**out8))  # amax: rows past M left out
    assert "row < M ? fmaxf(col < N" not in render(cfg.replace(a_rows=0, **out8))
    A, B = _ab()
    with pytest.raises(OperandError, match="A has 257 rows; this kernel loads 16 rows of A"):
        check_scaled_kernel(SimpleNamespace(config=cfg.replace(scaling="tensor")),
                            check_fp8(A, B, 1.0, 1.0))


def test_promoted_wide_tiles_exceed_the_register_budget():
    with pytest.raises(ConfigError) as info:
        FP8["fp8_tensor_fast"].replace(promote=128)
    text = str(info.value)
    assert "H11 acc-registers: ACC_REGS = 256 exceeds ACC_BUDGET = 192" in text


def test_header_states_scaling_and_promotion():
    src = render(FP8["fp8_block_prom2"], ARCH)
    head = src.split("namespace", 1)[0]
    assert head.startswith("// generated by gemmgen") and "do not edit" in head
    assert "// Scaling block: DeepSeek-V3" in head
    assert "// Accumulation promoted: every 128 K elements" in head
    assert "2 partial sets" in head and "scaling        = block" in head
    # every rule but those of D staging buffers, which a kernel that stages none cannot break
    staged = {"H57", "H58", "F31"}
    assert src.count("static_assert(") == len(FP8["fp8_block_prom2"].rules) - len(staged)
    assert not any(f'"{rule} ' in src for rule in staged) and "C_STAGES" not in src
    buffered = render(FP8["fp8_tensor_cluster"].replace(stages=4, c_stages=2), ARCH)
    assert buffered.count("static_assert(") == len(FP8["fp8_tensor_cluster"].rules)
    assert "constexpr int C_STAGES = 2;" in buffered and '"F31 c-stages-wide-d' in buffered
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in src
    e5 = render(FP8["fp8_grad_e5m2"], ARCH)
    assert ".f32.e5m2.e4m3" in e5 and "Accumulation fast" in e5


def test_search_space_is_valid_and_respects_the_scaling():
    fast = space("e4m3", "tensor", 0)
    block = space("e4m3", "block", 128)
    assert fast and block
    assert all(c.promote == 0 and not c.violations() for c in fast)
    assert all(c.scaling == "block" and c.bn <= 128 for c in block)


# ---- scales and API errors ---------------------------------------------------------------
def _ab(m=257, n=131, k=300):
    return np.zeros((m, k), E4M3), np.zeros((k, n), E4M3)


def test_scale_shapes_imply_the_scaling():
    A, B = _ab()
    assert check_fp8(A, B, 2.0, np.float32(0.5)).scaling == "tensor"
    args = check_fp8(A, B, np.ones((257, 1), np.float32), np.ones((1, 131), np.float32))
    assert args.scaling == "row" and (args.a_layout.s0, args.b_layout.s0) == (1, 1)
    args = check_fp8(A, B, 1.0, np.ones(131, np.float32))
    assert args.scaling == "row" and args.a_layout.s0 == 0  # a scalar broadcast: stride 0
    args = check_fp8(A, B, np.ones((257, 3), np.float32), np.ones((3, 2), np.float32))
    assert args.scaling == "block"
    assert (args.a_layout.s0, args.a_layout.s1, args.b_layout.s0, args.b_layout.s1) == (3, 1, 1, 2)


def test_torch_blockwise_layouts_read_as_strides():
    torch = pytest.importorskip("torch")
    from gemmgen.runtime.operands.scales import ScaleArg
    m, k, n = 300, 1024, 512
    sa = torch.ones(8, m).t()                 # (M, KB) M-major, as torch._scaled_mm wants
    sb = torch.ones(4, 8).t()                 # (KB, NB): the .t() of a (NB, KB) weight grid
    args = [ScaleArg(name, "torch", x, tuple(x.shape), x.stride())
            for name, x in (("scale_a", sa), ("scale_b", sb))]
    scaling, la, lb = scaling_of(*args, m, n, k)
    assert scaling == "block" and (la.s0, la.s1) == (1, m) and (lb.s0, lb.s1) == (8, 1)


@pytest.mark.parametrize("scale_a, scale_b, match", [
    (np.ones((257, 2), np.float32), 1.0, r"scale_a has shape \(257, 2\).*\(257, 3\)"),
    (1.0, np.ones((2, 3), np.float32), r"scale_b has shape \(2, 3\).*\(3, 2\)"),
    (np.ones(3, np.float64), 1.0, "scale_a has dtype float64; scales are float32"),
    ("x", 1.0, "scale_a: expected a number or a float32 array"),
    (np.ones((257, 3), np.float32), np.ones(131, np.float32), "blockwise scaling needs scale_b"),
    (float("nan"), 1.0, "scale_a = nan is not finite"),
])
def test_scale_errors_name_the_argument(scale_a, scale_b, match):
    A, B = _ab()
    with pytest.raises(OperandError, match=match):
        check_fp8(A, B, scale_a, scale_b)


def test_operand_errors_name_the_argument():
    A, B = _ab()
    with pytest.raises(OperandError, match="A has dtype float16; FP8 GEMMs take"):
        check_fp8(A.astype(np.float16), B, 1.0, 1.0)
    with pytest.raises(OperandError, match="uint8 bytes need dtype='e4m3'"):
        check_fp8(A.view(np.uint8), B, 1.0, 1.0)
    assert check_fp8(A.view(np.uint8), B, 1.0, 1.0, dtype="e4m3").a_dtype == "e4m3"
    with pytest.raises(OperandError, match="A's columns \\(300\\) must equal B's rows"):
        check_fp8(A, B[:299], 1.0, 1.0)
    with pytest.raises(OperandError, match="out_dtype must be one of bf16, fp16, fp32, e4m3"):
        check_fp8(A, B, 1.0, 1.0, out="e5m2")
    with pytest.raises(OperandError, match="bias must hold N = 131 values"):
        check_fp8(A, B, 1.0, 1.0, bias=np.zeros(7, ml_dtypes.bfloat16))
    with pytest.raises(OperandError, match="D has shape"):
        check_fp8(A, B, 1.0, 1.0, D=np.zeros((3, 3), ml_dtypes.bfloat16))


def test_gemm_fp8_refuses_alpha_and_beta_before_any_gpu_work():
    A, B = _ab()
    with pytest.raises(OperandError, match="FP8 GEMMs take no alpha or beta"):
        gemmgen.gemm(A, B, alpha=2.0)
    with pytest.raises(OperandError, match="scale_b has shape"):
        gemmgen.gemm(A, B, scale_a=1.0, scale_b=np.ones((5, 5), np.float32))


def test_reference_data_and_tolerance():
    rng = np.random.default_rng(0)
    A, B, sa, sb, ref = operands(rng, 65, 130, 300, "block")
    assert A.dtype == E4M3 and sa.shape == (65, 3) and sb.shape == (3, 2)
    q, s = quantize_np(ref, (128, 128))
    err, bad = compare(dequantize_np(q, s, (128, 128)), ref)
    assert bad == 0 and 0 < err < 0.05  # e4m3 keeps 3 mantissa bits
    assert compare(np.full((2, 2), np.nan), np.ones((2, 2))) == (float("inf"), 4)
    assert fp8_tolerance(16384, "fp32", True) > fp8_tolerance(16384, "fp32", False) >= 2e-3


# ---- static evidence: every preset and variants, compiled for sm_90a ------------------------
def _variants() -> list:
    base = FP8["fp8_block_prom2"]
    return [base.replace(bn=112, split_k=3),                       # a tile spanning two B blocks
            base.replace(epilogue="bias_gelu", out="fp16", store="tma", stages=6),
            FP8["fp8_tensor_fast"].replace(cluster_n=2, stages=3, store="tma", out="fp32",
                                           bn=128),
            FP8["fp8_row_fast"].replace(dtype="e4m3", b_dtype="e5m2", promote=256, bn=128,
                                        stages=7),
            FP8["fp8_tensor_promoted"].replace(promote=512, partials=1, m=4096, n=4096),
            # e4m3 D: 1 x 128 scales staged for the TMA store; per tensor, split-K, bias
            base.replace(out="e4m3", quant="1x128", store="tma", stages=6),
            FP8["fp8_tensor_fast"].replace(out="e4m3", quant="tensor", split_k=2,
                                           epilogue="bias"),
            # overlapped: split-K with a 2-CTA cluster; an e4m3 D with 1 x 128 scales and a
            # bias; one consumer (nothing to stagger)
            FP8["fp8_block_overlap"].replace(cluster_m=2, split_k=3),
            FP8["fp8_block_overlap"].replace(out="e4m3", quant="1x128", epilogue="bias",
                                             stages=5),
            FP8["fp8_block_decode"].replace(overlap=True),
            FP8["fp8_block_decode"].replace(overlap=True, bn=64, split_k=4),
            # decode loading 16 rows of A a tile (the rules' kernel at M = 16)
            choose_fp8(16, 4096, 4096, "tensor", True).config]


@pytest.fixture(scope="module")
def compiled(nvcc):
    from batched import compile_batched
    configs = list(FP8.values()) + _variants()
    out = {}
    for cfg, done in zip(configs, compile_batched(configs, arch=ARCH)):
        if isinstance(done, BuildError):
            pytest.fail(f"{cfg.name}: {done}")
        out[cfg.name] = (cfg, done[0], done[1])
    return out


def test_no_spills_no_stack_and_the_parameter_table(compiled):
    for name, (cfg, cubin, res) in compiled.items():
        assert res.spills == 0 and res.stack_bytes == 0, (name, res)
        layout = param_layout(cubin, name)
        ParamPacker(layout, tuple(p.kind for p in cfg.params()))
        assert layout.offsets[:3] == (112, 240, 368)
        assert param_layout(cubin, f"{name}_pack").offsets == TRANSPOSE_OFFSETS


def test_sass_has_qgmma_of_the_dtypes_and_no_local_memory(compiled):
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import sass_of, waits_before_global_access
    for name, (cfg, cubin, _) in compiled.items():
        text = sass_of(cubin, name)
        kinds = f"{cfg.dtype.upper()}.{cfg.b_dtype.upper()}"
        assert re.search(rf"QGMMA\.64x{cfg.bn}x32\.F32\.{kinds}", text), name
        assert "HGMMA" not in text and "UTMALDG" in text and "USETMAXREG" in text, name
        assert not re.search(r"\b(LDL|STL)\b", text), f"{name} uses local memory"
        assert ("UTMASTG" in text) == (cfg.store == "tma"), name
        if cfg.cluster > 1:
            assert "MULTICAST" in text, name
        assert f"Function : {name}_pack" in text, name
        assert waits_before_global_access(cubin, name), f"{name}: global access before the PDL wait"


def test_quantization_kernels_compile_cleanly(nvcc):
    from gemmgen.runtime.quantize import source
    for in_dtype, q in (("bf16", "e4m3"), ("fp32", "e5m2"), ("fp16", "e4m3")):
        report = compile_source(source(in_dtype, q), ("sm_90",), name=f"q_{in_dtype}_{q}")
        assert report["sm_90"].spills == 0 and report["sm_90"].stack_bytes == 0


FP8_VALUES = {
    "bm": [64, 128, 256], "bn": [64, 112, 128, 256], "stages": [3, 5, 7, 9],
    "consumers": [1, 2], "scaling": ["tensor", "row", "block"], "promote": [0, 128, 256],
    "partials": [1, 2], "cluster_m": [1, 2], "store": ["direct", "tma"], "split_k": [1, 4],
}


@pytest.mark.slow
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_python_verdict_equals_nvcc_verdict(nvcc, data):
    """A configuration compiles for sm_90a exactly when the model accepts it, and the
    static_asserts that fire are the model's rules."""
    base = data.draw(st.sampled_from(list(FP8.values()))).as_dict()
    base.pop("family")
    for field in data.draw(st.lists(st.sampled_from(list(FP8_VALUES)), min_size=1,
                                    max_size=2)):
        base[field] = data.draw(st.sampled_from(FP8_VALUES[field]))
    cfg = Fp8Config.unchecked(**base)
    found = {v.rule.id for v in cfg.violations()}
    event("invalid" if found else "valid")
    try:
        compile_source(render(cfg, ARCH), (ARCH,), name=cfg.name)
    except BuildError as err:
        assert found, f"valid by the model but nvcc failed:\n{err.log[-2000:]}"
        assert err.static_assert_ids() == found
    else:
        assert not found, f"nvcc accepted a config the model rejects: {sorted(found)}"


# ---- command line and suite (no GPU) ---------------------------------------------------------
def test_cli_emit_and_explain_take_the_fp8_dtypes(tmp_path):
    from click.testing import CliRunner

    from gemmgen.cli.main import main
    from gemmgen.codegen.render import config_from_source
    run = CliRunner().invoke
    out = tmp_path / "k.cu"
    res = run(main, ["emit", "--dtype", "e5m2", "--scaling", "block", "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = config_from_source(out.read_text())
    assert (cfg.family, cfg.dtype, cfg.scaling, cfg.promote) == ("fp8", "e5m2", "block", 128)
    res = run(main, ["emit", "--family", "fp8", "--scaling", "block", "--promote", "0"])
    assert res.exit_code == 2 and "F18 fast-needs-tensor-or-row" in res.output
    res = run(main, ["explain", "64", "2112", "7168", "--dtype", "e4m3", "--scaling", "block"])
    assert res.exit_code == 0 and "split 4 ways" in res.output, res.output
    res = run(main, ["explain", "64", "64", "64", "--dtype", "e4m3", "--scaling", "block",
                     "--fast-accum"])
    assert res.exit_code == 2 and "block scaling needs promoted" in res.output
    res = run(main, ["tune", "--m", "64", "--n", "64", "--k", "64", "--dtype", "e4m3",
                     "--scaling", "block", "--fast-accum"])
    assert res.exit_code == 2 and "--fast-accum" in res.output


def test_fp8_suite_cases():
    from pathlib import Path

    from gemmgen.tune import suites
    from gemmgen.tune.suite_cases import SuiteError
    suite = suites.load("fp8")
    cases = suites.expand(suite)
    assert not any(c.scaling == "block" and c.accum == "fast" for c in cases)
    labels = {c.label for c in cases}
    assert "e4m3 rcr 64x2112x7168 block promoted" in labels
    assert "fp8_block_cluster e4m3 rcr 4096x7168x16384 block promoted" in labels
    assert any(c.model == "llama3_8b" and c.tokens == 16 for c in cases)
    bad = Path(suite.path).with_name("fp8.toml").read_text().replace(
        'preset = ["fp8_tensor_fast"', 'scaling = "row"\npreset = ["fp8_tensor_fast"')
    with pytest.raises(SuiteError, match="fp8 presets only"):
        suites.from_dict(__import__("tomllib").loads(bad.replace('models = "llm"', "")), suite.path)


def test_recipe_packs_patches_and_workspaces_without_a_gpu(compiled, monkeypatch):
    """The launches of one call, built with the driver stubbed: a transposing pack for each
    operand that is not K-major or not 16-byte aligned, the split-K workspace and counters,
    and the operands' addresses patched where the GEMM and the packs read them."""
    import struct
    from types import SimpleNamespace

    from gemmgen.runtime import driver as driver_mod, hopper, tma
    from gemmgen.runtime.kernel import Kernel
    from gemmgen.runtime.recipe import PATCH_MAP, PATCH_POINTER, WORK_BASE, KernelArgs, Ref, Scale
    cfg = FP8["fp8_block_decode"]
    _, cubin, _ = compiled[cfg.name]
    kernel = Kernel(cfg, ARCH, cubin)
    monkeypatch.setattr(driver_mod, "current_device", lambda: 0)
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(tma, "encode", lambda spec, name: bytes(128))
    monkeypatch.setattr(type(kernel), "function", lambda self, dev=None, suffix="":
                        SimpleNamespace(handle=7 if suffix else 9, dynamic_smem=0 if suffix
                                        else cfg.smem_bytes))
    m, n, k = 64, 2112, 7168
    recipe = kernel.launches(KernelArgs(
        m, n, k, Ref(0, 0x7000000), m, Ref(1, 0x8000000), k, Ref(2, 0x9000000), n,
        a_k_major=False,                                       # A column-major: packed
        b_k_major=True,                                        # B K-major, aligned: as it is
        scale_a=Scale(Ref(4, 0xa000000), 1, m), scale_b=Scale(Ref(5, 0xb000000), 56, 1)), 0)
    assert recipe.path == "fp8 + pack A + split-K 7"
    pack, gemm = recipe.launches
    assert pack.function.handle == 7 and pack.grid == (112, 1, 1)
    assert [(p.index, p.kind) for p in pack.patches] == [(0, PATCH_POINTER),
                                                         (WORK_BASE, PATCH_POINTER)]
    src, s_row, s_col = struct.unpack_from("<Qqq", pack.params)
    assert (s_row, s_col) == (1, m)                            # (r, kk) at kk * lda + r
    assert gemm.grid == (119, 1, 1) and gemm.block == (256, 1, 1)   # 17 tiles x 7 slices
    kinds = {p.index: p.kind for p in gemm.patches}
    assert kinds == {1: PATCH_MAP, 2: PATCH_POINTER, 4: PATCH_POINTER, 5: PATCH_POINTER,
                     WORK_BASE: PATCH_MAP, WORK_BASE + 1: PATCH_POINTER,
                     WORK_BASE + 2: PATCH_POINTER}     # A's map reads the packed copy
    slots = {w.tag: w for w in recipe.workspaces}
    assert list(slots) == ["pack A", "split-K", "split-K counters"]
    assert slots["split-K counters"].zero and slots["split-K counters"].nbytes == 17 * 4
    assert slots["split-K"].nbytes == 17 * 7 * 64 * 128 * 4 and not slots["split-K"].zero
    assert len(recipe.to_bytes(hopper.FP8_ORDER)) > len(gemm.params)


@pytest.mark.parametrize("bn", range(8, 257, 8))
def test_b_scale_span_is_the_widest_tile_meeting_two_scale_blocks(bn):
    """F20's bound, BLOCK + gcd(BN, BLOCK), against every tile start n0 = j * BN: the tiles of
    a BN meet at most two 128-column B scale blocks exactly when BN <= b_scale_span(BN)."""
    from gemmgen.model.families.hopper.fp8.rules import BLOCK, b_scale_span
    starts = range(0, 128 * bn, bn)      # n0 mod 128 repeats within 128 tiles
    most = max((n0 + bn - 1) // BLOCK - n0 // BLOCK + 1 for n0 in starts)
    assert (most <= 2) == (bn <= b_scale_span(bn))
    cfg = PRESETS["fp8_block"].config.replace(check=False, bn=bn, partials=1, stages=2)
    assert ("F20" in {v.rule.id for v in cfg.violations()}) == (most > 2)


def test_a_cluster_ctas_b_scale_block_stays_inside_the_scales():
    """With a 1x2 cluster the second CTA of the last cluster tile may start past N (three
    column tiles make two cluster tiles); its B scale block index is clamped to the last block,
    as a column-split consumer's is (compute-sanitizer saw the unclamped kernel read past
    scale_b: fp8_cluster_scale_bounds_NVIDIA_H200.json). Without the cluster the index is
    as before."""
    clamp = "const int nb0 = min(n0 / BLOCK, nb_total - 1);"
    cfg = FP8["fp8_block"]
    assert clamp in render(cfg.replace(cluster_n=2), "sm_90a")
    assert clamp not in render(cfg, "sm_90a") and "const int nb0 = n0 / BLOCK;" in render(cfg)
    assert cfg.replace(cluster_n=2).tiles(256, 384)[1] * 2 * cfg.bn > 384   # a CTA past N


def test_a_tuned_a_rows_kernel_loads_every_row_of_a_larger_m():
    """A tuned decode kernel that loads 16 rows of A (a_rows) taken for a nearby shape with
    more rows loads the whole tile there instead of refusing the call."""
    from types import SimpleNamespace
    tuned = choose_fp8(16, 4096, 4096, "tensor", True).config
    db = SimpleNamespace(lookup=lambda *a, **k: ({"config": tuned.as_dict()}, "nearby"))
    assert choose_fp8(16, 4096, 4096, "tensor", True, db=db).config.a_rows == 16
    assert choose_fp8(24, 4096, 4096, "tensor", True, db=db).config.a_rows == 0
