"""gemmgen inside PyTorch: the op ``gemmgen::gemm``, its autograd, a drop-in ``Linear`` and
``patch(model)``.

Importing this module imports PyTorch (``import gemmgen`` alone does not). The op

    torch.ops.gemmgen.gemm(a, b, bias=None, epilogue="none") -> Tensor

computes ``act(a @ b + bias)`` for a (M x K) and b (K x N), float16, bfloat16 or float32 CUDA
tensors of one dtype, each row- or column-major (a transposed view is passed as it is: the
kernel's layout follows the strides; any other strides are made contiguous first). ``bias``
holds N values of the same dtype; ``epilogue`` is one of ``gemmgen.model.config.EPILOGUES`` ("none",
"bias", "relu", "gelu", "bias_relu", "bias_gelu"; gelu is the tanh approximation) and is fused
into the kernel. The result is a new row-major M x N tensor of a's dtype.

- The kernel is ``gemmgen.gemm``'s choice for the shape (tuned winner, nearest tuned shape, or
  the fastest family's default preset); compiled cubins come from gemmgen's disk cache.
- It launches on ``torch.cuda.current_stream()`` through the driver API (``gemmgen.runtime.driver``):
  no allocation but the output's (by PyTorch's allocator), no synchronization, so a call is
  captured by ``torch.cuda.graph``. Warm up once before capture (as PyTorch asks for any
  graph): the first call for a shape may compile and loads the kernel.
- A fake (meta) implementation gives the output's shape, dtype and strides, so
  ``torch.compile(fullgraph=True)`` traces the op without a graph break.
- Autograd: dA = dC' @ B^T and dB = A^T @ dC' through the same op on transposed views (no
  copies), dbias = dC' summed over rows, where dC' is dC times the activation's derivative at
  the pre-activation: for ReLU taken from the output's sign (output > 0 exactly where the
  pre-activation is), for GELU recomputed by one more GEMM with the "bias" epilogue (nothing
  extra is kept from the forward pass).
- Operands the kernels do not take (CPU tensors, float64, other dtypes, tensors on a GPU other
  than gemmgen's: PyCUDA's primary context's, one device per process) are computed by PyTorch
  with the same formula, so every valid input works.

Errors: ``OperandError`` (a ``ValueError``) naming the argument for a wrong rank, mismatched
inner dimensions, mixed dtypes, a bias of the wrong length or an epilogue that does not match
the bias; ``ImportError`` (with the install hint) for CUDA tensors without PyCUDA.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor, nn

from .compile.cache import compile_many
from .compile.nvcc import BuildError
from .heuristics.select import choose
from .heuristics.tunedb import TuneDB
from .model.config import EPILOGUES
from .model.families import fallback_config, get_family
from .runtime.api import gemm as dispatch_gemm
from .runtime.device import current_device, pycuda_modules
from .runtime.operands import OperandError

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes gemmgen's kernels take (fp16, bf16, fp32 on SIMT); others go to PyTorch."""


def _check_args(a: Tensor, b: Tensor, bias: Optional[Tensor], epilogue: str) -> None:
    """The op's argument checks (shared by the real and the fake implementation)."""
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


def _row_or_col(x: Tensor) -> Tensor:
    """``x`` itself when its strides are row- or column-major (what the kernels read), else a
    contiguous copy (e.g. an expanded gradient with stride 0)."""
    rows, cols = x.shape
    s0, s1 = x.stride()
    row = (cols <= 1 or s1 == 1) and (rows <= 1 or s0 >= max(cols, 1))
    col = (rows <= 1 or s0 == 1) and (cols <= 1 or s1 >= max(rows, 1))
    return x if row or col else x.contiguous()


def _kernel_takes(a: Tensor, b: Tensor, bias: Optional[Tensor]) -> bool:
    return (a.is_cuda and b.is_cuda and a.dtype in KERNEL_DTYPES and a.device == b.device
            and (bias is None or bias.device == a.device))


@torch.library.custom_op("gemmgen::gemm", mutates_args=())
def _gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, epilogue: str = "none") -> Tensor:
    _check_args(a, b, bias, epilogue)
    if not _kernel_takes(a, b, bias) or a.device.index != _driver()[2]:
        return reference(a, b, bias, epilogue).contiguous()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    args = (_row_or_col(a), _row_or_col(b), out)
    kwargs = dict(bias=None if bias is None else bias.contiguous(), epilogue=epilogue,
                  stream=torch.cuda.current_stream(a.device).cuda_stream)
    drv, dispatch_gemm, _ = _driver()
    if drv.Context.get_current() is not None:
        dispatch_gemm(*args, **kwargs)
        return out
    # A thread PyCUDA has not seen (PyTorch's autograd threads): PyCUDA keeps a context stack
    # per thread, and building or loading a kernel needs its context there. Pushed for the
    # call only: a context left on a thread's stack makes PyCUDA abort when the thread exits.
    import pycuda.autoprimaryctx as primary
    primary.context.push()
    try:
        dispatch_gemm(*args, **kwargs)
    finally:
        drv.Context.pop()
    return out


