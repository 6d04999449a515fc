"""Launches on a raw ``CUstream`` handle (an int), through the CUDA driver by ctypes.

PyCUDA launches only on its own ``Stream`` objects (or the legacy default stream), but PyTorch
and CuPy hand out their streams as raw handles (``torch.cuda.current_stream().cuda_stream``,
``cupy.cuda.Stream.ptr``). A kernel launched on such a handle joins that stream's order and,
during ``torch.cuda.graph`` capture, the graph. This module loads a kernel's cubin a second
time through ``cuModuleLoadData`` (into PyCUDA's primary context, the one PyTorch and CuPy use
too) and launches it with ``cuLaunchKernel`` and a packed parameter block
(``CU_LAUNCH_PARAM_BUFFER_POINTER``), as PyCUDA's ``Function._launch_kernel`` does. It never
allocates or synchronizes, so a launch is legal inside CUDA-graph capture.

Imported only when a launch asks for a raw stream; needs ``libcuda.so.1``.
"""
from __future__ import annotations

import ctypes

from .device import pycuda_modules

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_LAUNCH_PARAM_END, _LAUNCH_PARAM_BUFFER_POINTER, _LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
_LIB: list = []


class DriverError(RuntimeError):
    """A CUDA driver call failed; the message has the call and the driver's error name."""


def _lib():
    if not _LIB:
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u = ctypes.c_void_p, ctypes.c_uint
        lib.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p]
        lib.cuFuncSetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        lib.cuCtxSetCurrent.argtypes = [vp]
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _LIB.append(lib)
    return _LIB[0]


def _check(result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {(name.value or b'?').decode()} ({result})")


def _pycuda_context() -> int:
    """The handle of the context gemmgen's kernels live in (PyCUDA's primary context)."""
    pycuda_modules()
    import pycuda.autoprimaryctx as primary
    return primary.context.handle


_CTX: list = []


def ensure_context() -> None:
    """Make gemmgen's context (PyCUDA's primary context) current on this thread when no context
    is (PyTorch's autograd threads, for one). Raises ``DriverError`` when another context is
    current: the operands are on a device other than the one gemmgen's kernels were loaded on."""
    lib = _lib()
    if not _CTX:
        _CTX.append(_pycuda_context())
    cur = ctypes.c_void_p()
    _check(lib.cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
    if cur.value == _CTX[0]:
        return
    if cur.value is None:
        _check(lib.cuCtxSetCurrent(_CTX[0]), "cuCtxSetCurrent")
        return
    raise DriverError("another CUDA context is current (a tensor on a device other than "
                      "gemmgen's, which is PyCUDA's primary context's device): gemmgen launches "
                      "on one device per process")


class RawFunction:
    """A kernel of a cubin, loaded by the driver API for launches on raw stream handles.

    ``cubin``: the compiled module; ``name``: the kernel's symbol; ``dynamic_smem``: bytes of
    dynamic shared memory it is launched with (above 48 KiB the function opts in, as
    ``gemmgen.runtime.build.from_cubin`` does for PyCUDA's copy). Raises ``DriverError``."""

    def __init__(self, cubin: bytes, name: str, dynamic_smem: int = 0):
        lib = _lib()
        ensure_context()
        self._cubin = ctypes.create_string_buffer(cubin, len(cubin))  # kept alive with the module
        self.module, self.handle = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cuModuleLoadData(ctypes.byref(self.module), self._cubin), "cuModuleLoadData")
        _check(lib.cuModuleGetFunction(ctypes.byref(self.handle), self.module, name.encode()),
               f"cuModuleGetFunction({name})")
        if dynamic_smem > 48 * 1024:
            _check(lib.cuFuncSetAttribute(self.handle,
                                          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          dynamic_smem), "cuFuncSetAttribute")
        self.dynamic_smem = dynamic_smem

    def launch(self, grid: tuple, block: tuple, params: bytes, stream: int) -> None:
        """Enqueue one launch of ``grid`` x ``block`` threads on the raw stream handle ``stream``
        with the packed parameter block ``params`` (the kernel's parameters at their offsets).
        Asynchronous; no allocation, no synchronization."""
        ensure_context()
        buf = ctypes.c_char_p(params)
        size = ctypes.c_size_t(len(params))
        extra = (ctypes.c_void_p * 5)(_LAUNCH_PARAM_BUFFER_POINTER,
                                      ctypes.cast(buf, ctypes.c_void_p).value,
                                      _LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                      _LAUNCH_PARAM_END)
        _check(_lib().cuLaunchKernel(self.handle, grid[0], grid[1], grid[2], block[0], block[1],
                                     block[2], self.dynamic_smem, stream or None, None, extra),
               "cuLaunchKernel")


def stream_handle(stream):
    """``stream`` as a launch takes it: None or a PyCUDA ``Stream`` unchanged (PyCUDA launches
    it), else the raw ``CUstream`` int of an int, a PyTorch stream (``.cuda_stream``) or a CuPy
    stream (``.ptr``). Raises ``TypeError`` for anything else."""
    if stream is None or type(stream).__module__.startswith("pycuda"):
        return stream
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"stream: expected None, a PyCUDA Stream, a PyTorch or CuPy stream or a "
                    f"raw CUstream handle (int); got {type(stream).__name__}")
