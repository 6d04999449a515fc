"""On a Hopper GPU with PyTorch: gemmgen::swiglu (the dual GEMM) against float64 for fp16 and
bf16, its gate and up weights in place or packed, its gradients against PyTorch's,
torch.compile(fullgraph=True), CUDA-graph capture, and a patched transformers Llama MLP."""
import math

import pytest
from accuracy import rel_error

from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the dual GEMM runs on sm_90 (Hopper) only", allow_module_level=True)

import gemmgen.torch as gt  # noqa: E402
from gemmgen.torch.mlp import reference  # noqa: E402

NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _clear_recipes() -> None:
    if gt.LAUNCHER:
        torch.ops.gemmgen_launcher.clear_recipes()


@pytest.fixture(autouse=True)
def dual_everywhere(monkeypatch):
    """Every call runs the dual GEMM (these shapes are below the thresholds of uses_dual); the
    compiled launcher's recipes, planned under other thresholds, are dropped before and after."""
    import gemmgen.torch.mlp as mlp
    monkeypatch.setattr(mlp, "DUAL_MIN_M", 0)
    monkeypatch.setattr(mlp, "EAGER_MIN_FLOP", 0)
    _clear_recipes()
    yield
    _clear_recipes()


def _gemmgen_frames(fn) -> int:
    """Python frames of gemmgen's own modules that calling ``fn`` runs."""
    from pathlib import Path
    from frames import frames
    root = str(Path(gt.__file__).resolve().parents[1])
    return len(frames(fn, lambda path: path.startswith(root)))


def _dual_ran() -> bool:
    from gemmgen.runtime import tree_api
    return any(how == "dual" for _, how in tree_api._KERNELS.values())


def _tol(k: int, dtype) -> float:
    """tune.verify's bound for the two products plus tanh.approx's 2^-11 (relative) in SiLU."""
    return tolerance(k, NAMES[dtype], "fp32", NAMES[dtype]) + 2 * 2 ** -11


def _weights(n, k, dtype, fused: bool):
    """Gate and up weights one after the other in one buffer (read in place), or allocated up
    first, so the gate lies after it (packed into a workspace first)."""
    if fused:
        both = torch.randn(2 * n, k, device="cuda").to(dtype) * k ** -0.5
        return both[:n], both[n:]
    up = torch.randn(n, k, device="cuda").to(dtype) * k ** -0.5
    gate = torch.randn(n, k, device="cuda").to(dtype) * k ** -0.5
    return gate, up


@pytest.mark.parametrize("dtype", list(NAMES))
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("shape", [(1, 512, 256), (37, 1032, 512), (2, 500, 2048, 1024)])
def test_swiglu_matches_float64(dtype, fused, shape):
    *lead, n, k = shape
    x = torch.randn(*lead, k, device="cuda").to(dtype)
    gate, up = _weights(n, k, dtype, fused)
    torch.full((math.prod(lead), n), float("nan"), device="cuda", dtype=dtype)  # poison
    from gemmgen.runtime import tree_api
    tree_api._KERNELS.clear()  # built again from the disk cache: _dual_ran sees this call's
    out = gt.swiglu(x, gate, up)
    want = reference(x.double(), gate.double(), up.double())
    assert out.shape == (*lead, n) and out.dtype == dtype and _dual_ran()
    err, torch_err = rel_error(out, want), rel_error(reference(x, gate, up), want)
    assert err <= max(_tol(k, dtype), 2 * torch_err), (err, torch_err)


def _weight_pairs(n, k, dtype) -> dict:
    """Gate and up weights of one shape lying every way the op must tell apart: up right after
    the gate, up after the gate with a gap, up before the gate (three distances from the gate),
    and strided views (stacked into one pair, as right after, by the launcher)."""
    both = torch.randn(3 * n, k, device="cuda").to(dtype) * k ** -0.5
    wide = torch.randn(n, 2 * k, device="cuda").to(dtype) * k ** -0.5
    return {"fused": (both[:n], both[n:2 * n]), "gap": (both[:n], both[2 * n:]),
            "before": (both[2 * n:], both[:n]), "strided": (wide[:, :k], wide[:, k:])}