_DRIVER: list = []


def _driver():
    """(pycuda.driver, gemmgen.runtime.api.gemm, PyTorch's index of gemmgen's device), the primary
    context made current on first use. gemmgen's device is PyCUDA's primary context's, found
    among PyTorch's devices by PCI address (device 0 where PyTorch does not report one)."""
    if not _DRIVER:
        drv, _ = pycuda_modules()
        dev, attr = drv.Context.get_device(), drv.device_attribute
        want = tuple(dev.get_attribute(a) for a in (attr.PCI_DOMAIN_ID, attr.PCI_BUS_ID,
                                                     attr.PCI_DEVICE_ID))
        index = 0
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            got = tuple(getattr(props, f"pci_{n}_id", None) for n in ("domain", "bus", "device"))
            if got == want:
                index = i
                break
        _DRIVER.extend((drv, dispatch_gemm, index))
    return _DRIVER[0], _DRIVER[1], _DRIVER[2]


@_gemm.register_fake
def _gemm_fake(a: Tensor, b: Tensor, bias: Optional[Tensor] = None,
               epilogue: str = "none") -> Tensor:
    _check_args(a, b, bias, epilogue)
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
    if epi.endswith("relu"):
        grad = grad * (out > 0).to(grad.dtype)
    elif epi.endswith("gelu"):  # recompute the pre-activation: one GEMM, nothing kept
        z = _gemm(a, b, bias, "bias" if bias is not None else "none")
        grad = torch.ops.aten.gelu_backward(grad, z, approximate="tanh")
    da = db = dbias = None
    if ctx.needs_input_grad[0]:
        da = _gemm(_row_or_col(grad), b.t())   # (M x N) @ (N x K): B^T is B's other layout
    if ctx.needs_input_grad[1]:
        db = _gemm(a.t(), _row_or_col(grad))   # (K x M) @ (M x N): A^T likewise
    if ctx.has_bias and ctx.needs_input_grad[2]:
        dbias = grad.sum(0)
    return da, db, dbias, None


_gemm.register_autograd(_backward, setup_context=_setup_context)


def gemm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None,
         epilogue: Optional[str] = None) -> Tensor:
    """``torch.ops.gemmgen.gemm`` with autocast: under ``torch.autocast`` for a's device type the
    operands are cast to the autocast dtype first (as PyTorch's own matmul's are). ``epilogue`` defaults to
    "bias" when ``bias`` is given, else "none". Shapes, dtypes and errors: see the module."""
    if epilogue is None:
        epilogue = "bias" if bias is not None else "none"
    device = a.device.type
    if torch.is_autocast_enabled(device):
        dt = torch.get_autocast_dtype(device)
        a, b = a.to(dt), b.to(dt)
        bias = None if bias is None else bias.to(dt)
    return _gemm(a, b, bias, epilogue)


class Linear(nn.Linear):
    """``nn.Linear`` computed by gemmgen: y = act(x @ W^T + b) with W (out_features x
    in_features) read as a column-major B (no transposed copy). x is (..., in_features); its
    leading dimensions are flattened into M. ``activation`` ("relu", "gelu" or None) is fused
    into the kernel's epilogue. Same parameters and state dict as ``nn.Linear``."""

    activation: Optional[str] = None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, activation: Optional[str] = None):
        super().__init__(in_features, out_features, bias, device, dtype)
        if activation not in (None, "relu", "gelu"):
            raise ValueError(f"activation must be None, 'relu' or 'gelu'; got {activation!r}")
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return _linear(x, self.weight.t(), self.bias, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return super().extra_repr() + act + ", gemmgen"


def _linear(x: Tensor, w_kn: Tensor, bias: Optional[Tensor], act: Optional[str]) -> Tensor:
    """act(x @ w_kn + bias) over x's last dimension (w_kn: K x N, any layout)."""
    epi = ("bias" if bias is not None else "none") if act is None else (
        f"bias_{act}" if bias is not None else act)
    y = gemm(x.reshape(-1, x.shape[-1]), w_kn, bias, epi)
    return y.reshape(*x.shape[:-1], w_kn.shape[1])


_CONV1D: dict = {}


def _conv1d_class(base):
    """A subclass of transformers' ``Conv1D`` (weight in x out, y = x @ W + b) computed by
    gemmgen, W read as a row-major B; made once per base class."""
    if base not in _CONV1D:
        def forward(self, x):
            return _linear(x, self.weight, self.bias, None)
        _CONV1D[base] = type("Conv1D", (base,), {"forward": forward,
                                                  "__module__": __name__,
                                                  "__doc__": _conv1d_class.__doc__})
    return _CONV1D[base]


@dataclass
class PatchSummary:
    """What ``patch`` did: ``swapped`` maps each module's qualified name to what it was
    ("nn.Linear" or "Conv1D"), ``skipped`` to why it was left alone."""

    swapped: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)

    def counts(self) -> dict:
        out: dict = {}
        for kind in self.swapped.values():
            out[kind] = out.get(kind, 0) + 1
        return out

    def __str__(self) -> str:
        parts = [f"{n} {kind}" for kind, n in sorted(self.counts().items())] or ["nothing"]
        text = "gemmgen.torch.patch swapped " + ", ".join(parts)
        if self.skipped:
            text += f"; skipped {len(self.skipped)}: " + ", ".join(
                f"{k} ({v})" for k, v in self.skipped.items())
        return text


