"""Arrays as gemmgen reads them: the gemmgen dtype name of an array's elements or of a
library's dtype (NumPy, ml_dtypes, PyTorch, CuPy, PyCUDA), and the NumPy dtype that stores each
gemmgen dtype. The names and their properties are ``gemmgen.model.dtypes``'s.
"""
from __future__ import annotations

import numpy as np

from ..model.dtypes import ELEM_BYTES, FP8_DTYPES


def numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype that stores ``name`` (fp32 and tf32: float32; fp16: float16; bf16:
    ml_dtypes.bfloat16; e4m3, e5m2: ml_dtypes.float8_e4m3fn, float8_e5m2). Raises
    ``ImportError`` naming ml_dtypes when bf16 or FP8 needs it."""
    if name in ("fp32", "tf32"):
        return np.dtype(np.float32)
    if name == "fp16":
        return np.dtype(np.float16)
    if name in ("bf16", *FP8_DTYPES):
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError(f"{name} arrays need ml_dtypes (NumPy has no {name}): "
                              "pip install ml_dtypes") from exc
        return np.dtype({"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
                         "e5m2": ml_dtypes.float8_e5m2}[name])
    raise ValueError(f"unknown dtype {name!r}")


_LIBRARY_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                  "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
"""NumPy's, ml_dtypes' and PyTorch's names of the dtypes gemmgen knows."""


def torch_dtype_name(dtype) -> str | None:
    """gemmgen name of a torch dtype (float32 -> fp32, float16 -> fp16, bfloat16 -> bf16,
    float8_e4m3fn -> e4m3, float8_e5m2 -> e5m2)."""
    text = str(dtype)
    return _LIBRARY_NAMES.get(text[6:]) if text.startswith("torch.") else None


def dtype_name(dtype) -> str | None:
    """gemmgen name of a dtype argument: a gemmgen name (returned as it is), a torch dtype, a
    NumPy or ml_dtypes dtype, or its name ("bfloat16"); None for anything else."""
    if isinstance(dtype, str) and dtype in ELEM_BYTES:
        return dtype
    if "torch" in str(type(dtype)):
        return torch_dtype_name(dtype)
    try:
        return _LIBRARY_NAMES.get(np.dtype(dtype).name)
    except (TypeError, ValueError):
        return _LIBRARY_NAMES.get(str(dtype))


def dtype_name_of(x) -> str:
    """gemmgen dtype name of an array's elements (NumPy, CuPy, PyTorch, PyCUDA GPUArray):
    float32 -> fp32, float16 -> fp16, bfloat16 -> bf16, float8_e4m3fn -> e4m3, float8_e5m2 ->
    e5m2. Raises ``ValueError`` otherwise (uint8 too: name its FP8 type with ``dtype=``)."""
    if not hasattr(x, "dtype"):
        raise ValueError(f"expected an array (NumPy, CuPy, PyTorch, PyCUDA); got "
                         f"{type(x).__name__}")
    if type(x).__module__.split(".")[0] == "torch":
        name = torch_dtype_name(x.dtype)
    else:
        dt = np.dtype(x.dtype)
        name = _LIBRARY_NAMES.get(dt.name)
        if name is None and dt.kind == "V" and dt.itemsize == 2:
            name = "bf16"  # PyCUDA's view of a bfloat16 array
    if name is None:
        raise ValueError(f"no gemmgen kernel takes {getattr(x, 'dtype', type(x))} operands")
    return name


def array_dtype(x) -> str | None:
    """``dtype_name_of(x)``, or None for an array of a dtype gemmgen does not know, or for
    something that is not an array."""
    try:
        return dtype_name_of(x)
    except ValueError:
        return None
