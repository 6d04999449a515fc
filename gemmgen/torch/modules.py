"""Modules computed by gemmgen: a drop-in ``Linear``, transformers' ``Conv1D``, Llama-style
SwiGLU MLPs, and ``patch(model)`` / ``unpatch(model)`` that swap them into a model in place."""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .ops import linear
from .mlp import few_rows, swiglu


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
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return super().extra_repr() + act + ", gemmgen"


_CONV1D: dict = {}


def _conv1d_class(base):
    """A subclass of transformers' ``Conv1D`` (weight in x out, y = x @ W + b) computed by
    gemmgen, W read as a row-major B; made once per base class."""
    if base not in _CONV1D:
        def forward(self, x):
            return linear(x, self.weight.t(), self.bias)
        _CONV1D[base] = type("Conv1D", (base,), {"forward": forward,
                                                  "__module__": __name__,
                                                  "__doc__": _conv1d_class.__doc__})
    return _CONV1D[base]


_SWIGLU_MLP: dict = {}
_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def _swiglu_class(base):
    """A subclass of a Llama-style MLP class whose forward is down_proj(swiglu(x, gate, up)):
    the gate and up projections and SiLU * up in one dual GEMM; made once per base class. For
    fewer rows of x than the dual GEMM takes (``mlp.DUAL_MIN_M``) the forward is the base's
    formula, each projection its own GEMM, without the op's host time."""
    if base not in _SWIGLU_MLP:
        def forward(self, x):
            if few_rows(x):
                return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
            return self.down_proj(swiglu(x, self.gate_proj.weight, self.up_proj.weight))
        _SWIGLU_MLP[base] = type(base.__name__, (base,), {"forward": forward,
                                                          "__module__": __name__,
                                                          "__doc__": _swiglu_class.__doc__})
    return _SWIGLU_MLP[base]


SWIGLU_MLPS = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP")
"""transformers' MLP classes whose forward is down_proj(act_fn(gate_proj(x)) * up_proj(x))."""


def _forward_replaced(mod: nn.Module) -> str | None:
    """Why swapping ``mod``'s class would not change what it runs, or None: an instance
    attribute ``forward`` (set by accelerate's hooks, ``_hf_hook``, or by hand) wins over the
    class's."""
    if "forward" in mod.__dict__ or hasattr(mod, "_hf_hook"):
        return "its forward is replaced on the instance (accelerate's hooks, or by hand)"
    return None


def why_not_swiglu(mod: nn.Module, classes=()) -> str | None:
    """None when ``mod`` is a Llama-style SwiGLU MLP that ``patch`` fuses, else why not: its
    class is one of transformers' ``SWIGLU_MLPS`` or in ``classes`` (a forward computing
    down_proj(act_fn(gate_proj(x)) * up_proj(x))); neither it nor a projection has its forward
    replaced on the instance; ``gate_proj``, ``up_proj`` and ``down_proj`` are plain
    ``nn.Linear`` layers without hooks, gate and up of one shape, dtype and device and without
    bias; ``act_fn`` is SiLU."""
    cls = type(mod)
    known = cls.__module__.startswith("transformers.") and cls.__name__ in SWIGLU_MLPS
    if not known and cls not in classes:
        return (f"{cls.__name__}'s forward is not known to be down_proj(silu(gate_proj(x)) * "
                f"up_proj(x)) (pass it in swiglu_mlp to fuse it)")
    replaced = _forward_replaced(mod)
    if replaced:
        return replaced
    layers = [getattr(mod, name, None) for name in _PROJECTIONS]
    if not all(type(layer) in (nn.Linear, Linear) for layer in layers):
        return "not gate_proj, up_proj and down_proj nn.Linear layers"
    gate, up, _ = layers
    if gate.bias is not None or up.bias is not None:
        return "gate_proj or up_proj has a bias"
    if any(layer._forward_hooks or layer._forward_pre_hooks for layer in layers):
        return "a projection has forward hooks"
    if any(_forward_replaced(layer) for layer in layers):
        return "a projection's forward is replaced on the instance"
    w, v = gate.weight, up.weight
    if w.shape != v.shape or w.dtype != v.dtype or w.device != v.device:
        return "gate_proj and up_proj weights differ in shape, dtype or device"
    act = getattr(mod, "act_fn", None)
    if not (type(act) is nn.SiLU or type(act).__name__ == "SiLUActivation" or act is F.silu):
        return "act_fn is not SiLU"
    return None


