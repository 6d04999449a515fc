"""Launch-argument checks, without a GPU (NumPy arrays and fake device arrays)."""
import sys

import numpy as np
import pytest

from gemmgen.runtime.operands import OperandError, check_gemm, contiguous_strides, describe


class FakeDeviceArray:
    """Just enough __cuda_array_interface__ (v3) to stand for a CuPy or PyTorch array."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000000000, readonly=False,
                 stream=1):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (ptr, readonly), "version": 3, "stream": stream}


def f32(*shape):
    return np.ones(shape, dtype=np.float32)


def test_row_major_and_padded_views_give_leading_dimensions():
    assert describe(f32(4, 6), "A").lds == {"r": 6}
    big = f32(4, 10)
    view = describe(big[:, :6], "A")
    assert (view.shape, view.lds) == ((4, 6), {"r": 10})
    dev = describe(FakeDeviceArray((5, 3), strides=(64, 4)), "B")
    assert (dev.kind, dev.lds, dev.ptr) == ("cai", {"r": 16}, 0x7F0000000000)
    assert describe(FakeDeviceArray((5, 3)), "B").lds == {"r": 3}  # strides None: C-contiguous


def test_column_major_views_and_batches():
    assert describe(np.asfortranarray(f32(4, 6)), "A").lds == {"c": 4}
    assert describe(f32(6, 4).T, "A").lds == {"c": 4}  # a transposed view, no copy
    assert describe(f32(1, 6), "A").lds == {"r": 6, "c": 1}  # one row: either layout
    batch = describe(f32(3, 4, 6), "A")
    assert (batch.batch, batch.batch_stride, batch.shape, batch.lds) == (3, 24, (4, 6), {"r": 6})
    bcast = describe(np.broadcast_to(f32(4, 6), (5, 4, 6)), "B")
    assert (bcast.batch, bcast.batch_stride) == (5, 0)
    col_batch = describe(np.swapaxes(f32(3, 6, 4), 1, 2), "A")
    assert col_batch.lds == {"c": 4} and col_batch.batch_stride == 24
    with pytest.raises(OperandError, match="neither row- nor column-major"):
        describe(f32(8, 8)[::2, ::2], "A")


@pytest.mark.parametrize("bad, match", [
    (np.ones((4, 4), np.float64), r"A has dtype float64; this kernel takes fp32 \(float32\)"),
    (f32(2, 3, 4, 5), "A must be a 2-D matrix or a 3-D batch"),
    ([[1.0]], "A: expected a NumPy array"),
    (FakeDeviceArray((4, 4), typestr="<f2"), "A has dtype float16"),
])
def test_bad_operands_name_the_argument(bad, match):
    with pytest.raises(OperandError, match=match):
        describe(bad, "A")


def test_gemm_shapes_are_cross_checked():
    args = check_gemm(f32(3, 5), f32(5, 7), f32(3, 7))
    assert (args.m, args.n, args.k) == (3, 7, 5)
    with pytest.raises(OperandError, match=r"A's columns \(5\) must equal B's rows \(4\)"):
        check_gemm(f32(3, 5), f32(4, 7))
    with pytest.raises(OperandError, match=r"C has shape \(7, 3\); A @ B is 3x7"):
        check_gemm(f32(3, 5), f32(5, 7), f32(7, 3))
    with pytest.raises(OperandError, match="C is required when beta != 0"):
        check_gemm(f32(3, 5), f32(5, 7), beta=1.0)
    ro = f32(3, 7)
    ro.flags.writeable = False
    with pytest.raises(OperandError, match="C is read-only"):
        check_gemm(f32(3, 5), f32(5, 7), ro)
    with pytest.raises(OperandError, match="A on the host but the others on the GPU"):
        check_gemm(f32(3, 5), FakeDeviceArray((5, 7)), FakeDeviceArray((3, 7)))


def test_layouts_batches_and_bias_are_checked_against_the_kernel():
    fa = np.asfortranarray(f32(3, 5))
    with pytest.raises(OperandError, match="A is column-major, but this kernel takes row-major A "
                                           "\\(layout 'rrr'\\): build the kernel with layout 'crr'"):
        check_gemm(fa, f32(5, 7))
    args = check_gemm(fa, f32(5, 7), layout="crr")
    assert args.ld(args.a, 0) == 3
    args = check_gemm(f32(4, 3, 5), f32(5, 7), f32(4, 3, 7))
    assert args.batch == 4 and args.b.batch is None
    with pytest.raises(OperandError, match="batch sizes differ"):
        check_gemm(f32(4, 3, 5), f32(2, 5, 7), f32(4, 3, 7))
    with pytest.raises(OperandError, match="C must hold the whole batch of 4"):
        check_gemm(f32(4, 3, 5), f32(5, 7), f32(3, 7))
    with pytest.raises(OperandError, match="bias is required"):
        check_gemm(f32(3, 5), f32(5, 7), needs_bias=True)
    with pytest.raises(OperandError, match="bias must hold N = 7 values"):
        check_gemm(f32(3, 5), f32(5, 7), bias=f32(6), needs_bias=True)
    with pytest.raises(OperandError, match="bias given, but this kernel's epilogue has no bias"):
        check_gemm(f32(3, 5), f32(5, 7), bias=f32(7))
    assert check_gemm(f32(3, 5), f32(5, 7), bias=f32(7), needs_bias=True).bias.shape == (1, 7)


def test_empty_dimensions_are_accepted():
    args = check_gemm(f32(4, 0), f32(0, 5))
    assert (args.m, args.n, args.k) == (4, 5, 0)


def test_host_operands_without_pycuda_say_how_to_install(monkeypatch):
    """NumPy operands go through PyCUDA's copies: without it, gemm says how to install it."""
    import gemmgen
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.autoprimaryctx", None)
    with pytest.raises(ImportError, match=r"pip install 'gemmgen\[cuda\]'"):
        gemmgen.gemm(np.ones((4, 8), np.float32), np.ones((8, 4), np.float32))


