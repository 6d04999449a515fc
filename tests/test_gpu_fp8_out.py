"""On a Hopper GPU: an e4m3 output quantized in the fp8 kernel's epilogue
(gemmgen.torch.scaled_mm_quantized). Per 1 x 128 and per tensor, every input scaling, odd
shapes, split-K and a bias: the dequantized output against float64 (no worse than quantizing
the exact product with gemmgen.torch.quantize_reference), the scales and amax against the
exact product's, the output fed to the next blockwise GEMM, repeated calls, CUDA-graph capture
and torch.compile. The outputs' memory is poisoned (NaN bytes) before each call."""

import pytest
from accuracy import rel_error

from gemmgen.tune.fp8_verify import fp8_tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
E4M3 = torch.float8_e4m3fn
MODES = [("tensor", True), ("row", True), ("block", False)]
SHAPES = [(257, 131, 300), (1, 2112, 1024), (129, 520, 1000), (64, 2112, 7168), (512, 768, 512)]


@pytest.fixture(scope="module")
def hopper():
    """Skip off Hopper; else compile at once, in parallel nvcc processes, the kernels the tests
    below choose."""
    from gemmgen.compile.cache import compile_many
    from gemmgen.heuristics.fp8 import choose_fp8
    from gemmgen.runtime.device import device_arch, device_cc, sm_count
    if device_cc() != 90:
        pytest.skip("the fp8 family runs on sm_90 (Hopper) only")
    configs = {}
    for m, n, k in SHAPES:
        for scaling, fast in MODES:
            for quant in ("1x128", "tensor"):
                for epi in ("none", "bias"):
                    cfg = choose_fp8(m, n, k, scaling, fast, out="e4m3", epilogue=epi,
                                     sms=sm_count(), quant=quant).config
                    configs[cfg.name] = cfg
    done = compile_many(list(configs.values()), device_arch())
    bad = [str(d) for d in done if isinstance(d, Exception)]
    assert not bad, bad


def _data(m, n, k, scaling, seed):
    """(a, b column-major, scale_a, scale_b, float64 product of the dequantized inputs)."""
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen) * 0.05
    block_a, block_w = {"tensor": (None, None), "row": ("row", "row"),
                        "block": ((1, 128), (128, 128))}[scaling]
    a, sa = gt.quantize(x, block_a)
    q, sw = gt.quantize(w, block_w)
    ref = gt.dequantize(a, sa, block_a).double() @ gt.dequantize(q, sw, block_w).double().t()
    return a, q.t(), sa, (sw.t() if scaling != "tensor" else sw), ref


