"""Every kernel class keeps one call contract, ``kernel(A, B, C=None, *, alpha, beta, bias,
stream)``: checked here without a GPU, the FP8 kernels' launch replaced by its NumPy
equivalent (D = scale_a * scale_b * A @ B + bias), so what is tested is the mapping of alpha,
beta, K = 0 and batches onto it."""
import contextlib
import inspect

import numpy as np
import pytest

from gemmgen import PRESETS
from gemmgen.runtime import calls
from gemmgen.runtime.kernel import LAUNCHERS, DirectLaunch, Kernel
from gemmgen.runtime.operands import OperandError

ml_dtypes = pytest.importorskip("ml_dtypes")
CONTRACT = ["self", "A", "B", "C", "alpha", "beta", "bias", "stream"]


def test_every_family_takes_one_call_and_one_launch_contract():
    params = list(inspect.signature(Kernel.__call__).parameters)
    assert params[:len(CONTRACT)] == CONTRACT
    for method in ("launches", "launch_raw", "grid"):  # one launch contract: KernelArgs
        assert list(inspect.signature(getattr(Kernel, method)).parameters)[:2] == ["self", "args"]
    for launcher in (*LAUNCHERS.values(), DirectLaunch):
        for method in ("launches", "grid"):
            assert list(inspect.signature(getattr(launcher, method)).parameters)[:2] == \
                ["self", "args"], (launcher, method)


def test_each_family_takes_its_call_through_the_one_kernel_call(monkeypatch):
    """``kernel(A, B, C, ...)`` reaches the family's call with every keyword: FP8 scales to
    ``call_fp8``, offs and counts to ``call_grouped``, the rest to ``launch``."""
    from gemmgen.runtime import build as build_mod
    seen = []
    for family in ("fp8", "grouped"):
        monkeypatch.setitem(build_mod.CALLS, family, lambda k, *a, **kw: seen.append((k, a, kw)))
    monkeypatch.setattr(build_mod.driver, "current_device", lambda: 0)
    monkeypatch.setattr(build_mod.driver, "device_attribute", lambda dev, name: 1 << 20)
    monkeypatch.setattr(Kernel, "function", lambda self, dev=None, suffix="": None)
    for preset, extra in (("fp8_tensor_fast", {"scale_a": 2.0}), ("grouped_bf16", {"offs": 7})):
        cfg = PRESETS[preset].config
        monkeypatch.setitem(LAUNCHERS, cfg.family, DirectLaunch)  # no cubin to read
        kernel = build_mod.from_cubin(cfg, "sm_90a", b"")
        kernel(1, 2, 3, beta=0.5, **extra)
        assert seen[-1] == (kernel, (1, 2, 3), {"alpha": 1.0, "beta": 0.5, "bias": None,
                                                "stream": None, **extra})


def test_a_grouped_kernel_refuses_alpha_beta_and_bias_by_name():
    from gemmgen.runtime.calls import call_grouped
    for name, value in (("alpha", 2.0), ("beta", 1.0), ("bias", object()), ("bias", np.ones(3))):
        with pytest.raises(OperandError, match=f"^{name} = "):
            call_grouped(None, None, None, **{name: value})


class FakeFp8:
    """An fp8 kernel whose launch is NumPy: what the FP8 kernels compute, no more."""

    def __init__(self, epilogue="none"):
        self.config = PRESETS["fp8_tensor_fast"].config.replace(epilogue=epilogue)
        self.calls = 0


@pytest.fixture
def fake_launch(monkeypatch):
    def launch(kernel, A, B, scale_a, scale_b, D, bias=None, stream=None):
        kernel.calls += 1
        assert np.isfinite(A.astype(np.float32)).all() and np.isfinite(B.astype(np.float32)).all()
        value = float(scale_a) * float(scale_b) * (A.astype(np.float64) @ B.astype(np.float64))
        if bias is not None:
            value = value + bias.astype(np.float64)
        if kernel.config.epilogue.endswith("relu"):
            value = np.maximum(value, 0)
        out = D if D is not None else np.empty(value.shape, ml_dtypes.bfloat16)
        out[...] = value.astype(out.dtype)
        return out
    monkeypatch.setattr(calls, "launch_fp8", launch)


def operands(rng, m=7, n=5, k=9, batch=None):
    lead = (batch,) if batch else ()
    A = rng.standard_normal((*lead, m, k)).astype(ml_dtypes.float8_e4m3fn)
    B = rng.standard_normal((*lead, k, n)).astype(ml_dtypes.float8_e4m3fn)
    C = rng.standard_normal((*lead, m, n)).astype(ml_dtypes.bfloat16)
    return A, B, C


