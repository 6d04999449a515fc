"""The wgmma family without a GPU: model figures, rules, TMA geometry, parameter offsets, dispatch
choices, and the static evidence (ptxas and SASS) of every preset for sm_90a."""
import re
import subprocess

import pytest
from breakers import pairwise_variants
from hypothesis import HealthCheck, event, given, settings, strategies as st

from gemmgen import FAMILIES, PRESETS, BuildError, ConfigError, build, render
from gemmgen.compile.nvcc import compile_source, tool_path
from gemmgen.heuristics.select import choose
from gemmgen.model.config import LAYOUTS
from gemmgen.model.families import fallback_config
from gemmgen.model.families.hopper.wgmma import WgmmaConfig
from gemmgen.model.families.hopper.wgmma.env import SPLIT_LOADS
from gemmgen.runtime.tma import MapSpec, ParamPacker, TmaError, encode, operand_map, param_layout

WGMMA = {n: p.config for n, p in PRESETS.items() if p.config.family == "wgmma"}
ARCH = "sm_90a"


def test_family_runs_on_sm_90a_only():
    fam = FAMILIES["wgmma"]
    assert fam.arch_for(90) == "sm_90a"
    for cc in (80, 89, 100):
        with pytest.raises(ValueError, match="needs sm_90a exactly"):
            fam.arch_for(cc)


def test_older_arch_is_a_clear_build_error():
    with pytest.raises(BuildError, match="needs sm_90a"):
        build(WGMMA["wgmma_tma"], arch="sm_80")


def test_figures_of_the_cluster_preset():
    c = WGMMA["wgmma_cluster"]  # 128x256x64 fp16, 2 consumers + producer, 3 stages, TMA store
    assert (c.threads, c.consumer_rows, c.m_iters, c.acc_regs) == (384, 64, 1, 128)
    assert c.stage_bytes == 128 * 64 * 2 + 256 * 64 * 2
    assert c.c_smem_bytes == 128 * 256 * 2
    assert c.smem_bytes == 3 * c.stage_bytes + c.c_smem_bytes + 2 * 3 * 8 + 1024
    assert c.entry_regs == 168 and c.consumer_regs == 232
    env = c.env()
    assert (env["A_BOX_INNER"], env["A_BOX_ROWS"], env["A_BOXES"]) == (64, 128, 1)
    assert (env["B_BOX_INNER"], env["B_BOX_ROWS"], env["B_BOXES"]) == (64, 64, 4)
    assert env["B_MN_MAJOR"] == 1 and env["A_MN_MAJOR"] == 0 and env["CLUSTER"] == 2
    assert c.grid(4096, 4096) == (16 * 16 * 2, 1, 1)  # 256x256 cluster tiles, 2 CTAs each
    k = c.template_constants()
    assert (k["DESC_SBO"], k["B_DESC_LBO"], k["B_K_STEP_BYTES"], k["A_K_STEP_BYTES"]) == (
        1024, 64 * 128, 2048, 32)
    assert c.wgmma_asm["desc_a"] == 128 and len(c.wgmma_asm["acc_operands"]) == 128


def test_tf32_needs_a_k_major_b_and_names_the_way_out():
    with pytest.raises(ConfigError) as info:
        WGMMA["wgmma_tf32"].replace(layout="rrr")
    assert [v.rule.id for v in info.value.violations] == ["H19"]
    assert "layout 'rc?'" in str(info.value)


def test_every_violation_is_named_with_its_numbers():
    with pytest.raises(ConfigError) as info:
        WGMMA["wgmma_tma_store"].replace(stages=5, regs_consumer=240)
    text = str(info.value)
    # 5 stages x 48 KiB + 64 KiB of C staging + 10 barriers + the 1 KiB alignment slack
    assert "H09 smem-limit: SMEM_BYTES = 312400 exceeds SMEM_OPTIN = 232448" in text
    assert "H15 setmaxnreg-pool: REG_POOL = 66560 exceeds 65536" in text


