"""On a Hopper GPU with PyTorch: the Hopper kernels (wgmma, fp8, grouped) are launched with
programmatic dependent launch, so their set-up overlaps the end of the stream's previous kernel
and they wait for it (griddepcontrol.wait) before touching global memory. A chain of calls,
each reading the previous one's output (with FP8 a quantize between them), run back to back,
eager and replayed as a CUDA graph, must give bit for bit the outputs of the same calls with
the device synchronized after each: a read of an input before its producer finished, or a
write over one still being read, would change them. The chains' last outputs are also checked
against float64."""
import pytest

from gemmgen.tune.fp8_verify import fp8_tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device", allow_module_level=True)

STEPS = 6
K = 2048


@pytest.fixture(scope="module")
def hopper():
    from gemmgen.runtime.device import device_cc
    if device_cc() != 90:
        pytest.skip("the wgmma, fp8 and grouped families run on sm_90 (Hopper) only")


def _run(step, x, mode):
    """``STEPS`` calls of ``step``, each on the last one's output: "sync" (the device
    synchronized after each call), "eager" (back to back) or "graph" (captured, then the
    outputs poisoned with NaN and the graph replayed)."""
    def chain():
        outs = [x]
        for _ in range(STEPS):
            outs.append(step(outs[-1]))
            if mode == "sync":
                torch.cuda.synchronize()
        return outs[1:]
    if mode != "graph":
        outs = chain()
        torch.cuda.synchronize()
        return outs
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()  # plans and builds outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            outs = chain()
    for t in outs:
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return outs


def _same_chain(step, x):
    want = _run(step, x, "sync")
    for mode in ("eager", "graph"):
        got = _run(step, x, mode)
        for i, (a, b) in enumerate(zip(got, want)):
            assert torch.equal(a, b), f"{mode}: call {i + 1} of the chain differs"
    return want


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def _weights(shape, gen):
    return (torch.randn(*shape, device="cuda", generator=gen) * K ** -0.5).bfloat16()


@pytest.mark.parametrize("via", ["launcher", "python"])
@pytest.mark.parametrize("m", [64, 2048])  # swapped with split-K; 128 x 256 tiles
def test_chained_linears(hopper, m, via):
    """Through gemmgen.torch.linear (the compiled launcher) and gemmgen.gemm on the current
    stream (gemmgen.runtime.driver's launches)."""
    import gemmgen
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(m)
    w = _weights((K, K), gen)
    x = torch.randn(m, K, device="cuda", generator=gen).bfloat16()
    if via == "launcher":
        step = lambda t: gt.linear(t, w)  # noqa: E731
    else:
        def step(t):
            out = torch.empty(t.shape[0], K, device="cuda", dtype=torch.bfloat16)
            gemmgen.gemm(t, w.t(), out, stream=torch.cuda.current_stream().cuda_stream)
            return out
    outs = _same_chain(step, x)
    ref = x.double()
    for _ in range(STEPS):
        ref = (ref @ w.double().t()).bfloat16().double()  # rounded as each call's output is
    assert _rel(outs[-1], ref) < 2e-2


def test_chained_fp8_blockwise_with_quantize_between(hopper):
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(8)
    w = _weights((K, K), gen)
    q, sw = gt.quantize(w, (128, 128))
    x = torch.randn(256, K, device="cuda", generator=gen).bfloat16()

    def step(t):
        a, sa = gt.quantize(t, (1, 128))
        return gt.scaled_mm(a, q.t(), sa, sw.t(), out_dtype=torch.bfloat16)
    outs = _same_chain(step, x)
    # each call against float64 of its own quantized input (FP8 rounding compounds along a
    # chain computed apart, so the reference follows the kernel's chain)
    wd = gt.dequantize(q, sw, (128, 128)).double()
    for t, y in zip([x] + outs[:-1], outs):
        a, sa = gt.quantize(t, (1, 128))
        ref = gt.dequantize(a, sa, (1, 128)).double() @ wd.t()
        assert _rel(y, ref) <= fp8_tolerance(K, "bf16", False)


def test_chained_grouped(hopper):
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(9)
    counts = [384, 0, 700, 1024]
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    w = _weights((len(counts), K, K), gen)
    x = torch.randn(sum(counts), K, device="cuda", generator=gen).bfloat16()
    outs = _same_chain(lambda t: gt.grouped_mm(t, w.transpose(1, 2), offs), x)
    ref, start = x.double(), 0
    for _ in range(STEPS):
        parts, start = [], 0
        for g, c in enumerate(counts):
            parts.append(ref[start:start + c] @ w[g].double().t())
            start += c
        ref = torch.cat(parts).bfloat16().double()
    assert _rel(outs[-1], ref) < 2e-2
