"""The CUDA driver API through ctypes: contexts per device, modules, launches, memory.

Every launch of gemmgen goes through here (``cuLaunchKernel`` with a packed parameter block,
``CU_LAUNCH_PARAM_BUFFER_POINTER``; ``cuLaunchKernelEx`` for a kernel launched with
programmatic dependent launch), on a raw ``CUstream`` handle: PyTorch's and CuPy's streams
are such handles, and a PyCUDA ``Stream`` has one. A module is loaded once per device, into
that device's primary context (the one PyTorch, CuPy and PyCUDA's ``autoprimaryctx`` use), and
a call from any thread makes the operands' device's primary context current first (a thread
PyCUDA has never seen has none). A launch neither allocates nor synchronizes, so it is legal
inside CUDA-graph capture; the workspaces of a launch (``gemmgen.runtime.workspaces``) are
zeroed with a stream-ordered memset.

Needs ``libcuda.so.1``; importing this module does not load it.
"""
from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
FUNC_ATTRIBUTES = {"shared_size_bytes": 1, "local_size_bytes": 3, "num_regs": 4}
"""CUfunction_attribute values read by ``Function``."""
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_DEVICE_ATTRIBUTE = {"sms": 16, "max_smem_optin": 97, "cc_major": 75, "cc_minor": 76,
                       "smem_per_sm": 81, "regs_per_sm": 82, "threads_per_sm": 39,
                       "blocks_per_sm": 106, "l2_bytes": 38}
_LAUNCH_PARAM_END, _LAUNCH_PARAM_BUFFER_POINTER, _LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, padding to 8 bytes, a 64-byte value union (its first int)."""
    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("_rest", ctypes.c_char * 60)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``: grid, block, dynamic shared memory, stream, attributes."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


_PDL = _LaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
_LIB: list = []
_LOCK = threading.Lock()


class DriverError(RuntimeError):
    """A CUDA driver call failed; the message has the call and the driver's error name."""


def _lib():
    if not _LIB:
        with _LOCK:
            if not _LIB:
                _LIB.append(_load())
    return _LIB[0]


def _load():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise DriverError(f"the CUDA driver library (libcuda.so.1) is not available: {exc}"
                          ) from None
    vp, u, i, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
    pvp, pi = ctypes.POINTER(vp), ctypes.POINTER(i)
    sig = {
        "cuInit": [u], "cuDeviceGet": [pi, i], "cuDeviceGetCount": [pi],
        "cuDeviceGetAttribute": [pi, i, i], "cuDeviceGetName": [ctypes.c_char_p, i, i], "cuDevicePrimaryCtxRetain": [pvp, i],
        "cuCtxGetCurrent": [pvp], "cuCtxSetCurrent": [vp], "cuCtxGetDevice": [pi],
        "cuCtxSynchronize": [],
        "cuModuleLoadData": [pvp, ctypes.c_char_p], "cuModuleUnload": [vp],
        "cuModuleGetFunction": [pvp, vp, ctypes.c_char_p],
        "cuFuncSetAttribute": [vp, i, i], "cuFuncGetAttribute": [pi, i, vp],
        "cuLaunchKernel": [vp, u, u, u, u, u, u, u, vp, vp, vp],
        "cuLaunchKernelEx": [ctypes.POINTER(_LaunchConfig), vp, vp, vp],
        "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), sz], "cuMemFree_v2": [ctypes.c_uint64],
        "cuMemsetD8_v2": [ctypes.c_uint64, ctypes.c_ubyte, sz],
        "cuMemsetD8Async": [ctypes.c_uint64, ctypes.c_ubyte, sz, vp],
        "cuStreamSynchronize": [vp], "cuThreadExchangeStreamCaptureMode": [pi],
        "cuPointerGetAttribute": [vp, i, ctypes.c_uint64],
        "cuTensorMapReplaceAddress": [vp, vp], "cuGetErrorName": [i, ctypes.POINTER(ctypes.c_char_p)],
        "cuStreamCreate": [pvp, u], "cuStreamDestroy_v2": [vp],
        "cuStreamBeginCapture_v2": [vp, i], "cuStreamEndCapture": [vp, pvp],
        "cuGraphInstantiateWithFlags": [pvp, vp, ctypes.c_ulonglong],
        "cuGraphLaunch": [vp, vp], "cuGraphExecDestroy": [vp], "cuGraphDestroy": [vp],
        "cuEventCreate": [pvp, u], "cuEventRecord": [vp, vp], "cuEventSynchronize": [vp],
        "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), vp, vp], "cuEventDestroy_v2": [vp],
    }
    for name, args in sig.items():
        getattr(lib, name).argtypes = args
    _check_with(lib, lib.cuInit(0), "cuInit")
    return lib


