"""The runtime side of epilogue trees without a GPU: the tree operands' checks (each error
names its argument), the ``EpilogueArgs`` block at the cubin's offset with its pointers
patched per call as A, B and C are, the split-K reduction's copy of it, the dual GEMM's B map
and the heuristics that keep a tree unswapped."""
import struct

import pytest

from gemmgen import PRESETS
from gemmgen.codegen.render import render
from gemmgen.compile.cache import compile_cached
from gemmgen.heuristics.select import decide
from gemmgen.model.epilogue_rules import EPILOGUE_ARGS
from gemmgen.runtime import driver as driver_mod, tma
from gemmgen.runtime.epilogue_args import INDEX, UP_INDEX, check_epilogue
from gemmgen.runtime.kernel import Kernel
from gemmgen.runtime.operands import OperandError
from gemmgen.runtime.recipe import PATCH_MAP, PATCH_POINTER, WORK_BASE, KernelArgs, Ref
from gemmgen.runtime.tma import param_layout

TREE = "silu(acc*row_scale*col_scale + bias) + R"
FIELD = {f.name: f for f in EPILOGUE_ARGS}


class Dev:
    """A device array as ``__cuda_array_interface__`` describes it (no GPU behind it)."""

    def __init__(self, shape, typestr, ptr, strides=None):
        self.shape, self.ndim, self.ptr = tuple(shape), len(shape), ptr
        self.size = 1
        for s in shape:
            self.size *= s
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": typestr,
                                         "data": (ptr, False), "strides": strides, "version": 3}

    def reshape(self, *shape):
        shape = (1, self.size) if shape == (1, -1) else shape
        return Dev(shape, self.__cuda_array_interface__["typestr"], self.ptr)


def _tree_cfg(**changes):
    return PRESETS["wgmma_tma_store"].config.replace(epilogue=TREE, **changes)


def _operands(m, n):
    return {"row_scale": Dev((m,), "<f4", 0x500000), "col_scale": Dev((n,), "<f4", 0x600000),
            "R": Dev((m, n), "<f2", 0x800000)}


def test_each_tree_operand_is_checked_by_name():
    cfg, m, n = _tree_cfg(), 256, 512
    ops = _operands(m, n)
    got = check_epilogue(cfg, ops, m, n, None)
    assert set(got.ops) == {"row_scale", "col_scale", "R"} and got.fields["ldr"] == n
    with pytest.raises(OperandError, match="R is required"):
        check_epilogue(cfg, {**ops, "R": None}, m, n, None)
    with pytest.raises(OperandError, match="col_scale must hold 512 values"):
        check_epilogue(cfg, {**ops, "col_scale": Dev((n + 1,), "<f4", 0x600000)}, m, n, None)
    with pytest.raises(OperandError, match="row_scale has dtype"):
        check_epilogue(cfg, {**ops, "row_scale": Dev((m,), "<f2", 0x500000)}, m, n, None)
    with pytest.raises(OperandError, match="aux given, but the epilogue"):
        check_epilogue(cfg, {**ops, "aux": Dev((m, n), "<f2", 0x900000)}, m, n, None)
    with pytest.raises(OperandError, match="R has shape"):
        check_epilogue(cfg, {**ops, "R": Dev((m, n + 8), "<f2", 0x800000)}, m, n, None)
    plain = PRESETS["wgmma_tma_store"].config
    with pytest.raises(OperandError, match="reads none of them"):
        check_epilogue(plain, {"R": ops["R"]}, m, n, None)


def _kernel(monkeypatch, cfg):
    cubin, _ = compile_cached(render(cfg, "sm_90a"), "sm_90a", cfg.name)

    class Fn:
        def __init__(self, handle, smem):
            self.handle, self.dynamic_smem = handle, smem
    monkeypatch.setattr(Kernel, "function", lambda self, device=None, suffix="": Fn(
        hash(suffix) & 0xFFFF, 0 if suffix else self.config.dynamic_smem_bytes))
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(tma, "encode", lambda spec, name="": bytes([spec.ptr % 251]) * 128)
    return Kernel(cfg, "sm_90a", cubin), cubin


def _refs(n):
    return [Ref(i, 0x100000 * (i + 1)) for i in range(n)]


def _check_block(params, patches, at, epi):
    """The struct at byte ``at``: each operand's pointer patched (its operand index), the
    leading dimensions and strides written."""
    ptrs = {(p.offset, p.index) for p in patches
            if p.kind == PATCH_POINTER and 4 <= p.index < WORK_BASE}  # no workspace
    assert ptrs == {(at + FIELD[name].offset, INDEX[name]) for name in epi.ops}
    for name, op in epi.ops.items():
        assert struct.unpack_from("<Q", params, at + FIELD[name].offset)[0] == op.ptr
    for name, value in epi.fields.items():
        code = "<i" if FIELD[name].size == 4 else "<q"
        assert struct.unpack_from(code, params, at + FIELD[name].offset)[0] == value, name


