"""The op ``gemmgen::grouped_mm``: ``torch._grouped_mm``'s conventions, its CPU (reference) and
fake implementations, autograd, the Python planner the compiled launcher calls, and the Python
CUDA path where the launcher is not loaded.

    torch.ops.gemmgen.grouped_mm(a, b, offs=None, out_dtype=None) -> Tensor

- a [T, K], b [G, K, N], offs [G] (int32 cumulative row ends): rows offs[g-1]..offs[g] of a
  times b[g] -> [T, N] (rows past offs[G-1] are zeros). The MoE forward passes the experts'
  [G, N, K] weights as ``w.transpose(-2, -1)`` (no copy).
- a [G, M, K], b [G, K, N], no offs: batched -> [G, M, N].
- a [M, T], b [T, N], offs [G] over T: [G, M, N], group g reducing over its rows (the weight
  gradient, e.g. a = dY.t(), b = X).
- a [G, M, K], b [K, N_total], offs over N: -> [M, N_total] (PyTorch's path only).

fp16/bf16 CUDA tensors run gemmgen's grouped kernel (one launch, the offsets read on the
device: a call on a captured stream becomes part of a CUDA graph); everything else (CPU
tensors, other dtypes, strides or addresses TMA cannot read) runs the reference, a loop of
matmuls in fp32 rounded to the output dtype. ``out_dtype``: a's dtype (default) or float32.
Autograd: da through the same op (b's matrices transposed, no copy), db through the K-grouped
form (2-D x 2-D), for the 2-D x 3-D, 3-D x 3-D and 2-D x 2-D forms.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.grouped import grouped_gemm, plan_grouped
from ..runtime.operands import OperandError
from . import launcher
from .ops import _LIB, _REFERENCE, LAUNCHER, _warn_once, autocast

GROUPED_DTYPES = (torch.float16, torch.bfloat16)


def _form(a: Tensor, b: Tensor, offs: Tensor | None) -> str:
    """ "2d3d", "3d3d", "2d2d" or "3d2d"; ``OperandError`` for other ranks or a missing or
    superfluous ``offs``."""
    form = f"{a.dim()}d{b.dim()}d"
    if form not in ("2d3d", "3d3d", "2d2d", "3d2d"):
        raise OperandError(f"grouped_mm takes a and b of 2 or 3 dimensions (not both 3-D "
                           f"with offs); got a {tuple(a.shape)} and b {tuple(b.shape)}")
    if (offs is None) != (form == "3d3d"):
        raise OperandError("offs is required unless a and b are both 3-D (then it must be "
                           "None)" if form != "3d3d" else
                           "offs is None for 3-D a and b (one group per matrix)")
    return form


def check_args(a: Tensor, b: Tensor, offs: Tensor | None, out_dtype) -> tuple[str, tuple]:
    """(form, output shape) after the op's checks; ``OperandError`` naming the argument."""
    form = _form(a, b, offs)
    if a.dtype != b.dtype:
        raise OperandError(f"a has dtype {a.dtype} and b {b.dtype}: they must match")
    if out_dtype is not None and out_dtype not in (a.dtype, torch.float32):
        raise OperandError(f"out_dtype {out_dtype}: a's dtype ({a.dtype}) or torch.float32")
    if offs is not None and (offs.dim() != 1 or offs.dtype != torch.int32):
        raise OperandError(f"offs must be a 1-D int32 tensor; got {offs.dtype} of shape "
                           f"{tuple(offs.shape)}")
    g = offs.shape[0] if offs is not None else None
    k_a = a.shape[-1] if form != "2d2d" else a.shape[1]
    k_b = b.shape[-2] if form != "2d2d" else b.shape[0]
    if k_a != k_b:
        raise OperandError(f"a's last dimension ({k_a}) must equal b's "
                           f"{'first' if form == '2d2d' else 'second-to-last'} ({k_b})")
    if form in ("2d3d", "3d2d") and b.dim() == 3 and b.shape[0] != g:
        raise OperandError(f"b holds {b.shape[0]} groups and offs {g}")
    if form == "3d3d" and a.shape[0] != b.shape[0]:
        raise OperandError(f"a holds {a.shape[0]} matrices and b {b.shape[0]}")
    if form == "3d2d" and a.shape[0] != g:
        raise OperandError(f"a holds {a.shape[0]} groups and offs {g}")
    if form == "2d3d":
        return form, (a.shape[0], b.shape[-1])
    if form == "3d3d":
        return form, (a.shape[0], a.shape[1], b.shape[2])
    if form == "2d2d":
        return form, (g, a.shape[0], b.shape[1])
    return form, (a.shape[1], b.shape[1])


