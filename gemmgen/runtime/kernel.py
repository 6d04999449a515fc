"""A compiled kernel loaded into the current context, and its launch on device pointers.

``Kernel`` launches through PyCUDA (a PyCUDA ``Stream`` or the legacy default stream) or, for a
raw ``CUstream`` handle (PyTorch, CuPy), through the driver API (``gemmgen.runtime.driver``).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..compile.nvcc import Resources
from ..model.config import ConfigBase
from .driver import RawFunction, stream_handle
from .launch import launch

SIGNATURE = "iiifPiPifPiqqqP"  # M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides, bias
_PARAMS = struct.Struct("@" + SIGNATURE)  # the parameter block, natively aligned as PyCUDA packs it


def raw_stream(stream) -> int | None:
    """The raw ``CUstream`` handle a launch on ``stream`` goes to through the driver API
    (``gemmgen.runtime.driver``): an int as it is, a PyTorch or CuPy stream's handle; None for None or
    a PyCUDA ``Stream``, which PyCUDA launches on. Raises ``TypeError`` for anything else."""
    if stream is None or type(stream).__module__.startswith("pycuda"):
        return None
    if type(stream) is int:
        return stream
    return stream_handle(stream)


@dataclass
class Kernel:
    """A compiled kernel: call it as ``kernel(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None)``.

    ``registers`` per thread, ``smem_bytes`` static shared memory and ``local_bytes`` of local
    memory per thread come from the loaded function (CUDA's cuFuncGetAttribute); ``resources``
    is ptxas's report (spills, stack) when gemmgen compiled it.
    """

    config: ConfigBase
    arch: str
    function: object = field(repr=False)
    module: object = field(repr=False)
    source_path: str | None = None
    resources: Resources | None = None
    cubin: bytes = field(default=b"", repr=False)

    @property
    def name(self) -> str:
        """The kernel's symbol: the config's name."""
        return self.config.name

    @property
    def registers(self) -> int:
        """Registers per thread the loaded function uses (at launch, for setmaxnreg kernels)."""
        return self.function.num_regs

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block, bytes."""
        return self.function.shared_size_bytes

    @property
    def local_bytes(self) -> int:
        """Local memory per thread, bytes (spills or stack; 0 for every preset)."""
        return self.function.local_size_bytes

    def launch_raw(self, m: int, n: int, k: int, alpha: float, a_ptr: int, lda: int, b_ptr: int,
                   ldb: int, beta: float, c_ptr: int, ldc: int, stride_a: int = 0,
                   stride_b: int = 0, stride_c: int = 0, bias_ptr: int = 0, batch: int = 1,
                   stream=None) -> None:
        """Enqueue one launch on device pointers (no checks; asynchronous). Strides are the
        elements between consecutive matrices of a batch (0 broadcasts one matrix).
        ``stream``: None (the legacy default stream), a PyCUDA ``Stream``, or a raw ``CUstream``
        handle (an int, or a PyTorch/CuPy stream), launched through ``gemmgen.runtime.driver``."""
        grid_x, grid_y, _ = self.config.grid(m, n)
        raw = raw_stream(stream)
        if raw is not None:
            self.raw_function().launch(
                (grid_x, grid_y, batch), (self.config.threads, 1, 1),
                _PARAMS.pack(m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a,
                             stride_b, stride_c, bias_ptr), raw)
            return
        self.function.prepared_async_call(
            (grid_x, grid_y, batch), (self.config.threads, 1, 1), stream, m, n, k, alpha,
            a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b, stride_c, bias_ptr,
            shared_size=self.config.dynamic_smem_bytes)

    def raw_function(self):
        """This kernel loaded through the driver API (``gemmgen.runtime.driver.RawFunction``) for launches
        on raw stream handles; loaded on first use. Raises ``RuntimeError`` when the Kernel was
        made without its cubin."""
        raw = self.__dict__.get("_raw")
        if raw is None:
            if not self.cubin:
                raise RuntimeError(f"{self.name}: no cubin kept, so it cannot launch on a raw "
                                   f"stream handle; pass a PyCUDA Stream or None")
            raw = self.__dict__["_raw"] = RawFunction(self.cubin, self.name,
                                                      self.config.dynamic_smem_bytes)
        return raw

    def __call__(self, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None):
        """C = act(alpha * A @ B + beta * C + bias); see ``gemmgen.runtime.launch.launch``."""
        return launch(self, A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream)