def _fuse_gate_up(gate: nn.Linear, up: nn.Linear) -> None:
    """Make the gate and up weights views of one (2N x K) buffer, gate first, so the dual GEMM
    reads them in place; their Parameter objects stay the same (optimizers holding them stay
    valid)."""
    w, v = gate.weight, up.weight
    if v.data_ptr() == w.data_ptr() + w.numel() * w.element_size() and w.is_contiguous() \
            and v.is_contiguous():
        return
    with torch.no_grad():
        both = torch.cat([w.detach(), v.detach()])
        n = w.shape[0]
        w.data, v.data = both[:n], both[n:]


@dataclass
class PatchSummary:
    """What ``patch`` did: ``swapped`` maps each module's qualified name to what it was
    ("nn.Linear", "Conv1D" or "SwiGLU MLP"), ``skipped`` to why it was left alone."""

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
    if "transformers" not in sys.modules and importlib.util.find_spec("transformers") is None:
        return None
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return None
    return Conv1D


def _mlp_classes(swiglu_mlp) -> tuple:
    """The further MLP classes ``patch``'s ``swiglu_mlp`` names: none for a bool, else the class
    or each class of a sequence. Raises ``TypeError`` naming the argument for anything else."""
    if isinstance(swiglu_mlp, bool):
        return ()
    if isinstance(swiglu_mlp, type):
        return (swiglu_mlp,)
    try:
        classes = tuple(swiglu_mlp)
    except TypeError:  # not a sequence
        classes = None
    if classes is None or not all(isinstance(c, type) for c in classes):
        raise TypeError(f"swiglu_mlp must be True, False, an MLP class or a sequence of them; "
                        f"got {swiglu_mlp!r}")
    return classes


def patch(model: nn.Module, exclude=(), swiglu_mlp=True) -> PatchSummary:
    """Route ``model``'s ``nn.Linear`` and transformers ``Conv1D`` layers (the model itself
    included) through gemmgen, in place: each module's class becomes ``gemmgen.torch.Linear``
    or a gemmgen ``Conv1D`` subclass, keeping its parameters (optimizers holding them stay
    valid), hooks and state-dict keys. ``exclude``: qualified module names (or prefixes ending
    in ".") to leave alone; an MLP one of whose projections is excluded is not fused. Subclasses of
    ``nn.Linear`` and modules whose forward is replaced on the instance (accelerate's hooks) are
    left alone (the class's forward is not what they run).
    With ``swiglu_mlp`` (True, or further MLP classes of the same forward: one or a sequence), each
    Llama-style MLP (``why_not_swiglu``) computes its gate and up projections and SiLU * up in
    one dual GEMM (``gemmgen.torch.swiglu``), its gate and up weights made views of one buffer
    (gate first) so the kernel reads them in place.
    ``unpatch`` undoes it (the weights stay in their shared buffer). Returns a ``PatchSummary``;
    raises ``TypeError`` for a ``swiglu_mlp`` that is not a bool or classes (nothing swapped)."""
    conv1d = _transformers_conv1d()
    summary = PatchSummary()
    classes = _mlp_classes(swiglu_mlp)

    def excluded(name: str) -> bool:
        return any(name == e or (e.endswith(".") and name.startswith(e)) for e in exclude)
    for name, mod in model.named_modules():
        if excluded(name):
            if isinstance(mod, nn.Linear) or (conv1d is not None and isinstance(mod, conv1d)):
                summary.skipped[name] = "excluded"
            continue
        cls = type(mod)
        if swiglu_mlp and hasattr(mod, "gate_proj") and cls not in _SWIGLU_MLP.values():
            why = why_not_swiglu(mod, classes)
            if why is None and any(excluded(f"{name}.{p}" if name else p) for p in _PROJECTIONS):
                why = "a projection is excluded"
            if why is None:
                _fuse_gate_up(mod.gate_proj, mod.up_proj)
                mod._gemmgen_original_class = cls
                mod.__class__ = _swiglu_class(cls)
                summary.swapped[name] = "SwiGLU MLP"
            else:
                summary.skipped[name] = why
        swappable = cls is nn.Linear or (conv1d is not None and cls is conv1d)
        replaced = _forward_replaced(mod) if swappable else None
        if replaced:
            summary.skipped[name] = replaced
        elif cls is nn.Linear:
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