def group_bounds(offs: Tensor, total: int) -> list[tuple[int, int]]:
    """(begin, end) of each group, clamped as the kernel clamps them."""
    out, end = [], 0
    for v in offs.tolist():
        begin = end
        end = min(max(int(v), begin), total)
        out.append((begin, end))
    return out


def reference(a: Tensor, b: Tensor, offs: Tensor | None = None, out_dtype=None) -> Tensor:
    """The grouped product by PyTorch matmuls in float32, rounded to the output dtype (the
    kernels accumulate in float32): the op's path for inputs the kernels do not take, and
    the tests' reference (pass float64 tensors for a float64 one)."""
    form, shape = check_args(a, b, offs, out_dtype)
    dt = out_dtype or a.dtype
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.zeros(shape, dtype=acc, device=a.device)
    if form == "3d3d":
        out = torch.bmm(a.to(acc), b.to(acc))
    elif form == "2d3d":
        for g, (s, e) in enumerate(group_bounds(offs, a.shape[0])):
            out[s:e] = a[s:e].to(acc) @ b[g].to(acc)
    elif form == "2d2d":
        for g, (s, e) in enumerate(group_bounds(offs, a.shape[1])):
            out[g] = a[:, s:e].to(acc) @ b[s:e].to(acc)
    else:
        for g, (s, e) in enumerate(group_bounds(offs, b.shape[1])):
            out[:, s:e] = a[g].to(acc) @ b[:, s:e].to(acc)
    return out.to(dt).contiguous()


def _is_row(x: Tensor) -> bool:
    rows, cols, s0, s1 = x.shape[-2], x.shape[-1], x.stride(-2), x.stride(-1)
    return (cols <= 1 or s1 == 1) and (rows <= 1 or s0 >= max(cols, 1))


def _is_col(x: Tensor) -> bool:
    rows, cols, s0, s1 = x.shape[-2], x.shape[-1], x.stride(-2), x.stride(-1)
    return (rows <= 1 or s0 == 1) and (cols <= 1 or s1 >= max(rows, 1))


def prepare(a: Tensor, b: Tensor, offs: Tensor | None) -> tuple:
    """The operands as the kernels read them (the compiled launcher does the same): the
    token matrix row-major, the K-grouped a column-major and b row-major, B's matrices either
    way, the offsets contiguous; other strides become copies."""
    if a.dim() == 2 and b.dim() == 2:
        a = a if _is_col(a) else a.t().contiguous().t()
        b = b if _is_row(b) else b.contiguous()
    else:
        a = a if _is_row(a) else a.contiguous()
        b = b if (_is_row(b) or _is_col(b)) else b.contiguous()
    return a, b, None if offs is None else offs.contiguous()


def kernel_takes(a: Tensor, b: Tensor, offs: Tensor | None) -> bool:
    """Whether the grouped kernels take these operands (CUDA, fp16/bf16, one device, not the
    3-D x 2-D form)."""
    same = a.device == b.device and (offs is None or offs.device == a.device)
    return (a.is_cuda and same and a.dtype in GROUPED_DTYPES
            and not (a.dim() == 3 and b.dim() == 2))


@torch.library.impl(_LIB, "grouped_mm", "CPU")
def _grouped_cpu(a, b, offs=None, out_dtype=None):
    return reference(a, b, offs, out_dtype)


@torch.library.impl(_LIB, "_grouped_reference", "CompositeExplicitAutograd")
def _grouped_reference(a, b, offs, out_dtype):
    return reference(a, b, offs, out_dtype)


@torch.library.register_fake("gemmgen::grouped_mm")
def _grouped_fake(a, b, offs=None, out_dtype=None):
    _, shape = check_args(a, b, offs, out_dtype)
    return a.new_empty(shape, dtype=out_dtype or a.dtype)


