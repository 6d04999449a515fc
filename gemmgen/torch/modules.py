"""Modules computed by gemmgen: a drop-in ``Linear``, transformers' ``Conv1D``, and
``patch(model)`` / ``unpatch(model)`` that swap them into a model in place."""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Optional

from torch import Tensor, nn

from .ops import linear


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
