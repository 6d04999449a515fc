"""The op ``gemmgen::gemm``: schema, CPU and fake implementations, autograd, and its CUDA
implementation (the compiled launcher, else Python).

    torch.ops.gemmgen.gemm(a, b, bias=None, epilogue="none") -> Tensor

``act(a @ b + bias)`` for a (M x K) and b (K x N), float16, bfloat16 or float32 tensors of one
dtype, each row- or column-major (a transposed view is passed as it is; other strides are made
contiguous first); ``bias`` holds N values of the same dtype; ``epilogue`` is one of
``gemmgen.model.config.EPILOGUES``. The result is a new row-major M x N tensor of a's dtype.

On CUDA tensors the compiled launcher (``gemmgen.torch.launcher``) runs the op without Python
after the first call of an operand signature; that first call runs the Python planner
``gemmgen::_plan``, which checks the operands, builds the kernel ``gemmgen.gemm`` would choose
on this device and returns its launch recipe (``gemmgen.runtime.recipe``). Operands the kernels
do not take are computed by ``gemmgen::_reference`` (PyTorch, same formula).
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor

from ..model.config import EPILOGUES
from ..runtime.api import plan_for
from ..runtime.operands import OperandError
from ..runtime.recipe import FORMAT_VERSION
from . import launcher

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes gemmgen's kernels take (fp16, bf16, fp32 on SIMT); others go to PyTorch."""

_LIB = torch.library.Library("gemmgen", "DEF")
_LIB.define("gemm(Tensor a, Tensor b, Tensor? bias=None, str epilogue='none') -> Tensor")
_LIB.define("linear(Tensor x, Tensor weight, Tensor? bias=None, str activation='none') -> Tensor")
_LIB.define("_plan(Tensor a, Tensor b, Tensor? bias, str epilogue, Tensor out) -> Tensor")
_LIB.define("_reference(Tensor a, Tensor b, Tensor? bias, str epilogue) -> Tensor")
_GEMM = torch.ops.gemmgen.gemm.default
_SCALED = ("Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
           "ScalarType? out_dtype=None, bool use_fast_accum=False")
_LIB.define(f"scaled_mm({_SCALED}) -> Tensor")  # implemented in gemmgen.torch.fp8
_LIB.define(f"_scaled_mm_reference({_SCALED}) -> Tensor")
_LIB.define("_scaled_mm_plan(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
            "ScalarType? out_dtype, bool use_fast_accum, Tensor out) -> Tensor")
# gemmgen::scaled_mm_quantized (gemmgen.torch.quantized): an e4m3 D with its scales and amax
_QUANTIZED = ("Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
              "Tensor? scale=None, str block='1x128', bool use_fast_accum=False")
_LIB.define(f"scaled_mm_quantized({_QUANTIZED}) -> (Tensor, Tensor, Tensor)")
_LIB.define(f"_scaled_mm_quantized_reference({_QUANTIZED}) -> (Tensor, Tensor, Tensor)")
_LIB.define("_scaled_mm_quantized_plan(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, "
            "Tensor? bias, str block, bool use_fast_accum, Tensor out, Tensor? scale_d, "
            "Tensor amax) -> Tensor")
# gemmgen::grouped_mm (gemmgen.torch.grouped): defined here, before the compiled launcher
# registers its CUDA kernels for both ops.
_LIB.define("grouped_mm(Tensor a, Tensor b, Tensor? offs=None, ScalarType? out_dtype=None) "
            "-> Tensor")
_LIB.define("_grouped_plan(Tensor a, Tensor b, Tensor? offs, ScalarType? out_dtype, "
            "Tensor out) -> Tensor")
_LIB.define("_grouped_reference(Tensor a, Tensor b, Tensor? offs, ScalarType? out_dtype) "
            "-> Tensor")
# gemmgen::scaled_grouped_mm (gemmgen.torch.grouped): FP8 experts with block scales
_SCALED_GROUPED = ("Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? offs=None, "
                   "ScalarType? out_dtype=None")
_LIB.define(f"scaled_grouped_mm({_SCALED_GROUPED}) -> Tensor")
_LIB.define(f"_scaled_grouped_reference({_SCALED_GROUPED}) -> Tensor")
_LIB.define("_scaled_grouped_plan(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, "
            "Tensor? offs, ScalarType? out_dtype, Tensor out) -> Tensor")
