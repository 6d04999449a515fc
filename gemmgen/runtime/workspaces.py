"""Workspaces of launch recipes, one set per stream (as PyTorch keeps cuBLAS's workspace).

A recipe (``gemmgen.runtime.recipe``) names the scratch memory its launches need as slots
(``Workspace``: a tag, a size, whether it starts zeroed: split-K partials and arrival counters,
repacked or 3xTF32-split operands, the dual GEMM's packed B). ``addresses`` gives each slot a
buffer from the pool of the (device, stream) the launches are queued on, so launches on two
streams never share one, while the launches of one stream, which run in order, share them
across calls and kernels.

- Pools are keyed by device and raw stream handle; the legacy default stream (None, 0, 1: it
  runs in order with every blocking stream) is one pool, the per-thread default stream (2) one
  pool per thread. A handle stands for one stream for the life of the process (PyTorch never
  destroys the streams of its pools; a stream destroyed while work is queued on it and
  another created with the same handle would share). Within a pool a buffer is keyed by
  (tag, zero): a zeroed slot (counters the kernels leave at zero) never shares memory with one
  that is not.
- A buffer is allocated with ``cuMemAlloc`` (capture mode relaxed for the call, as PyTorch's
  allocator does) and, for a zeroed slot, zeroed by ``cuMemsetD8Async`` on the stream (stream-
  ordered; a memset node inside CUDA-graph capture). A buffer too small for a recipe is
  replaced: the stream is synchronized before the old one is freed (it may still be in use by
  queued work).
- A stream under CUDA-graph capture gets a pool of its own per capture (the graph's kernels
  keep those addresses), kept, with every buffer it ever held, for the life of the process
  (the driver does not tell when a graph is destroyed): nothing of a capture's pool is ever
  synchronized or freed.
- At most ``LIMIT`` pools per device outside capture: past it the least recently used one
  whose stream is not capturing is dropped, after synchronizing its stream (a per-thread
  default stream's pool only by its own thread).
"""
from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

from . import driver

LIMIT = 64
"""Pools (streams) per device kept outside capture; the least recently used goes beyond it."""
PER_THREAD = 2  # CU_STREAM_PER_THREAD
LEGACY = (None, 0, 1)  # the legacy default stream (CU_STREAM_LEGACY is 1)
_LOCK = threading.Lock()
_POOLS: dict[int, OrderedDict] = {}      # device -> pool key -> Pool (least recent first)
_CAPTURED: dict[tuple, "Pool"] = {}      # pool key of a capture -> Pool, kept
_THREAD = threading.local()
_TOKENS = itertools.count(1)


@dataclass(frozen=True)
class Workspace:
    """A recipe's workspace slot: ``tag`` (what it holds: "split-K", "pack A", ...),
    ``nbytes`` it needs, and whether it must hold zeros when first used (``zero``: counters
    that the kernels leave at zero again)."""

    tag: str
    nbytes: int
    zero: bool = False


def _thread_token() -> int:
    """A number for the calling thread, never reused by another thread of the process."""
    token = getattr(_THREAD, "token", None)
    if token is None:
        token = _THREAD.token = next(_TOKENS)
    return token


def pool_key(device: int, stream, capture: int | None) -> tuple:
    """(device, stream handle, thread, capture id) of the pool for launches on ``stream``:
    the legacy stream's handles are one, the per-thread default stream's thread is part."""
    handle = 0 if stream in LEGACY else stream
    thread = _thread_token() if handle == PER_THREAD else 0
    return device, handle, thread, capture


class Pool:
    """The buffers of one (device, stream[, capture]): by (tag, zero)."""

    def __init__(self, key: tuple):
        self.device, self.stream, self.thread, self.capture = key
        self.buffers: dict[tuple[str, bool], driver.DeviceBuffer] = {}
        self.kept: list[driver.DeviceBuffer] = []  # replaced during capture: graphs use them
        self.lock = threading.Lock()  # held from handing out addresses until the launches
        # are queued: no other thread replaces (frees) a buffer whose address is in flight
        self.leases = 0  # threads holding or waiting for ``lock`` (changed under _LOCK)

    def address(self, slot: Workspace, stream) -> int:
        """The address of a buffer for ``slot``, allocated (and zeroed on ``stream``) or
        replaced by a larger one where needed."""
        key = (slot.tag, slot.zero)
        held = self.buffers.get(key)
        if held is not None and held.nbytes >= slot.nbytes:
            return held.ptr
        with driver.on_device(self.device):
            with driver.relaxed_capture():
                new = driver.DeviceBuffer(slot.nbytes)
            if slot.zero:
                driver.memset_async(new.ptr, max(slot.nbytes, 1), stream)
        if held is not None and (self.capture is not None or not _drained(self, stream)):
            self.kept.append(held)  # a graph, or work still queued, may use it
        self.buffers[key] = new
        with driver.on_device(self.device), driver.relaxed_capture():
            del held  # freed here (cuMemFree) unless kept
        return new.ptr


