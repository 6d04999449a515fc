"""Launch recipes without a GPU: which bytes of each parameter block hold which operand's
address (as a pointer or inside a tensor map), the serialized form the compiled launcher
reads, and the launcher's build."""
import struct
import types

import pytest

from gemmgen import PRESETS
from gemmgen.codegen.render import render
from gemmgen.compile.cache import compile_cached
from gemmgen.runtime import driver as driver_mod, hopper, kernel as kernel_mod, recipe as rc, tma
from gemmgen.runtime.kernel import _PARAMS, Kernel
from gemmgen.runtime.recipe import (PATCH_MAP, PATCH_POINTER, WORK_BASE, KernelArgs, Ref,
                                    Workspace)
from gemmgen.runtime.tma import param_layout


class FakeFunction:
    def __init__(self, handle, smem=0):
        self.handle, self.dynamic_smem = handle, smem


def _fake_functions(monkeypatch):
    made = {}

    def function(self, device=None, suffix=""):
        return made.setdefault(suffix, FakeFunction(0x1000 + len(made),
                                                    0 if suffix else self.config.dynamic_smem_bytes))
    monkeypatch.setattr(Kernel, "function", function)
    return made


def test_field_offsets_are_nvccs():
    native = [struct.calcsize("@" + kernel_mod.SIGNATURE[:i + 1])
              - struct.calcsize("@" + kernel_mod.SIGNATURE[i])
              for i in range(len(kernel_mod.SIGNATURE))]
    assert list(rc.field_offsets(_PARAMS)) == native