# gemmgen::swiglu (gemmgen.torch.mlp): the dual GEMM's op and its planner
_LIB.define("swiglu(Tensor x, Tensor w_gate, Tensor w_up) -> Tensor")
_LIB.define("_swiglu_plan(Tensor x, Tensor w_gate, Tensor w_up, Tensor out) -> Tensor")
_REFERENCE = torch.tensor(list(FORMAT_VERSION.to_bytes(4, "little") + b"\xff" * 4),
                          dtype=torch.uint8)


def check_args(a: Tensor, b: Tensor, bias: Optional[Tensor], epilogue: str) -> None:
    """The op's argument checks. Raises ``OperandError`` naming the argument."""
    if epilogue not in EPILOGUES:
        raise OperandError(f"epilogue: unknown {epilogue!r}; known: {', '.join(EPILOGUES)}")
    for name, x in (("a", a), ("b", b)):
        if x.dim() != 2:
            raise OperandError(f"{name} must be a 2-D matrix; got shape {tuple(x.shape)}")
    if a.shape[1] != b.shape[0]:
        raise OperandError(f"a is {a.shape[0]}x{a.shape[1]} and b is {b.shape[0]}x{b.shape[1]}: "
                           f"a's columns must equal b's rows")
    if a.dtype != b.dtype:
        raise OperandError(f"a has dtype {a.dtype} and b has {b.dtype}: they must match")
    wants_bias = epilogue.startswith("bias")
    if wants_bias and bias is None:
        raise OperandError(f"bias is required by epilogue {epilogue!r}")
    if not wants_bias and bias is not None:
        raise OperandError(f"bias given, but epilogue {epilogue!r} has none (use 'bias', "
                           f"'bias_relu' or 'bias_gelu')")
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != b.shape[1]:
            raise OperandError(f"bias must hold N = {b.shape[1]} values (1-D); got shape "
                               f"{tuple(bias.shape)}")
        if bias.dtype != a.dtype:
            raise OperandError(f"bias has dtype {bias.dtype}; a and b have {a.dtype}")


def activate(z: Tensor, epilogue: str) -> Tensor:
    """The epilogue's activation of the pre-activation ``z`` (PyTorch ops): identity, ReLU, or
    GELU's tanh approximation (the kernels' ``gelu_tanh``)."""
    if epilogue.endswith("relu"):
        return torch.relu(z)
    if epilogue.endswith("gelu"):
        return torch.nn.functional.gelu(z, approximate="tanh")
    return z


def reference(a: Tensor, b: Tensor, bias: Optional[Tensor] = None,
              epilogue: str = "none") -> Tensor:
    """``act(a @ b + bias)`` by PyTorch: the op's path for operands the kernels do not take,
    and the tests' reference."""
    z = a @ b if bias is None else torch.addmm(bias, a, b)
    return activate(z, epilogue)


def row_or_col(x: Tensor) -> Tensor:
    """``x`` itself when its strides are row- or column-major (what the kernels read), else a
    contiguous copy (e.g. an expanded gradient with stride 0)."""
    rows, cols = x.shape
    s0, s1 = x.stride()
    row = (cols <= 1 or s1 == 1) and (rows <= 1 or s0 >= max(cols, 1))
    col = (rows <= 1 or s0 == 1) and (cols <= 1 or s1 >= max(rows, 1))
    return x if row or col else x.contiguous()


def kernel_takes(a: Tensor, b: Tensor, bias: Optional[Tensor]) -> bool:
    """Whether gemmgen's kernels take these operands (CUDA, a kernel dtype, one device)."""
    return (a.is_cuda and b.is_cuda and a.dtype in KERNEL_DTYPES and a.device == b.device
            and (bias is None or bias.device == a.device))


@torch.library.impl(_LIB, "gemm", "CPU")
def _gemm_cpu(a, b, bias=None, epilogue="none"):
    check_args(a, b, bias, epilogue)
    return reference(a, b, bias, epilogue).contiguous()


@torch.library.impl(_LIB, "_reference", "CompositeExplicitAutograd")
def _reference_impl(a, b, bias, epilogue):
    check_args(a, b, bias, epilogue)
    return reference(a, b, bias, epilogue).contiguous()


