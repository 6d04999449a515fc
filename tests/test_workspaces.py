"""Workspaces per stream without a GPU: recipes declare slots (``WorkRef`` patches), and each
run takes the buffers of the (device, stream) it launches on from ``runtime.workspaces``,
with the driver replaced by fakes."""
import contextlib
import struct
import threading
import weakref

import pytest

from gemmgen.runtime import driver, recipe as rc, workspaces as ws
from gemmgen.runtime.recipe import PATCH_MAP, PATCH_POINTER, WORK_BASE, Launch, MapRef, Recipe
from gemmgen.runtime.recipe import Ref, WorkRef, Workspace, pack, workspace


class FakeDriver:
    """cuMemAlloc, cuMemsetD8Async, cuStreamSynchronize and the capture query, recorded."""

    def __init__(self, monkeypatch):
        self.next, self.memsets, self.syncs, self.freed, self.launched = 0x100000, [], [], [], []
        self.capturing: dict = {}  # stream handle -> capture id
        fake = self

        class Buffer:
            def __init__(self, nbytes, zero=False):
                self.ptr, self.nbytes = fake.next, nbytes
                fake.next += 1 << 24

            def __del__(self):
                fake.freed.append(self.ptr)

        monkeypatch.setattr(driver, "DeviceBuffer", Buffer)
        monkeypatch.setattr(driver, "memset_async", lambda p, n, s: self.memsets.append((p, n, s)))
        monkeypatch.setattr(driver, "stream_synchronize", lambda s: self.syncs.append(s))
        monkeypatch.setattr(driver, "capture_id", lambda s: self.capturing.get(s))
        monkeypatch.setattr(driver, "on_device", lambda dev: contextlib.nullcontext())
        monkeypatch.setattr(driver, "relaxed_capture", contextlib.nullcontext)
        monkeypatch.setattr(driver, "launch", lambda fn, grid, block, smem, params, stream,
                            pdl=False: self.launched.append((stream, params)))


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(ws, "_POOLS", {})
    monkeypatch.setattr(ws, "_CAPTURED", {})
    return FakeDriver(monkeypatch)


SPLIT = Workspace("split-K", 4096)
COUNTERS = Workspace("split-K counters", 64, zero=True)


def test_each_stream_has_its_own_buffers_and_a_stream_keeps_its_own(fake):
    a1, c1 = ws.addresses(0, 0x5000, (SPLIT, COUNTERS))
    a2, c2 = ws.addresses(0, 0x6000, (SPLIT, COUNTERS))
    assert len({a1, c1, a2, c2}) == 4, "two streams never share a workspace"
    assert ws.addresses(0, 0x5000, (SPLIT, COUNTERS)) == (a1, c1)
    assert ws.addresses(1, 0x5000, (SPLIT,))[0] not in (a1, a2), "per device too"
    assert fake.memsets == [(c1, 64, 0x5000), (c2, 64, 0x6000)], \
        "counters zeroed once each, on their own stream"
    assert ws.pools(0) == 2 and ws.pools() == 3


def test_the_legacy_stream_is_one_pool_and_zeroed_slots_never_share(fake):
    (a,) = ws.addresses(0, None, (SPLIT,))
    assert ws.addresses(0, 0, (SPLIT,)) == ws.addresses(0, 1, (SPLIT,)) == (a,)
    (z,) = ws.addresses(0, None, (Workspace("split-K", 64, zero=True),))
    assert z != a, "a slot that must start zeroed has a buffer of its own"


def test_the_per_thread_default_stream_is_a_pool_per_thread(fake):
    mine = ws.addresses(0, ws.PER_THREAD, (SPLIT,))
    got = []
    t = threading.Thread(target=lambda: got.append(ws.addresses(0, ws.PER_THREAD, (SPLIT,))))
    t.start()
    t.join()
    assert got[0] != mine and ws.addresses(0, ws.PER_THREAD, (SPLIT,)) == mine


def test_a_larger_slot_replaces_the_buffer_after_the_stream_drains(fake):
    (small,) = ws.addresses(0, 0x5000, (SPLIT,))
    (large,) = ws.addresses(0, 0x5000, (Workspace("split-K", 8192),))
    assert large != small and fake.syncs == [0x5000] and small in fake.freed
    assert ws.addresses(0, 0x5000, (SPLIT,)) == (large,), "a larger buffer serves a smaller slot"
    (z,) = ws.addresses(0, 0x5000, (COUNTERS,))
    (z2,) = ws.addresses(0, 0x5000, (Workspace("split-K counters", 128, zero=True),))
    assert fake.memsets[-2:] == [(z, 64, 0x5000), (z2, 128, 0x5000)], "a new one is zeroed"


def test_a_capture_has_its_own_pool_and_nothing_is_freed_or_synchronized(fake):
    (eager,) = ws.addresses(0, 0x5000, (SPLIT,))
    fake.capturing[0x5000] = 7
    (g1,) = ws.addresses(0, 0x5000, (SPLIT,))
    (g1_large,) = ws.addresses(0, 0x5000, (Workspace("split-K", 8192),))
    fake.capturing[0x5000] = 8
    (g2,) = ws.addresses(0, 0x5000, (SPLIT,))
    assert len({eager, g1, g1_large, g2}) == 4, "each graph keeps buffers of its own"
    assert fake.syncs == [] and g1 not in fake.freed, "the replaced one stays for the graph"
    del fake.capturing[0x5000]
    assert ws.addresses(0, 0x5000, (SPLIT,)) == (eager,)
    ws.clear()
    assert ws._CAPTURED, "capture pools outlive clear(): their graphs may replay"