@pytest.mark.parametrize("layout", LAYOUTS)
def test_operand_maps_follow_the_layout(layout):
    c = WGMMA["wgmma_tma_store"].replace(layout=layout)
    e = c.env()
    a = operand_map("fp16", 4096, 300, 200, 512 if layout[0] == "r" else 304, layout[0] == "c",
                    1, 0, e["A_BOX_INNER"], e["A_BOX_ROWS"], 128)
    if layout[0] == "r":   # K contiguous: dims (K, M), box (BK, BM)
        assert a.dims[:2] == (200, 300) and a.box[:2] == (64, 128)
    else:                  # M contiguous: dims (M, K), box (64 M, BK)
        assert a.dims[:2] == (300, 200) and a.box[:2] == (64, 64)
    assert a.strides[0] == (512 if layout[0] == "r" else 304) * 2 and a.problems("A") == []


def test_unaligned_operands_are_named():
    odd = operand_map("fp16", 4098, 4095, 4093, 4093, False, 2, 4095 * 4093, 64, 128, 128)
    text = "; ".join(odd.problems("A"))
    assert "A's address is not 16-byte aligned (offset 2)" in text
    assert "A's leading dimension is 8186 bytes" in text and "batch stride" in text
    with pytest.raises(TmaError, match="A's leading dimension"):
        encode(odd, "A")  # refused before the driver is asked
    bcast = operand_map("fp16", 4096, 64, 64, 64, False, 5, 0, 64, 64, 128)
    assert bcast.dims[2] == 1, "a broadcast operand is one matrix for every batch entry"


def test_param_packer_places_each_field():
    from gemmgen.runtime.tma import ParamLayout
    layout = ParamLayout((112, 240, 368, 496, 500), (128, 128, 128, 4, 4), 504)
    packed = ParamPacker(layout, ("128s", "128s", "128s", "i", "f")).pack(
        b"a" * 128, b"b" * 128, b"c" * 128, 7, 1.5)
    assert len(packed) == 504 and packed[112:240] == b"a" * 128 and packed[:112] == bytes(112)
    assert int.from_bytes(packed[496:500], "little") == 7
    with pytest.raises(ValueError, match="is 4 bytes"):
        ParamPacker(layout, ("128s", "128s", "128s", "i", "q"))


def test_dispatch_prefers_wgmma_on_hopper_only():
    cfg, how = choose(None, "H", "fp16", 512, 512, 512, cc=90)
    assert cfg.family == "wgmma" and how == "default"
    assert choose(None, "A", "fp16", 512, 512, 512, cc=80)[0].family == "mma"
    assert choose(None, "H", "tf32", 64, 64, 64, cc=90, layout="rrr")[0].family == "mma"
    assert choose(None, "H", "tf32", 64, 64, 64, cc=90, layout="rcr")[0].family == "wgmma"
    assert choose(None, "H", "fp32", 64, 64, 64, cc=90)[0].family == "simt"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fallback_takes_the_same_problem(layout):
    for cfg in (WGMMA["wgmma_tma_store"].replace(layout=layout, epilogue="bias_gelu"),
                WGMMA["wgmma_tf32"]):
        fb = fallback_config(cfg)
        assert (fb.family, fb.dtype, fb.out, fb.layout, fb.epilogue) == (
            "wmma", cfg.dtype, cfg.out, cfg.layout, cfg.epilogue)


def test_fallback_of_c_staged_in_buffers_stores_directly():
    """An epilogue tree (or an fp8 kernel) with C staging buffers falls back to itself with
    direct stores, which stage nothing: c_stages 0 (a valid config, not H57)."""
    tree = WGMMA["wgmma_tma_store"].replace(layout="rcr", epilogue="silu(acc + bias)",
                                            stages=4, c_stages=1)
    fp8 = PRESETS["fp8_tensor_cluster"].config.replace(stages=4, c_stages=2)
    for cfg in (tree, fp8):
        fb = fallback_config(cfg)
        assert (fb.family, fb.store, fb.c_stages, fb.epilogue) == (
            cfg.family, "direct", 0, cfg.epilogue) and not fb.violations(), fb.name


# ---- static evidence: every preset and each layout/epilogue path, compiled for sm_90a -------
def _variants() -> list:
    base = WGMMA["wgmma_tma_store"]
    out = [c for c in pairwise_variants(base) if c.layout != "rrr"]
    return out + [base.replace(pingpong=True, bn=128, stages=4), base.replace(out="fp32", bn=128),
                  base.replace(store="direct", split_k=3, layout="crc", epilogue="bias_gelu"),
                  base.replace(store="direct", bn=8, split_k=4, stages=6, layout="ccc"),
                  WGMMA["wgmma_3xtf32"].replace(split_k=2, layout="crr", epilogue="bias_relu"),
                  base.replace(layout="rcr", bn=224, stages=4, c_stages=2, epilogue="bias_gelu"),
                  base.replace(bm=64, bn=64, consumers=1, regs_producer=0, regs_consumer=0,
                               waiter=True, stages=12, store="direct", split_k=4,
                               split_inline=True, stream_k=True, layout="ccc",
                               epilogue="bias_gelu")]