@torch.library.impl(_LIB, "_plan", "CUDA")
def _plan(a: Tensor, b: Tensor, bias: Optional[Tensor], epilogue: str, out: Tensor) -> Tensor:
    """The launch recipe of one operand signature for the compiled launcher, as bytes (a CPU
    uint8 tensor); "reference" (a recipe of no launches that names ``gemmgen::_reference``)
    for operands the kernels do not take. Raises ``OperandError`` for bad arguments."""
    check_args(a, b, bias, epilogue)
    if not kernel_takes(a, b, bias):
        return _REFERENCE
    plan = plan_for(a, b, out, bias, 1.0, 0.0, epilogue)
    launcher.keep_alive(plan)
    order = (1, 0, 2, 3) if plan.swap else (0, 1, 2, 3)  # the kernel's A is B^T when swapped
    data = plan.recipe.to_bytes(order)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def call(op, *args):
    """``op(*args)``, past the op's autograd kernel where no gradient can be asked for: with
    grad mode off (``torch.no_grad()``) or no tensor argument requiring grad, outside
    ``torch.compile``'s tracing. That kernel is Python (``torch.library.register_autograd``)
    and costs host time on every call even when it only passes the call on (5 to 7 us under
    no_grad on the H200 and H100 hosts measured, benchmarks/results/host_overhead_*.json);
    inference mode skips it by itself."""
    if torch.compiler.is_compiling() or torch.is_inference_mode_enabled() or (
            torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                            for a in args)):
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def autocast(device: str, *tensors: Optional[Tensor]) -> tuple:
    """``tensors`` cast to the autocast dtype where ``torch.autocast`` is on for ``device``
    ("cuda" or "cpu"), as PyTorch's own matmul casts its operands (None stays None); else as
    given. The entry of every gemmgen op with autocast (gemm, linear, swiglu, grouped_mm)."""
    if device not in ("cuda", "cpu") or not torch.is_autocast_enabled(device):
        return tensors
    dt = torch.get_autocast_dtype(device)
    return tuple(None if t is None else t.to(dt) for t in tensors)


def gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None,
         epilogue: Optional[str] = None) -> Tensor:
    """``torch.ops.gemmgen.gemm`` with autocast: under ``torch.autocast`` for a's device type the
    operands are cast to the autocast dtype first (as PyTorch's own matmul's are). ``epilogue`` defaults to
    "bias" when ``bias`` is given, else "none". Shapes, dtypes and errors: see ``gemmgen.torch.ops``."""
    if epilogue is None:
        epilogue = "bias" if bias is not None else "none"
    a, b, bias = autocast(a.device.type, a, b, bias)
    return call(_GEMM, a, b, bias, epilogue)


ACTIVATIONS = ("none", "relu", "gelu")
"""``linear``'s activations (fused into the kernel's epilogue)."""


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
           activation: Optional[str] = None) -> Tensor:
    """``act(x @ weight^T + bias)`` as ``torch.nn.functional.linear`` computes it (x (..., K),
    weight (N, K), bias N values), with ``activation`` ("relu", "gelu" or None) fused, through
    ``torch.ops.gemmgen.linear`` (one C++ call where the launcher is loaded); autocast as
    ``gemm``. Raises ``OperandError`` naming the argument."""
    x, weight, bias = autocast(x.device.type, x, weight, bias)
    return call(_LINEAR, x, weight, bias, activation or "none")


def _linear_epilogue(bias, activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise OperandError(f"activation: unknown {activation!r}; known: None, 'relu', 'gelu'")
    if activation == "none":
        return "bias" if bias is not None else "none"
    return f"bias_{activation}" if bias is not None else activation


def _flat(x: Tensor, weight: Tensor) -> Tensor:
    if x.dim() < 1 or weight.dim() != 2:
        raise OperandError(f"x must have at least 1 dimension and weight 2; got shapes "
                           f"{tuple(x.shape)} and {tuple(weight.shape)}")
    return x.reshape(-1, x.shape[-1])


@torch.library.impl(_LIB, "linear", "CompositeExplicitAutograd")
def _linear_any(x, weight, bias=None, activation="none"):
    """Any device: through ``gemmgen::gemm`` (a CUDA tensor reaches the compiled launcher
    there, or the Python path)."""
    epi = _linear_epilogue(bias, activation)
    y = torch.ops.gemmgen.gemm(_flat(x, weight), weight.t(), bias, epi)
    return y.reshape(*x.shape[:-1], weight.shape[0])


@torch.library.register_fake("gemmgen::linear")
def _linear_fake(x, weight, bias=None, activation="none"):
    _linear_epilogue(bias, activation)
    _flat(x, weight)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx, inputs, output) -> None:
    x, weight, bias, activation = inputs
    ctx.activation, ctx.has_bias = activation, bias is not None
    ctx.save_for_backward(x, weight, bias if activation == "gelu" else None,
                          output if activation == "relu" else None)