@torch.library.impl(_LIB, "_grouped_plan", "CUDA")
def _grouped_plan(a: Tensor, b: Tensor, offs: Tensor | None, out_dtype, out: Tensor) -> Tensor:
    """The launch recipe of one operand signature for the compiled launcher (operands 0 a,
    1 b, 2 out, 3 offs), as a CPU uint8 tensor; the "reference" recipe for operands the
    kernels do not take (dtype, device, strides or addresses TMA cannot read). Raises
    ``OperandError`` for bad arguments."""
    check_args(a, b, offs, out_dtype)
    if not kernel_takes(a, b, offs):
        return _REFERENCE
    try:
        plan = plan_grouped(a, b, offs, out, None, out_dtype)
    except OperandError:  # the shapes were checked above: a layout or alignment TMA refuses
        return _REFERENCE
    launcher.keep_alive(plan)
    return torch.frombuffer(bytearray(plan.recipe.to_bytes()), dtype=torch.uint8)


def _grouped_cuda_python(a, b, offs=None, out_dtype=None):
    """The CUDA implementation where the compiled launcher is not loaded: the same plans,
    launched from Python on PyTorch's current stream."""
    _, shape = check_args(a, b, offs, out_dtype)
    a2, b2, offs2 = prepare(a, b, offs)
    if not kernel_takes(a2, b2, offs2):
        return reference(a, b, offs, out_dtype)
    _warn_once()
    out = torch.empty(shape, dtype=out_dtype or a.dtype, device=a.device)
    try:
        return grouped_gemm(a2, b2, offs2, out,
                            stream=torch.cuda.current_stream(a.device).cuda_stream)
    except OperandError:
        return reference(a, b, offs, out_dtype)


def grouped_mm(a: Tensor, b: Tensor, offs: Tensor | None = None, out_dtype=None, *,
               scale_a: Tensor | None = None, scale_b: Tensor | None = None) -> Tensor:
    """``torch.ops.gemmgen.grouped_mm`` (see the module docstring), under ``torch.autocast``
    with the operands cast to the autocast dtype first. With ``scale_a`` and ``scale_b``:
    ``torch.ops.gemmgen.scaled_grouped_mm``, FP8 operands with block scales (``scaled``)."""
    if scale_a is not None or scale_b is not None:
        if scale_a is None or scale_b is None:
            raise OperandError("scale_a and scale_b go together: A's 1 x 128 block scales and "
                               "B's 128 x 128 ones")
        return torch.ops.gemmgen.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype)
    a, b = autocast(a.device.type, a, b)
    return torch.ops.gemmgen.grouped_mm(a, b, offs, out_dtype)


def _setup_context(ctx, inputs, output) -> None:
    a, b, offs, _ = inputs
    ctx.save_for_backward(a, b, offs)


def _backward(ctx, grad: Tensor):
    a, b, offs = ctx.saved_tensors
    op = torch.ops.gemmgen.grouped_mm
    grad = grad.to(a.dtype)
    da = db = None
    if a.dim() == 2 and b.dim() == 3:      # rows of a grouped: da as the forward, db K-grouped
        if ctx.needs_input_grad[0]:
            da = op(grad, b.transpose(-2, -1), offs)
        if ctx.needs_input_grad[1]:
            db = op(a.t(), grad, offs)
    elif a.dim() == 3 and b.dim() == 3:    # batched
        if ctx.needs_input_grad[0]:
            da = op(grad, b.transpose(-2, -1))
        if ctx.needs_input_grad[1]:
            db = op(a.transpose(-2, -1), grad)
    elif a.dim() == 2 and b.dim() == 2:    # K-grouped: both are row-grouped products
        if ctx.needs_input_grad[0]:
            da = op(b, grad.transpose(-2, -1), offs).t()
        if ctx.needs_input_grad[1]:
            db = op(a.t(), grad, offs)
    else:                                  # 3-D x 2-D: PyTorch's path
        with torch.enable_grad():
            a_, b_ = a.detach().requires_grad_(), b.detach().requires_grad_()
            da, db = torch.autograd.grad(reference(a_, b_, offs).float(), (a_, b_),
                                         grad.float())
        da, db = da.to(a.dtype), db.to(b.dtype)
    return da, db, None, None


torch.library.register_autograd("gemmgen::grouped_mm", _backward, setup_context=_setup_context)

if not LAUNCHER:
    _LIB.impl("grouped_mm", _grouped_cuda_python, "CUDA")

__all__ = ["GROUPED_DTYPES", "grouped_mm", "kernel_takes", "launcher", "prepare", "reference"]
