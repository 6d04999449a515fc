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