def test_plain_kernel_recipe_patches_every_operand(nvcc, monkeypatch):
    cfg = PRESETS["warptile_tuned"].config
    cubin, _ = compile_cached(render(cfg, "sm_80"), "sm_80", cfg.name)
    _fake_functions(monkeypatch)
    k = Kernel(cfg, "sm_80", cubin)
    refs = [Ref(i, 0x10000 * (i + 1)) for i in range(4)]
    r = k.launches(KernelArgs.blas(
        300, 200, 100, 1.0, refs[0], 100, refs[1], 200, 0.5, refs[2], 200, 0, 0, 0, refs[3], 1), 0)
    (ln,) = r.launches
    offsets = param_layout(cubin, cfg.name).offsets
    # M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides, bias: A is field 4, B 6, C 9, bias 14
    assert {(p.offset, p.kind, p.index) for p in ln.patches} == {
        (offsets[4], PATCH_POINTER, 0), (offsets[6], PATCH_POINTER, 1),
        (offsets[9], PATCH_POINTER, 2), (offsets[14], PATCH_POINTER, 3)}
    assert ln.params == _PARAMS.pack(300, 200, 100, 1.0, 0x10000, 100, 0x20000, 200, 0.5,
                                     0x30000, 200, 0, 0, 0, 0x40000)
    assert ln.grid == (-(-200 // cfg.bn), -(-300 // cfg.bm), 1)
    empty = k.launches(KernelArgs.blas(
        0, 200, 100, 1.0, refs[0], 100, refs[1], 200, 0.0, refs[2], 200), 0)
    assert empty.launches == [], "an empty output launches nothing"


def _tma_kernel(monkeypatch, preset, **changes):
    cfg = PRESETS[preset].config.replace(**changes)
    cubin, _ = compile_cached(render(cfg, "sm_90a"), "sm_90a", cfg.name)
    _fake_functions(monkeypatch)
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(tma, "encode", lambda spec, name="": bytes([spec.ptr % 251]) * 128)
    return Kernel(cfg, "sm_90a", cubin), param_layout(cubin, cfg.name).offsets


def test_tma_recipe_patches_the_tensor_maps_and_pointers(nvcc, monkeypatch):
    k, offsets = _tma_kernel(monkeypatch, "wgmma_tma_store")
    refs = [Ref(i, 0x100000 * (i + 1)) for i in range(3)]
    r = k.launches(KernelArgs.blas(
        4096, 4096, 4096, 1.0, refs[0], 4096, refs[1], 4096, 0.0, refs[2], 4096), 0)
    (gemm,) = r.launches
    assert r.path == "tma"
    # tensor maps of A, B, C are parameters 0-2; the pointers A 7, B 9, C 12, bias 17
    maps = {(p.offset, p.index) for p in gemm.patches if p.kind == PATCH_MAP}
    ptrs = {(p.offset, p.index) for p in gemm.patches if p.kind == PATCH_POINTER}
    assert maps == {(offsets[0], 0), (offsets[1], 1), (offsets[2], 2)}
    assert ptrs == {(offsets[7], 0), (offsets[9], 1), (offsets[12], 2)}
    assert gemm.grid == (132, 1, 1) and gemm.smem == k.config.dynamic_smem_bytes


def test_split_k_recipe_writes_partials_to_the_workspace_and_reduces_into_c(nvcc, monkeypatch):
    k, offsets = _tma_kernel(monkeypatch, "wgmma_tma_store", store="direct", split_k=2)
    refs = [Ref(i, 0x100000 * (i + 1)) for i in range(4)]
    r = k.launches(KernelArgs.blas(
        128, 4096, 8192, 1.0, refs[0], 8192, refs[1], 4096, 0.0, refs[2], 4096, 0, 0, 0, refs[3],
        1), 0)
    gemm, reduce = r.launches
    assert r.path == "tma + split-K 2"
    assert not [p for p in gemm.patches if p.index in (2, 3)], "the GEMM writes the workspace"
    assert r.workspaces == (Workspace("split-K", 4096 * 128 * 2 * 4, False),)
    assert (offsets[12], PATCH_POINTER, WORK_BASE) in {(p.offset, p.kind, p.index)
                                                       for p in gemm.patches}
    helper = hopper.HELPER_OFFSETS["reduce"]  # ws, ldp, slice, m, n, alpha, beta, C, ...
    assert {(p.offset, p.index) for p in reduce.patches} == {
        (helper[0], WORK_BASE), (helper[7], 2), (helper[10], 3)}, \
        "the reduction reads the stream's workspace, writes C and reads bias"


def test_inline_split_k_is_one_launch_that_writes_c_itself(nvcc, monkeypatch):
    k, offsets = _tma_kernel(monkeypatch, "wgmma_tma_store", store="direct", split_k=4,
                             split_inline=True)
    refs = [Ref(i, 0x100000 * (i + 1)) for i in range(4)]
    r = k.launches(KernelArgs.blas(
        64, 1024, 8192, 1.0, refs[0], 8192, refs[1], 1024, 0.5, refs[2], 1024, 0, 0, 0, refs[3], 1),
        0)
    (gemm,) = r.launches
    assert r.path == "tma + split-K 4 inline"
    ptrs = {(p.offset, p.index) for p in gemm.patches if p.kind == PATCH_POINTER}
    assert ptrs == {(offsets[7], 0), (offsets[9], 1), (offsets[12], 2), (offsets[17], 3),
                    (offsets[19], WORK_BASE), (offsets[20], WORK_BASE + 1)}
    c = k.config  # every tile's 4 slices of BM x BN fp32 partials; a counter per consumer
    tiles = -(-64 // c.bm) * -(-1024 // c.bn)
    assert [(w.tag, w.nbytes, w.zero) for w in r.workspaces] == [
        ("split-K", tiles * 4 * c.bm * c.bn * 4, False),
        ("split-K counters", tiles * c.consumers * 4, True)]


def test_unaligned_a_is_repacked_with_the_callers_address_patched(nvcc, monkeypatch):
    k, offsets = _tma_kernel(monkeypatch, "wgmma_tma_store")
    a = Ref(0, 0x100002)  # off 16-byte alignment
    r = k.launches(KernelArgs.blas(4096, 4096, 4095, 1.0, a, 4095, Ref(1, 0x200000), 4096, 0.0,
                   Ref(2, 0x300000), 4096), 0)
    pack, gemm = r.launches
    assert r.path == "tma + repack A"
    assert [p.index for p in pack.patches] == [0, WORK_BASE], "pack reads the caller's A"
    assert 0 not in {p.index for p in gemm.patches}, "the GEMM reads the padded copy"
    assert r.workspaces == (Workspace("pack A", 4096 * 4096 * 2, False),)
    assert (0, PATCH_POINTER, 0) in {(p.offset, p.kind, p.index) for p in pack.patches}
    dst = hopper.HELPER_OFFSETS["pack"][3]
    assert (dst, PATCH_POINTER, WORK_BASE) in {(p.offset, p.kind, p.index) for p in pack.patches}
    assert (offsets[0], PATCH_MAP, WORK_BASE) in {(p.offset, p.kind, p.index)
                                                  for p in gemm.patches}, "A's map: the copy"


def test_serialized_recipe_matches_the_launchers_format(nvcc, monkeypatch):
    k, _ = _tma_kernel(monkeypatch, "wgmma_tma_store", store="direct", split_k=2)
    refs = [Ref(i, 0x100000 * (i + 1)) for i in range(4)]
    r = k.launches(KernelArgs.blas(
        128, 4096, 8192, 1.0, refs[0], 8192, refs[1], 4096, 0.0, refs[2], 4096, 0, 0, 0, refs[3],
        1), 0)
    data = r.to_bytes((1, 0, 2, 3))
    version, count = struct.unpack_from("<II", data)
    assert (version, count) == (rc.FORMAT_VERSION, 2)
    at = 8
    for ln in r.launches:
        handle, *dims, smem, flags, n = struct.unpack_from("<Q6IIIi", data, at)
        at += struct.calcsize("<Q6IIIi")
        assert (handle, tuple(dims), smem) == (ln.function.handle, ln.grid + ln.block, ln.smem)
        assert flags == int(ln.pdl)
        assert data[at:at + n] == ln.params
        at += n
        (npatch,) = struct.unpack_from("<I", data, at)
        at += 4
        got = [struct.unpack_from("<IIIq", data, at + 20 * i) for i in range(npatch)]
        at += 20 * npatch
        assert got == [(p.offset, p.kind, (1, 0, 2, 3)[p.index] if p.index < WORK_BASE
                        else p.index, p.delta) for p in ln.patches]
    assert WORK_BASE in {p.index for ln in r.launches for p in ln.patches}, "not mapped"
    # the GEMM waits for its predecessor itself (PDL); the split-K reduction launches plainly
    assert [ln.pdl for ln in r.launches] == [True, False]
    (nslots,) = struct.unpack_from("<I", data, at)
    at += 4
    slots = [struct.unpack_from("<QI", data, at + 12 * i) for i in range(nslots)]
    at += 12 * nslots
    assert slots == [(w.nbytes, int(w.zero)) for w in r.workspaces] == [(4096 * 128 * 2 * 4, 0)]
    assert at == len(data)


def test_launcher_builds_with_the_host_compiler():
    """The compiled launcher of gemmgen::gemm builds and loads where a C++ compiler and
    PyTorch's headers exist (here: PyTorch's CPU build; the CUDA kernel it registers runs
    only on a GPU)."""
    torch = pytest.importorskip("torch")
    from gemmgen.torch import launcher
    if launcher.compiler() is None:
        pytest.skip("no C++ compiler")
    path = launcher.build()
    assert path.is_file() and path == launcher.library_path(launcher.compiler())
    torch.ops.load_library(str(path))
    assert torch.ops.gemmgen_launcher.recipes_held() == 0


def test_without_a_compiler_the_op_keeps_a_python_cuda_implementation(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    import gemmgen.torch as gt
    from gemmgen.torch import launcher
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):
        launcher.build()
    assert torch._C._dispatch_has_kernel_for_dispatch_key("gemmgen::gemm", "CUDA")
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    assert torch.allclose(gt.gemm(a, b), a @ b)


def test_packing_a_value_beyond_its_field_names_the_field(monkeypatch):
    """A size past a 32-bit int parameter is an OperandError naming the argument and the
    limit, before any launch (was a bare struct.error)."""
    from gemmgen.runtime.operands import OperandError
    values = (2 ** 31, 4, 4, 1.0, Ref(0, 0x1000), 4, Ref(1, 0x2000), 4, 0.0, Ref(2, 0x3000), 4,
              0, 0, 0, 0)
    with pytest.raises(OperandError, match=r"^M = 2147483648 does not fit .*2147483647"):
        rc.pack(_PARAMS, rc.field_offsets(_PARAMS), values, kernel_mod.PARAM_NAMES)
    with pytest.raises(OperandError, match=r"^parameter 0 \(int\) = 2147483648"):
        rc.pack(_PARAMS, rc.field_offsets(_PARAMS), values)
    padded = struct.Struct("<128s4xiq")  # a ParamPacker's: a tensor map, padding, int, long
    with pytest.raises(OperandError, match=r"^parameter 1 \(int\) = 2147483648"):
        rc.pack(padded, (0, 132, 136), (bytes(128), 2 ** 31, 0))
    _fake_functions(monkeypatch)
    k = Kernel(PRESETS["smem"].config, "sm_80", b"")
    with pytest.raises(OperandError, match=r"^ldb = -2147483649"):
        k.launches(KernelArgs.blas(
            4, 4, 4, 1.0, 0x1000, 4, 0x2000, -2 ** 31 - 1, 0.0, 0x3000, 4), 0)


def _within_grid_limits(recipe) -> None:
    for ln in recipe.launches:
        x, y, z = ln.grid
        assert 1 <= x <= 2 ** 31 - 1 and 1 <= y <= 65535 and 1 <= z <= 65535, ln.grid


def test_helper_launches_stay_within_the_grid_limits_at_four_million_rows(nvcc, monkeypatch):
    """3xTF32 at M = 4,000,000: the split of A takes ceil(M / 32) = 125,000 tiles of rows,
    past gridDim.y's 65535, so it is launched in pieces whose rows and addresses add up."""
    k, _ = _tma_kernel(monkeypatch, "wgmma_3xtf32")
    m, n, kk = 4_000_000, 128, 64
    r = k.launches(KernelArgs.blas(m, n, kk, 1.0, Ref(0, 0x100000), kk, Ref(1, 0x200000), n, 0.0,
                   Ref(2, 0x300000), n), 0)
    _within_grid_limits(r)
    splits = [ln for ln in r.launches if ln.function.handle != k.function(0).handle]
    offsets = hopper.HELPER_OFFSETS["split3"]  # src, so, sk, sbs, dst, ldd, sbd, outer, ...
    pieces = [(struct.unpack_from("<i", ln.params, offsets[7])[0],
               [p for p in ln.patches if p.index == 0]) for ln in splits]
    a_pieces = [(outer, patches[0].delta) for outer, patches in pieces if patches]
    assert len(a_pieces) >= 2 and sum(outer for outer, _ in a_pieces) == m
    at = 0
    for outer, delta in a_pieces:  # each piece reads A from its first row on (row-major A)
        assert delta == at * kk * 4
        at += outer


def test_batched_helper_launches_stay_within_the_grid_limits(nvcc, monkeypatch):
    k, _ = _tma_kernel(monkeypatch, "wgmma_3xtf32")
    batch = 70_000
    r = k.launches(KernelArgs.blas(64, 64, 64, 1.0, Ref(0, 0x100000), 64, Ref(1, 0x200000), 64, 0.0,
                   Ref(2, 0x300000), 64, 64 * 64, 64 * 64, 64 * 64, batch=batch), 0)
    _within_grid_limits(r)


def test_blockwise_quantization_launches_within_the_grid_limits(monkeypatch):
    """128 x 128 quantization of 10,000,000 rows: 78,125 row blocks, in pieces of 65535."""
    from gemmgen.runtime import quantize
    calls = []
    monkeypatch.setattr(quantize, "module", lambda *a, **k: None)
    monkeypatch.setattr(quantize, "_launch", lambda mod, name, kind, grid, values, stream:
                        calls.append((grid, values)))
    monkeypatch.setattr(quantize.driver, "on_device", lambda dev: __import__(
        "contextlib").nullcontext())
    rows = 10_000_000
    quantize.quantize("128x128", "bf16", "e4m3", 0x10000, 256, rows, 256, 0x20000000000, 256,
                       0x30000000000, ss_r=2, ss_c=1)
    assert all(grid[1] <= 65535 for grid, _ in calls)
    assert sum(values[2] for _, values in calls) == rows
    at = 0
    for grid, (x, ldx, n_rows, cols, q, ldq, scale, ss_r, ss_c, floor) in calls:
        assert n_rows <= grid[1] * 128, "one CTA per block of 128 rows: none left out"
        assert (x, q, scale) == (0x10000 + at * 256 * 2, 0x20000000000 + at * 256,
                                 0x30000000000 + at // 128 * 2 * 4)
        at += n_rows


def test_serialized_recipe_keeps_every_operand_index_by_default():
    """The launcher numbers as many operands as a recipe patches (six for FP8: scale_a and
    scale_b are 4 and 5): without an order, each patch keeps its index."""
    from types import SimpleNamespace
    fn = SimpleNamespace(handle=5, dynamic_smem=0)
    patches = tuple(rc.Patch(8 * i, PATCH_POINTER, i, 0) for i in range(6))
    r = rc.Recipe(0, [rc.Launch(fn, (1, 1, 1), (128, 1, 1), bytes(48), patches)], "fp8")
    data = r.to_bytes()
    at = 8 + struct.calcsize("<Q6IIIi") + 48 + 4
    got = [struct.unpack_from("<IIIq", data, at + 20 * i)[2] for i in range(6)]
    assert got == list(range(6))


class _Recipe:
    device, path = 0, "tma"

    def __init__(self):
        self.calls = []

    def run(self, ptrs, stream):
        self.calls.append((ptrs, stream))


class _Kernel:
    last_path = None


def test_one_plan_reads_every_operand_in_the_recipes_order(monkeypatch):
    """plans.Plan for the three call shapes: (A, B, C, bias), FP8's (A, B, D, bias, scale_a,
    scale_b) with a number scale, and a swapped 16-bit call; a missing output is made."""
    from contextlib import nullcontext
    from gemmgen.runtime import driver, plans
    monkeypatch.setattr(driver, "on_device", lambda dev: nullcontext())
    monkeypatch.setattr(driver, "stream_handle", lambda s: ("handle", s))
    from test_operands import FakeDeviceArray

    def array(ptr):
        return FakeDeviceArray((1,), ptr=ptr)
    monkeypatch.setattr(plans, "device_scalar", lambda value, like, device: array(int(value)))
    a, b, c, bias, sa, sb = (array(0x1000 * (i + 1)) for i in range(6))
    made = array(0x9000)
    recipe = _Recipe()
    plan = plans.plan_of(_Kernel(), recipe, (a, b, c, bias), lambda: made)
    assert plan.run(a, b, c, bias, stream=7) is c
    assert plan.run(b, a, None, None) is made
    fp8 = plans.plan_of(_Kernel(), recipe, (a, b, None, None, 3.0, sb), lambda: made)
    assert fp8.run(a, b, None, None, 5.0, sb, stream=1) is made
    swapped = plans.plan_of(_Kernel(), recipe, (a, b, c, None), None, swap=True)
    swapped.run(a, b, c, None)
    assert [call[0] for call in recipe.calls] == [
        (0x1000, 0x2000, 0x3000, 0x4000), (0x2000, 0x1000, 0x9000, 0),
        (0x1000, 0x2000, 0x9000, 0, 5, 0x6000), (0x2000, 0x1000, 0x3000, 0)]
    assert recipe.calls[0][1] == ("handle", 7)


def test_a_launch_without_patches_hands_the_driver_one_prepared_block(monkeypatch):
    """Recipe.run: a launch whose parameters no call patches passes the same driver.Params
    (made once, pointing at its bytes) on every call; a patched launch passes fresh bytes with
    the operand's address written in."""
    import ctypes
    fn = types.SimpleNamespace(handle=5, dynamic_smem=0)
    plain = rc.Launch(fn, (1, 1, 1), (128, 1, 1), b"\x01" * 16)
    patched = rc.Launch(fn, (2, 1, 1), (128, 1, 1), bytes(16), (rc.Patch(8, PATCH_POINTER, 0, 4),))
    seen = []
    monkeypatch.setattr(driver_mod, "launch", lambda f, grid, block, smem, params, stream,
                        pdl=False: seen.append(params))
    recipe = rc.Recipe(0, [plain, patched], "test")
    recipe.run((0x1000,), None)
    recipe.run((0x2000,), None)
    assert seen[0] is seen[2] and isinstance(seen[0], driver_mod.Params)
    extra = seen[0].extra
    assert ctypes.string_at(extra[1], ctypes.c_size_t.from_address(extra[3]).value) == b"\x01" * 16
    assert struct.unpack_from("<Q", seen[1], 8)[0] == 0x1004
    assert struct.unpack_from("<Q", seen[3], 8)[0] == 0x2004


def test_dual_plan_reads_a_following_up_in_place_and_patches_any_other(nvcc, monkeypatch):
    """plans.plan_gemm with the dual GEMM's up: an up weight anywhere after the gate is read in place
    (one tensor map, up's place encoded as its distance from the gate, so nothing patches up),
    one before it is packed first with up's address patched into the pack launch; the
    launcher's swiglu op numbers up 3, and run_tree reads every operand in the recipe's order."""
    import dataclasses
    from contextlib import nullcontext
    from gemmgen.runtime import plans
    from gemmgen.runtime.epilogue_args import UP_INDEX
    from gemmgen.runtime.tree_api import dual_config
    from test_operands import FakeDeviceArray
    cfg = dual_config("rcr", "silu(gate)*up", dtype="fp16")
    cubin, _ = compile_cached(render(cfg, "sm_90a"), "sm_90a", cfg.name)
    _fake_functions(monkeypatch)
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(tma, "encode", lambda spec, name="": bytes([spec.ptr % 251]) * 128)
    monkeypatch.setattr(driver_mod, "on_device", lambda dev: nullcontext())
    monkeypatch.setattr(driver_mod, "stream_handle", lambda s: ("handle", s))
    k = Kernel(cfg, "sm_90a", cubin)
    m, n, depth = 256, 512, 1024

    def weight_t(ptr):  # the K x N column-major view of an N x K weight
        return FakeDeviceArray((depth, n), "<f2", (2, 2 * depth), ptr)
    x = FakeDeviceArray((m, depth), "<f2", None, 0x10000000)
    c = FakeDeviceArray((m, n), "<f2", None, 0x20000000)
    gate = weight_t(0x30000000)
    after, before = weight_t(0x50000000), weight_t(0x28000000)
    fused = plans.plan_gemm(k, x, gate, c, None, 1.0, 0.0, 0, tree={"up": after})
    packed = plans.plan_gemm(k, x, gate, c, None, 1.0, 0.0, 0, tree={"up": before})

    def indices(plan):
        return {p.index for ln in plan.recipe.launches for p in ln.patches}
    assert fused.recipe.path == "tma" and len(fused.recipe.launches) == 1
    assert indices(fused) == {0, 1, 2}
    assert packed.recipe.path == "tma + pack B+up" and UP_INDEX in indices(packed)
    data = packed.recipe.to_bytes(tuple(range(UP_INDEX)) + (3,))
    at, seen = 8, set()
    for ln in packed.recipe.launches:
        at += struct.calcsize("<Q6IIIi") + len(ln.params)
        (count,) = struct.unpack_from("<I", data, at)
        seen |= {struct.unpack_from("<IIIq", data, at + 4 + 20 * i)[2] for i in range(count)}
        at += 4 + 20 * count
    assert 3 in seen and UP_INDEX not in seen
    recipe = _Recipe()
    dataclasses.replace(packed, recipe=recipe).run_tree(x, gate, c, None, {"up": before},
                                                        stream=3)
    assert recipe.calls == [((0x10000000, 0x30000000, 0x20000000, 0, 0, 0, 0, 0, 0, 0,
                              0x28000000), ("handle", 3))]
