"""Data types: gemmgen's dtype names -> NumPy dtypes, unit roundoffs and cuBLAS enums."""
from __future__ import annotations

import numpy as np

# Unit roundoff u = 2^-(significand bits): of the storage format, and of what the kernel rounds
# inputs to (TF32 keeps 10 explicit bits of a float32).
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}

ELEM_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp32": 4}
"""Bytes per element as stored (tf32 is float32 storage)."""
CTYPES = {"fp16": "half", "bf16": "__nv_bfloat16", "tf32": "float", "fp32": "float"}
"""C++ storage type of each dtype in the emitted kernels."""

# cudaDataType_t (library_types.h) and cublasComputeType_t (cublas_api.h) values.
CUDA_R = {"fp32": 0, "tf32": 0, "fp16": 2, "bf16": 14}
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 77


def stored_as(name: str) -> str:
    """The gemmgen dtype whose memory holds ``name``: fp32 for tf32 (float32 storage), else
    ``name``. It is also C's default dtype for A and B of ``name``."""
    return "fp32" if name == "tf32" else name


def numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype that stores ``name`` (fp32 and tf32: float32; fp16: float16; bf16:
    ml_dtypes.bfloat16). Raises ``ImportError`` naming ml_dtypes when bf16 needs it."""
    if name in ("fp32", "tf32"):
        return np.dtype(np.float32)
    if name == "fp16":
        return np.dtype(np.float16)
    if name == "bf16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError("bf16 arrays need ml_dtypes (NumPy has no bfloat16): "
                              "pip install ml_dtypes") from exc
        return np.dtype(ml_dtypes.bfloat16)
    raise ValueError(f"unknown dtype {name!r}")


def torch_dtype_name(dtype) -> str | None:
    """gemmgen name of a torch dtype (float32 -> fp32, float16 -> fp16, bfloat16 -> bf16)."""
    return {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}.get(
        str(dtype))


def dtype_name_of(x) -> str:
    """gemmgen dtype name of an array's elements (NumPy, CuPy, PyTorch, PyCUDA GPUArray):
    float32 -> fp32, float16 -> fp16, bfloat16 -> bf16. Raises ``ValueError`` otherwise."""
    if not hasattr(x, "dtype"):
        raise ValueError(f"expected an array (NumPy, CuPy, PyTorch, PyCUDA); got "
                         f"{type(x).__name__}")
    if type(x).__module__.split(".")[0] == "torch":
        name = torch_dtype_name(x.dtype)
    else:
        dt = np.dtype(x.dtype)
        name = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(dt.name)
        if name is None and dt.kind == "V" and dt.itemsize == 2:
            name = "bf16"  # PyCUDA's view of a bfloat16 array
    if name is None:
        raise ValueError(f"no gemmgen kernel takes {getattr(x, 'dtype', type(x))} operands")
    return name
