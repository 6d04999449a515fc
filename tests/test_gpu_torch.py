"""On a GPU with PyTorch: the op gemmgen::gemm against a float64 reference for fp16/bf16/fp32 in
every layout (transposed views), autograd against PyTorch's, torch.compile(fullgraph=True),
CUDA-graph capture and replay, launches on a side stream, and the patched Linear/Conv1D."""

import pytest
from accuracy import rel_error

from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device", allow_module_level=True)

import gemmgen.torch as gt  # noqa: E402

NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
DTYPES = list(NAMES)
SHAPES = [(256, 320, 192), (127, 129, 131), (64, 64, 4096)]  # M, N, K


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Every kernel these tests reach, compiled at once by parallel nvcc processes (the test
    session's cache starts empty; one by one they would take minutes)."""
    layouts, epilogues = [], []
    for dt in NAMES.values():
        layouts += [(dt, 256, 320, 192, lay + "r", "none") for lay in ("rr", "rc", "cr", "cc")]
        epilogues += [(dt, 192, 256, 320, "rcr", epi) for epi in
                      ("bias", "relu", "gelu", "bias_relu", "bias_gelu")]
    done = [gt.precompile(layouts), gt.precompile(epilogues, fallbacks=False)]
    errors = done[0]["errors"] + done[1]["errors"]
    assert not errors, errors
    return done


def _operand(rows, cols, layout, dtype):
    """A rows x cols matrix of normal values, row-major or as a column-major transposed view."""
    if layout == "r":
        return torch.randn(rows, cols, device="cuda").to(dtype)
    return torch.randn(cols, rows, device="cuda").to(dtype).t()


def _poison(m, n, dtype):
    """Fill then free a block of the output's size: the caching allocator hands the same memory
    to the op's output, so a kernel that skips an element leaves NaN there."""
    x = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    del x


def _ref(a, b, bias, epilogue):
    return gt.reference(a.double(), b.double(), None if bias is None else bias.double(), epilogue)


def _tol(dtype, k, epilogue="none"):
    name = NAMES[dtype]
    return tolerance(k, name, "fp32", name) * (2 if epilogue.endswith(("relu", "gelu")) else 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("lay", ["rr", "rc", "cr", "cc"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_op_matches_float64_in_every_layout(dtype, lay, shape):
    m, n, k = shape
    a, b = _operand(m, k, lay[0], dtype), _operand(k, n, lay[1], dtype)
    _poison(m, n, dtype)
    out = torch.ops.gemmgen.gemm(a, b)
    torch.cuda.synchronize()
    assert out.shape == (m, n) and out.dtype == dtype and out.stride() == (n, 1)
    err = rel_error(out, _ref(a, b, None, "none"))
    assert err <= _tol(dtype, k), (err, _tol(dtype, k))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("epilogue", ["bias", "relu", "gelu", "bias_relu", "bias_gelu"])
def test_fused_epilogues(dtype, epilogue):
    m, n, k = 192, 256, 320
    a, b = _operand(m, k, "r", dtype), _operand(k, n, "c", dtype)
    bias = torch.randn(n, device="cuda").to(dtype) if epilogue.startswith("bias") else None
    _poison(m, n, dtype)
    out = torch.ops.gemmgen.gemm(a, b, bias, epilogue)
    err = rel_error(out, _ref(a, b, bias, epilogue))
    assert err <= _tol(dtype, k, epilogue), err


def test_gradcheck_fp32_simt_kernels():
    """torch.autograd.gradcheck through the fp32 (SIMT) kernels: finite differences in float32
    with loose tolerances (gemmgen has no float64 kernel; tests/test_torch.py checks the same
    formulas in float64 on PyTorch's path)."""
    torch.manual_seed(0)
    a = _operand(12, 20, "c", torch.float32).requires_grad_()
    b = _operand(20, 16, "r", torch.float32).requires_grad_()
    bias = torch.randn(16, device="cuda", requires_grad=True)
    for epi in ("none", "bias", "bias_gelu"):
        def fn(a_, b_, c_, epi=epi):
            return torch.ops.gemmgen.gemm(a_, b_, c_ if epi.startswith("bias") else None, epi)
        assert torch.autograd.gradcheck(fn, (a, b, bias), eps=1e-2, atol=2e-2, rtol=2e-2,
                                        nondet_tol=1e-5), epi


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("epilogue", ["bias", "bias_relu", "bias_gelu"])
def test_gradients_match_pytorch(dtype, epilogue):
    """dA, dB, dbias through gemmgen kernels against float64 autograd of the reference."""
    torch.manual_seed(1)
    m, n, k = 256, 192, 320
    a = _operand(m, k, "r", dtype).requires_grad_()
    w = torch.randn(n, k, device="cuda").to(dtype).requires_grad_()  # nn.Linear's weight
    bias = torch.randn(n, device="cuda").to(dtype).requires_grad_()
    g = torch.randn(m, n, device="cuda").to(dtype)
    got = torch.autograd.grad(torch.ops.gemmgen.gemm(a, w.t(), bias, epilogue), (a, w, bias), g)
    a64, w64, b64 = (x.detach().double().requires_grad_() for x in (a, w, bias))
    want = torch.autograd.grad(gt.reference(a64, w64.t(), b64, epilogue), (a64, w64, b64),
                               g.double())
    for name, x, y, kk in zip("a w bias".split(), got, want, (n, m, m)):
        assert x.dtype == dtype
        err = rel_error(x, y)
        assert err <= 4 * _tol(dtype, kk, epilogue), (name, err)


def test_torch_compile_fullgraph_matches_eager():
    torch.manual_seed(2)
    model = torch.nn.Sequential(gt.Linear(256, 512, activation="gelu"), gt.Linear(512, 256))
    model = model.cuda().half()
    x = torch.randn(8, 64, 256, device="cuda", dtype=torch.half, requires_grad=True)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, eager, rtol=1e-2, atol=1e-2)
    out.float().square().mean().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


def test_cuda_graph_capture_and_replay():
    torch.manual_seed(3)
    a = torch.randn(512, 384, device="cuda", dtype=torch.half)
    w = torch.randn(256, 384, device="cuda", dtype=torch.half)
    bias = torch.randn(256, device="cuda", dtype=torch.half)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, load, plan) outside capture
        for _ in range(2):
            torch.ops.gemmgen.gemm(a, w.t(), bias, "bias_gelu")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = torch.ops.gemmgen.gemm(a, w.t(), bias, "bias_gelu")
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        err = rel_error(static_out, _ref(a, w.t(), bias, "bias_gelu"))
        assert err <= _tol(torch.half, 384, "bias_gelu"), err


def test_launches_on_the_current_side_stream():
    """On a non-blocking side stream, a long GPU sleep precedes the write of A: a kernel on any
    other stream would read the old A."""
    a = torch.zeros(256, 512, device="cuda", dtype=torch.half)
    b = torch.randn(512, 384, device="cuda", dtype=torch.half)
    new_a = torch.randn(256, 512, device="cuda", dtype=torch.half)
    torch.ops.gemmgen.gemm(a, b)  # warm up
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        a.copy_(new_a)
        out = torch.ops.gemmgen.gemm(a, b)
    side.synchronize()
    err = rel_error(out, _ref(new_a, b, None, "none"))
    assert err <= _tol(torch.half, 512), err


def test_patched_mlp_matches_pytorch_in_autocast():
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(3072, 768)).cuda()
    x = torch.randn(4, 128, 768, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = model(x)
        summary = gt.patch(model)
        got = model(x)
    assert summary.counts() == {"nn.Linear": 2}
    assert got.dtype == want.dtype == torch.bfloat16
    err = rel_error(got, want.double())
    assert err <= 2e-2, err


def test_patched_conv1d_matches():
    pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(5)
    layer = Conv1D(2304, 768).cuda().half()
    x = torch.randn(2, 64, 768, device="cuda", dtype=torch.half)
    want = layer(x)
    assert gt.patch(layer).counts() == {"Conv1D": 1}
    err = rel_error(layer(x), want.double())
    assert err <= 1e-2, err