@pytest.mark.skipif(not gt.LAUNCHER, reason="the compiled launcher is not loaded")
def test_launcher_keys_swiglu_by_where_up_lies_and_repeats_without_python():
    """Through the compiled launcher: pairs of one shape whose up lies right after, after a gap
    or before the gate, and strided weights, called in turn with fresh inputs, each match
    float64 (a recipe reused for a pair lying otherwise would read the wrong up), one recipe
    per distance; a repeated call runs no gemmgen Python, on the dual GEMM and on PyTorch's
    formula for few rows."""
    import gemmgen.torch.mlp as mlp
    dtype, m, n, k = torch.bfloat16, 96, 384, 512
    pairs = _weight_pairs(n, k, dtype)
    for _ in range(2):
        for name, (gate, up) in pairs.items():
            x = torch.randn(m, k, device="cuda").to(dtype)
            out = torch.ops.gemmgen.swiglu(x, gate, up)
            want = reference(x.double(), gate.double(), up.double())
            err = rel_error(out, want)
            assert err <= max(_tol(k, dtype), 2 * rel_error(reference(x, gate, up), want)), (
                name, err)
    held = torch.ops.gemmgen_launcher.recipes_held()
    assert held == 3, held  # fused and strided (stacked) share the distance, so one recipe
    x = torch.randn(m, k, device="cuda").to(dtype)
    gate, up = pairs["fused"]
    assert _gemmgen_frames(lambda: torch.ops.gemmgen.swiglu(x, gate, up)) == 0
    mlp.DUAL_MIN_M = 1 << 20  # restored by the fixture: PyTorch's formula, run from C++
    small = torch.randn(3, k, device="cuda").to(dtype)
    torch.ops.gemmgen.swiglu(small, gate, up)
    assert _gemmgen_frames(lambda: torch.ops.gemmgen.swiglu(small, gate, up)) == 0
    assert torch.equal(torch.ops.gemmgen.swiglu(small, gate, up),
                       reference(small, gate, up))
    assert torch.ops.gemmgen_launcher.recipes_held() == held + 1


def test_swiglu_gradients_match_pytorch():
    dtype, m, n, k = torch.bfloat16, 200, 384, 256
    x = torch.randn(m, k, device="cuda").to(dtype).requires_grad_()
    gate, up = (w.detach().requires_grad_() for w in _weights(n, k, dtype, True))
    dy = torch.randn(m, n, device="cuda").to(dtype)
    got = torch.autograd.grad(gt.swiglu(x, gate, up), (x, gate, up), dy)
    x64, g64, u64 = (t.detach().double().requires_grad_() for t in (x, gate, up))
    want = torch.autograd.grad(reference(x64, g64, u64), (x64, g64, u64), dy.double())
    for name, a, b in zip(("dx", "dw_gate", "dw_up"), got, want):
        assert rel_error(a, b) <= 2e-2, (name, rel_error(a, b))


def test_swiglu_compiles_and_captures():
    dtype, m, n, k = torch.float16, 64, 512, 256
    x = torch.randn(m, k, device="cuda").to(dtype)
    gate, up = _weights(n, k, dtype, True)
    eager = gt.swiglu(x, gate, up)
    compiled = torch.compile(lambda a, g, u: gt.swiglu(a, g, u) * 2, fullgraph=True)
    assert torch.equal(compiled(x, gate, up), eager * 2)
    out = torch.empty_like(eager)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out.copy_(gt.swiglu(x, gate, up))  # warm-up outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out.copy_(gt.swiglu(x, gate, up))
    torch.cuda.synchronize()
    out.zero_()
    x.copy_(torch.randn(m, k, device="cuda").to(dtype))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, gt.swiglu(x, gate, up))


def test_patched_llama_mlp_matches_and_trains():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=688, hidden_act="silu")
    torch.manual_seed(0)
    mlp = LlamaMLP(cfg).to("cuda", torch.bfloat16)
    x = torch.randn(3, 50, 256, device="cuda").to(torch.bfloat16)
    want = mlp(x)
    summary = gt.patch(mlp)
    assert summary.swapped.get("") == "SwiGLU MLP", summary
    got = mlp(x)
    assert rel_error(got, want.double()) <= 2e-2
    got.float().square().mean().backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all())
               for p in mlp.parameters())