def _drained(pool: Pool, stream) -> bool:
    """Wait for the work queued on ``pool``'s stream (``stream``, a handle the calling thread
    may synchronize); False where the driver refuses."""
    try:
        with driver.on_device(pool.device), driver.relaxed_capture():
            driver.stream_synchronize(stream)
    except driver.DriverError:
        return False
    return True


@contextmanager
def leased(device: int, stream, slots: tuple[Workspace, ...]):
    """The address of each of ``slots`` for launches on the raw stream handle ``stream`` of
    ``device`` (from that stream's pool; see the module's notes), held for the ``with`` block:
    queue the launches that use them inside it. Until the block ends, no other thread can
    replace (and free) those buffers, nor can the bound drop their pool. Thread-safe."""
    capture = None if stream in LEGACY else driver.capture_id(stream)
    key = pool_key(device, stream, capture)
    with _LOCK:
        if capture is not None:
            pool = _CAPTURED.get(key) or _CAPTURED.setdefault(key, Pool(key))
        else:
            pools = _POOLS.setdefault(device, OrderedDict())
            pool = pools.get(key)
            if pool is None:
                pool = pools[key] = Pool(key)
                _bound(pools, key)
            pools.move_to_end(key)
        pool.leases += 1  # the bound leaves a leased pool alone
    try:
        with pool.lock:
            yield tuple(pool.address(s, stream) for s in slots)
    finally:
        with _LOCK:
            pool.leases -= 1


def addresses(device: int, stream, slots: tuple[Workspace, ...]) -> tuple[int, ...]:
    """The addresses ``leased`` gives, released at once: only for a caller that queues no
    launch with them while another thread may use the same stream (tests, tools)."""
    with leased(device, stream, slots) as work:
        return work


def _bound(pools: OrderedDict, fresh: tuple) -> None:
    """Drop least recently used pools past ``LIMIT`` (not ``fresh``, not one whose stream is
    capturing or is another thread's per-thread default stream, not one a thread holds
    leased), each after synchronizing its stream; one the driver will not synchronize now
    stays. Called with ``_LOCK`` held."""
    for key in list(pools):
        if len(pools) <= LIMIT:
            return
        pool = pools[key]
        if key == fresh or (pool.stream == PER_THREAD and pool.thread != _thread_token()):
            continue
        if pool.stream not in LEGACY and driver.capture_id(pool.stream) is not None:
            continue
        if pool.leases:
            continue  # a thread is queueing launches with its buffers
        if _drained(pool, pool.stream):
            with driver.on_device(pool.device), driver.relaxed_capture():
                del pools[key], pool  # its buffers are freed here


def release_captures(device: int, stream: int) -> int:
    """Free the pools of every capture made on the raw stream handle ``stream`` of ``device``:
    for an owner that has destroyed each graph captured there and synchronized the stream
    (a timer's private stream), since the driver does not say when a graph is gone. Returns
    how many pools were freed."""
    with _LOCK:
        keys = [k for k in _CAPTURED if k[0] == device and k[1] == stream]
        gone = [_CAPTURED.pop(k) for k in keys]
    with driver.on_device(device), driver.relaxed_capture():
        del gone[:]  # their buffers are freed here
    return len(keys)


def pools(device: int | None = None) -> int:
    """Pools held outside capture (on ``device``, or on every device)."""
    with _LOCK:
        return sum(len(p) for d, p in _POOLS.items() if device is None or d == device)


def clear() -> None:
    """Forget every pool outside capture (for tests: the caller makes sure no work that uses
    them is queued)."""
    with _LOCK:
        _POOLS.clear()