def _check_with(lib, result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {(name.value or b'?').decode()} ({result})")


def check(result: int, call: str) -> None:
    """Raise ``DriverError`` naming ``call`` and the driver's error when ``result`` is not 0."""
    if result != 0:
        _check_with(_lib(), result, call)


# ---- devices and contexts -----------------------------------------------------------------
_PRIMARY: dict[int, int] = {}


def device_count() -> int:
    """CUDA devices the driver sees."""
    n = ctypes.c_int()
    check(_lib().cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
    return n.value


def device_attribute(device: int, name: str) -> int:
    """One attribute of ``device``: "sms", "max_smem_optin", "cc_major" or "cc_minor"."""
    out = ctypes.c_int()
    check(_lib().cuDeviceGetAttribute(ctypes.byref(out), CU_DEVICE_ATTRIBUTE[name], device),
          f"cuDeviceGetAttribute({name})")
    return out.value


def device_name(device: int) -> str:
    """The product name of ``device`` ("NVIDIA H200")."""
    buf = ctypes.create_string_buffer(256)
    check(_lib().cuDeviceGetName(buf, 256, device), "cuDeviceGetName")
    return buf.value.decode()


def primary_context(device: int) -> int:
    """The handle of ``device``'s primary context (retained once per process)."""
    ctx = _PRIMARY.get(device)
    if ctx is None:
        with _LOCK:
            if device not in _PRIMARY:
                handle = ctypes.c_void_p()
                check(_lib().cuDevicePrimaryCtxRetain(ctypes.byref(handle), device),
                      f"cuDevicePrimaryCtxRetain({device})")
                _PRIMARY[device] = handle.value
            ctx = _PRIMARY[device]
    return ctx


def current_context() -> int | None:
    """The context current on this thread (None when there is none)."""
    cur = ctypes.c_void_p()
    check(_lib().cuCtxGetCurrent(ctypes.byref(cur)), "cuCtxGetCurrent")
    return cur.value


def current_device() -> int:
    """The device of this thread's current context; device 0's primary context is made
    current first where the thread has none."""
    dev = ctypes.c_int()
    if _lib().cuCtxGetDevice(ctypes.byref(dev)) == 0:   # one call where a context is current
        return dev.value
    if current_context() is None:
        check(_lib().cuCtxSetCurrent(primary_context(0)), "cuCtxSetCurrent")
    check(_lib().cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
    return dev.value


def synchronize() -> None:
    """Wait for all work of the current context (``cuCtxSynchronize``)."""
    check(_lib().cuCtxSynchronize(), "cuCtxSynchronize")


def device_of(ptr: int) -> int:
    """The device that owns the device address ``ptr``. Raises ``DriverError`` for an address
    no device knows (a host pointer, freed memory)."""
    out = ctypes.c_int()
    check(_lib().cuPointerGetAttribute(ctypes.byref(out), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       ptr), "cuPointerGetAttribute(DEVICE_ORDINAL)")
    return out.value


@contextmanager
def on_device(device: int):
    """Make ``device``'s primary context current on this thread for the block, and put back
    what was current before (a thread of PyTorch's autograd engine, or one PyCUDA never saw,
    may have none or another device's)."""
    lib = _lib()
    want = primary_context(device)
    before = current_context()
    if before != want:
        check(lib.cuCtxSetCurrent(want), "cuCtxSetCurrent")
    try:
        yield
    finally:
        if before is not None and before != want:
            check(lib.cuCtxSetCurrent(before), "cuCtxSetCurrent")


# ---- modules and functions ----------------------------------------------------------------
class Function:
    """A kernel of a module loaded on one device (``handle``: its CUfunction), with the
    attributes the driver reports and the dynamic shared memory it is launched with (above
    48 KiB the function opts in). Raises ``DriverError``."""

    def __init__(self, module: int, name: str, dynamic_smem: int = 0):
        lib = _lib()
        handle = ctypes.c_void_p()
        check(lib.cuModuleGetFunction(ctypes.byref(handle), module, name.encode()),
              f"cuModuleGetFunction({name})")
        self.handle, self.name, self.dynamic_smem = handle.value, name, dynamic_smem
        if dynamic_smem > 48 * 1024:
            check(lib.cuFuncSetAttribute(self.handle,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         dynamic_smem), "cuFuncSetAttribute")

    def attribute(self, name: str) -> int:
        """"num_regs", "shared_size_bytes" (static) or "local_size_bytes" (per thread)."""
        out = ctypes.c_int()
        check(_lib().cuFuncGetAttribute(ctypes.byref(out), FUNC_ATTRIBUTES[name], self.handle),
              f"cuFuncGetAttribute({name})")
        return out.value

    def launch(self, grid: tuple, block: tuple, params: bytes, stream: int = 0) -> None:
        """Enqueue ``grid`` x ``block`` threads on the raw stream handle ``stream`` (0: the
        legacy default stream) with the packed parameter block ``params``. Asynchronous."""
        launch(self.handle, grid, block, self.dynamic_smem, params, stream)


class Module:
    """A cubin loaded into one device's primary context; ``function(name, smem)`` gives its
    kernels (cached). The cubin's bytes are kept alive with the module."""

    def __init__(self, cubin: bytes, device: int):
        self.device = device
        self._cubin = ctypes.create_string_buffer(cubin, len(cubin))
        handle = ctypes.c_void_p()
        with on_device(device):
            check(_lib().cuModuleLoadData(ctypes.byref(handle), self._cubin), "cuModuleLoadData")
        self.handle = handle.value
        self._functions: dict[str, Function] = {}

    def function(self, name: str, dynamic_smem: int = 0) -> Function:
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = Function(self.handle, name, dynamic_smem)
        return fn


class Params:
    """A parameter block made ready for ``cuLaunchKernel``'s ``extra`` argument once: the
    bytes, their size and the ``CU_LAUNCH_PARAM_*`` array pointing at both, kept alive
    together. A recipe's launch whose parameters no call patches keeps one, so that a
    repeated launch does no ctypes work but the call itself."""

    __slots__ = ("data", "_buf", "_size", "extra")

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self._buf = ctypes.c_char_p(self.data)
        self._size = ctypes.c_size_t(len(self.data))
        self.extra = (ctypes.c_void_p * 5)(_LAUNCH_PARAM_BUFFER_POINTER,
                                           ctypes.cast(self._buf, ctypes.c_void_p).value,
                                           _LAUNCH_PARAM_BUFFER_SIZE,
                                           ctypes.addressof(self._size), _LAUNCH_PARAM_END)


def launch(function: int, grid: tuple, block: tuple, smem: int, params: bytes | Params,
           stream: int | None = None, pdl: bool = False) -> None:
    """One ``cuLaunchKernel`` of the CUfunction ``function`` with the parameter block
    ``params`` (the kernel's parameters at their offsets, as bytes or a ``Params`` made
    once) on the raw stream handle ``stream`` (None or 0: the legacy default stream).
    ``pdl``: ``cuLaunchKernelEx`` with programmatic stream serialization, for a kernel that
    waits for its predecessor itself (``griddepcontrol.wait`` before any global access: the
    Hopper configs' ``pdl``), so that its launch and set-up overlap the previous kernel's end.
    The current context must be the function's device's. No allocation, no synchronization."""
    if not isinstance(params, Params):
        params = Params(params)
    if pdl:
        cfg = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), smem,
                            stream or None, ctypes.pointer(_PDL), 1)
        check(_lib().cuLaunchKernelEx(ctypes.byref(cfg), function, None, params.extra),
              "cuLaunchKernelEx")
        return
    check(_lib().cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                block[2], smem, stream or None, None, params.extra),
          "cuLaunchKernel")