def ref(A, B, C, alpha, beta, sa=1.0, sb=1.0):
    out = alpha * sa * sb * np.matmul(A.astype(np.float64), B.astype(np.float64))
    return out + beta * C.astype(np.float64) if beta else out


def close(got, want):
    got = got.astype(np.float64)
    return np.linalg.norm(got - want) <= 2e-2 * max(np.linalg.norm(want), 1e-30)


def test_alpha_multiplies_the_scale_and_beta_adds_the_old_c(fake_launch):
    rng = np.random.default_rng(0)
    A, B, C = operands(rng)
    C0 = C.copy()
    out = calls.call_fp8(FakeFp8(), A, B, C, alpha=1.5, beta=-0.75, scale_a=2.0, scale_b=0.5)
    assert out is C and close(C, ref(A, B, C0, 1.5, -0.75, 2.0, 0.5))


def test_alpha_zero_and_k_zero_read_neither_a_nor_b(fake_launch):
    rng = np.random.default_rng(1)
    A, B, C = operands(rng)
    A[0, 0] = B[0, 0] = np.nan
    kernel = FakeFp8()
    C0 = C.copy()
    out = calls.call_fp8(kernel, A, B, C, alpha=0.0, beta=2.0)
    assert kernel.calls == 0 and close(out, 2.0 * C0.astype(np.float64))
    empty_a, empty_b = A[:, :0], B[:0]
    C[...] = np.nan  # beta == 0: C is not read
    out = calls.call_fp8(kernel, empty_a, empty_b, C, alpha=1.0, beta=0.0)
    assert kernel.calls == 0 and not out.astype(np.float32).any()


def test_batches_run_one_matrix_at_a_time(fake_launch):
    rng = np.random.default_rng(2)
    A, B, C = operands(rng, batch=3)
    kernel = FakeFp8()
    out = calls.call_fp8(kernel, A, B[0], None, alpha=0.5)
    assert kernel.calls == 3 and out.shape == (3, 7, 5)
    assert close(out, ref(A, B[0], None, 0.5, 0.0))


def test_beta_with_an_activation_is_refused_by_name(fake_launch):
    rng = np.random.default_rng(3)
    A, B, C = operands(rng)
    with pytest.raises(OperandError, match="beta"):
        calls.call_fp8(FakeFp8("relu"), A, B, C, beta=1.0)
    with pytest.raises(OperandError, match="C is required"):
        calls.call_fp8(FakeFp8(), A, B, None, beta=1.0)


def test_numpy_tree_operands_are_packed_in_the_layout_the_kernel_reads():
    from gemmgen.runtime.launch import packed_tree_operands
    cfg = PRESETS["wgmma_tma_store"].config.replace(layout="rrc", epilogue="acc + R",
                                                    check=False)
    R = np.arange(12, dtype=np.float16).reshape(3, 4)
    got = packed_tree_operands(cfg, {"R": R, "col_scale": np.ones(4, np.float32)[::1]})
    assert got["R"].flags.f_contiguous and np.array_equal(got["R"], R)
    assert got["col_scale"].flags.c_contiguous


def test_device_operands_prepare_and_add_c_on_the_kernels_stream(monkeypatch):
    """The copy of C (beta != 0), the alpha-scaled scale_a and the second pass are made on
    the stream the kernel runs on, not on the library's current stream."""
    torch = pytest.importorskip("torch")
    state, seen = {"on": None}, []

    @contextlib.contextmanager
    def on_stream(s):
        state["on"] = s
        yield
        state["on"] = None
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda handle, device=None: handle)
    real_f32 = calls._f32

    def f32(x, copy=False):
        seen.append(("copy" if copy else "read", state["on"]))
        return real_f32(x, copy)
    monkeypatch.setattr(calls, "_f32", f32)

    def launch(kernel, A, B, scale_a, scale_b, D, bias=None, stream=None):
        seen.append(("launch", state["on"], float(scale_a)))
        D.copy_((A.float() @ B.float()) * scale_a)
        return D
    monkeypatch.setattr(calls, "launch_fp8", launch)
    A = torch.randn(4, 8).to(torch.float8_e4m3fn)
    B = torch.randn(8, 3).to(torch.float8_e4m3fn)
    C = torch.randn(4, 3)
    C0 = C.clone()
    calls.call_fp8(FakeFp8(), A, B, C, alpha=2.0, beta=0.5, stream=0x77,
                      scale_a=torch.tensor([1.5]))
    assert seen[0] == ("copy", 0x77) and seen[1] == ("launch", None, 3.0)
    assert all(on == 0x77 for what, on, *_ in seen[2:]), seen
    want = 3.0 * (A.float() @ B.float()) + 0.5 * C0
    assert torch.allclose(C, want, rtol=1e-5, atol=1e-5)
