"""Data types: gemmgen's dtype names, their sizes, C types, unit roundoffs and cuBLAS enums
(which NumPy, PyTorch or CuPy dtype an array of each has: ``gemmgen.runtime.arrays``).

FP8 (the fp8 family): e4m3 (``torch.float8_e4m3fn``, ``ml_dtypes.float8_e4m3fn``: 4 exponent
bits, 3 mantissa bits, no infinities, largest finite 448) and e5m2 (``float8_e5m2``: 5 and 2,
largest finite 57344), one byte each.
"""
from __future__ import annotations

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