def _poison(m, n):
    """Leave NaN bytes where the caching allocator will place the next outputs."""
    junk = [torch.full((m * n + 4096,), 0x7F, dtype=torch.uint8, device="cuda"),
            torch.full((m * (n // 128 + 1) + 64,), float("nan"), device="cuda")]
    del junk


def _call(a, b, sa, sb, bias, block, scale, fast):
    import gemmgen.torch as gt
    _poison(a.shape[0], b.shape[1])
    return gt.scaled_mm_quantized(a, b, sa, sb, bias=bias, block=block, scale=scale,
                                  use_fast_accum=fast)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("scaling, fast", MODES)
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_1x128_output(hopper, m, n, k, scaling, fast, with_bias):
    import gemmgen.torch as gt
    a, b, sa, sb, ref = _data(m, n, k, scaling, seed=m + n + k)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16) if with_bias else None
    if bias is not None:
        ref = ref + bias.double()
    q, s, amax = _call(a, b, sa, sb, bias, (1, 128), None, fast)
    nb = -(-n // 128)
    assert q.dtype == E4M3 and q.shape == (m, n)
    assert s.shape == (m, nb) and s.stride() == (1, m) and amax.shape == (1,)
    # The dequantized output is as close to the exact product as quantizing that product is.
    rq, rs = gt.quantize_reference(ref.float(), (1, 128))
    floor = rel_error(gt.dequantize(rq, rs), ref)
    got = rel_error(gt.dequantize(q, s), ref)
    assert got <= floor * 1.1 + fp8_tolerance(k, "fp32", fast), (got, floor)
    # Scales and amax are the exact product's, to the GEMM's error.
    assert torch.allclose(s.double(), rs.double(), rtol=0.05, atol=1e-30), (s - rs).abs().max()
    top = float(ref.abs().max())
    assert abs(float(amax) - top) <= 0.02 * top, (float(amax), top)
    # Each group's largest value lands on +-448, the top of e4m3.
    mags = torch.nn.functional.pad(q.float().abs(), (0, nb * 128 - n)).view(m, nb, 128)
    assert torch.equal(mags.amax(dim=2), torch.full((m, nb), 448.0, device="cuda"))


@pytest.mark.parametrize("scaling, fast", MODES)
@pytest.mark.parametrize("m, n, k", SHAPES[:4])
def test_per_tensor_output(hopper, m, n, k, scaling, fast):
    a, b, sa, sb, ref = _data(m, n, k, scaling, seed=3 * m + n)
    top = float(ref.abs().max())
    scale = torch.tensor(2 * top / 448, device="cuda")   # headroom, as a past amax gives
    q, s, amax = _call(a, b, sa, sb, None, None, scale, fast)
    assert s is scale and q.dtype == E4M3
    assert abs(float(amax) - top) <= 0.02 * top
    exact = (ref / float(scale)).clamp(-448, 448).float().to(E4M3).double() * float(scale)
    floor = rel_error(exact, ref)
    got = rel_error(q.double() * float(scale), ref)
    assert got <= floor * 1.1 + fp8_tolerance(k, "fp32", fast), (got, floor)
    # A scale too small saturates to +-448 (no inf, no NaN).
    small = torch.tensor(top / 448 / 8, device="cuda")
    q, _, _ = _call(a, b, sa, sb, None, None, small, fast)
    qf = q.float()
    assert bool(torch.isfinite(qf).all()) and float(qf.abs().max()) == 448.0


def test_amax_is_each_calls_own(hopper):
    """amax is written whole by each call: after a call on large values, a call on small ones
    reports its own max (the kernel's per-CTA slots and counter are back at zero), on every
    path (per tensor and 1 x 128, split-K, a grid of one wave or more)."""
    import gemmgen.torch as gt
    for m, n, k, block in ((64, 2112, 7168, (1, 128)), (512, 768, 512, None),
                           (4096, 4096, 512, (1, 128))):
        a, b, sa, sb, ref = _data(m, n, k, "tensor", seed=m)
        scale = torch.tensor(float(ref.abs().max()) / 448, device="cuda") if block is None else None
        for factor in (64.0, 1.0, 1.0 / 64):
            _, _, amax = gt.scaled_mm_quantized(a, b, sa * factor, sb, block=block, scale=scale,
                                                use_fast_accum=True)
            top = float(ref.abs().max()) * factor
            assert abs(float(amax) - top) <= 0.02 * top, (m, n, k, factor, float(amax), top)


def test_feeds_the_next_blockwise_gemm_and_repeats(hopper):
    """(q, scales) are the next scaled_mm's blockwise a and scale_a; repeated calls (split-K
    counters back at zero) give the same bytes."""
    import gemmgen.torch as gt
    a, b, sa, sb, _ = _data(64, 2112, 7168, "block", seed=5)
    q, s, amax = gt.scaled_mm_quantized(a, b, sa, sb)
    for _ in range(3):
        q2, s2, amax2 = gt.scaled_mm_quantized(a, b, sa, sb)
        assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8))
        assert torch.equal(s, s2) and torch.equal(amax, amax2)
    gen = torch.Generator(device="cuda").manual_seed(6)
    w2, sw2 = gt.quantize(torch.randn(512, 2112, device="cuda", generator=gen), (128, 128))
    y = gt.scaled_mm(q, w2.t(), s, sw2.t())
    ref = gt.dequantize(q, s).double() @ gt.dequantize(w2, sw2, (128, 128)).double().t()
    assert rel_error(y, ref) <= fp8_tolerance(2112, "bf16", False)


def test_graph_capture_and_compile(hopper):
    import gemmgen.torch as gt
    a, b, sa, sb, _ = _data(256, 512, 1024, "tensor", seed=7)
    scale = torch.tensor(0.05, device="cuda")
    want = gt.scaled_mm_quantized(a, b, sa, sb)       # warm up: plans and builds
    want_t = gt.scaled_mm_quantized(a, b, sa, sb, block=None, scale=scale)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = gt.scaled_mm_quantized(a, b, sa, sb)
        got_t = gt.scaled_mm_quantized(a, b, sa, sb, block=None, scale=scale)
    g.replay()
    torch.cuda.synchronize()
    for x, y in zip((*got, *got_t), (*want, *want_t)):
        assert torch.equal(x.view(torch.uint8) if x.dtype == E4M3 else x,
                           y.view(torch.uint8) if y.dtype == E4M3 else y)
    fn = torch.compile(lambda a, b: gt.scaled_mm_quantized(a, b, sa, sb), fullgraph=True)
    q, s, amax = fn(a, b)
    assert torch.equal(q.view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(s, want[1]) and torch.equal(amax, want[2])


def test_bad_arguments_name_themselves(hopper):
    import gemmgen.torch as gt
    from gemmgen.runtime.operands import OperandError
    a, b, sa, sb, _ = _data(64, 256, 256, "tensor", seed=9)
    with pytest.raises(OperandError, match="scale is required"):
        gt.scaled_mm_quantized(a, b, sa, sb, block=None)
    with pytest.raises(OperandError, match="block must be"):
        gt.scaled_mm_quantized(a, b, sa, sb, block=(2, 64))
    with pytest.raises(OperandError, match="bias"):
        gt.scaled_mm_quantized(a, b, sa, sb, bias=torch.zeros(256, device="cuda"))
    with pytest.raises(ValueError, match="scale is for block='tensor'"):
        gt.scaled_mm_quantized(a, b, sa, sb, scale=torch.ones((), device="cuda"))
