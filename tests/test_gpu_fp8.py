"""On a Hopper GPU: the fp8 family end to end. Every preset on odd shapes (NumPy through PyCUDA),
every scaling and accumulation mode through gemmgen.gemm and gemmgen.torch.scaled_mm (PyTorch
tensors, D poisoned with NaN, verified against float64 on the dequantized inputs), the
transposing pack, split-K repeated calls, bias and output dtypes, e5m2, the GPU quantization
against its reference, CUDA-graph capture, torch.compile, and the error of promoted and fast
accumulation beside torch._scaled_mm's on the same data (K = 16384, wide dynamic range).

Set GEMMGEN_FP8_ERRORS=<file> to write the error comparison as JSON."""
import json
import os

import numpy as np
import pytest
from accuracy import rel_error

from gemmgen import PRESETS
from gemmgen.tune.fp8_verify import CASES, fp8_tolerance, sweep_fp8

pytestmark = pytest.mark.gpu
FP8 = [name for name, p in PRESETS.items() if p.config.family == "fp8"]


@pytest.fixture(scope="module")
def hopper():
    """Skip off Hopper; else compile at once, in parallel nvcc processes, the kernels that
    gemmgen.gemm chooses for the tests below (the session's cache starts empty)."""
    from gemmgen.compile.cache import compile_many
    from gemmgen.heuristics.fp8 import choose_fp8
    from gemmgen.runtime.device import device_arch, device_cc, sm_count
    if device_cc() != 90:
        pytest.skip("the fp8 family runs on sm_90 (Hopper) only")
    wanted = [(m, n, k, sc, fast, "bf16", "e4m3") for m, n, k in SHAPES for sc, fast in MODES]
    wanted += [(300, 264, 520, sc, False, out, "e4m3") for sc in ("tensor", "row", "block")
               for out in ("bf16", "fp16", "fp32")]
    wanted += [(512, 1024, 16384, sc, fast, "bf16", "e4m3") for sc, fast in MODES]
    configs = {}
    for m, n, k, sc, fast, out, a in wanted:
        cfg = choose_fp8(m, n, k, sc, fast, a, "e4m3", out, sms=sm_count()).config
        configs[cfg.name] = cfg
    done = compile_many(list(configs.values()), device_arch())
    bad = [str(d) for d in done if isinstance(d, Exception)]
    assert not bad, bad


@pytest.fixture(scope="module")
def kernels(hopper):
    """Every preset, compiled at once by parallel nvcc processes."""
    from gemmgen.runtime.build import build_many
    built = build_many([PRESETS[n].config for n in FP8])
    bad = [str(k) for k in built if isinstance(k, Exception)]
    assert not bad, bad
    return dict(zip(FP8, built))


@pytest.mark.parametrize("name", FP8)
def test_preset_on_odd_shapes(kernels, name):
    results = sweep_fp8(name, kernels[name], CASES, seed=1)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    paths = {(r.m, r.n, r.k): r.path for r in results}
    assert "pack A+B" in paths[(257, 131, 300)], paths  # rows of 300 bytes: TMA needs 16
    assert paths[(128, 256, 512)].startswith("fp8"), paths


# Overlapped kernels whose CTAs take several units (the deferred epilogue runs between them):
# 17 x 17 tiles for 132 SMs, with split-K more; K tails of 4 and 8 blocks (whole windows).
OVERLAP_CASES = CASES + ((2049, 2117, 1000), (2100, 2090, 390))
OVERLAP_VARIANTS = {
    "split_k_cluster": dict(split_k=3, cluster_m=2),
    "direct_fp32": dict(store="direct", out="fp32", stages=7),
    "tensor_promoted": dict(scaling="tensor"),
    "row_promoted": dict(scaling="row"),
    "one_consumer": dict(bm=64, consumers=1, regs_consumer=240, stages=8, split_k=2),
}


@pytest.mark.parametrize("variant", OVERLAP_VARIANTS)
def test_overlapped_variants_on_odd_shapes(hopper, variant):
    from gemmgen.runtime.build import build
    cfg = PRESETS["fp8_block_overlap"].config.replace(**OVERLAP_VARIANTS[variant])
    results = sweep_fp8(variant, build(cfg), OVERLAP_CASES, seed=2)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


# The waiter warp with one consumer and fast accumulation: per tensor and per row, split-K, a
# TMA store, an fp16 D, on shapes of several units per CTA (an e4m3 D and a bias with the
# waiter: the rules' picks at M <= 128 with fast accumulation in test_gpu_fp8_out.py).
WAITER_VARIANTS = {
    "tensor_64x64": dict(bn=64, stages=14),
    "row_split_k": dict(scaling="row", bn=128, stages=9, split_k=4),
    "tma_store": dict(bn=128, stages=8, store="tma"),
    "fp16_out": dict(bn=64, stages=14, out="fp16"),
}


