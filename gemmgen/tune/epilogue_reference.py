"""Verification: an epilogue tree evaluated in float64 on NumPy (or CuPy) arrays, the reference the
GPU tests compare the kernels against. It reads the same leaves the kernel does (the
accumulator, alpha, beta*C, the row and column vectors, R) and returns the result with what the
recording nodes saw (``aux``, ``amax``)."""
from __future__ import annotations

import math

import numpy as np

from ..model.epilogue import Epilogue, Node

E4M3_MAX = 448.0


def _xp(x):
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        import cupy
        return cupy
    return np


def _round(x, dtype: str, xp):
    """x rounded to ``dtype`` (fp16, bf16, e4m3 saturating), back in float64."""
    if dtype == "fp16":
        return x.astype(xp.float16).astype(xp.float64)
    import ml_dtypes
    host = np.asarray(x.get() if hasattr(x, "get") else x)
    if dtype == "bf16":
        out = host.astype(ml_dtypes.bfloat16).astype(np.float64)
    else:
        out = np.clip(host, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)
        out = out.astype(np.float64)
    return xp.asarray(out)


def _activation(op: str, x, xp):
    if op == "relu":
        return xp.maximum(x, 0.0)
    if op == "gelu":
        return 0.5 * x * (1 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if op == "gelu_erf":
        host = np.asarray(x.get() if hasattr(x, "get") else x)
        erf = np.vectorize(math.erf, otypes=[np.float64])(host / math.sqrt(2))
        return 0.5 * x * (1 + xp.asarray(erf))
    if op == "silu":
        return x / (1 + xp.exp(-x))
    return x  # identity


def evaluate(epilogue: str | Epilogue, leaves: dict, staged: str | None = None):
    """(result, recorded) of the tree in float64. ``leaves`` maps leaf names to arrays that
    broadcast to M x N: ``acc`` (or ``gate`` and ``up``), ``alpha``, ``beta`` with ``C``,
    ``row_scale`` and ``row_bias`` (shape (M, 1)), ``col_scale`` and ``bias`` (shape (N,)),
    ``R``. ``recorded`` holds ``aux`` (the array aux saw) and ``amax`` (max |x| it saw).
    ``staged``: C's dtype when the kernel overlaps its epilogue, whose activation then sees its
    argument rounded to it (``gemmgen.model.epilogue_rules.deferral``)."""
    from ..model.epilogue_rules import deferral
    epi = epilogue if isinstance(epilogue, Epilogue) else Epilogue.parse(epilogue)
    cut = deferral(epi)[0] if staged and deferral(epi) else None
    xp = _xp(next(v for v in leaves.values() if hasattr(v, "shape")))
    recorded: dict = {}

    def value(n: Node):
        if n.op == "beta_c":
            return leaves["beta"] * leaves["C"] if leaves["beta"] != 0 else 0.0
        if n.op in ("acc", "gate", "up", "alpha", "row_scale", "col_scale", "row_bias", "bias",
                    "R"):
            return leaves[n.op]
        args = [value(a) for a in n.args]
        if n.op == "add":
            out = sum(args[1:], args[0])
        elif n.op == "mul":
            out = args[0]
            for a in args[1:]:
                out = out * a
        elif n.op == "cast":
            out = _round(xp.asarray(args[0], dtype=xp.float64), n.attr("dtype"), xp)
        elif n.op == "aux":
            out = recorded["aux"] = args[0]
        elif n.op == "amax":
            out = args[0]
            recorded["amax"] = float(xp.max(xp.abs(out)))
        else:
            out = _activation(n.op, args[0], xp)
        if n is cut:
            out = _round(xp.asarray(out, dtype=xp.float64), staged, xp)
        return out
    return value(epi.root), recorded
