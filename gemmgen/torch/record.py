"""The GEMMs a model runs: ``record(model, *inputs)`` lists them, and ``save_problems``
(re-exported here) writes them as the shapes file ``gemmgen tune --shapes`` reads.

A ``TorchDispatchMode`` sees every matrix product the model's forward (and, with
``backward=True``, its backward) pass runs: ``aten.mm``, ``aten.addmm``, ``aten.bmm``,
``aten.baddbmm`` (nn.Linear, matmul and Conv1D lower to these) and ``gemmgen::gemm`` (a patched
model). Each becomes a ``Problem``: dtype, M, N, K, the layout its operands' strides give (r or
c each for A, B and C) and how often it ran. Works on CPU and meta tensors too (the shapes are
what counts), so a model can be recorded without a GPU.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..runtime.arrays import torch_dtype_name
from ..model.problem import Problem, save_problems

_TUNABLE = {"fp16", "bf16", "fp32"}


def _major(x: torch.Tensor) -> str:
    """"c" when the rows are contiguous and the columns are not, else "r" (other strides, e.g.
    an expanded gradient, are copied row-major before a kernel reads them)."""
    rows, cols = x.shape[-2], x.shape[-1]
    return "c" if rows > 1 and cols > 1 and x.stride(-2) == 1 and x.stride(-1) != 1 else "r"


def _product(func, args) -> tuple | None:
    """(A, B, batched) of a matrix-product call, or None for any other op."""
    name = getattr(func, "_schema", None) and func._schema.name
    if name in ("aten::mm", "aten::bmm"):
        return args[0], args[1], name == "aten::bmm"
    if name in ("aten::addmm", "aten::baddbmm"):
        return args[1], args[2], name == "aten::baddbmm"
    if name == "gemmgen::gemm":
        return args[0], args[1], False
    return None


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        found = _product(func, args)
        if found is not None:
            a, b, batched = found
            dtype = torch_dtype_name(a.dtype)
            c_major = "r" if not isinstance(out, torch.Tensor) else _major(out)
            batch = a.shape[0] if batched else 1
            self.seen[(dtype, a.shape[-2], b.shape[-1], a.shape[-1],
                       _major(a) + _major(b) + c_major, batch)] += 1
        return out


def record(model: torch.nn.Module, *inputs, backward: bool = False, **kwargs) -> list[Problem]:
    """Run ``model(*inputs, **kwargs)`` (and, with ``backward``, the backward pass from a random
    gradient of its (first) output) and return the GEMMs it ran, most frequent first. Half-precision and float32
    products only (others are not gemmgen's); under autocast, the cast dtype is recorded."""
    rec = _Recorder()
    with rec:
        out = model(*inputs, **kwargs)
        if backward:  # a random output gradient: contiguous, as a real loss's is
            first = out if isinstance(out, torch.Tensor) else out[0]
            first.backward(torch.randn_like(first))
    problems = [Problem(dt, m, n, k, lay, batch, count)
                for (dt, m, n, k, lay, batch), count in rec.seen.items() if dt in _TUNABLE]
    return sorted(problems, key=lambda p: (-p.count, p.dtype, p.m, p.n, p.k, p.layout))


__all__ = ["Problem", "record", "save_problems"]