@pytest.mark.parametrize("variant", WAITER_VARIANTS)
def test_waiter_variants_on_odd_shapes(hopper, variant):
    from gemmgen.runtime.build import build
    cfg = PRESETS["fp8_row_decode"].config.replace(
        scaling="tensor", split_k=1, waiter=True).replace(**WAITER_VARIANTS[variant])
    results = sweep_fp8(variant, build(cfg), OVERLAP_CASES, seed=3)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


# Decode kernels loading a_rows rows of A a tile: M up to a_rows (K tails, one row, N = 1),
# with split-K, row scales and a TMA store; the rows past a_rows keep what the stage held and
# never reach D. A larger M is refused.
A_ROWS_CASES = ((1, 2112, 1024), (16, 131, 300), (13, 1031, 777), (8, 2112, 7168), (1, 1, 1),
                (32, 520, 1000), (29, 257, 4100))
A_ROWS_VARIANTS = {
    "rows16": dict(a_rows=16),
    "rows8_split": dict(a_rows=8, split_k=2),
    "rows32_row_tma": dict(a_rows=32, scaling="row", bn=128, stages=8, store="tma"),
}


@pytest.mark.parametrize("variant", A_ROWS_VARIANTS)
def test_a_rows_variants_on_decode_shapes(hopper, variant):
    from gemmgen.runtime.build import build
    from gemmgen.runtime.operands import OperandError
    cfg = PRESETS["fp8_row_decode"].config.replace(
        scaling="tensor", split_k=1, waiter=True, bn=64, stages=14).replace(
        **A_ROWS_VARIANTS[variant])
    kernel = build(cfg)
    cases = [c for c in A_ROWS_CASES if c[0] <= cfg.a_rows]
    results = sweep_fp8(variant, kernel, cases, seed=4)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    with pytest.raises(OperandError, match=f"loads {cfg.a_rows} rows of A"):
        sweep_fp8(variant, kernel, ((cfg.a_rows + 1, 64, 128),), seed=5)


# Split-K over the tail: more cluster tiles than a wave, so only those past the last whole wave
# are split (with a cluster, a TMA store, fast and overlapped promoted loops); a shape of whole
# waves (none split) and one of fewer tiles than a wave (all split).
TAIL_VARIANTS = {
    "fast_cluster": ("fp8_tensor_cluster", dict(split_k=4)),
    "block_overlap": ("fp8_block_overlap", dict(split_k=4)),
    "block_one_consumer": ("fp8_block_overlap", dict(bm=64, consumers=1, regs_consumer=240,
                                                     stages=9, split_k=8, store="direct")),
}


