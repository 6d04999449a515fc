"""Data types: gemmgen's dtype names -> NumPy dtypes, unit roundoffs and cuBLAS enums.

FP8 (the fp8 family): e4m3 (``torch.float8_e4m3fn``, ``ml_dtypes.float8_e4m3fn``: 4 exponent
bits, 3 mantissa bits, no infinities, largest finite 448) and e5m2 (``float8_e5m2``: 5 and 2,
largest finite 57344), one byte each.
"""
from __future__ import annotations

import numpy as np

# Unit roundoff u = 2^-(significand bits): of the storage format, and of what the kernel rounds
# inputs to (TF32 keeps 10 explicit bits of a float32).
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8,
                 "e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}

ELEM_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4, "e4m3": 1, "e5m2": 1}
"""Bytes per element as stored (tf32 is float32 storage)."""
FP8_DTYPES = ("e4m3", "e5m2")
"""The FP8 dtypes: A and B of the fp8 family only (no other family, no cuBLAS baseline)."""
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
"""Largest finite value of each FP8 dtype (a quantization scale is amax / FP8_MAX)."""
CTYPES = {"fp16": "half", "bf16": "__nv_bfloat16", "tf32": "float", "fp32": "float",
          "e4m3": "__nv_fp8_e4m3", "e5m2": "__nv_fp8_e5m2"}
"""C++ storage type of each dtype in the emitted kernels."""

# cudaDataType_t (library_types.h) and cublasComputeType_t (cublas_api.h) values.
CUDA_R = {"fp32": 0, "tf32": 0, "fp16": 2, "bf16": 14, "e4m3": 28, "e5m2": 29}
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77


def stored_as(name: str) -> str:
    """The gemmgen dtype whose memory holds ``name``: fp32 for tf32 (float32 storage), else
    ``name``. It is also C's default dtype for A and B of ``name``."""
    return "fp32" if name == "tf32" else name


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