# ---- memory and tensor maps ----------------------------------------------------------------
class DeviceBuffer:
    """``nbytes`` of device memory on the current context's device (``cuMemAlloc``; zeroed by
    ``cuMemsetD8`` when ``zero``), freed with the object. ``ptr`` is its address."""

    def __init__(self, nbytes: int, zero: bool = False):
        ptr = ctypes.c_uint64()
        check(_lib().cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 256)), "cuMemAlloc")
        self.ptr, self.nbytes = ptr.value, nbytes
        if zero:  # finished before any stream (non-blocking ones too) can read it
            check(_lib().cuMemsetD8_v2(self.ptr, 0, max(nbytes, 256)), "cuMemsetD8")
            synchronize()

    def __del__(self):
        if _LIB and getattr(self, "ptr", 0):
            _LIB[0].cuMemFree_v2(self.ptr)
            self.ptr = 0

    def __int__(self) -> int:
        return self.ptr

    def zero(self) -> DeviceBuffer:
        """Set every byte to 0 (``cuMemsetD8``, then a context synchronization so that no
        stream sees the buffer before: never call it inside CUDA-graph capture); returns the
        buffer."""
        check(_lib().cuMemsetD8_v2(self.ptr, 0, max(self.nbytes, 1)), "cuMemsetD8")
        synchronize()
        return self