@pytest.mark.parametrize("variant", TAIL_VARIANTS)
def test_split_tail_past_the_last_whole_wave(hopper, variant):
    from gemmgen.runtime.build import build
    from gemmgen.runtime.device import sm_count
    name, changes = TAIL_VARIANTS[variant]
    cfg = PRESETS[name].config.replace(**changes)
    wave = sm_count() // cfg.cluster
    bm, bn = cfg.bm * cfg.cluster_m, cfg.bn * cfg.cluster_n
    whole = (bm * 6, bn * (2 * wave // 6), 1000)            # 2 whole waves of tiles
    cases = ((2049, 2117, 1000), (2100, 2090, 390), whole, (bm * 2 - 5, bn * 3 + 7, 900))
    results = sweep_fp8(variant, build(cfg), cases, seed=4)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    for r in results:
        tiles = -(-r.m // bm) * -(-r.n // bn)
        split = cfg.split_tiles(r.m, r.n, sm_count())
        assert split == (tiles if tiles <= wave else tiles % wave), (r, split)
        label = f"split-K {cfg.split_k}"
        tail = f"{label} on the last {split} of {tiles} tiles"
        want = label if split == tiles else tail if split else f"{label}: whole waves, none split"
        assert want in r.path and ("on the last" in r.path) == (want == tail), (r.path, want)
    assert "none split" in results[2].path and "on the last" in results[0].path, results


# D staged chunk by chunk through buffers (c_stages): 128 x 256 with a fourth stage (two buffers,
# one; row scales), 128 x 192 (3 chunks, two buffers: a unit's first chunk takes the buffer its
# previous unit's last chunk used), an fp32 D with split-K over the tail, the overlapped
# blockwise loop (the store in its deferred epilogue), each on shapes of several units per CTA.
C_STAGES_VARIANTS = {
    "cluster_cs2": ("fp8_tensor_cluster", dict(stages=4, c_stages=2)),
    "row_cs1": ("fp8_row_fast", dict(store="tma", stages=4, c_stages=1)),
    "odd_chunks": ("fp8_tensor_cluster", dict(bn=192, stages=4, c_stages=2)),
    "fp32_split_tail": ("fp8_tensor_cluster", dict(out="fp32", c_stages=2, split_k=4)),
    "block_overlap": ("fp8_block_overlap", dict(c_stages=1)),
}


@pytest.mark.parametrize("variant", C_STAGES_VARIANTS)
def test_d_staged_through_chunk_buffers(hopper, variant):
    from gemmgen.runtime.build import build
    name, changes = C_STAGES_VARIANTS[variant]
    cfg = PRESETS[name].config.replace(**changes)
    assert cfg.store == "tma" and cfg.c_stages and cfg.c_smem_bytes < cfg.bm * cfg.bn * 2
    results = sweep_fp8(variant, build(cfg), OVERLAP_CASES, seed=5)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


# ---- PyTorch tensors through gemmgen.gemm and gemmgen.torch.scaled_mm ----------------------
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
MODES = [("tensor", True), ("tensor", False), ("row", True), ("row", False), ("block", False)]
SHAPES = [(257, 131, 300), (1, 2112, 1024), (129, 520, 1000), (64, 2112, 7168)]


def _wide(rows, cols, gen):
    """Normals times 2^a per row (a in [-2, 2]) and 2^b per 128 columns (b in [-1, 1])."""
    x = torch.randn(rows, cols, device="cuda", generator=gen)
    a = torch.rand(rows, 1, device="cuda", generator=gen) * 4 - 2
    b = (torch.rand(1, -(-cols // 128), device="cuda", generator=gen) * 2 - 1)
    return x * torch.exp2(a + b.repeat_interleave(128, dim=1)[:, :cols])


def _data(m, n, k, scaling, seed=0, a_dtype=E4M3, b_dtype=E4M3):
    """(a M x K, b K x N column-major, scale_a, scale_b, float64 reference) in the shapes
    scaled_mm takes, quantized by gemmgen.torch.quantize on the GPU."""
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, w = _wide(m, k, gen), _wide(n, k, gen)
    block_a, block_w = {"tensor": (None, None), "row": ("row", "row"),
                        "block": ((1, 128), (128, 128))}[scaling]
    a, sa = gt.quantize(x, block_a, a_dtype)
    q, sw = gt.quantize(w, block_w, b_dtype)
    ref = gt.dequantize(a, sa, block_a).double() @ gt.dequantize(q, sw, block_w).double().t()
    sb = sw.t() if scaling != "tensor" else sw   # row: (1, N); block: (KB, NB) view
    return a, q.t(), sa, sb, ref


@pytest.mark.parametrize("scaling, fast", MODES)
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_gemm_every_scaling_and_accumulation(hopper, scaling, fast, m, n, k):
    import gemmgen
    a, b, sa, sb, ref = _data(m, n, k, scaling)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemmgen.gemm(a, b, d, scale_a=sa, scale_b=sb, fast_accum=fast)
    err = rel_error(d, ref)
    assert err <= fp8_tolerance(k, "bf16", fast), (scaling, fast, err)


@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_scaled_mm_in_every_layout_and_output(hopper, scaling):
    import gemmgen.torch as gt
    m, n, k = 300, 264, 520
    a, b, sa, sb, ref = _data(m, n, k, scaling, seed=3)
    for a_, b_ in ((a, b), (a.t().contiguous().t(), b), (a, b.contiguous())):  # repacked ones
        for out in OUT.values():
            y = gt.scaled_mm(a_, b_, sa, sb, out_dtype=out)
            assert y.dtype == out and rel_error(y, ref) <= fp8_tolerance(k, "bf16", False)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    y = gt.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, bias=bias)
    assert rel_error(y, ref + bias.double()) <= fp8_tolerance(k, "bf16", False)


def test_e5m2_times_e4m3_into_fp32(hopper):
    import gemmgen
    a, b, sa, sb, ref = _data(257, 131, 640, "row", seed=5, a_dtype=E5M2)
    d = gemmgen.gemm(a, b, scale_a=sa, scale_b=sb, out_dtype="fp32", fast_accum=True)
    assert d.dtype == torch.float32 and rel_error(d, ref) <= fp8_tolerance(640, "fp32", True)


def test_python_scales_and_repeated_split_k_calls(hopper):
    import gemmgen
    from gemmgen.runtime.api import chosen_fp8
    a, b, sa, sb, ref = _data(64, 2112, 7168, "tensor", seed=7)
    first = gemmgen.gemm(a, b, scale_a=float(sa), scale_b=float(sb))
    for _ in range(3):  # the split-K counters are back at zero after each launch
        again = gemmgen.gemm(a, b, scale_a=float(sa), scale_b=float(sb))
        assert torch.equal(first, again)
    kernel, choice = chosen_fp8(a, b, float(sa), float(sb))
    assert kernel.config.split_k > 1 and "split-K" in kernel.last_path
    assert rel_error(first, ref) <= fp8_tolerance(7168, "bf16", False)


@pytest.mark.parametrize("block", [(1, 128), (128, 128), "row", None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_matches_its_reference(hopper, block, dtype):
    import gemmgen.torch as gt
    x = _wide(300, 520, torch.Generator(device="cuda").manual_seed(11)).to(dtype)
    q, s = gt.quantize(x, block)
    rq, rs = gt.quantize_reference(x, block)
    assert tuple(s.shape) == tuple(rs.shape) and s.stride() == rs.stride()
    assert torch.equal(s, rs)
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))


def test_graph_capture_and_compile(hopper):
    import gemmgen.torch as gt
    a, b, sa, sb, ref = _data(256, 512, 1024, "block", seed=13)
    y0 = gt.scaled_mm(a, b, sa, sb)   # warm up: plans and builds outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = gt.scaled_mm(a, b, sa, sb)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, y0)
    fn = torch.compile(lambda a, b: gt.scaled_mm(a, b, sa, sb), fullgraph=True)
    assert torch.equal(fn(a, b), y0)


def _torch_block_scales(sa, sb):
    """The blockwise layouts torch._scaled_mm (2.11) takes: a (M, KB) M-major, b (KB, NB)."""
    return sa.t().contiguous().t(), sb


def test_error_beside_torch_scaled_mm(hopper):
    """Promoted accumulation's error is at most cuBLASLt's blockwise error on the same data
    (K = 16384, wide dynamic range); fast accumulation's is reported."""
    import gemmgen.torch as gt
    m, n, k = 512, 1024, 16384
    rows = {}
    for scaling in ("tensor", "row", "block"):
        a, b, sa, sb, ref = _data(m, n, k, scaling, seed=17)
        for fast in ((True, False) if scaling != "block" else (False,)):
            rows[f"gemmgen {scaling} {'fast' if fast else 'promoted'}"] = rel_error(
                gt.scaled_mm(a, b, sa, sb, use_fast_accum=fast), ref)
            try:
                tsa, tsb = _torch_block_scales(sa, sb) if scaling == "block" else (sa, sb)
                y = torch._scaled_mm(a, b, tsa, tsb, out_dtype=torch.bfloat16,
                                     use_fast_accum=fast)
                rows[f"torch._scaled_mm {scaling} {'fast' if fast else 'accurate'}"] = rel_error(y, ref)
            except RuntimeError as exc:
                rows[f"torch._scaled_mm {scaling}"] = f"unsupported: {str(exc)[:80]}"
    path = os.environ.get("GEMMGEN_FP8_ERRORS")
    if path:
        with open(path, "w") as f:
            json.dump({"M": m, "N": n, "K": k, "rel_error": rows}, f, indent=1)
    print(json.dumps(rows, indent=1))
    ours = rows["gemmgen block promoted"]
    theirs = rows.get("torch._scaled_mm block accurate")
    if isinstance(theirs, float):
        assert ours <= theirs * 1.05, rows
    assert rows["gemmgen tensor promoted"] <= rows["gemmgen tensor fast"] * 1.05, rows


def test_launcher_runs_repeated_calls_without_python(hopper):
    import gemmgen.torch as gt
    if not gt.LAUNCHER:
        pytest.skip(f"compiled launcher not loaded: {gt.launcher.why_not()}")
    a, b, sa, sb, _ = _data(128, 256, 512, "row", seed=19)
    before = torch.ops.gemmgen_launcher.recipes_held()
    y = gt.scaled_mm(a, b, sa, sb)
    assert torch.ops.gemmgen_launcher.recipes_held() == before + 1
    assert torch.equal(gt.scaled_mm(a, b, sa, sb), y)
    assert torch.ops.gemmgen_launcher.recipes_held() == before + 1


def test_numpy_operands_round_trip(hopper):
    import gemmgen
    from gemmgen.tune.fp8_verify import compare, operands
    A, B, sa, sb, ref = operands(np.random.default_rng(23), 100, 300, 256, "block")
    D = gemmgen.gemm(A, B, scale_a=sa, scale_b=sb, out_dtype="fp32")
    err, bad = compare(D, ref)
    assert bad == 0 and err <= fp8_tolerance(256, "fp32", False)