def _transformers_conv1d():
    """transformers' Conv1D class if transformers is installed (imported only then), else None."""
    import importlib.util
    import sys
    if "transformers" not in sys.modules and importlib.util.find_spec("transformers") is None:
        return None
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return None
    return Conv1D


def patch(model: nn.Module, exclude=()) -> PatchSummary:
    """Route ``model``'s ``nn.Linear`` and transformers ``Conv1D`` layers (the model itself
    included) through gemmgen, in place: each module's class becomes ``gemmgen.torch.Linear``
    or a gemmgen ``Conv1D`` subclass, keeping its parameters (optimizers holding them stay
    valid), hooks and state-dict keys. ``exclude``: qualified module names (or prefixes ending
    in ".") to leave alone. Subclasses of ``nn.Linear`` are left alone (their forward may differ).
    ``unpatch`` undoes it. Returns a ``PatchSummary``."""
    conv1d = _transformers_conv1d()
    summary = PatchSummary()
    for name, mod in model.named_modules():
        if any(name == e or (e.endswith(".") and name.startswith(e)) for e in exclude):
            if isinstance(mod, nn.Linear) or (conv1d is not None and isinstance(mod, conv1d)):
                summary.skipped[name] = "excluded"
            continue
        cls = type(mod)
        if cls is nn.Linear:
            mod._gemmgen_original_class = cls
            mod.__class__ = Linear
            summary.swapped[name] = "nn.Linear"
        elif conv1d is not None and cls is conv1d:
            mod._gemmgen_original_class = cls
            mod.__class__ = _conv1d_class(cls)
            summary.swapped[name] = "Conv1D"
        elif isinstance(mod, nn.Linear) and cls is not Linear:
            summary.skipped[name] = f"{cls.__name__} subclasses nn.Linear"
    return summary


def unpatch(model: nn.Module) -> int:
    """Give every module ``patch`` swapped its original class back; returns how many."""
    n = 0
    for mod in model.modules():
        original = mod.__dict__.pop("_gemmgen_original_class", None)
        if original is not None:
            mod.__class__ = original
            n += 1
    return n


def linear_problems(m: int, k: int, n: int, dtype: str, weight: str = "nk",
                    epilogue: str = "bias") -> list:
    """The GEMMs one linear layer of M rows, K inputs and N outputs runs in a training step, as
    ``precompile`` takes them: the forward pass (``weight`` "nk": nn.Linear's N x K weight read
    column-major; "kn": Conv1D's K x N weight read row-major) and the backward's dA and dB."""
    b = "c" if weight == "nk" else "r"
    return [(dtype, m, n, k, "r" + b + "r", epilogue),
            (dtype, m, k, n, "r" + ("r" if b == "c" else "c") + "r", "none"),
            (dtype, k, n, m, "crr", "none")]


def precompile(problems, db=None, jobs: int | None = None, fallbacks: bool = True) -> dict:
    """Compile at once, in parallel nvcc processes, the kernels ``gemmgen.gemm`` will choose for
    ``problems`` ((dtype, M, N, K, layout, epilogue) tuples; dtype "fp16", "bf16" or "fp32"),
    with the fallback kernel of each TMA (wgmma) kernel (unless ``fallbacks`` is False: it
    runs only for operands TMA cannot describe), into gemmgen's disk cache, so the
    calls that follow only load cubins. Returns {"kernels": configs, "seconds": wall time,
    "errors": [messages]}. Needs a GPU (the choice depends on it) and nvcc."""
    import time

    gpu, cc = current_device()
    tunedb = TuneDB(db)
    configs = {}
    for dt, m, n, k, lay, epi in problems:
        cfg, _ = choose(tunedb, gpu, dt, m, n, k, cc, lay, epi)
        configs[repr(cfg)] = cfg
        if fallbacks and get_family(cfg.family).tma:
            fb = fallback_config(cfg)
            configs[repr(fb)] = fb
    start = time.perf_counter()
    done = compile_many(list(configs.values()), jobs=jobs)
    errors = [str(d) for d in done if isinstance(d, BuildError)]
    return {"kernels": len(configs), "seconds": time.perf_counter() - start, "errors": errors}


__all__ = ["KERNEL_DTYPES", "Linear", "PatchSummary", "activate", "gemm", "linear_problems",
           "patch", "precompile", "reference", "unpatch"]
