"""The op ``gemmgen::swiglu``: a Llama-style MLP's gate and up projections and their SwiGLU
product in one kernel, the wgmma family's dual GEMM (``silu(gate)*up``), with autograd.

    torch.ops.gemmgen.swiglu(x, w_gate, w_up) -> Tensor

``silu(x @ w_gate^T) * (x @ w_up^T)`` for x (..., K) and the nn.Linear weights w_gate, w_up
(N x K, one dtype, no bias); the result is (..., N) in x's dtype. The kernel reads each tile of
x once for both products and writes only the product: the two N-wide intermediates of
``F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)`` never reach memory. Weights that lie one
after the other with one leading dimension (a fused gate_up weight, or ``patch``'s) are read in
place; any other pair is packed into a workspace first.

- CUDA, float16 and bfloat16 on Hopper: the dual GEMM from ``DUAL_MIN_M`` rows of x, where it
  is faster than PyTorch's formula (``uses_dual``), on PyTorch's current stream (capturable in
  a CUDA graph after a warm-up call). The compiled launcher (``gemmgen.torch.launcher``) runs
  a repeated call without Python: the first call of an operand signature (shapes, strides,
  dtypes, and where w_up lies from w_gate) runs the planner ``gemmgen::_swiglu_plan``, later
  ones patch the addresses into its recipe; calls the kernel does not take run PyTorch's
  formula from C++. Without the launcher the dual GEMM launches from Python, about 0.4 ms of
  host time per call, so an eager call there takes it only for products of at least
  ``EAGER_MIN_FLOP``. Everything else (fewer rows, CPU tensors, float32, other GPUs, operands
  on two devices) is computed by PyTorch with the same formula.
- Autograd: the gate and up products are recomputed (nothing is kept from the forward pass),
  the SwiGLU derivative is taken in fp32 (float64 for float64), and the four weight and input products run through
  ``gemmgen::gemm``.
- A fake (meta) implementation gives the output's shape and dtype for ``torch.compile``.

Errors: ``OperandError`` (a ``ValueError``) naming the argument for a weight that is not 2-D,
weights of different shapes, x's last dimension not K, or mixed dtypes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..runtime.operands import OperandError
from . import launcher
from .ops import _LIB, _REFERENCE, LAUNCHER, autocast, call, row_or_col
DUAL_DTYPES = (torch.float16, torch.bfloat16)
"""The dtypes the dual GEMM takes; others go to PyTorch."""
TREE = "silu(gate)*up"
DUAL_MIN_M = 1024
"""Rows of x from which a call runs the dual GEMM (through the compiled launcher, or
graph-captured): on an H200, bf16, at
M = 1024 and 4096 it took 0.72 to 0.95 of PyTorch's graph-captured time on the MLPs of
Llama-3-8B, Qwen2.5-7B and Qwen2-1.5B, at M <= 16 up to 1.43 times it
(benchmarks/results/swiglu_NVIDIA_H200.json)."""
EAGER_MIN_FLOP = 4e11
"""FLOP of the two products (4 M N K) from which an eager call launched from Python (no
compiled launcher) runs the dual GEMM: about 0.6 ms of tensor-core time at 700 TFLOP/s, above
the Python launch's 0.4 ms of host time."""


def check_args(x: Tensor, w_gate: Tensor, w_up: Tensor) -> None:
    """The op's argument checks. Raises ``OperandError`` naming the argument."""
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if w.dim() != 2:
            raise OperandError(f"{name} must be a 2-D N x K weight; got shape {tuple(w.shape)}")
    if w_gate.shape != w_up.shape:
        raise OperandError(f"w_gate is {tuple(w_gate.shape)} and w_up {tuple(w_up.shape)}: "
                           f"the gate and up weights must have one shape (N x K)")
    if x.dim() < 1 or x.shape[-1] != w_gate.shape[1]:
        raise OperandError(f"x has shape {tuple(x.shape)}; its last dimension must be K = "
                           f"{w_gate.shape[1]} (the weights' columns)")
    for name, w in (("w_gate", w_gate), ("w_up", w_up)):
        if w.dtype != x.dtype:
            raise OperandError(f"{name} has dtype {w.dtype} and x {x.dtype}: they must match")


def reference(x: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor:
    """``silu(x @ w_gate^T) * (x @ w_up^T)`` by PyTorch (the tests' reference and the op's path
    for operands the kernel does not take)."""
    return F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)


def uses_dual(m: int, n: int, k: int, capturing: bool, compiled: bool = True) -> bool:
    """Whether a call with x of M rows and N x K weights runs the dual GEMM (else PyTorch's
    formula): from ``DUAL_MIN_M`` rows through the compiled launcher (``compiled``) or while a
    CUDA graph is captured; from ``EAGER_MIN_FLOP`` as well for an eager Python launch."""
    return m >= DUAL_MIN_M and (compiled or capturing or 4 * m * n * k >= EAGER_MIN_FLOP)


def few_rows(x: Tensor) -> bool:
    """Whether x (..., K) has fewer rows than any call runs the dual GEMM for (``DUAL_MIN_M``):
    the formula runs then whatever else holds."""
    return x.numel() < DUAL_MIN_M * x.shape[-1] if x.dim() else True


def kernel_takes(x: Tensor, w_gate: Tensor, w_up: Tensor) -> bool:
    """Whether the dual GEMM takes these operands (CUDA on sm_90, fp16 or bf16, one device)."""
    if not (x.is_cuda and x.dtype in DUAL_DTYPES and w_gate.device == x.device == w_up.device):
        return False
    return torch.cuda.get_device_capability(x.device) == (9, 0)