def test_pools_are_bounded_least_recently_used_first(fake, monkeypatch):
    monkeypatch.setattr(ws, "LIMIT", 3)
    first = ws.addresses(0, 0x1000, (SPLIT,))
    for s in (0x2000, 0x3000):
        ws.addresses(0, s, (SPLIT,))
    ws.addresses(0, 0x1000, (SPLIT,))           # 0x2000 is now the least recently used
    fake.capturing[0x2000] = 5                  # ... but capturing: 0x3000 goes instead
    ws.addresses(0, 0x4000, (SPLIT,))
    assert ws.pools(0) == 3 and fake.syncs == [0x3000]
    assert ws.addresses(0, 0x1000, (SPLIT,)) == first
    del fake.capturing[0x2000]
    ws.addresses(0, 0x5000, (SPLIT,))
    assert ws.pools(0) == 3 and fake.syncs == [0x3000, 0x2000]


def test_pack_patches_a_work_ref_with_its_slot_index():
    slots = []
    first = workspace(slots, "pack A", 1000)
    second = workspace(slots, "split-K", 64, zero=True)
    assert slots == [Workspace("pack A", 1000), Workspace("split-K", 64, True)]
    assert (first.slot, second.slot, second.index) == (0, 1, WORK_BASE + 1)
    moved = second.shifted(256)
    assert isinstance(moved, WorkRef) and moved.slot == 1 and moved.delta == 256
    fmt = struct.Struct("<Q4xiQ128s")
    data, patches = pack(fmt, (0, 12, 16, 24),
                         (moved, 3, Ref(0, 0x1000), MapRef(bytes(128), first.shifted(16))))
    assert [(p.kind, p.index, p.delta) for p in patches] == [
        (PATCH_POINTER, WORK_BASE + 1, 256), (PATCH_POINTER, 0, 0), (PATCH_MAP, WORK_BASE, 16)]
    assert struct.unpack_from("<Q", data)[0] == int(moved) != 0
    with pytest.raises(ValueError, match="twice"):
        workspace(slots, "pack A", 10)


def test_a_recipe_run_patches_each_streams_buffers(fake):
    slots = []
    work = workspace(slots, "split-K", 4096)
    fmt = struct.Struct("@QQ")
    params, patches = pack(fmt, rc.field_offsets(fmt), (Ref(0, 0x1000), work.shifted(8)))
    fn = type("F", (), {"handle": 1, "dynamic_smem": 0})()
    r = Recipe(0, [Launch(fn, (1, 1, 1), (32, 1, 1), params, patches)], "x", tuple(slots))
    r.run((0xA000,), 0x5000)
    r.run((0xB000,), 0x6000)
    (s1, p1), (s2, p2) = fake.launched
    (w1,) = ws.addresses(0, 0x5000, tuple(slots))
    (w2,) = ws.addresses(0, 0x6000, tuple(slots))
    assert (s1, fmt.unpack(p1)) == (0x5000, (0xA000, w1 + 8))
    assert (s2, fmt.unpack(p2)) == (0x6000, (0xB000, w2 + 8)) and w1 != w2
    data = r.to_bytes()
    assert data[-16:] == struct.pack("<IQI", 1, 4096, 0), "the slots close the launcher's bytes"


def test_a_buffer_is_freed_with_its_pool(fake):
    ws.addresses(0, 0x5000, (SPLIT,))
    held = weakref.ref(ws._POOLS[0][ws.pool_key(0, 0x5000, None)])
    ws.clear()
    assert held() is None and len(fake.freed) == 1


def test_a_buffer_in_flight_is_not_freed_by_another_thread_growing_it(fake):
    """Thread A holds its lease (its launches are being queued) while thread B, on the same
    stream, needs a larger buffer for the same slot: B waits, so A's address is never freed
    before A has queued its launches."""
    entered, done = threading.Event(), []
    with ws.leased(0, None, (SPLIT,)) as (a,):
        def grow():
            entered.set()
            done.append(ws.addresses(0, None, (Workspace("split-K", 1 << 20),)))
        t = threading.Thread(target=grow)
        t.start()
        entered.wait(5)
        t.join(0.3)
        assert t.is_alive() and a not in fake.freed, "B must wait for A's lease"
    t.join(5)
    assert done and done[0][0] != a and a in fake.freed, "then B replaces it"


def test_the_bound_leaves_a_leased_pool_alone(fake, monkeypatch):
    monkeypatch.setattr(ws, "LIMIT", 1)
    with ws.leased(0, 0x5000, (SPLIT,)) as (a,):
        ws.addresses(0, 0x6000, (SPLIT,))
        ws.addresses(0, 0x7000, (SPLIT,))
        assert a not in fake.freed
