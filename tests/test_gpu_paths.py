"""On a Hopper GPU: the paths gemm takes for odd and skinny shapes (repack, split-K, swapped
operands) and for FP32-accurate 3xTF32, through gemmgen.gemm and on every operand kind."""
import numpy as np
import pytest

import gemmgen
from gemmgen import PRESETS, build
from gemmgen.heuristics.select import decide
from gemmgen.tune.verify import BATCH_CASES, CASES, compare, reference, sweep_kernel, tolerance

pytestmark = pytest.mark.gpu

PATHS = {
    "split-K 3, crc, bias+GELU": PRESETS["wgmma_tma_store"].config.replace(
        store="direct", split_k=3, layout="crc", epilogue="bias_gelu"),
    "split-K 2, ping-pong, bf16": PRESETS["wgmma_bf16"].config.replace(
        store="direct", split_k=2, pingpong=True, bm=64),
    "split-K 3, one tile per CTA": PRESETS["wgmma_ws"].config.replace(split_k=3, layout="rcr"),
    "inline split-K 2, one tile per CTA": PRESETS["wgmma_ws"].config.replace(
        split_k=2, split_inline=True, layout="rcr"),
    "decode tile 128x8, split-K 4": PRESETS["wgmma_tma_store"].config.replace(
        store="direct", bn=8, split_k=4, stages=6, layout="ccc"),
    "repack, ccc": PRESETS["wgmma_bf16"].config.replace(store="direct", layout="ccc"),
    "inline split-K 3, crc, bias+GELU": PRESETS["wgmma_tma_store"].config.replace(
        store="direct", split_k=3, split_inline=True, layout="crc", epilogue="bias_gelu"),
    "inline split-K 4, decode 64x8, rcc": PRESETS["wgmma_tma_store"].config.replace(
        store="direct", bm=64, bn=8, consumers=1, regs_producer=0, regs_consumer=0, stages=8,
        split_k=4, split_inline=True, layout="rcc"),
    "inline split-K 2, bf16 rrr, 64 rows": PRESETS["wgmma_bf16"].config.replace(
        store="direct", bm=64, consumers=1, regs_producer=0, regs_consumer=0, split_k=2,
        split_inline=True),
    "3xTF32 crr, split-K 2, bias+ReLU": PRESETS["wgmma_3xtf32"].config.replace(
        layout="crr", split_k=2, epilogue="bias_relu"),
    "stream-K 3, 128x128, TMA store": PRESETS["wgmma_tma_store"].config.replace(
        bn=128, stages=6, split_k=3, split_inline=True, stream_k=True),
    "stream-K 4, decode 64x8, rcc": PRESETS["wgmma_tma_store"].config.replace(
        store="direct", bm=64, bn=8, consumers=1, regs_producer=0, regs_consumer=0, stages=8,
        split_k=4, split_inline=True, stream_k=True, layout="rcc"),
    "stream-K 8, 3xTF32 crr, bias+ReLU": PRESETS["wgmma_3xtf32"].config.replace(
        layout="crr", store="direct", split_k=8, split_inline=True, stream_k=True,
        epilogue="bias_relu"),
    **{f"waiter, {label}": PRESETS["wgmma_bf16"].config.replace(
        bm=64, consumers=1, regs_producer=0, regs_consumer=0, waiter=True, **kw)
       for label, kw in {
           "64x32, 16 stages, rcr": dict(bn=32, stages=16, store="direct", layout="rcr"),
           "64x128, TMA store, rrr": dict(bn=128, stages=8),
           "one tile per CTA, crr": dict(bn=64, stages=12, persistent=False, layout="crr"),
           "inline split-K 4, decode 64x8, rcc": dict(
               bn=8, stages=16, store="direct", split_k=4, split_inline=True, layout="rcc"),
           "stream-K 4, 64x64, ccc, bias+GELU": dict(
               bn=64, stages=12, store="direct", split_k=4, split_inline=True, stream_k=True,
               layout="ccc", epilogue="bias_gelu")}.items()},
    "waiter, 3xTF32 64x64 crr": PRESETS["wgmma_3xtf32"].config.replace(
        bm=64, bn=64, consumers=1, regs_producer=0, regs_consumer=0, layout="crr",
        stages=4, waiter=True),
    # the mid-M rule's one wave of 64-row tiles of widths that are not multiples of 64, C
    # stored through TMA in 64- and 32-byte swizzled chunks
    "mid-M 64x96, waiter, TMA store in 64-byte chunks": decide(
        None, "NVIDIA H200", "bf16", 256, 3072, 3072, cc=90, layout="rcr").config,
    "64x80, waiter, TMA store in 32-byte chunks, ccr, bias+GELU": PRESETS["wgmma_bf16"].config
    .replace(bm=64, bn=80, consumers=1, regs_producer=0, regs_consumer=0, waiter=True,
             stages=10, layout="ccr", epilogue="bias_gelu"),
    **{f"cluster split-K {label}": PRESETS["wgmma_bf16"].config.replace(
        store="direct", persistent=False, split_cluster=True, **kw)
       for label, kw in {
           "2, 128x128, rcr": dict(bn=128, stages=6, split_k=2, layout="rcr"),
           "3, 128x64, crr, bias": dict(bn=64, stages=8, split_k=3, layout="crr",
                                        epilogue="bias"),
           "4, waiter 64x128, ccc, bias+GELU": dict(
               bm=64, bn=128, consumers=1, regs_producer=0, regs_consumer=0, waiter=True,
               stages=8, split_k=4, layout="ccc", epilogue="bias_gelu"),
           "8, 64x64, rrc": dict(bm=64, bn=64, consumers=1, regs_producer=0,
                                 regs_consumer=0, stages=8, split_k=8, layout="rrc")}.items()},
}


