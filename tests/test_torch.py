"""gemmgen.torch without a GPU: the op's registration and schema, its fake implementation (shapes,
dtypes, strides), the autograd formulas (through PyTorch's path for CPU tensors: these check
the backward's algebra and layouts, not the kernels, which tests/test_gpu_torch.py does),
patching, and that ``import gemmgen`` does not import torch."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make install adds it)")

from torch.library import opcheck  # noqa: E402

import gemmgen.torch as gt  # noqa: E402
from gemmgen.runtime.operands import OperandError  # noqa: E402

EPILOGUE_CASES = [("none", False), ("bias", True), ("relu", False), ("gelu", False),
                  ("bias_relu", True), ("bias_gelu", True)]


def test_importing_gemmgen_does_not_import_torch():
    code = ("import sys, gemmgen, gemmgen.runtime.api, gemmgen.runtime.launch, gemmgen.cli; "
            "assert 'torch' not in sys.modules, 'gemmgen imported torch'; print('clean')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr


def test_op_is_registered_with_its_schema():
    op = torch.ops.gemmgen.gemm.default
    schema = str(op._schema)
    assert schema.startswith("gemmgen::gemm(Tensor a, Tensor b, Tensor? bias=None, "
                             "str epilogue=\"none\") -> Tensor"), schema


def _operands(dtype, layout_a="r", layout_b="r", m=5, k=7, n=6, bias=False, grad=False):
    a = torch.randn(m, k, dtype=dtype) if layout_a == "r" else torch.randn(k, m, dtype=dtype).t()
    b = torch.randn(k, n, dtype=dtype) if layout_b == "r" else torch.randn(n, k, dtype=dtype).t()
    c = torch.randn(n, dtype=dtype) if bias else None
    if grad:
        for x in (a, b, c):
            if x is not None:
                x.requires_grad_()
    return a, b, c


@pytest.mark.parametrize("epilogue,has_bias", EPILOGUE_CASES)
def test_opcheck_schema_fake_autograd_registration(epilogue, has_bias):
    """torch.library.opcheck: schema, fake tensor vs real (shape, dtype, strides), autograd
    registration and AOT dispatch, on CPU tensors (PyTorch's path of the op)."""
    a, b, bias = _operands(torch.float32, "r", "c", bias=has_bias, grad=True)
    result = opcheck(torch.ops.gemmgen.gemm.default, (a, b, bias, epilogue))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("activation,has_bias", [("none", False), ("none", True),
                                                 ("relu", True), ("gelu", False)])
def test_linear_op_opcheck_and_matches_f_linear(activation, has_bias):
    """gemmgen::linear: F.linear's contract (x (..., K), weight (N, K)) with the activation
    fused; opcheck, values and gradients against PyTorch's, on CPU tensors."""
    x = torch.randn(2, 5, 12, requires_grad=True)
    w = torch.randn(7, 12, requires_grad=True)
    bias = torch.randn(7, requires_grad=True) if has_bias else None
    result = opcheck(torch.ops.gemmgen.linear.default, (x, w, bias, activation))
    assert all(v == "SUCCESS" for v in result.values()), result
    z = torch.nn.functional.linear(x, w, bias)
    ref = {"none": z, "relu": torch.relu(z),
           "gelu": torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    out = gt.linear(x, w, bias, None if activation == "none" else activation)
    assert out.shape == (2, 5, 7) and torch.allclose(out, ref, atol=1e-5)
    grads = torch.autograd.grad(out.sum(), [t for t in (x, w, bias) if t is not None])
    want = torch.autograd.grad(ref.sum(), [t for t in (x, w, bias) if t is not None])
    assert all(torch.allclose(g, h, atol=1e-4) for g, h in zip(grads, want))
    with pytest.raises(OperandError, match="activation: unknown 'tanh'"):
        torch.ops.gemmgen.linear(x, w, bias, "tanh")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("lay", ["rr", "rc", "cr", "cc"])
def test_fake_impl_shape_dtype_strides(dtype, lay):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a, b, _ = _operands(dtype, lay[0], lay[1], m=33, k=17, n=9)
        out = torch.ops.gemmgen.gemm(a, b)
    assert tuple(out.shape) == (33, 9) and out.dtype == dtype and out.stride() == (9, 1)


def test_fake_impl_checks_like_the_real_one():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a, b = torch.empty(4, 5), torch.empty(6, 3)
        with pytest.raises(OperandError, match="a's columns must equal b's rows"):
            torch.ops.gemmgen.gemm(a, b)


@pytest.mark.parametrize("epilogue,has_bias", EPILOGUE_CASES)
def test_gradcheck_float64_through_transposed_views(epilogue, has_bias):
    """The backward's formulas (dA = dC'·Bᵀ, dB = Aᵀ·dC' on views, dbias, the activation's
    derivative) against finite differences in float64."""
    torch.manual_seed(1)
    a, b, bias = _operands(torch.float64, "c", "r", bias=has_bias, grad=True)
    inputs = (a, b, bias) if has_bias else (a, b)

    def fn(*xs):
        return torch.ops.gemmgen.gemm(xs[0], xs[1], xs[2] if has_bias else None, epilogue)
    assert torch.autograd.gradcheck(fn, inputs)


def test_gradients_match_pytorch_autograd():
    torch.manual_seed(2)
    a, b, bias = _operands(torch.float32, "r", "c", m=9, k=11, n=13, bias=True, grad=True)
    out = gt.gemm(a, b, bias, "bias_gelu")
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (a, b, bias), g)
    want = torch.autograd.grad(gt.reference(a, b, bias, "bias_gelu"), (a, b, bias), g)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("args,match", [
    ((torch.empty(3), torch.empty(3, 2), None, "none"), "a must be a 2-D matrix"),
    ((torch.empty(3, 4), torch.empty(5, 2), None, "none"), "a's columns must equal b's rows"),
    ((torch.empty(3, 4), torch.empty(4, 2, dtype=torch.float64), None, "none"), "must match"),
    ((torch.empty(3, 4), torch.empty(4, 2), None, "bias"), "bias is required"),
    ((torch.empty(3, 4), torch.empty(4, 2), torch.empty(2), "relu"), "bias given"),
    ((torch.empty(3, 4), torch.empty(4, 2), torch.empty(3), "bias"), "N = 2 values"),
    ((torch.empty(3, 4), torch.empty(4, 2), None, "swish"), "unknown 'swish'"),
])
def test_bad_arguments_name_the_argument(args, match):
    with pytest.raises(OperandError, match=match):
        torch.ops.gemmgen.gemm(*args)


def test_linear_is_a_drop_in_with_fused_activation():
    torch.manual_seed(3)
    ref = torch.nn.Linear(8, 5)
    lin = gt.Linear(8, 5, activation="relu")
    lin.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(lin(x), torch.relu(ref(x)))
    assert set(lin.state_dict()) == {"weight", "bias"} and isinstance(lin, torch.nn.Linear)
    with pytest.raises(ValueError, match="activation"):
        gt.Linear(2, 2, activation="tanh")


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(6, 12)
        self.down = torch.nn.Linear(12, 6, bias=False)
        self.mha = torch.nn.MultiheadAttention(6, 2)  # its out_proj subclasses nn.Linear

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_patch_swaps_linear_layers_keeps_parameters_and_unpatches():
    torch.manual_seed(4)
    model = torch.nn.Sequential(_Block(), torch.nn.Linear(6, 3))
    params = [id(p) for p in model.parameters()]
    x = torch.randn(4, 6)
    want = model(x)
    summary = gt.patch(model, exclude=("1",))
    assert summary.swapped == {"0.up": "nn.Linear", "0.down": "nn.Linear"}
    assert summary.skipped["1"] == "excluded"
    assert "subclasses nn.Linear" in summary.skipped["0.mha.out_proj"]
    assert type(model[0].up) is gt.Linear and type(model[1]) is torch.nn.Linear
    assert [id(p) for p in model.parameters()] == params
    assert "2 nn.Linear" in str(summary)
    torch.testing.assert_close(model(x), want)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(got, want)
    assert gt.unpatch(model) == 2 and type(model[0].up) is torch.nn.Linear


def test_patch_swaps_transformers_conv1d():
    pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(5)
    model = torch.nn.Sequential(Conv1D(7, 4), torch.nn.Linear(7, 2))
    x = torch.randn(3, 4)
    want = model(x)
    summary = gt.patch(model)
    assert summary.counts() == {"Conv1D": 1, "nn.Linear": 1}
    assert isinstance(model[0], Conv1D) and type(model[0]) is not Conv1D
    torch.testing.assert_close(model(x), want)


def test_autocast_casts_mixed_operands_like_pytorch_matmul():
    a, b, bias = _operands(torch.float32, bias=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, want = gt.gemm(a.bfloat16(), b, bias), torch.addmm(bias, a.bfloat16(), b)
    assert out.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(out, want)
    with pytest.raises(OperandError, match="must match"):  # no autocast: no silent cast
        gt.gemm(a.bfloat16(), b)


def test_linear_problems_name_the_three_gemms_of_a_step():
    fwd, da, db = gt.linear_problems(4096, 768, 3072, "fp16", weight="nk")
    assert fwd == ("fp16", 4096, 3072, 768, "rcr", "bias")   # x @ W^T, W read column-major
    assert da == ("fp16", 4096, 768, 3072, "rrr", "none")    # dC @ W
    assert db == ("fp16", 768, 3072, 4096, "crr", "none")    # x^T @ dC
    assert gt.linear_problems(8, 2, 4, "bf16", weight="kn")[1][4] == "rcr"  # dC @ W^T (Conv1D)


def test_live_plans_are_bounded_like_the_launchers_recipe_table(monkeypatch):
    """The plans kept alive for the compiled launcher's recipes are bounded by the table's own
    limit (one constant, compiled into launcher.cpp), and dropped together with the table."""
    import re

    from gemmgen.torch import launcher, ops
    source = launcher.SOURCE.read_text()
    assert "kLimit = GEMMGEN_RECIPE_LIMIT" in source
    assert f"-DGEMMGEN_RECIPE_LIMIT={launcher.RECIPE_LIMIT}" in launcher.command("c++", "x.so")
    assert re.search(rf"#define GEMMGEN_RECIPE_LIMIT {launcher.RECIPE_LIMIT}\b", source)
    cleared = []
    monkeypatch.setattr(launcher, "_clear_table", lambda: cleared.append(len(launcher._LIVE)))
    monkeypatch.setattr(launcher, "_LIVE", [])
    monkeypatch.setattr(launcher, "RECIPE_LIMIT", 8)

    class Plan:
        swap = False

        class recipe:  # noqa: N801 - stands for a Recipe
            @staticmethod
            def to_bytes(order=(0, 1, 2, 3)):
                return b"\x01\x00\x00\x00\x00\x00\x00\x00"
    monkeypatch.setattr(ops, "plan_for", lambda *args: Plan())
    monkeypatch.setattr(ops, "kernel_takes", lambda *args: True)
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    for _ in range(20):
        ops._plan(a, b, None, "none", torch.empty(2, 4))
        assert len(launcher._LIVE) <= 8
    assert cleared == [8, 8], "the table is cleared with the plans, each time the limit is hit"


# ---- gemmgen::swiglu and the patched SwiGLU MLP (PyTorch's path on the CPU) -------------------

def _mlp_class(name="LlamaMLP", module="transformers.models.llama.modeling_llama"):
    """A class shaped and named as transformers' Llama MLP."""
    def __init__(self, k=16, n=24, bias=False):
        torch.nn.Module.__init__(self)
        self.gate_proj = torch.nn.Linear(k, n, bias=bias, dtype=torch.float64)
        self.up_proj = torch.nn.Linear(k, n, bias=bias, dtype=torch.float64)
        self.down_proj = torch.nn.Linear(n, k, bias=False, dtype=torch.float64)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
    return type(name, (torch.nn.Module,), {"__init__": __init__, "forward": forward,
                                           "__module__": module})


def test_swiglu_schema_fake_and_gradients(monkeypatch):
    from gemmgen.torch import mlp
    monkeypatch.setattr(mlp, "DUAL_MIN_M", 0)  # the op (and its backward) at any number of rows
    op = torch.ops.gemmgen.swiglu.default
    assert str(op._schema) == "gemmgen::swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor"
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    wg, wu = (torch.randn(5, 8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    want = torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())
    assert torch.allclose(gt.swiglu(x, wg, wu), want)
    assert torch.autograd.gradcheck(gt.swiglu, (x, wg, wu))
    opcheck(op, (x.detach().float(), wg.detach().float(), wu.detach().float()))
    with torch.device("meta"):
        y = gt.swiglu(torch.empty(7, 8), torch.empty(5, 8), torch.empty(5, 8))
    assert y.shape == (7, 5)


@pytest.mark.parametrize("bad, word", [
    (lambda x, w: (x, w, w[:, :4]), "w_gate is"), (lambda x, w: (x, w.t(), w.t()), "last"),
    (lambda x, w: (x, w[0], w[0]), "w_gate must"), (lambda x, w: (x, w.half(), w), "dtype")])
def test_swiglu_errors_name_the_argument(bad, word):
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    with pytest.raises(OperandError, match=word):
        gt.swiglu(*bad(x, w))


def test_patch_fuses_llama_style_mlps_and_keeps_parameters():
    mlp = _mlp_class()()
    x = torch.randn(3, 16, dtype=torch.float64)
    want = mlp(x)
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    summary = gt.patch(mlp)
    assert summary.swapped[""] == "SwiGLU MLP" and summary.counts()["nn.Linear"] == 3
    assert mlp.gate_proj.weight is gate and mlp.up_proj.weight is up  # optimizers stay valid
    assert up.data_ptr() == gate.data_ptr() + gate.numel() * gate.element_size()  # in place
    assert torch.allclose(mlp(x), want)
    assert type(mlp).forward is not _mlp_class().forward
    assert gt.unpatch(mlp) == 4 and type(mlp).__name__ == "LlamaMLP"
    assert torch.allclose(mlp(x), want)


def test_patch_leaves_mlps_it_cannot_fuse_and_says_why():
    own = _mlp_class("MyMLP", __name__)
    with_bias = _mlp_class()(bias=True)
    hooked = _mlp_class()()
    hooked.up_proj.register_forward_hook(lambda *a: None)
    gelu = _mlp_class()()
    gelu.act_fn = torch.nn.GELU()
    for mod, why in ((own(), "not known"), (with_bias, "bias"), (hooked, "hooks"),
                     (gelu, "SiLU")):
        summary = gt.patch(mod)
        assert why in summary.skipped[""] and "" not in summary.swapped, summary
    mod = own()
    assert gt.patch(mod, swiglu_mlp=(own,)).swapped[""] == "SwiGLU MLP"
    assert gt.patch(own(), swiglu_mlp=False).skipped == {}


def test_patch_leaves_what_runs_another_forward_and_what_is_excluded():
    """A forward replaced on the instance (accelerate's hooks set ``forward`` and ``_hf_hook``)
    wins over the class, so swapping the class would change nothing: such modules are skipped.
    An MLP one of whose projections is excluded is not fused (its projection stays as it was)."""
    x = torch.randn(3, 16, dtype=torch.float64)
    hooked = _mlp_class()()
    hooked.forward = lambda x: x
    summary = gt.patch(hooked)
    assert "replaced" in summary.skipped[""] and summary.counts() == {"nn.Linear": 3}
    accel = _mlp_class()()
    accel.up_proj._hf_hook = object()
    summary = gt.patch(accel)
    assert "projection's forward" in summary.skipped[""]
    assert "replaced" in summary.skipped["up_proj"]
    assert type(accel.up_proj) is torch.nn.Linear and type(accel.gate_proj) is gt.Linear
    outer = torch.nn.Sequential(_mlp_class()())
    want = outer(x)
    summary = gt.patch(outer, exclude=("0.down_proj",))
    assert summary.skipped == {"0": "a projection is excluded", "0.down_proj": "excluded"}
    assert type(outer[0].down_proj) is torch.nn.Linear and torch.allclose(outer(x), want)


@pytest.mark.parametrize("classes", [lambda own: [own], lambda own: own, lambda own: {own}])
def test_patch_takes_mlp_classes_as_one_or_any_sequence(classes):
    own = _mlp_class("MyMLP", __name__)
    assert gt.patch(own(), swiglu_mlp=classes(own)).swapped[""] == "SwiGLU MLP"


@pytest.mark.parametrize("bad", ["LlamaMLP", ["LlamaMLP"], 3])
def test_patch_refuses_mlp_classes_that_are_not_classes_and_swaps_nothing(bad):
    mlp = _mlp_class()()
    with pytest.raises(TypeError, match="swiglu_mlp"):
        gt.patch(mlp, swiglu_mlp=bad)
    assert type(mlp.gate_proj) is torch.nn.Linear and type(mlp).__name__ == "LlamaMLP"
    assert not hasattr(mlp, "_gemmgen_original_class")


def test_swiglu_takes_the_dual_gemm_where_it_pays():
    from gemmgen.torch.mlp import uses_dual
    assert uses_dual(1024, 14336, 4096, capturing=True)
    assert not uses_dual(128, 14336, 4096, capturing=True)
    assert uses_dual(1024, 14336, 4096, capturing=False)       # the compiled launcher
    assert not uses_dual(128, 14336, 4096, capturing=False)
    # launched from Python, an eager call pays 0.4 ms of host time
    assert uses_dual(4096, 14336, 4096, capturing=False, compiled=False)      # 0.96 TFLOP
    assert not uses_dual(1024, 14336, 4096, capturing=False, compiled=False)  # 0.24 TFLOP
    assert uses_dual(1024, 14336, 4096, capturing=True, compiled=False)


def test_the_launcher_registers_swiglu_and_its_planner_is_defined_first():
    """gemmgen::swiglu's CUDA kernel is the compiled launcher's (its planner's schema is
    defined by gemmgen.torch.ops, which loads the launcher, so the C++ finds it)."""
    import re
    from gemmgen.torch import launcher
    source = launcher.SOURCE.read_text()
    assert re.search(r'm\.impl\("swiglu", &gemmgen_launcher::swiglu_cuda\)', source)
    assert '"gemmgen::_swiglu_plan"' in source
    schema = torch.ops.gemmgen._swiglu_plan.default._schema
    assert str(schema) == ("gemmgen::_swiglu_plan(Tensor x, Tensor w_gate, Tensor w_up, "
                           "Tensor out) -> Tensor")


def _autograd_kernel_frames(fn) -> int:
    """Python frames of torch.library's autograd kernels (register_autograd) that ``fn`` runs."""
    from frames import frames
    return len(frames(fn, lambda path: path.endswith(("_library/autograd.py",
                                                       "_library\\autograd.py"))))


@pytest.mark.parametrize("entry", ["linear", "gemm", "swiglu"])
def test_no_grad_calls_skip_the_python_autograd_kernel(entry, monkeypatch):
    """Under torch.no_grad() the entry points call their op past its Python autograd kernel
    (host time on every call); with grad mode on they go through it, and give the same result."""
    from gemmgen.torch import mlp
    monkeypatch.setattr(mlp, "DUAL_MIN_M", 0)  # swiglu: the op at any number of rows
    x = torch.randn(3, 8, requires_grad=True)
    w, v = torch.randn(5, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    fn = {"linear": lambda: gt.linear(x, w), "gemm": lambda: gt.gemm(x, w.t()),
          "swiglu": lambda: gt.swiglu(x, w, v)}[entry]
    assert _autograd_kernel_frames(fn) > 0
    with torch.no_grad():
        assert _autograd_kernel_frames(fn) == 0
        fast = fn()
    assert not fast.requires_grad and torch.equal(fast, fn().detach())
    for t in (x, w, v):  # grad mode on, but nothing to differentiate
        t.requires_grad_(False)
    assert _autograd_kernel_frames(fn) == 0 and torch.equal(fn(), fast)


def test_patched_mlp_runs_the_formula_below_the_dual_gemms_rows(monkeypatch):
    """A fused MLP calls the SwiGLU op from mlp.DUAL_MIN_M rows of x on; with fewer it runs
    the formula through its own projections (no op, no host time of its own); same result.
    gemmgen.torch.swiglu runs PyTorch's formula itself below those rows, the op from them."""
    from gemmgen.torch import mlp as mlp_mod, modules
    calls = []
    monkeypatch.setattr(modules, "swiglu", lambda *a: calls.append(a) or mlp_mod.swiglu(*a))
    mod = _mlp_class()()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    want = mod(x)
    gt.patch(mod)
    monkeypatch.setattr(mlp_mod, "DUAL_MIN_M", 7)
    assert torch.allclose(mod(x), want) and calls == []
    monkeypatch.setattr(mlp_mod, "DUAL_MIN_M", 6)
    assert torch.allclose(mod(x), want) and len(calls) == 1
    w, v = mod.gate_proj.weight, mod.up_proj.weight
    assert _autograd_kernel_frames(lambda: gt.swiglu(x, w, v)) > 0
    monkeypatch.setattr(mlp_mod, "DUAL_MIN_M", 7)
    assert _autograd_kernel_frames(lambda: gt.swiglu(x, w, v)) == 0
    with pytest.raises(OperandError, match="w_up"):
        gt.swiglu(x, w, v[:, :3])


def test_compiled_calls_under_no_grad_trace_without_a_graph_break():
    """torch.compile(fullgraph=True) traces gemmgen.torch.linear and swiglu under no_grad and
    inference mode too (the no-grad fast path is not taken while compiling)."""
    x, w = torch.randn(3, 8), torch.randn(5, 8, requires_grad=True)
    fn = torch.compile(lambda a, b: gt.linear(a, b) + gt.swiglu(a, b, b), fullgraph=True,
                       backend="eager")
    want = torch.nn.functional.linear(x, w) + torch.nn.functional.silu(x @ w.t()) * (x @ w.t())
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            torch.testing.assert_close(fn(x, w), want.detach())