def memset_async(ptr: int, nbytes: int, stream: int | None) -> None:
    """Set ``nbytes`` bytes at ``ptr`` to 0 on the raw stream handle ``stream``
    (``cuMemsetD8Async``: stream-ordered, recorded as a memset node inside CUDA-graph
    capture)."""
    check(_lib().cuMemsetD8Async(ptr, 0, nbytes, stream or None), "cuMemsetD8Async")


def stream_synchronize(stream: int | None) -> None:
    """Wait for the work queued on the raw stream handle ``stream`` (never during its
    capture: the driver refuses)."""
    check(_lib().cuStreamSynchronize(stream or None), "cuStreamSynchronize")


def capture_id(stream: int | None) -> int | None:
    """The id of the CUDA-graph capture under way on ``stream``, None when it is not
    capturing (``cuStreamGetCaptureInfo``; 0 when the driver refuses the query, e.g. for the
    legacy stream while another stream captures: callers then treat it as capturing)."""
    lib = _lib()
    fn = getattr(lib, "cuStreamGetCaptureInfo_v2", None) or lib.cuStreamGetCaptureInfo
    status, cid = ctypes.c_int(), ctypes.c_uint64()
    # every output after the id is optional: NULLs suit each version of the call
    if fn(ctypes.c_void_p(stream or None), ctypes.byref(status), ctypes.byref(cid), None, None,
          None, None) != 0:
        return 0
    return cid.value if status.value != 0 else None  # CU_STREAM_CAPTURE_STATUS_NONE is 0


@contextmanager
def relaxed_capture():
    """Let this thread make calls that CUDA-graph capture in global mode forbids (an
    allocation) for the block, as PyTorch's caching allocator does around ``cudaMalloc``
    (``cuThreadExchangeStreamCaptureMode`` to CU_STREAM_CAPTURE_MODE_RELAXED and back)."""
    mode = ctypes.c_int(2)
    check(_lib().cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)),
          "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        _lib().cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))


_MAP = threading.local()


def replace_map_address(tensor_map: bytes, ptr: int) -> bytes:
    """The 128-byte CUtensorMap ``tensor_map`` with its global address set to ``ptr``
    (``cuTensorMapReplaceAddress``: every other field kept)."""
    buf = getattr(_MAP, "buf", None)
    if buf is None:
        buf = _MAP.buf = ctypes.create_string_buffer(256)
    base = ctypes.addressof(buf)
    at = base + (-base % 64)  # a CUtensorMap is 64-byte aligned
    ctypes.memmove(at, tensor_map, 128)
    check(_lib().cuTensorMapReplaceAddress(at, ptr), "cuTensorMapReplaceAddress")
    return ctypes.string_at(at, 128)


def stream_handle(stream) -> int | None:
    """``stream`` as a raw ``CUstream`` int: None stays None (the legacy default stream), an
    int as it is, a PyCUDA ``Stream``'s ``handle``, a PyTorch stream's ``cuda_stream``, a CuPy
    stream's ``ptr``. Raises ``TypeError`` for anything else."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise TypeError(f"stream: expected None, a PyCUDA Stream, a PyTorch or CuPy stream or a "
                    f"raw CUstream handle (int); got {type(stream).__name__}")