@pytest.fixture(scope="module")
def compiled(nvcc):
    """name -> (cubin, ptxas resources) for the presets and the variants, compiled in parallel
    nvcc processes (BuildError, and so a failed test, for any ptxas slow-path warning), one
    translation unit per core (tests/batched.py)."""
    from batched import compile_batched
    configs = list(WGMMA.values()) + _variants()
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
        kinds = tuple(p.kind for p in cfg.params())
        assert len(layout.offsets) == len(kinds)
        assert layout.offsets[:3] == (112, 240, 368), "tensor maps 128-byte aligned in c[0x0]"
        ParamPacker(layout, tuple(p.kind for p in cfg.params()))  # sizes agree with the launch's struct codes


def test_parameter_table_agrees_with_cuobjdump(compiled, tmp_path):
    tool = tool_path("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    cfg, cubin, _ = compiled[WGMMA["wgmma_cluster"].name]
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([tool, "-elf", str(path)], capture_output=True, text=True).stdout
    text = re.split(r"\n\.", text.split(f"\n.nv.info.{cfg.name}\n")[1])[0]  # its own section
    found = {int(o, 16): (int(f, 16), int(s, 16)) for o, f, s in re.findall(
        r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)\s+Size\s*:\s*(0x[0-9a-f]+)",
        text)}
    ours = param_layout(cubin, cfg.name)
    assert [found[i] for i in range(len(found))] == list(zip(ours.offsets, ours.sizes))


def test_sass_has_wgmma_and_tma_and_no_local_memory(compiled):
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import sass_of, waits_before_global_access
    for name, (cfg, cubin, _) in compiled.items():
        text = sass_of(cubin, name)
        assert "HGMMA" in text and "UTMALDG" in text, name
        assert not re.search(r"\b(LDL|STL)\b", text), f"{name} uses local memory"
        if cfg.store == "tma":
            assert "UTMASTG" in text, name
        if cfg.store == "tma" and cfg.out_bytes == 2 and cfg.layout[2] == "r":
            assert "STSM" in text, f"{name}: no stmatrix"
        if cfg.cluster > 1:
            assert "MULTICAST" in text, name
        if cfg.setmaxnreg:
            assert "USETMAXREG" in text, name
        # the module's helper kernels: the repack always, the split and the reduction when used
        assert f"Function : {name}_pack" in text, name
        assert waits_before_global_access(cubin, name), f"{name}: global access before the PDL wait"
        assert (f"Function : {name}_split3" in text) == (cfg.math == "3xtf32"), name
        assert (f"Function : {name}_reduce" in text) == cfg.split_apart, name


def test_the_waiter_warp_polls_the_full_barriers_for_the_one_consumer():
    """With ``waiter`` the consumer's K loop meets the producer warpgroup's second warp at
    BAR_WAITER instead of polling the full barrier; that warp polls each stage in the
    consumer's order. Only with a producer warpgroup and one consumer (H60, H61)."""
    base = WGMMA["wgmma_tma_store"].replace(bm=64, bn=64, consumers=1, regs_producer=0,
                                            regs_consumer=0, stages=12)
    plain, waiter = render(base), render(base.replace(waiter=True))
    meet = "named_sync(BAR_WAITER, WARPGROUP + 32);"
    poll = "mbar_wait(full_bar + 8 * s, phase);"
    assert meet not in plain and plain.count(poll) == 1
    assert waiter.count(meet) == 2 and waiter.count(poll) == 1
    warp = waiter.index("if (__shfl_sync(0xffffffffu, wtid / 32, 0) == 1) {")
    consumer = waiter.index("// ---- consumer warpgroups ----")
    assert warp < waiter.index(poll) < waiter.index(meet) < consumer < waiter.rindex(meet)
    assert "constexpr int BAR_WAITER = 15;" in waiter and "BAR_WAITER" not in plain
    assert base.name + "_wt" == base.replace(waiter=True).name
    for bad, rule in ((dict(bm=128, consumers=2, regs_producer=40, regs_consumer=232), "H61"),
                      (dict(producer=False, persistent=False), "H60")):
        with pytest.raises(ConfigError, match=rule):
            base.replace(waiter=True, **bad)