def test_build_without_a_cuda_driver_says_what_is_missing(monkeypatch):
    """Building and launching need the CUDA driver (not PyCUDA): its absence is one clear
    error naming the library."""
    import ctypes

    from gemmgen import PRESETS, build
    from gemmgen.runtime import driver

    def missing(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(driver, "_LIB", [])
    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(driver.DriverError, match=r"libcuda\.so\.1\) is not available"):
        build(PRESETS["smem"].config)


def test_half_precision_operands():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    h = np.ones((4, 8), np.float16)
    assert describe(h, "A", "fp16").lds == {"r": 8}
    assert describe(np.ones((4, 8), ml_dtypes.bfloat16), "A", "bf16").dtype.itemsize == 2
    assert describe(FakeDeviceArray((4, 8), typestr="<f2"), "B", "fp16").lds == {"r": 8}
    assert describe(np.ones((4, 8), "V2"), "A", "bf16").lds == {"r": 8}  # PyCUDA's bf16 view
    with pytest.raises(OperandError, match="A has dtype float16; this kernel takes bf16"):
        describe(h, "A", "bf16")
    args = check_gemm(f32(3, 5), f32(5, 7), f32(3, 7), dtype="tf32", out="fp32")
    assert (args.m, args.n, args.k) == (3, 7, 5)
    args = check_gemm(h[:3, :5], np.ones((5, 7), np.float16), f32(3, 7), dtype="fp16", out="fp32")
    assert args.c.dtype == np.float32
    with pytest.raises(OperandError, match="C has dtype float16; this kernel takes fp32"):
        check_gemm(h[:3, :5], np.ones((5, 7), np.float16), np.ones((3, 7), np.float16),
                   dtype="fp16", out="fp32")


@pytest.mark.parametrize("alpha, beta, name, match", [
    ("2", 0.0, "alpha", "got str '2'"),
    (1.0, 1j, "beta", "got a complex number 1j"),
    (np.complex64(1), 0.0, "alpha", "complex"),
    (None, 0.0, "alpha", "got NoneType"),
    (True, 0.0, "alpha", "got bool"),
    (1.0, [0.5], "beta", "got list"),
    (1e39, 0.0, "alpha", "does not fit the kernel's float32"),
    (1.0, -1e300, "beta", "does not fit the kernel's float32"),
])
def test_alpha_and_beta_must_be_real_float32_numbers(alpha, beta, name, match):
    from gemmgen.runtime.operands import check_scalars
    with pytest.raises(OperandError, match=match) as info:
        check_scalars(alpha, beta)
    assert str(info.value).startswith(name)


def test_scalars_accept_python_and_numpy_reals():
    from gemmgen.runtime.operands import check_scalars
    assert check_scalars(2, np.float32(0.5)) == (2.0, 0.5)
    assert check_scalars(np.int64(3), np.float64(-1.25)) == (3.0, -1.25)
    a, b = check_scalars(float("nan"), float("inf"))
    assert a != a and b == float("inf")
    assert all(type(v) is float for v in check_scalars(np.float16(1), 0))


def test_check_gemm_names_beta_and_one_dimensional_operands():
    with pytest.raises(OperandError, match="^beta must be a real number"):
        check_gemm(f32(3, 5), f32(5, 7), f32(3, 7), beta="1")
    with pytest.raises(OperandError, match=r"^A must be a 2-D matrix or a 3-D batch; got shape \(5,\)"):
        check_gemm(f32(5), f32(5, 7))
    with pytest.raises(OperandError, match=r"^B must be a 2-D matrix"):
        check_gemm(f32(3, 5), f32(5))


def test_dtype_name_of_a_non_array_is_a_value_error():
    from gemmgen.runtime.arrays import dtype_name_of
    with pytest.raises(ValueError, match="expected an array .*got list"):
        dtype_name_of([[1.0]])


class FakeCupy(FakeDeviceArray):
    """A CuPy array on ``device`` (its ``.device.id``, ``.data.ptr``), for the device checks."""

    __module__ = "cupy._core.core"

    def __init__(self, shape, device=0, typestr="<f4", ptr=0x7F0000000000):
        super().__init__(shape, typestr=typestr, ptr=ptr)
        self.shape, self.ndim, self.dtype = tuple(shape), len(shape), np.dtype(typestr)
        self.strides = contiguous_strides(self.shape, self.dtype.itemsize)
        self.device = type("Device", (), {"id": device})()
        self.data = type("Memory", (), {"ptr": ptr})()


class FakeGPUArray:
    """A PyCUDA GPUArray: its device is the one owning ``gpudata`` (asked of the driver)."""

    def __init__(self, shape, ptr):
        self.shape, self.dtype, self.size = tuple(shape), np.dtype(np.float32), int(np.prod(shape))
        self.strides = contiguous_strides(self.shape, 4)
        self.gpudata = ptr


FakeGPUArray.__name__ = "GPUArray"


def test_operands_on_two_gpus_are_refused_naming_both():
    with pytest.raises(OperandError, match=r"^A is on cuda:0, B on cuda:1"):
        check_gemm(FakeCupy((3, 5), 0), FakeCupy((5, 7), 1))
    with pytest.raises(OperandError, match=r"^A is on cuda:1, C on cuda:0"):
        check_gemm(FakeCupy((3, 5), 1), FakeCupy((5, 7), 1), FakeCupy((3, 7), 0))
    torch = pytest.importorskip("torch")

    class FakeTensor:
        __module__ = "torch"
        is_cuda, dtype = True, torch.float32

        def __init__(self, shape, device):
            self.shape, self.device = tuple(shape), torch.device(device)

        def stride(self):
            return (self.shape[1], 1)

        def element_size(self):
            return 4

        def data_ptr(self):
            return 0x7F0000000000
    with pytest.raises(OperandError, match=r"^bias is on cuda:2, A on cuda:0|A is on cuda:0, "
                                           r"bias on cuda:2"):
        check_gemm(FakeTensor((3, 5), "cuda:0"), FakeTensor((5, 7), "cuda:0"),
                   bias=FakeTensor((1, 7), "cuda:2"), needs_bias=True)


def test_pointer_devices_are_asked_of_the_driver(monkeypatch):
    """GPUArrays and other __cuda_array_interface__ arrays name no device: the pointer's owner
    (cuPointerGetAttribute) does, in gemm and in a kernel's own call."""
    from gemmgen import PRESETS
    from gemmgen.runtime import driver
    from gemmgen.runtime.kernel import Kernel
    from gemmgen.runtime.operands import check_one_device
    owner = {0x1000: 0, 0x2000: 1, 0x3000: 0}
    monkeypatch.setattr(driver, "device_of", lambda ptr: owner[ptr])
    a, b, c = FakeGPUArray((3, 5), 0x1000), FakeGPUArray((5, 7), 0x2000), FakeGPUArray((3, 7), 0x3000)
    assert check_one_device({"A": a, "C": c}, driver.device_of) == 0
    with pytest.raises(OperandError, match=r"^A is on cuda:0, B on cuda:1"):
        check_one_device({"A": a, "B": b, "C": c}, driver.device_of)
    kernel = Kernel(PRESETS["smem"].config, "sm_80", b"")
    with pytest.raises(OperandError, match=r"^A is on cuda:0, B on cuda:1"):
        kernel(a, b, c)


def test_gemm_refuses_operands_on_two_gpus_before_any_gpu_work():
    import gemmgen
    with pytest.raises(OperandError, match=r"^A is on cuda:0, B on cuda:1"):
        gemmgen.gemm(FakeCupy((3, 5), 0), FakeCupy((5, 7), 1))
    with pytest.raises(OperandError, match=r"^A is on cuda:0, C on cuda:1"):
        gemmgen.gemm(FakeCupy((3, 5), 0), FakeCupy((5, 7), 0), FakeCupy((3, 7), 1))
    with pytest.raises(OperandError, match=r"^A is on cuda:1, B on cuda:0"):
        gemmgen.gemm(FakeCupy((3, 5), 1, "|u1"), FakeCupy((5, 7), 0, "|u1"), dtype="e4m3")
    with pytest.raises(OperandError, match=r"^A is on cuda:0, B on cuda:1"):
        gemmgen.grouped_gemm(FakeCupy((4, 5, 8), 0, "<f2"), FakeCupy((4, 8, 6), 1, "<f2"))


BIG = 2 ** 31  # one past the kernels' int parameters


def test_extents_and_leading_dimensions_beyond_int32_name_the_argument():
    with pytest.raises(OperandError, match=r"^M = 2147483648 .*2147483647"):
        check_gemm(FakeDeviceArray((BIG, 4)), FakeDeviceArray((4, 6)))
    with pytest.raises(OperandError, match=r"^N = 2147483648"):
        check_gemm(FakeDeviceArray((3, 4)), FakeDeviceArray((4, BIG)))
    with pytest.raises(OperandError, match=r"^K = 2147483648"):
        check_gemm(FakeDeviceArray((3, BIG)), FakeDeviceArray((BIG, 6)))
    with pytest.raises(OperandError, match=r"^lda = 2147483648"):
        check_gemm(FakeDeviceArray((3, 4), strides=(BIG * 4, 4)), FakeDeviceArray((4, 6)))
    with pytest.raises(OperandError, match=r"^ldc = 2147483650"):
        check_gemm(FakeDeviceArray((3, 4)), FakeDeviceArray((4, 6)),
                   FakeDeviceArray((3, 6), strides=((BIG + 2) * 4, 4)))
    assert check_gemm(FakeDeviceArray((3, 4)), FakeDeviceArray((4, 6)),
                      FakeDeviceArray((3, 6), strides=((BIG - 1) * 4, 4))).c.lds["r"] == BIG - 1


def test_sizes_beyond_int32_are_refused_before_any_gpu_work():
    import gemmgen
    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.operands.groups import check_grouped
    with pytest.raises(OperandError, match=r"^M = 2147483648"):
        gemmgen.gemm(FakeCupy((BIG, 5)), FakeCupy((5, 7)))
    with pytest.raises(OperandError, match=r"^K = 2147483648"):
        check_fp8(FakeCupy((4, BIG), typestr="|u1"), FakeCupy((BIG, 8), typestr="|u1"), 1.0, 1.0,
                  dtype="e4m3")
    with pytest.raises(OperandError, match=r"^N = 2147483648"):
        check_grouped(FakeCupy((64, 8), typestr="<f2"), FakeCupy((2, 8, BIG), typestr="<f2"),
                      FakeCupy((2,), typestr="<i4"))