@pytest.fixture(scope="module")
def hopper():
    from gemmgen.runtime.device import device_cc
    if device_cc() != 90:
        pytest.skip("the wgmma family runs on sm_90 (Hopper) only")


@pytest.mark.parametrize("label", list(PATHS))
def test_path_is_correct_over_the_sweep(hopper, label):
    kernel = build(PATHS[label])
    results = sweep_kernel(label, kernel, CASES, batch_cases=BATCH_CASES)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    paths = {r.path for r in results}
    if kernel.config.split_k > 1:
        assert any("split-K" in p for p in paths), paths


TAIL = {
    "128x128, TMA store, split 3": PRESETS["wgmma_tma_store"].config.replace(
        bn=128, stages=6, split_k=3, split_inline=True),
    "64x128, one consumer, direct, ccc, bias+GELU, split 4": PRESETS["wgmma_tma_store"].config
    .replace(bm=64, bn=128, consumers=1, regs_producer=0, regs_consumer=0, stages=8,
             store="direct", layout="ccc", epilogue="bias_gelu", split_k=4, split_inline=True),
    "128x128, TMA store, stream-K 3": PATHS["stream-K 3, 128x128, TMA store"],
    "64x128, one consumer, direct, ccc, bias+GELU, stream-K 4": PRESETS["wgmma_tma_store"].config
    .replace(bm=64, bn=128, consumers=1, regs_producer=0, regs_consumer=0, stages=8,
             store="direct", layout="ccc", epilogue="bias_gelu", split_k=4, split_inline=True,
             stream_k=True),
}


@pytest.mark.parametrize("label", list(TAIL))
def test_inline_split_k_past_one_wave_splits_only_the_tail(hopper, label):
    """More tiles than SMs: the tiles of the whole waves are computed whole and only those past
    the last whole wave are split (1100 x 2112: 153 tiles of 128 x 128 on 132 SMs, the last
    21 split; batched 3 x 300 x 4000: 3 x 5 x 32 = 480 of 64 x 128, the last 84 split), each
    correct against float64 with alpha and beta."""
    from gemmgen.runtime.driver import device_attribute
    kernel, sms = build(TAIL[label]), device_attribute(0, "sms")
    cases = [(1100, 2112, 1000, 1.5, -0.5), (333, 4000, 777, 1.0, 0.0)]
    results = sweep_kernel(label, kernel, cases, batch_cases=[(3, 300, 4000, 640, 1.0, 0.5, True)])
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    c = kernel.config
    tiles = [-(-m // c.bm) * -(-n // c.bn) * b for b, m, n in ((1, 1100, 2112), (1, 333, 4000),
                                                                  (3, 300, 4000))]
    for r, t in zip(results, tiles):
        split = c.split_tiles(t, sms)
        assert 0 < split < t if t > sms else split == t, (t, split)
        assert (f"on the last {split} of {t} tiles" in r.path) == (split < t), r.path


