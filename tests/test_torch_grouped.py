"""gemmgen::grouped_mm without a GPU: schema, fake implementation, the reference against
torch._grouped_mm's semantics, the autograd formulas of each form in float64 (on CPU tensors,
PyTorch's path of the op: the kernels are tests/test_gpu_grouped.py's), and the errors."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make install adds it)")

from torch.library import opcheck  # noqa: E402

import gemmgen.torch as gt  # noqa: E402
from gemmgen.runtime.operands import OperandError  # noqa: E402
from gemmgen.torch.grouped import prepare, reference  # noqa: E402


def _offs(*ends):
    return torch.tensor(ends, dtype=torch.int32)


def _forms(dtype=torch.float64, grad=False):
    """(a, b, offs) of each form: 2-D x 3-D with an empty and a 1-row group and rows past the
    last offset, 3-D x 3-D, 2-D x 2-D (a a transposed view), 3-D x 2-D."""
    torch.manual_seed(0)
    out = {
        "2d3d": (torch.randn(13, 6, dtype=dtype), torch.randn(4, 7, 6, dtype=dtype)
                 .transpose(1, 2), _offs(3, 3, 4, 11)),
        "3d3d": (torch.randn(3, 5, 6, dtype=dtype), torch.randn(3, 6, 4, dtype=dtype), None),
        "2d2d": (torch.randn(12, 5, dtype=dtype).t(), torch.randn(12, 4, dtype=dtype),
                 _offs(0, 5, 5, 12)),
        "3d2d": (torch.randn(3, 5, 6, dtype=dtype), torch.randn(6, 9, dtype=dtype),
                 _offs(2, 2, 9)),
    }
    if grad:
        for a, b, _ in out.values():
            a.requires_grad_()
            b.requires_grad_()
    return out


def test_schema():
    schema = str(torch.ops.gemmgen.grouped_mm.default._schema)
    assert schema == ("gemmgen::grouped_mm(Tensor a, Tensor b, Tensor? offs=None, "
                      "ScalarType? out_dtype=None) -> Tensor")


def test_reference_is_the_loop_of_matmuls():
    f = _forms()
    a, b, offs = f["2d3d"]
    out = reference(a, b, offs)
    assert torch.allclose(out[4:11], a[4:11] @ b[3]) and torch.allclose(out[3:4], a[3:4] @ b[2])
    assert torch.equal(out[11:], torch.zeros(2, 7, dtype=a.dtype)), "rows past offs[-1]"
    a, b, offs = f["2d2d"]
    out = reference(a, b, offs)
    assert out.shape == (4, 5, 4) and torch.equal(out[0], torch.zeros(5, 4, dtype=a.dtype))
    assert torch.allclose(out[3], a[:, 5:12] @ b[5:12])
    a, b, offs = f["3d2d"]
    assert reference(a, b, offs).shape == (5, 9)


def test_reference_matches_torch_grouped_mm_where_it_runs():
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this PyTorch has no _grouped_mm")
    a, b, offs = (torch.randn(48, 32), torch.randn(3, 16, 32).transpose(1, 2), _offs(16, 32, 48))
    try:
        theirs = torch._grouped_mm(a.bfloat16(), b.bfloat16(), offs)
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._grouped_mm does not run here: {exc}")
    ours = reference(a.bfloat16(), b.bfloat16(), offs)
    assert torch.allclose(ours.float(), theirs.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("form", ["2d3d", "3d3d", "2d2d"])
def test_opcheck(form):
    a, b, offs = _forms(torch.float32, grad=True)[form]
    result = opcheck(torch.ops.gemmgen.grouped_mm.default, (a, b, offs, None))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("form", ["2d3d", "3d3d", "2d2d", "3d2d"])
def test_gradcheck_float64(form):
    """The backward's formulas (da through the op with b's matrices transposed, db through
    the K-grouped form) against finite differences."""
    a, b, offs = _forms(grad=True)[form]
    assert torch.autograd.gradcheck(lambda x, y: gt.grouped_mm(x, y, offs), (a, b))


def test_fake_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        for form, (a, b, offs) in _forms(torch.bfloat16).items():
            out = torch.ops.gemmgen.grouped_mm(a, b, offs, torch.float32)
            want = {"2d3d": (13, 7), "3d3d": (3, 5, 4), "2d2d": (4, 5, 4), "3d2d": (5, 9)}[form]
            assert tuple(out.shape) == want and out.dtype == torch.float32, form


@pytest.mark.parametrize("args, message", [
    (lambda: (torch.randn(4, 5), torch.randn(2, 6, 3), _offs(2, 4)), "a's last dimension (5)"),
    (lambda: (torch.randn(4, 5), torch.randn(2, 5, 3), None), "offs is required"),
    (lambda: (torch.randn(2, 4, 5), torch.randn(2, 5, 3), _offs(2, 4)), "offs is None"),
    (lambda: (torch.randn(4, 5), torch.randn(3, 5, 3), _offs(2, 4)), "b holds 3 groups"),
    (lambda: (torch.randn(4, 5), torch.randn(2, 5, 3), torch.tensor([2, 4])), "1-D int32"),
    (lambda: (torch.randn(4, 5), torch.randn(2, 5, 3).double(), _offs(2, 4)), "must match"),
])
def test_errors_name_the_argument(args, message):
    with pytest.raises(OperandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gt.grouped_mm(*args())


def test_prepare_keeps_views_the_kernels_read():
    a, b, offs = _forms(torch.bfloat16)["2d3d"]
    a2, b2, _ = prepare(a, b, offs)
    assert a2 is a and b2 is b, "row-major tokens and [G, N, K]^T weights need no copy"
    a, b, offs = _forms(torch.bfloat16)["2d2d"]
    a2, b2, _ = prepare(a, b, offs)
    assert a2 is a and b2 is b
    a2, _, _ = prepare(a.contiguous(), b, offs)  # row-major a for the K-grouped form: copied
    assert a2.stride() == (1, 5)


# ---- gemmgen::scaled_grouped_mm: FP8 experts with block scales ---------------------------------
def _scaled(masked=False, k=320, n=264):
    """FP8 tokens and experts with block scales (quantize_reference), their float64
    dequantized values, and offsets with an empty group and rows past the last offset."""
    from gemmgen.torch.fp8 import dequantize, quantize_reference
    torch.manual_seed(1)
    ws = [quantize_reference(torch.randn(n, k), (128, 128)) for _ in range(3)]
    w = torch.stack([q for q, _ in ws])
    sw = torch.stack([s for _, s in ws])
    wd = [dequantize(q, s, (128, 128)).double() for q, s in ws]
    if masked:
        toks = [quantize_reference(torch.randn(40, k) * 2, (1, 128)) for _ in range(3)]
        a, sa = torch.stack([q for q, _ in toks]), torch.stack([s for _, s in toks])
        ad = [dequantize(q, s, (1, 128)).double() for q, s in toks]
        return a, w.transpose(1, 2), sa, sw, None, ad, wd
    a, sa = quantize_reference(torch.randn(70, k) * 2, (1, 128))
    return (a, w.transpose(1, 2), sa, sw, _offs(20, 20, 61),
            dequantize(a, sa, (1, 128)).double(), wd)


def test_scaled_grouped_reference_is_the_dequantized_product_per_group():
    a, b, sa, sw, offs, ad, wd = _scaled()
    out = gt.grouped_mm(a, b, offs, scale_a=sa, scale_b=sw)
    assert out.dtype == torch.bfloat16 and out.shape == (70, 264)
    want = torch.zeros(70, 264, dtype=torch.float64)
    want[:20], want[20:61] = ad[:20] @ wd[0].t(), ad[20:61] @ wd[2].t()
    assert float((out.double() - want).norm() / want.norm()) < 8e-3     # bf16 rounding
    assert not out[61:].any(), "rows past the last offset are zeros"
    a3, b3, sa3, sw3, _, ad3, wd3 = _scaled(masked=True)
    out3 = gt.scaled_grouped_mm(a3, b3, sa3, sw3, out_dtype=torch.float32)
    for g in range(3):
        want3 = ad3[g] @ wd3[g].t()
        assert float((out3[g].double() - want3).norm() / want3.norm()) < 1e-5


@pytest.mark.parametrize("masked", [False, True])
def test_scaled_grouped_fake_tensor_and_schema(masked):
    """opcheck's fake-tensor test (its schema test compares float8 inputs with allclose,
    which PyTorch does not implement on the CPU: the schema is checked as text)."""
    a, b, sa, sw, offs, _, _ = _scaled(masked)
    result = opcheck(torch.ops.gemmgen.scaled_grouped_mm.default, (a, b, sa, sw, offs, None),
                     test_utils=("test_faketensor",))
    assert all(v == "SUCCESS" for v in result.values()), result
    assert str(torch.ops.gemmgen.scaled_grouped_mm.default._schema) == (
        "gemmgen::scaled_grouped_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, "
        "Tensor? offs=None, ScalarType? out_dtype=None) -> Tensor")


@pytest.mark.parametrize("change, message", [
    ({"scale_a": "drop"}, "scale_a and scale_b go together"),
    ({"sa": lambda sa: sa[:, :2]}, "scale_a must be float32 of shape \\(70, 3\\)"),
    ({"sw": lambda sw: sw.double()}, "scale_b must be float32 of shape \\(3, 3, 3\\)"),
    ({"a": lambda a: a.float()}, "a and b must both be float8_e4m3fn or float8_e5m2"),
    ({"offs": lambda o: o.long()}, "offs must be 3 int32 cumulative row ends"),
])
def test_scaled_grouped_errors_name_the_argument(change, message):
    a, b, sa, sw, offs, _, _ = _scaled()
    if change.get("scale_a") == "drop":
        with pytest.raises(OperandError, match=message):
            gt.grouped_mm(a, b, offs, scale_b=sw)
        return
    a = change.get("a", lambda x: x)(a)
    sa = change.get("sa", lambda x: x)(sa)
    sw = change.get("sw", lambda x: x)(sw)
    offs = change.get("offs", lambda x: x)(offs)
    with pytest.raises(OperandError, match=message):
        gt.grouped_mm(a, b, offs, scale_a=sa, scale_b=sw)
