"""FP8 quantization on the GPU: x (rows x cols, fp32, fp16 or bf16) -> FP8 bytes and fp32
dequantization scales s = max(amax, floor) / FP8_MAX per group, q = saturate(x / s), by the
kernels of ``templates/fp8_quant.cu.j2`` (one module per input and FP8 dtype, compiled into the
cubin cache, loaded per device).

Groups (``GROUPS``): "1x128" (per token and 128 columns: DeepSeek-V3's activations), "128x128"
(its weights), "row" (one scale per row) and "tensor" (one scale, two passes). Launches take
device pointers and a raw stream; ``gemmgen.torch.quantize`` allocates and calls them.
"""
from __future__ import annotations

import struct
import threading

from ..codegen.render import render_template
from ..compile.cache import compile_cached
from ..model.dtypes import CTYPES, ELEM_BYTES, FP8_MAX
from . import driver
from .recipe import GRID_LIMIT_YZ, field_offsets, grid_pieces, offset, pack

GROUPS = ("1x128", "128x128", "row", "tensor")
THREADS = 256
GROUP = 128
ELEMS = GROUP // 32          # 1x128: each lane of a warp quantizes 4 consecutive values
ROWS_PER_CTA = THREADS // 32  # 1x128: a warp per (row, group)
INTERP = {"e4m3": "__NV_E4M3", "e5m2": "__NV_E5M2"}
SIGNATURES = {"1x128": "PqiiPqPqqf", "128x128": "PqiiPqPqqf", "amax": "PqiiPi",
              "apply": "PqiiPiPqPf"}
STRUCTS = {k: struct.Struct("@" + v) for k, v in SIGNATURES.items()}
OFFSETS = {k: field_offsets(v) for k, v in STRUCTS.items()}
_TILED = ("x", "ldx", "rows", "cols", "q", "ldq", "scale", "ss_r", "ss_c", "floor")
NAMES = {"1x128": _TILED, "128x128": _TILED, "amax": ("x", "ldx", "rows", "cols", "amax", "per_row"),
         "apply": ("x", "ldx", "rows", "cols", "amax", "per_row", "q", "ldq", "scale", "floor")}
"""The argument each parameter holds (named when a value does not fit it)."""

_MODULES: dict[tuple, driver.Module] = {}
_LOCK = threading.Lock()


def name_of(in_dtype: str, fp8: str) -> str:
    return f"gemm_fp8_quant_{in_dtype}_{fp8}"


def source(in_dtype: str, fp8: str) -> str:
    """The module's CUDA source for ``in_dtype`` (fp32, fp16, bf16) and ``fp8`` (e4m3, e5m2)."""
    name = name_of(in_dtype, fp8)
    q = {"name": name, "ns": f"{name}_cfg", "in_dtype": in_dtype,
         "fp8": fp8, "in_t": CTYPES[in_dtype], "interp": INTERP[fp8],
         "fp8_max": repr(FP8_MAX[fp8]),
         "constants": [("THREADS", THREADS), ("GROUP", GROUP), ("ELEMS", ELEMS)]}
    return render_template("fp8_quant.cu.j2", q=q)


def module(in_dtype: str, fp8: str, device: int, arch: str = "sm_90a") -> driver.Module:
    """The quantization module on ``device`` (compiled once into the cubin cache)."""
    key = (in_dtype, fp8, device, arch)
    found = _MODULES.get(key)
    if found is None:
        with _LOCK:
            if key not in _MODULES:
                cubin, _ = compile_cached(source(in_dtype, fp8), arch, name_of(in_dtype, fp8))
                _MODULES[key] = driver.Module(cubin, device)
            found = _MODULES[key]
    return found


def _launch(mod, name: str, kind: str, grid, values, stream) -> None:
    params, _ = pack(STRUCTS[kind], OFFSETS[kind], tuple(values), NAMES[kind])
    driver.launch(mod.function(name).handle, grid, (THREADS, 1, 1), 0, params, stream)


def quantize(group: str, in_dtype: str, fp8: str, x: int, ldx: int, rows: int, cols: int,
             q: int, ldq: int, scale: int, ss_r: int = 0, ss_c: int = 0, amax: int = 0,
             floor: float = 1.1754943508222875e-38, device: int = 0, stream=None,
             arch: str = "sm_90a") -> None:
    """Quantize x into q and scale (device addresses) on ``device``'s ``stream``. The scale of
    group (i, j) goes to scale[i * ss_r + j * ss_c] ("1x128": row i, column block j;
    "128x128": row block i, column block j; "row": scale[i * ss_r]; "tensor": scale[0]).
    "row" and "tensor" need ``amax``: a zeroed float32 buffer of ``rows`` values (row) or one
    (tensor). Raises ``ValueError`` for an unknown group, ``OperandError`` naming a size beyond
    its parameter (rows or cols past 2^31 - 1), ``DriverError`` from the launch."""
    if group not in GROUPS:
        raise ValueError(f"unknown quantization group {group!r}; known: {', '.join(GROUPS)}")
    if not rows or not cols:
        return
    mod = module(in_dtype, fp8, device, arch)
    name = name_of(in_dtype, fp8)
    with driver.on_device(device):
        if group in ("1x128", "128x128"):
            if group == "1x128":  # its rows loop over grid y
                ys = -(-rows // ROWS_PER_CTA)
                _launch(mod, f"{name}_{group}", group,
                        (-(-cols // GROUP), min(ys, GRID_LIMIT_YZ), 1),
                        (x, ldx, rows, cols, q, ldq, scale, ss_r, ss_c, floor), stream)
                return
            item = ELEM_BYTES[in_dtype]  # 128x128: one CTA per block, launched in pieces
            for r0, nr in grid_pieces(rows, GROUP, GRID_LIMIT_YZ):
                _launch(mod, f"{name}_{group}", group, (-(-cols // GROUP), -(-nr // GROUP), 1),
                        (offset(x, r0 * ldx * item), ldx, nr, cols, offset(q, r0 * ldq), ldq,
                         offset(scale, r0 // GROUP * ss_r * 4), ss_r, ss_c, floor), stream)
            return
        per_row = 1 if group == "row" else 0
        if group == "row" and ss_r != 1:
            raise ValueError("row scales are written contiguously (ss_r = 1)")
        grid = (min(-(-cols // THREADS), 64), min(rows, GRID_LIMIT_YZ), 1)
        _launch(mod, f"{name}_amax", "amax", grid, (x, ldx, rows, cols, amax, per_row), stream)
        _launch(mod, f"{name}_apply", "apply", grid,
                (x, ldx, rows, cols, amax, per_row, q, ldq, scale, floor), stream)