def test_stream_k_is_reproducible_and_matches_the_unsplit_kernel(hopper):
    """Stream-K sums a tile's pieces in K order whoever arrives last: two launches give the same
    bits; and its result is within float32 rounding of the unsplit kernel's on a tail whose
    pieces cross tile boundaries (256 x 4544 x 4544: 72 tiles of 128 x 128 on the SMs)."""
    torch = pytest.importorskip("torch")
    cfg = TAIL["128x128, TMA store, stream-K 3"]
    kern, whole = build(cfg), build(cfg.replace(split_k=1, split_inline=False, stream_k=False))
    gen = torch.Generator(device="cuda").manual_seed(1)
    m, n, k = 256, 4544, 4544
    a = torch.randn(m, k, device="cuda", generator=gen).half()
    b = torch.randn(k, n, device="cuda", generator=gen).half()
    outs = []
    for kernel in (kern, kern, whole):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        kernel(a, b, c)
        torch.cuda.synchronize()
        outs.append(c)
    assert torch.equal(outs[0], outs[1])
    ref = a.double() @ b.double()
    err = ((outs[0].double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance(k, "fp16", "fp32", "fp16"), err
    assert ((outs[0].double() - outs[2].double()).norm() / ref.norm()).item() < 1e-3


@pytest.mark.parametrize("label", [x for x in PATHS if x.startswith("cluster split-K")])
def test_a_cluster_split_k_gives_the_inline_split_k_bits(hopper, label):
    """The cluster split-K sums a tile's slices in slice order, as the inline split-K's last
    slice does: the same bits, launch after launch, with alpha, beta and the epilogue."""
    torch = pytest.importorskip("torch")
    cfg = PATHS[label]
    kern = build(cfg)
    inline = build(cfg.replace(split_cluster=False, split_inline=True, persistent=True,
                               waiter=False, stages=min(cfg.stages, 6)))
    gen = torch.Generator(device="cuda").manual_seed(2)

    def operand(rows, cols, col_major):  # rows x cols, in the layout's order
        x = torch.randn(*((cols, rows) if col_major else (rows, cols)), device="cuda",
                        generator=gen).bfloat16()
        return x.t() if col_major else x
    for m, n, k in ((256, 576, 7168), (333, 1000, 2050), (64, 4096, 4096)):
        a, b = operand(m, k, cfg.layout[0] == "c"), operand(k, n, cfg.layout[1] == "c")
        c0 = operand(m, n, cfg.layout[2] == "c")
        bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
        outs = []
        for kernel in (kern, kern, inline):
            c = c0.clone()
            kernel(a, b, c, alpha=1.5, beta=-0.5,
                   bias=bias if cfg.epilogue.startswith("bias") else None)
            torch.cuda.synchronize()
            outs.append(c)
        assert not outs[0].isnan().any()
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), (m, n, k)


def test_large_odd_operands_are_repacked_not_sent_to_the_fallback(hopper):
    kernel = build(PATHS["repack, ccc"])
    res = sweep_kernel("odd", kernel, [(1023, 1025, 1021, 1.5, -0.5)], batch_cases=[])
    assert res[0].passed and "repack" in res[0].path, res[0]


def _cupy():
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("m", [1, 8, 64])
def test_gemm_swaps_operands_for_a_small_m(hopper, m):
    cp = _cupy()
    from gemmgen.runtime.api import chosen_choice
    rng = cp.random.default_rng()
    a = rng.standard_normal((m, 1024), dtype=cp.float32).astype(cp.float16)
    b = rng.standard_normal((1024, 2048), dtype=cp.float32).astype(cp.float16)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    out = gemmgen.gemm(a, b)
    kernel, choice = chosen_choice(a, b)
    assert choice.swap and kernel.config.bn == max(8, m)
    assert out.shape == (m, 2048)
    err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert err <= tolerance(1024, "fp16", "fp32", "fp16"), err
    c = cp.full((m, 2048), cp.nan, cp.float16)
    again = gemmgen.gemm(a, b, c, alpha=2.0)  # the cached plan, into a given C
    assert again is c
    err = float(cp.linalg.norm(c.astype(cp.float64) - 2 * ref) / cp.linalg.norm(2 * ref))
    assert err <= tolerance(1024, "fp16", "fp32", "fp16"), err


def test_gemm_3xtf32_is_as_accurate_as_fp32_in_any_layout(hopper):
    cp = _cupy()
    rng = cp.random.default_rng()
    a = rng.standard_normal((777, 1531), dtype=cp.float32)
    b = rng.standard_normal((1531, 523), dtype=cp.float32).T.copy().T  # column-major view
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    out = gemmgen.gemm(a, b, math="3xtf32")
    err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert err <= tolerance(1531, "fp32"), err
    one_pass = gemmgen.gemm(a, b, dtype="tf32")
    err1 = float(cp.linalg.norm(one_pass.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert err * 20 < err1, (err, err1)  # 1xTF32 keeps 10 mantissa bits
    with pytest.raises(ValueError, match="float32"):
        gemmgen.gemm(a.astype(cp.float16), b.astype(cp.float16), math="3xtf32")


def test_split_and_helpers_launch_on_a_torch_stream(hopper):
    torch = pytest.importorskip("torch")
    a = torch.randn(8, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    bias = torch.randn(4096, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)  # the launch must wait behind this on the same stream
        out = gemmgen.gemm(a, b, bias=bias, epilogue="bias_relu",
                           stream=torch.cuda.current_stream())
    s.synchronize()
    ref = torch.relu(a.double() @ b.double() + bias.double())
    assert float((out.double() - ref).norm() / ref.norm()) < 2e-3
    from gemmgen.runtime.api import chosen_choice
    kernel, choice = chosen_choice(a, b, epilogue="bias_relu")
    assert kernel.config.split_k > 1 and "split-K" in kernel.last_path


def test_wide_range_data_keeps_3xtf32_at_fp32_accuracy(hopper):
    """Exponents spread over 2^-20..2^20 with mixed signs; tf32's exponent range is fp32's,
    so only the rounding of the small part differs from an exact split."""
    rng = np.random.default_rng()
    A = (rng.standard_normal((256, 512)) * np.exp2(rng.integers(-20, 21, (256, 512)))).astype(
        np.float32)
    B = (rng.standard_normal((512, 192)) * np.exp2(rng.integers(-20, 21, (512, 192)))).astype(
        np.float32)
    out = build(PRESETS["wgmma_3xtf32"].config)(A, B)
    err, worst = compare(out, reference(A, B, None, 1.0, 0.0))
    assert err <= tolerance(512, "fp32"), (err, worst)


def test_3xtf32_edge_values(hopper):
    """Denormal inputs lose their small part (flushed like tf32's); values within 2^-11 of
    FLT_MAX round the big part to infinity: documented, and what happens is checked here."""
    A = np.full((64, 64), 1e-39, np.float32)  # denormal
    B = np.ones((64, 64), np.float32)
    out = build(PRESETS["wgmma_3xtf32"].config)(A, B)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= 64 * 1e-39 * 1.01)
    big = np.full((64, 64), np.finfo(np.float32).max, np.float32)
    one = np.eye(64, dtype=np.float32)
    out = build(PRESETS["wgmma_3xtf32"].config)(big, one)
    assert not np.all(np.isfinite(out))  # big = rna(FLT_MAX) overflows: not FP32's answer