@torch.library.impl(_LIB, "swiglu", "CPU")
def _swiglu_cpu(x, w_gate, w_up):
    check_args(x, w_gate, w_up)
    return reference(x, w_gate, w_up).contiguous()


@torch.library.impl(_LIB, "_swiglu_plan", "CUDA")
def _swiglu_plan(x: Tensor, w_gate: Tensor, w_up: Tensor, out: Tensor) -> Tensor:
    """The compiled launcher's planner: the recipe of the dual GEMM for x (M x K, row- or
    column-major) and the weights (N x K, contiguous) as bytes, its operands numbered 0 x,
    1 w_gate^T, 2 out (M x N), 3 w_up^T; "reference" where PyTorch's formula runs instead
    (``uses_dual``, ``kernel_takes``). Raises ``OperandError`` for bad arguments."""
    check_args(x, w_gate, w_up)
    n, k = w_gate.shape
    if (x.dim() != 2 or not kernel_takes(x, w_gate, w_up) or min(x.shape[0], n, k) == 0
            or not uses_dual(x.shape[0], n, k, capturing=False)):
        return _REFERENCE
    from ..model.epilogue import Epilogue
    from ..runtime.api import tree_problem
    from ..runtime.epilogue_args import UP_INDEX
    from ..runtime.tree_api import tree_plan
    b, up = w_gate.t(), w_up.t()
    plan = tree_plan(x, b, out, Epilogue.parse(TREE), tree_problem(x, b, out, None, None),
                     up=up)
    launcher.keep_alive(plan)
    order = tuple(range(UP_INDEX)) + (3,)  # the recipe's up (UP_INDEX) is the launcher's 3
    return torch.frombuffer(bytearray(plan.recipe.to_bytes(order)), dtype=torch.uint8)


def _swiglu_cuda_python(x, w_gate, w_up):
    """The CUDA implementation where the compiled launcher is not loaded."""
    check_args(x, w_gate, w_up)
    n, k = w_gate.shape
    x2 = x.reshape(-1, k)
    if not kernel_takes(x, w_gate, w_up) or min(x2.shape[0], n, k) == 0 or not uses_dual(
            x2.shape[0], n, k, torch.cuda.is_current_stream_capturing(), compiled=False):
        return reference(x, w_gate, w_up).contiguous()
    from ..runtime.api import gemm as runtime_gemm
    out = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    with torch.cuda.device(x.device):
        runtime_gemm(row_or_col(x2), w_gate.contiguous().t(), out, epilogue=TREE,
                     up=w_up.contiguous().t(),
                     stream=torch.cuda.current_stream(x.device).cuda_stream)
    return out.reshape(*x.shape[:-1], n)


if not LAUNCHER:
    _LIB.impl("swiglu", _swiglu_cuda_python, "CUDA")


@torch.library.register_fake("gemmgen::swiglu")
def _swiglu_fake(x, w_gate, w_up):
    check_args(x, w_gate, w_up)
    return x.new_empty((*x.shape[:-1], w_gate.shape[0]))


def _setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad: Tensor):
    """d/dx, d/dw_gate, d/dw_up of silu(g) * u with g = x w_gate^T and u = x w_up^T recomputed:
    dg = dy u silu'(g), du = dy silu(g), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g)."""
    x, w_gate, w_up = ctx.saved_tensors
    op = torch.ops.gemmgen.gemm
    k = x.shape[-1]
    x2 = row_or_col(x.reshape(-1, k))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    g = op(x2, w_gate.t()).to(acc)
    u = op(x2, w_up.t()).to(acc)
    dy = grad.reshape(-1, grad.shape[-1]).to(acc)
    s = torch.sigmoid(g)
    dg = (dy * u * s * (1 + g * (1 - s))).to(x.dtype)
    du = (dy * g * s).to(x.dtype)
    dx = dw_gate = dw_up = None
    if ctx.needs_input_grad[0]:
        dx = (op(dg, w_gate) + op(du, w_up)).reshape(x.shape)   # (M x N) @ (N x K)
    if ctx.needs_input_grad[1]:
        dw_gate = op(dg.t(), x2)                                 # (N x M) @ (M x K)
    if ctx.needs_input_grad[2]:
        dw_up = op(du.t(), x2)
    return dx, dw_gate, dw_up


torch.library.register_autograd("gemmgen::swiglu", _backward, setup_context=_setup)
_SWIGLU = torch.ops.gemmgen.swiglu.default


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor:
    """``silu(x @ w_gate^T) * (x @ w_up^T)`` through ``torch.ops.gemmgen.swiglu`` (one dual GEMM
    on Hopper; see ``gemmgen.torch.mlp``), with autocast as ``gemmgen.torch.linear``. x is
    (..., K), w_gate and w_up nn.Linear weights (N x K); returns (..., N). With fewer rows than
    the dual GEMM takes (``few_rows``) PyTorch's formula runs here, without the op's host
    time. Raises ``OperandError`` naming the argument."""
    x, w_gate, w_up = autocast(x.device.type, x, w_gate, w_up)
    if few_rows(x):  # the argument checks only where PyTorch's own would not name it
        if w_gate.dim() != 2 or w_gate.shape != w_up.shape:
            check_args(x, w_gate, w_up)
        try:
            return reference(x, w_gate, w_up)
        except RuntimeError:
            check_args(x, w_gate, w_up)
            raise
    return call(_SWIGLU, x, w_gate, w_up)