def _cluster_split(**kw):
    """A 64 x 128 one-consumer kernel (the waiter's) with a cluster split-K of ``kw``."""
    fields = dict(bm=64, bn=128, consumers=1, regs_producer=0, regs_consumer=0, stages=8,
                  waiter=True, store="direct", persistent=False, layout="rcr", split_k=4,
                  split_cluster=True)
    return WGMMA["wgmma_tma_store"].replace(**{**fields, **kw})


def test_a_cluster_split_k_sums_its_slices_through_distributed_shared_memory():
    """With ``split_cluster`` a tile's slices are one 1 x 1 x SPLIT_K cluster: each CTA leaves
    its partials in its ring, arrives on every CTA's barrier and sums its share of the elements
    from every slice (DSMEM loads) before storing it; nothing of it in a kernel without it.
    Each of its rules breaks on its own (H62-H71)."""
    cfg = _cluster_split()
    plain = render(cfg.replace(split_cluster=False, split_k=1))
    src = render(cfg)
    assert cfg.name.endswith("_sk4c_wt_lrcr") and "split-K 4 in a cluster" in cfg.brief()
    assert "__cluster_dims__(1, 1, " in src and "ld.shared::cluster.v4.f32" in src
    assert src.index("mbar_arrive_cluster_relaxed(split_bar, r)") < src.index(
        "mbar_wait_acquire_cluster(split_bar, 0);") < src.index("if (!owned(e)) continue;")
    assert "tile.split = blockIdx.z % SPLIT_K;" in src
    for word in ("split_bar", "ld_cluster4", "__cluster_dims__", "owned(", "SPLIT_CLUSTER"):
        assert word in src and word not in plain, word
    base = cfg.replace(waiter=False)
    for bad, rule in ((dict(split_k=9), "H62"), (dict(cluster_m=2, persistent=True), "H63"),
                      (dict(persistent=True), "H64"), (dict(split_inline=True), "H65"),
                      (dict(store="tma"), "H66"), (dict(epilogue="silu(acc) + R"), "H67"),
                      (dict(stages=1, bn=256), "H68"),
                      (dict(bm=128, consumers=2, pingpong=True, regs_producer=40,
                            regs_consumer=232), "H69"),
                      (dict(producer=False), "H70")):
        with pytest.raises(ConfigError, match=rule):
            base.replace(**bad)
    with pytest.raises(ConfigError, match="H71"):
        WGMMA["wgmma_3xtf32"].replace(store="direct", persistent=False, split_k=2,
                                      split_cluster=True)


def test_a_non_persistent_split_k_counts_its_slices_against_the_grid_limit():
    """A non-persistent split-K launches batch x split_k CTAs in z: a batch that fits alone
    but not in 4 slices is refused before any launch, naming both."""
    from types import SimpleNamespace

    from gemmgen.runtime.launch import check_launch
    from gemmgen.runtime.operands import OperandError
    kernel = SimpleNamespace(config=_cluster_split())
    check_launch(kernel, SimpleNamespace(m=64, n=128, k=4096, batch=16383))
    with pytest.raises(OperandError, match="a batch of 16384 in 4 split-K slices, exceeds"):
        check_launch(kernel, SimpleNamespace(m=64, n=128, k=4096, batch=16384))