def _linear_backward(ctx, grad: Tensor):
    x, weight, bias, out = ctx.saved_tensors
    op = torch.ops.gemmgen.gemm
    if ctx.activation == "relu":
        grad = grad * (out > 0).to(grad.dtype)
    elif ctx.activation == "gelu":  # recompute the pre-activation: one GEMM, nothing kept
        z = _LINEAR(x, weight, bias, "none")
        grad = torch.ops.aten.gelu_backward(grad, z, approximate="tanh")
    g2 = row_or_col(grad.reshape(-1, grad.shape[-1]))
    dx = dw = dbias = None
    if ctx.needs_input_grad[0]:
        dx = op(g2, weight).reshape(x.shape)          # (M x N) @ (N x K)
    if ctx.needs_input_grad[1]:
        dw = op(g2.t(), _flat(x, weight))               # (N x M) @ (M x K)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        dbias = g2.sum(0)
    return dx, dw, dbias, None


torch.library.register_autograd("gemmgen::linear", _linear_backward, setup_context=_linear_setup)
_LINEAR = torch.ops.gemmgen.linear.default


def _gemm_cuda_python(a, b, bias=None, epilogue="none"):
    """The CUDA implementation where the compiled launcher is not loaded: the same plans,
    launched from Python (``gemmgen.gemm``'s fast path) on PyTorch's current stream."""
    check_args(a, b, bias, epilogue)
    if not kernel_takes(a, b, bias):
        return reference(a, b, bias, epilogue).contiguous()
    _warn_once()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    from ..runtime.api import gemm as runtime_gemm
    runtime_gemm(row_or_col(a), row_or_col(b), out,
                 bias=None if bias is None else bias.contiguous(), epilogue=epilogue,
                 stream=torch.cuda.current_stream(a.device).cuda_stream)
    return out


_WARNED: list = []


def _warn_once() -> None:
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn(f"gemmgen.torch: the compiled launcher is not loaded "
                      f"({launcher.why_not() or 'not tried'}); gemmgen's ops launch from "
                      f"Python, at more host time per call", RuntimeWarning, stacklevel=3)


@torch.library.register_fake("gemmgen::gemm")
def _gemm_fake(a, b, bias=None, epilogue="none"):
    check_args(a, b, bias, epilogue)
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output) -> None:
    a, b, bias, epilogue = inputs
    ctx.epilogue = epilogue
    ctx.has_bias = bias is not None
    gelu, relu = epilogue.endswith("gelu"), epilogue.endswith("relu")
    ctx.save_for_backward(a, b, bias if gelu else None, output if relu else None)


def _backward(ctx, grad: Tensor):
    a, b, bias, out = ctx.saved_tensors
    epi = ctx.epilogue
    op = torch.ops.gemmgen.gemm
    if epi.endswith("relu"):
        grad = grad * (out > 0).to(grad.dtype)
    elif epi.endswith("gelu"):  # recompute the pre-activation: one GEMM, nothing kept
        z = op(a, b, bias, "bias" if bias is not None else "none")
        grad = torch.ops.aten.gelu_backward(grad, z, approximate="tanh")
    da = db = dbias = None
    if ctx.needs_input_grad[0]:
        da = op(row_or_col(grad), b.t())   # (M x N) @ (N x K): B^T is B's other layout
    if ctx.needs_input_grad[1]:
        db = op(a.t(), row_or_col(grad))   # (K x M) @ (M x N): A^T likewise
    if ctx.has_bias and ctx.needs_input_grad[2]:
        dbias = grad.sum(0)
    return da, db, dbias, None


torch.library.register_autograd("gemmgen::gemm", _backward, setup_context=_setup_context)


LAUNCHER = torch.cuda.is_available() and launcher.load() is not None
"""Whether CUDA calls of ``gemmgen::gemm`` go through the compiled launcher (built and loaded
at import where PyTorch sees a GPU; ``gemmgen.torch.launcher.why_not()`` says why not)."""
if not LAUNCHER:
    _LIB.impl("gemm", _gemm_cuda_python, "CUDA")