def test_the_epilogue_args_sit_at_the_cubins_offset_with_patched_pointers(nvcc, monkeypatch):
    cfg, m, n = _tree_cfg(), 1000, 2048
    k, cubin = _kernel(monkeypatch, cfg)
    layout = param_layout(cubin, cfg.name)
    assert layout.sizes[-1] == 88 and layout.offsets[-1] == 600  # docs-notes/epilogue_abi.md
    epi = check_epilogue(cfg, _operands(m, n), m, n, None)
    refs = _refs(4)
    r = k.launches(KernelArgs.blas(
        m, n, 512, 1.0, refs[0], 512, refs[1], n, 0.0, refs[2], n, 0, 0, 0, refs[3], 1,
        epi=epi.block(refs=True)), 0)
    (gemm,) = r.launches
    assert r.path == "tma"
    _check_block(gemm.params, gemm.patches, layout.offsets[-1], epi)
    assert {(p.offset, p.index) for p in gemm.patches if p.kind == PATCH_MAP} == {
        (layout.offsets[i], i) for i in range(3)}
    assert (layout.offsets[17], 3) in {(p.offset, p.index) for p in gemm.patches}  # bias


def test_split_k_passes_the_struct_to_the_reduction(nvcc, monkeypatch):
    cfg, m, n = _tree_cfg(store="direct", split_k=2), 128, 4096
    k, cubin = _kernel(monkeypatch, cfg)
    reduce = param_layout(cubin, cfg.name + "_reduce")
    assert reduce.offsets[-1] == 80 and reduce.sizes[-1] == 88
    epi = check_epilogue(cfg, _operands(m, n), m, n, None)
    refs = _refs(4)
    r = k.launches(KernelArgs.blas(
        m, n, 8192, 1.0, refs[0], 8192, refs[1], n, 0.0, refs[2], n, 0, 0, 0, refs[3], 1,
        epi=epi.block(refs=True)), 0)
    _, red = r.launches
    assert r.path == "tma + split-K 2"
    _check_block(red.params, red.patches, 80, epi)


def test_dual_b_reads_a_fused_pair_in_place_else_packs_both(nvcc, monkeypatch):
    cfg = PRESETS["wgmma_tma_store"].config.replace(dual=True, bn=128, stages=4, layout="rcr",
                                                    epilogue="silu(gate)*up")
    k, _ = _kernel(monkeypatch, cfg)
    m, n, kk = 512, 1024, 512
    a, b, c = Ref(0, 0x1000000), Ref(1, 0x2000000), Ref(2, 0x9000000)
    fused = k.launches(KernelArgs.blas(m, n, kk, 1.0, a, kk, b, kk, 0.0, c, n,
                                       up=(Ref(UP_INDEX, 0x2000000 + n * kk * 2), kk, 0)), 0)
    (gemm,) = fused.launches
    assert fused.path == "tma"
    maps = {(p.offset, p.index) for p in gemm.patches if p.kind == PATCH_MAP}
    assert len(maps) == 3 and all(i in (0, 1, 2) for _, i in maps)
    apart = k.launches(KernelArgs.blas(m, n, kk, 1.0, a, kk, b, kk, 0.0, c, n,
                                       up=(Ref(UP_INDEX, 0x1800000), kk, 0)), 0)  # Bu, Bg: packed
    pack_g, pack_u, gemm = apart.launches
    assert apart.path == "tma + pack B+up"
    assert pack_g.patches[0].index == 1 and pack_u.patches[0].index == UP_INDEX
    assert 1 not in {p.index for p in gemm.patches}, "the GEMM reads the packed pair"


def test_trees_are_never_swapped_and_reduce_apart():
    small = decide(None, "NVIDIA H200", "fp16", 8, 4096, 4096, 90, "rrr", TREE)
    assert not small.swap and small.config.epilogue == TREE
    assert not small.config.split_inline
    plain = decide(None, "NVIDIA H200", "fp16", 8, 4096, 4096, 90, "rrr", "none")
    assert plain.swap


def test_a_residual_is_read_in_the_layout_it_is_given_in():
    """R follows C's layout unless the tree spells one; an R given in the other layout is
    spelled as given, so the kernel reads it as it is (a column-major R beside a row-major C
    was refused before)."""
    import numpy as np

    from gemmgen.model.epilogue import Epilogue
    from gemmgen.runtime.tree_api import r_layout_of_operand
    row = np.zeros((6, 5), np.float16)
    col = np.asfortranarray(row)

    def spelled(tree, R, c_layout):
        return r_layout_of_operand(Epilogue.parse(tree), R, c_layout).expr
    assert spelled("acc + R", col, "r") == "acc + R(layout='c')"
    assert spelled("acc + R", row, "c") == "acc + R(layout='r')"
    assert spelled("acc + R(dtype='fp32')", col.astype(np.float32), "r") == \
        "acc + R(layout='c', dtype='fp32')"
    assert spelled("acc + R", col, "c") == "acc + R"
    assert spelled("acc + R", row, "r") == "acc + R"
    assert spelled("acc + R(layout='r')", col, "r") == "acc + R(layout='r')"
    assert spelled("gelu(acc + bias)", None, "r") == "gelu(acc + bias)"


def test_a_tree_kernel_writes_c_in_the_dtype_c_has():
    from gemmgen.model.presets import PRESETS
    from gemmgen.runtime.tree_api import _with_out
    cfg = PRESETS["wgmma_tma_store"].config.replace(epilogue="amax(acc*col_scale + bias)",
                                                    check=False)  # fp16 C: amax needs fp32
    assert _with_out(cfg, None) is cfg and _with_out(cfg, cfg.out) is cfg
    wide = _with_out(cfg, "fp32")
    assert wide.out == "fp32" and wide.dtype == cfg.dtype and not wide.violations()
