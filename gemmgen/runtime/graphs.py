"""Private streams, CUDA events and CUDA graphs through the CUDA driver API (ctypes, as in
``gemmgen.runtime.driver``): what ``gemmgen.tune.bench.time_graphed`` needs to time launches
as graph replays without PyTorch. Each object belongs to the context current when it was
made; it is freed with the object (or ``close``)."""
from __future__ import annotations

import ctypes

from . import driver

_vp = ctypes.c_void_p
CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1


def _call(name: str, *args) -> None:
    driver.check(getattr(driver._lib(), name)(*args), name)


def _free(name: str, handle) -> None:
    if driver._LIB and handle:  # not at interpreter exit, after the library is gone
        getattr(driver._LIB[0], name)(_vp(handle))


class Stream:
    """A non-blocking stream (``cuStreamCreate``). ``handle`` is its raw ``CUstream``."""

    def __init__(self):
        handle = _vp()
        _call("cuStreamCreate", ctypes.byref(handle), CU_STREAM_NON_BLOCKING)
        self.handle = handle.value

    def close(self) -> None:
        _free("cuStreamDestroy_v2", getattr(self, "handle", None))
        self.handle = None

    __del__ = close


class Graph:
    """What ``record(handle)`` queues on ``stream`` (a ``Stream``; ``handle`` its raw handle),
    captured into a CUDA graph and instantiated (``cuStreamBeginCapture`` in thread-local
    mode, ``cuStreamEndCapture``, ``cuGraphInstantiateWithFlags``); ``launch()`` replays it on
    that stream. Raises ``DriverError`` when capture or instantiation fails (the capture is
    ended first)."""

    def __init__(self, stream: Stream, record) -> None:
        graph, exe = _vp(), _vp()
        self.stream, self.graph, self.exec = stream, None, None
        _call("cuStreamBeginCapture_v2", _vp(stream.handle), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        try:
            record(stream.handle)
        finally:
            ended = driver._lib().cuStreamEndCapture(_vp(stream.handle), ctypes.byref(graph))
        driver.check(ended, "cuStreamEndCapture")
        self.graph = graph.value
        _call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, 0)
        self.exec = exe.value

    def launch(self) -> None:
        _call("cuGraphLaunch", _vp(self.exec), _vp(self.stream.handle))

    def close(self) -> None:
        _free("cuGraphExecDestroy", getattr(self, "exec", None))
        _free("cuGraphDestroy", getattr(self, "graph", None))
        self.exec = self.graph = None

    __del__ = close


class Event:
    """A CUDA event (``cuEventCreate``) for timing."""

    def __init__(self):
        handle = _vp()
        _call("cuEventCreate", ctypes.byref(handle), 0)
        self.handle = handle.value

    def record(self, stream: int | None) -> Event:
        """Record on the raw stream handle ``stream`` (None: the legacy default stream)."""
        _call("cuEventRecord", _vp(self.handle), _vp(stream or None))
        return self

    def seconds_since(self, start: Event) -> float:
        """Seconds from ``start`` to this event, waiting for this one first."""
        _call("cuEventSynchronize", _vp(self.handle))
        ms = ctypes.c_float()
        _call("cuEventElapsedTime", ctypes.byref(ms), _vp(start.handle), _vp(self.handle))
        return ms.value / 1e3

    def close(self) -> None:
        _free("cuEventDestroy_v2", getattr(self, "handle", None))
        self.handle = None

    __del__ = close