def test_a_cluster_split_k_loads_every_slice_of_its_share_before_adding(nvcc):
    """The cluster split-K's sum loads 16 bytes at a time (LD.E.128 through the cluster's
    shared-memory window), issues a quad's loads from every CTA of the cluster before its
    additions, waits on its barrier once and leaves the kernel through the cluster barrier;
    no spills, at 64 x 64 with one consumer and 8 slices, and at 128 x 128 with two
    consumers, 3 slices and GELU (4 slices of 64 x 128 and 2 of 128 x 128 compiled clean too
    when this was written)."""
    configs = [_cluster_split(split_k=8, bn=64, layout="rcc"),
               WGMMA["wgmma_tma_store"].replace(bn=128, stages=6, store="direct",
                                                persistent=False, split_k=3, split_cluster=True,
                                                epilogue="bias_gelu", layout="crr")]
    for cfg, res, text in _compiled_sass(configs):
        assert res.spills == 0 and res.stack_bytes == 0, (cfg.name, res)
        quads = -(-cfg.m_iters * cfg.bn // 2 // 4 // cfg.split_k)  # of a thread's share
        first_add = text.index("FADD")
        assert text.count("LD.E.128 ", 0, first_add) >= cfg.split_k, cfg.name
        assert text.count("LD.E.128 ") >= quads * cfg.split_k, cfg.name
        assert not re.search(r"\bLD\.E\.?(32|64)?\s", text), f"{cfg.name}: a narrower DSMEM load"
        assert "UCGABAR_WAIT" in text and "SYNCS.PHASECHK" in text, cfg.name


def test_producer_warp_issues_tma_loads_from_uniform_registers(compiled):
    """The producer warp walks the tiles in step (one elected lane issues), so no TMA load of
    a kernel with a producer warpgroup sits in a waterfall loop (R2UR of every operand before
    each load), which bounded the K loop of 64-row tiles."""
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import waterfall_tma_loads
    for name, (cfg, cubin, _) in compiled.items():
        if cfg.producer:
            loads, looped = waterfall_tma_loads(cubin, name)
            assert loads and not looped, f"{name}: {looped} of {loads} TMA loads in a waterfall"


WGMMA_VALUES = {
    "bm": [64, 128, 192, 256], "bn": [64, 128, 200, 256], "stages": [2, 3, 4, 5],
    "consumers": [1, 2], "pingpong": [False, True], "cluster_m": [1, 2],
    "layout": ["rrr", "crc", "rcr"],
    "epilogue": ["none", "bias_gelu", "silu(acc*row_scale*col_scale + bias) + R", "silu(gate)*up"],
    "dual": [False, True], "overlap": [False, True],
    "store": ["tma", "direct"], "regs_consumer": [232, 240], "split_k": [1, 3],
    "math": ["native", "3xtf32"], "c_stages": [0, 1, 2, 5],
}


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_python_verdict_equals_nvcc_verdict(nvcc, data):
    """A configuration compiles for sm_90a exactly when the model accepts it, and the
    static_asserts that fire are the model's rules."""
    base = data.draw(st.sampled_from(list(WGMMA.values()))).as_dict()
    base.pop("family")
    for field in data.draw(st.lists(st.sampled_from(list(WGMMA_VALUES)), min_size=1,
                                    max_size=2)):
        base[field] = data.draw(st.sampled_from(WGMMA_VALUES[field]))
    cfg = WgmmaConfig.unchecked(**base)
    found = {v.rule.id for v in cfg.violations()}
    event("invalid" if found else "valid")
    try:
        compile_source(render(cfg, ARCH), (ARCH,), name=cfg.name)
    except BuildError as err:
        assert found, f"valid by the model but nvcc failed:\n{err.log[-2000:]}"
        assert err.static_assert_ids() == found
    else:
        assert not found, f"nvcc accepted a config the model rejects: {sorted(found)}"


def test_a_slow_path_warning_is_a_build_error():
    from gemmgen.compile.nvcc import slow_path_warnings
    log = ("ptxas warning : (C7511) Potential Performance Loss: wgmma.mma_async instructions "
           "are serialized due to insufficient register resources for the wgmma pipeline")
    assert slow_path_warnings(log)[0].startswith("C7511")
    assert slow_path_warnings("ptxas info : Used 168 registers") == []


def test_map_spec_is_hashable_for_the_cache():
    spec = MapSpec("fp16", 0, (64, 64, 1), (128, 8192), (64, 64, 1), 128)
    assert {spec: 1}[MapSpec("fp16", 0, (64, 64, 1), (128, 8192), (64, 64, 1), 128)] == 1


def _compiled_sass(configs, main_only=True):
    """(config, ptxas resources, SASS) of each of ``configs``, compiled for ARCH: its main
    kernel's, or with ``main_only=False`` the whole cubin's; skips without cuobjdump, fails on
    a build error."""
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import compile_batched, sass_of
    for cfg, done in zip(configs, compile_batched(configs, arch=ARCH)):
        assert not isinstance(done, BuildError), (cfg.name, done)
        text = sass_of(done[0], cfg.name)
        if main_only:
            text = text.split(f"Function : {cfg.name}\n")[1].split("Function :")[0]
        yield cfg, done[1], text


def test_staged_bias_takes_the_global_loads_out_of_the_epilogue(nvcc):
    """With the bias staged in shared memory (one cp.async, LDGSTS, at each tile's start), a
    kernel with a bias has the global loads of the same kernel without one plus the 8 of the
    element-by-element copy of a bias view that is not 16-byte aligned; the epilogue used to
    load the bias from global memory between its stmatrix stores (128 more loads). Bias + GELU
    is emitted once (``_emitted_once``)."""
    base = WGMMA["wgmma_tma_store"]
    pairs = [("none", "bias_gelu"), ("silu(acc*row_scale)", "silu(acc*row_scale + bias)")]
    configs = [base.replace(epilogue=e) for pair in pairs for e in pair]
    counts = []
    for cfg, res, text in _compiled_sass(configs, main_only=False):
        counts.append((len(re.findall(r"\bLDG\.", text)), len(re.findall(r"\bLDGSTS\.", text))))
        if cfg.epilogue == "bias_gelu":
            _emitted_once(cfg, res, text)
    for i, (plain, with_bias) in enumerate(pairs):
        (loads, copies), (loads_b, copies_b) = counts[2 * i], counts[2 * i + 1]
        assert loads_b == loads + 16 // base.out_bytes, (plain, with_bias, counts)
        assert copies_b == copies + 1, (plain, with_bias, counts)


def _emitted_once(cfg, res, text):
    """Where beta != 0 a staged epilogue with a bias or an activation folds beta * C into the sums
    first, under one branch, so the compiler emits the activation once: one MUFU.TANH per
    accumulator of a consumer thread for GELU (a test of beta per value had it emit two copies,
    256 at 128 x 256). A staged bias is read a column pair per load (no LDS.U16). No spills."""
    if "gelu" in cfg.epilogue:
        assert len(re.findall(r"\bMUFU\.TANH\b", text)) == cfg.acc_regs, cfg.name
    if cfg.vectors:
        assert not re.search(r"\bLDS\.U16\b", text), cfg.name
    assert res.spills == 0 and res.stack_bytes == 0, (cfg.name, res)


@pytest.mark.slow
def test_bias_gelu_epilogue_is_emitted_once_in_every_staging(nvcc):
    """``_emitted_once`` with a column-major C, C through chunk buffers, and two 64-row slices
    per consumer (128 x 128 ping-pong); ``make test`` checks the whole staged tile (below)."""
    base = WGMMA["wgmma_bf16"].replace(epilogue="bias_gelu", layout="rcr")
    configs = [base.replace(layout="rrc", stages=3), base.replace(c_stages=2, stages=4),
               base.replace(bn=128, pingpong=True, stages=4)]
    for cfg, res, text in _compiled_sass(configs):
        _emitted_once(cfg, res, text)


def test_no_wait_between_a_tiles_copies_and_its_main_loop(nvcc):
    """The staged R and vectors are copied (LDGSTS) at a tile's start and waited for in its
    epilogue: no wait on scoreboard SB0 (DEPBAR) between the first copy and the first wgmma.
    cp.async.bulk.wait_group.read (the wait before R overwrites the staging tile) shares SB0
    with cp.async.wait_group, so R is copied before the vectors. Without a producer the
    consumer issues the ring's TMA loads before the copies."""
    base = WGMMA["wgmma_tma_store"]
    configs = [base.replace(epilogue="acc*col_scale + bias + R"),
               base.replace(epilogue="acc + bias + R", producer=False, persistent=False,
                            consumers=1, bn=192, regs_producer=0, regs_consumer=0)]
    for cfg, _, text in _compiled_sass(configs):
        first_copy, first_mma = text.index("LDGSTS"), text.index("HGMMA")
        assert first_copy < first_mma, cfg.name
        assert "DEPBAR.LE SB0" not in text[first_copy:first_mma], cfg.name
        assert text.count("LDGDEPBAR", first_copy, first_mma) == 2, cfg.name  # R, vectors
        if not cfg.producer:
            assert text.index("UTMALDG") < first_copy, cfg.name


def test_inline_split_k_reads_every_slice_of_a_pass_in_one_round_trip(nvcc):
    """The last slice of an inline split-K tile sums the slices' partials with L2-coherent
    loads (LDG.E.STRONG.GPU): every slice's loads of a pass (SPLIT_LOADS / SPLIT_K elements
    each, or the whole fragment) go out before the first addition, so a pass costs one round
    trip to L2. Slice by slice, a 128 x 128 tile at split-K 4 waited for 16 round trips and
    took as long as the unsplit kernel (H200). The partials are stored in fragment order: one
    store per accumulator, none of them guarded; no spills (128 x 256 at split 8 included)."""
    base = WGMMA["wgmma_tma_store"].replace(
        bm=64, consumers=1, regs_producer=0, regs_consumer=0, store="direct", stages=4,
        split_k=2, split_inline=True)
    configs = [base.replace(layout="rcc", bn=64, split_k=8), base.replace(layout="rcc", bn=8),
               base.replace(bn=128, split_k=4),
               WGMMA["wgmma_tma_store"].replace(split_k=8, split_inline=True)]  # TMA store
    for cfg, res, text in _compiled_sass(configs):
        assert res.spills == 0, (cfg.name, res)
        elems = cfg.m_iters * cfg.bn // 2
        runs = [len(re.findall(r"LDG\.E\.STRONG\.GPU", part))
                for part in re.split(r"\bFADD\b", text)]
        assert max(runs) >= min(SPLIT_LOADS // cfg.split_k, elems) * cfg.split_k, (
            cfg.name, runs)
        assert sum(runs) == elems * cfg.split_k, (cfg.name, runs)
        assert len(re.findall(r"STG\.E\.STRONG\.GPU", text)) == elems, cfg.name


def test_which_vectors_are_staged():
    base = WGMMA["wgmma_tma_store"]

    def leaves(**kw):
        return [v.leaf for v in base.replace(**kw).vectors]
    assert leaves(epilogue="none") == [] and leaves(epilogue="gelu") == []
    assert leaves(epilogue="bias_relu") == ["bias"]
    assert leaves(epilogue="silu(acc*row_scale*col_scale + bias) + R") == [
        "bias", "col_scale", "row_scale"]
    assert leaves(epilogue="bias_gelu", store="direct", split_k=3) == []  # partial sums
    # the overlap stages what its register part reads; the deferred part reads global memory
    assert leaves(epilogue="gelu(acc + bias)*col_scale", overlap=True) == ["bias"]
    cfg = base.replace(epilogue="acc*col_scale + row_bias")  # BN 256, 64 rows per consumer
    assert cfg.smem_bytes == base.smem_bytes + 2 * 2 * (256 * 4 + 64 * 2)
    assert cfg.template_constants()["VEC_ROW_BIAS_AT"] == 256 * 4
    # where two slots per consumer would not fit beside the ring, nothing is staged:
    # 128 x 128 with 6 stages leaves 1952 bytes, the two vectors need 2 x 2 x 768
    tight = base.replace(bn=128, stages=6, epilogue="acc*col_scale + bias")
    assert tight.vectors == () and tight.smem_bytes == tight.replace(epilogue="none").smem_bytes
    assert [v.leaf for v in tight.replace(stages=5).vectors] == ["bias", "col_scale"]


def test_which_residuals_are_staged():
    base = WGMMA["wgmma_tma_store"]

    def staged(**kw):
        return base.replace(**kw).residual_staged
    assert staged(epilogue="acc + R") and staged(epilogue="silu(acc + bias) + R")
    assert not staged(epilogue="acc + bias")
    assert not staged(epilogue="acc + R(layout='c')")          # not C's layout
    assert not staged(epilogue="acc + R(dtype='fp32')")        # not C's dtype
    assert not staged(epilogue="acc + R", store="direct")      # no staging tile
    assert not staged(epilogue="acc + R", out="fp32", bn=128)  # the staging of a 16-bit C only
    assert not staged(epilogue="gelu(acc) + R", overlap=True)  # the overlap stages z there
    assert base.replace(epilogue="acc + R").smem_bytes == base.smem_bytes  # C's own staging


def test_c_staged_in_chunk_buffers_leaves_room_for_a_stage():
    """128 x 256 with the whole C tile staged (64 KB) fits 3 stages; staged chunk by chunk
    through two 8 KB buffers per consumer it fits 4. The kernel declares C_STAGES and asserts
    its rules only then; a kernel that stages whole tiles renders as before."""
    base = WGMMA["wgmma_bf16"].replace(layout="rcr")
    assert base.stages == 3 and base.c_stages == 0
    with pytest.raises(ConfigError, match="H09 smem-limit"):
        base.replace(stages=4)
    cfg = base.replace(stages=4, c_stages=2)
    assert cfg.c_smem_bytes == 2 * 64 * 2 * 128 < base.c_smem_bytes == 2 * 64 * 256 * 2
    assert cfg.name.endswith("_tma_cs2_outbf16_lrcr") and "_cs" not in base.name
    src, plain = render(cfg, ARCH), render(base, ARCH)
    assert "constexpr int C_STAGES = 2;" in src and "H58 c-stages-chunks" in src
    assert "bulk_wait_read_n<C_STAGES - 1>()" in src
    assert "C_STAGES" not in plain and "H57" not in plain
    for bad, rule in ((dict(store="direct"), "H57"), (dict(layout="rcc"), "H57"),
                      (dict(c_stages=5), "H58"), (dict(epilogue="acc + R"), "H59"),
                      (dict(epilogue="bias_gelu", overlap=True), "H59")):
        trial = cfg.replace(check=False, **bad)
        assert rule in {v.rule.id for v in trial.violations()}, (bad, trial.violations())


def test_c_stage_buffers_wait_for_the_store_that_last_read_them(nvcc):
    """Chunk ch of a tile reuses the buffer of chunk ch - C_STAGES, so its wait lets at most
    C_STAGES - 1 stores still read (SASS ``DEPBAR.LE SB0, 0x1`` with two buffers). Where
    C_STAGES does not divide C_CHUNKS (128 x 144: 9 chunks; 128 x 224: 7), the previous tile's
    last chunk used buffer 0, so the first chunk waits for every store (``0x0``), as the
    kernel's last wait does; with 4 chunks only that last wait is a full one."""
    base = WGMMA["wgmma_bf16"].replace(layout="rcr", c_stages=2)
    configs = [base.replace(bn=bn, stages=st) for bn, st in ((256, 4), (144, 6), (224, 4))]
    for cfg, _, text in _compiled_sass(configs):
        chunks = cfg.c_chunks
        odd = chunks % cfg.c_stages != 0
        assert chunks == {256: 4, 144: 9, 224: 7}[cfg.bn], cfg.name
        assert len(re.findall(r"DEPBAR\.LE SB0, 0x1\b", text)) == chunks - odd, cfg.name
        assert len(re.findall(r"DEPBAR\.LE SB0, 0x0\b", text)) == 1 + odd, cfg.name


def test_shape_rules_stage_c_in_buffers_where_that_deepens_the_ring():
    """The shape rules take C staging buffers where the whole staged tile limits the ring:
    128 x 256 tiles at 4096^3 get 4 stages and two buffers; 128 x 128 tiles (6 stages either
    way), direct stores, epilogues with a vector (two buffers leave no room to stage it, one
    serializes the stores) and epilogue trees keep the whole tile (or none)."""
    from gemmgen.heuristics.select import decide
    from gemmgen.heuristics.tunedb import TuneDB

    def pick(m, n, k):
        return decide(TuneDB(None), "NVIDIA H200", "bf16", m, n, k, 90, "rcr", "none", True,
                      "native", 1, table=False)
    big = pick(4096, 4096, 4096)
    assert (big.config.bm, big.config.bn, big.config.stages, big.config.c_stages) == (
        128, 256, 4, 2), big.config.name
    assert any("2 chunk buffers (3 with the whole tile staged)" in r for r in big.reasons)
    for m, n, k in ((4096, 512, 2048), (1, 4096, 4096)):
        cfg = pick(m, n, k).config
        assert cfg.c_stages == 0 or cfg.stages > 3, cfg.name
    assert pick(1, 4096, 4096).config.c_stages == 0  # direct stores
    def with_epilogue(e):
        return decide(TuneDB(None), "NVIDIA H200", "bf16", 4096, 4096, 4096, 90, "rcr", e,
                      True, "native", 1, table=False).config
    tree = with_epilogue("acc*col_scale + bias")
    assert (tree.stages, tree.c_stages) == (3, 0), tree.name  # a tree stages the whole tile
    for e in ("bias", "bias_gelu"):  # the bias staged beside the whole tile and 3 stages
        cfg = with_epilogue(e)
        assert (cfg.stages, cfg.c_stages) == (3, 0), cfg.name
        assert [v.leaf for v in cfg.vectors] == ["bias"], cfg.name
        assert not cfg.replace(stages=4, c_stages=2).vectors  # no room left for it
