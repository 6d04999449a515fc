"""The grouped family without a GPU: presets and rules, the tile scheduler (the template's C++
compiled for the host and run beside its Python mirror over empty, 1-row, ragged and skewed
groups), static evidence (ptxas, SASS) of every preset, TMA geometry, the dispatch choice,
explain, and grouped_gemm's argument errors."""
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

from gemmgen import PRESETS, BuildError, grouped_gemm, render
from gemmgen.codegen.render import _env
from gemmgen.compile.nvcc import tool_path
from gemmgen.heuristics import grouped as hg
from gemmgen.model.config import ConfigError
from gemmgen.model.families import config_from_dict, families_for
from gemmgen.model.families.hopper.grouped import GroupedConfig
from gemmgen.runtime.operands.groups import check_grouped
from gemmgen.runtime.kernel import Kernel
from gemmgen.runtime.operands import OperandError
from gemmgen.runtime.hopper.fp8 import TRANSPOSE_OFFSETS, TRANSPOSE_STRUCT
from gemmgen.runtime.recipe import KernelArgs, Ref, Scale
from gemmgen.runtime.tma import ParamPacker, param_layout

GROUPED = {n: p.config for n, p in PRESETS.items() if p.config.family == "grouped"}
ARCH = "sm_90a"


def test_presets_and_the_family_stay_out_of_gemms_choice():
    assert set(GROUPED) == {"grouped_small", "grouped_bf16", "grouped_bf16_ends", "grouped_dgrad",
                            "grouped_wgrad", "grouped_fp16", "grouped_fp8",
                            "grouped_fp8_split_n"}
    assert all(c.name.startswith("gemm_grouped_") and not c.violations() for c in GROUPED.values())
    assert "grouped" not in {f.name for f in families_for("bf16", 90)}
    c = GROUPED["grouped_bf16"]
    assert (c.threads, c.consumer_rows, c.acc_regs, c.entry_regs) == (384, 64, 128, 168)
    assert c.smem_bytes == 1024 * (-(-3 * c.stage_bytes // 1024)) + 2 * 64 * 256 * 2 + 48 + 1024
    k = GROUPED["grouped_wgrad"].template_constants()
    assert (k["A_MN_MAJOR"], k["B_MN_MAJOR"], k["A_BOXES"], k["B_BOXES"]) == (1, 1, 2, 4)
    assert (k["A_DESC_LBO"], k["A_K_STEP_BYTES"], k["TAIL_UNITS"]) == (64 * 128, 2048,
                                                                       c.stage_bytes // 16)


def _unchecked(preset: str, **changes) -> GroupedConfig:
    return GROUPED[preset].replace(check=False, **changes)


def test_layout_rules_name_the_way_out():
    bad = _unchecked("grouped_bf16", layout="crr")
    assert [v.rule.name for v in bad.violations()] == ["a-layout"]
    assert "row-major (layout 'r??')" in str(bad.violations()[0])


@pytest.mark.parametrize("preset", ["grouped_bf16", "grouped_wgrad", "grouped_fp8"])
def test_one_stage_is_refused(preset):
    """A consumer releases a stage once it waits on the next one, so a ring of one stage
    would wait on itself (the kernel would hang): H53, the rule of every Hopper kernel with a
    producer warpgroup, refuses it, and the source says so."""
    assert [v.rule.id for v in _unchecked(preset, stages=1).violations()] == ["H53"]
    assert '"H53 stages-ring: STAGES >= 2*PRODUCER when STAGES >= 1"' in render(GROUPED[preset],
                                                                                "sm_90a")


# ---- the scheduler: the template's C++ on the host against the Python mirror ----------------
HARNESS = """
#include <algorithm>
#include <cstdio>
using std::max;
using std::min;
#define __device__
#define __forceinline__ inline
#define __restrict__
static int __ldg(const int* p) { return *p; }
constexpr int BM = %(bm)d, BN = %(bn)d, BK = %(bk)d, GROUP = %(group)d;
%(scheduler)s
int main() {
    int mode, groups, rows, n, k, grid, null;
    if (scanf("%%d %%d %%d %%d %%d %%d %%d", &mode, &groups, &rows, &n, &k, &grid, &null) != 7)
        return 2;
    static int offs[4096];
    for (int g = 0; g < groups; ++g) if (scanf("%%d", &offs[g]) != 1) return 2;
    for (int cta = 0; cta < grid; ++cta) {
        Sched s;
        s.offs = null ? nullptr : offs;
        s.groups = groups; s.rows = rows; s.tiles_n = (n + BN - 1) / BN; s.mode = mode;
        %(k_field)s
        Tile t;
        for (int i = cta; s.next(i, t); i += grid)
            printf("%%d %%d %%d %%d %%d %%d %%d %%d %%d %%d\\n", cta, t.g, t.m0, t.n0, t.row, t.z,
                   t.valid, t.k0, t.nk, t.tail);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def host_scheduler(tmp_path_factory):
    """cfg -> a function running the template's scheduler on the host (g++)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    built = {}

    def run(cfg, mode, offs, rows, n, k, grid, groups=None):
        if cfg.name not in built:
            src = HARNESS % {"bm": cfg.bm, "bn": cfg.bn, "bk": cfg.bk, "group": cfg.group,
                             "scheduler": _env().get_template("_grouped_scheduler.cu.j2")
                             .make_module({"cfg": cfg}).scheduler(),
                             "k_field": "s.k_tiles = (k + BK - 1) / BK;" if cfg.grouping == "m"
                             else "s.k_total = k;"}
            d = tmp_path_factory.mktemp("sched")
            (d / "s.cpp").write_text(src)
            subprocess.run([cxx, "-O1", "-std=c++17", "-o", str(d / "s"), str(d / "s.cpp")],
                           check=True, capture_output=True)
            built[cfg.name] = d / "s"
        null = offs is None
        offs = [0] * groups if null else offs
        text = f"{mode} {len(offs)} {rows} {n} {k} {grid} {int(null)}\n" + " ".join(map(str, offs))
        out = subprocess.run([str(built[cfg.name])], input=text, capture_output=True,
                             text=True, check=True).stdout
        return [tuple(map(int, line.split())) for line in out.splitlines()]
    return run


def _python(cfg, mode, offs, rows, n, k, grid, groups=None):
    if cfg.grouping == "k":
        tiles = list(hg.tiles_k_grouped(cfg, offs, rows, n, k))
    else:
        tiles = list(hg.tiles_m_grouped(cfg, offs, rows, n, k, mode == 1, groups))
    return [(cta, *(getattr(t, f) for f in ("g", "m0", "n0", "row", "z", "valid", "k0", "nk",
                                             "tail")))
            for cta, ts in enumerate(hg.per_cta(tiles, grid)) for t in ts]


COUNTS = {
    "uniform": hg.row_counts("uniform", 1000, 8),
    "empty groups": [0, 130, 0, 0, 1, 255, 0, 64],
    "one-row groups": [1] * 9 + [300],
    "not a multiple of the tile": [129, 127, 65, 63, 191, 257],
    "90% skew": hg.row_counts("skew90", 5000, 16),
    "all empty": [0, 0, 0],
}


def _check_m_cover(cfg, counts, tiles, n):
    """Every row of every group written exactly once per column tile, nothing past a group's
    end, the rows past offs[G-1] (here none: offs[-1] < rows below) zero-filled."""
    ends = hg.offsets(counts)
    rows = ends[-1] + 37  # rows past offs[G-1]: the zero-filled group
    written = {}
    for t in tiles:
        _, g, m0, n0, row, z, valid, k0, nk, tail = t
        begin = ends[g - 1] if 0 < g <= len(counts) else (0 if g == 0 else ends[-1])
        assert row == begin + m0 and valid > 0 and z == 0
        for r in range(row, row + min(valid, cfg.bm)):
            written[(r, n0)] = written.get((r, n0), 0) + 1
        assert nk == (0 if g == len(counts) else -(-64 // cfg.bk))
    assert set(written.values()) == {1}
    assert {r for r, _ in written} == set(range(rows))
    assert {c for _, c in written} == set(range(0, n, cfg.bn))


ORDERS = ("forward", "ends")


@pytest.mark.parametrize("name", list(COUNTS))
@pytest.mark.parametrize("preset", ["grouped_bf16", "grouped_small"])
@pytest.mark.parametrize("order", ORDERS)
def test_m_grouped_schedule_matches_and_covers(host_scheduler, name, preset, order):
    cfg = GROUPED[preset].replace(order=order)
    counts, n = COUNTS[name], 600
    offs = hg.offsets(counts)
    rows = offs[-1] + 37
    for grid in (1, 7, 132):
        got = host_scheduler(cfg, 0, offs, rows, n, 64, grid)
        assert got == _python(cfg, 0, offs, rows, n, 64, grid), (name, grid)
    _check_m_cover(cfg, counts, got, n)


@pytest.mark.parametrize("order", ORDERS)
def test_offsets_are_clamped_on_the_device(host_scheduler, order):
    """Offsets past the rows, or decreasing, never make a tile leave [0, rows)."""
    cfg = GROUPED["grouped_bf16"].replace(order=order)
    for offs in ([50, 10, 300, 5000], [-5, 100, 90, 100], [1 << 30] * 3):
        got = host_scheduler(cfg, 0, offs, 400, 256, 64, 5)
        assert got == _python(cfg, 0, offs, 400, 256, 64, 5)
        assert all(0 <= t[4] and t[4] + min(t[6], cfg.bm) <= 400 for t in got)


@pytest.mark.parametrize("order", ORDERS)
def test_masked_schedule(host_scheduler, order):
    cfg = GROUPED["grouped_bf16"].replace(order=order)
    counts = [0, 1, 200, 256, 300, 17]  # 300 > rows: clamped to the matrix
    got = host_scheduler(cfg, 1, counts, 256, 512, 64, 11)
    assert got == _python(cfg, 1, counts, 256, 512, 64, 11)
    per = {g: sum(min(t[6], cfg.bm) for t in got if t[1] == g and t[3] == 0) for g in range(6)}
    assert per == {0: 0, 1: 1, 2: 200, 3: 256, 4: 256, 5: 17}
    assert all(t[5] == t[1] and t[4] == t[2] for t in got)  # z = group, row = m0
    full = host_scheduler(cfg, 1, None, 130, 256, 64, 4, groups=3)  # no counts: every row
    assert full == _python(cfg, 1, None, 130, 256, 64, 4, groups=3)
    assert sum(min(t[6], cfg.bm) for t in full) == 3 * 130


def _visited(tiles) -> list:
    """The tiles a schedule ran, without the CTA, sorted (a repeated tile stays twice)."""
    return sorted(t[1:] for t in tiles)


GARBAGE = [[3, 900, 2, 2, 1 << 30, -7, 64], [-1, -1, 0], [400, 10, 20, 30, 1000, 999],
           [0] * 5 + [1, 1, 2] + [0]]


@pytest.mark.parametrize("masked", [False, True])
def test_ends_order_runs_every_tile_exactly_once(host_scheduler, masked):
    """Order "ends" runs exactly the tiles of the forward order, each once, whatever the
    offsets (empty, 1-row, ragged, skewed, decreasing, negative, past the rows) and the grid
    (odd grids alternate a CTA between the two ends); each CTA's front tiles come in forward
    order and its back tiles in reverse (both cursors only move one way)."""
    fwd, ends = GROUPED["grouped_bf16"], GROUPED["grouped_bf16_ends"]
    rng = np.random.default_rng(5)
    cases = [hg.offsets(c) for c in COUNTS.values()] + GARBAGE
    cases += [sorted(rng.integers(0, 700, 9).tolist()) for _ in range(3)]
    mode, rows = int(masked), 300 if masked else 700
    for offs in cases:
        want = _visited(host_scheduler(fwd, mode, offs, rows, 384, 64, 1))
        assert len(set(want)) == len(want)
        index = {t: i for i, t in enumerate(t[1:] for t in host_scheduler(fwd, mode, offs, rows,
                                                                            384, 64, 1))}
        for grid in (1, 2, 5, 132):
            got = host_scheduler(ends, mode, offs, rows, 384, 64, grid)
            assert _visited(got) == want, (offs, grid)
            for cta in range(grid):
                seq = [index[t[1:]] for t in got if t[0] == cta]
                ts = range(cta, cta + grid * len(seq), grid)
                front = [i for i, t in zip(seq, ts) if t % 2 == 0]
                back = [i for i, t in zip(seq, ts) if t % 2 == 1]
                assert front == sorted(front) and back == sorted(back, reverse=True)


def test_ends_order_mirror():
    assert hg.ends_order(list(range(7))) == [0, 6, 1, 5, 2, 4, 3]
    assert hg.ends_order(list(range(6))) == [0, 5, 1, 4, 2, 3]
    assert hg.ends_order([]) == []
    cfg = GROUPED["grouped_bf16_ends"]
    assert cfg.name.endswith("_lrcr_oends") and "order" in cfg.as_dict()
    assert "order" not in GROUPED["grouped_bf16"].as_dict()
    assert "_o" not in GROUPED["grouped_bf16"].name.rsplit("_l", 1)[1]
    assert [v.rule.id for v in GROUPED["grouped_wgrad"].replace(
        order="ends", check=False).violations()] == ["G25"]
    forward = render(GROUPED["grouped_bf16"], ARCH)
    assert "ORDER_ENDS" not in forward and "G25" not in forward
    assert "constexpr int ORDER_ENDS = 1;" in render(cfg, ARCH)


def test_k_grouped_schedule_covers_each_groups_rows(host_scheduler):
    cfg = GROUPED["grouped_wgrad"]
    counts = [0, 1, 64, 65, 1000, 0, 127]
    offs = hg.offsets(counts)
    got = host_scheduler(cfg, 0, offs, 300, 512, offs[-1], 13)
    assert got == _python(cfg, 0, offs, 300, 512, offs[-1], 13)
    for t in got:
        _, g, m0, n0, row, z, valid, k0, nk, tail = t
        size = counts[g]
        assert (k0, nk) == (offs[g] - size, -(-size // cfg.bk)) and z == g and row == m0
        if nk:
            assert 0 < tail <= cfg.bk and (nk - 1) * cfg.bk + tail == size
    assert len(got) == len(counts) * 3 * 2  # ceil(300/128) x ceil(512/256) tiles per group


# ---- static evidence --------------------------------------------------------------------------
def _variants() -> list:
    base = GROUPED["grouped_bf16"]
    return [base.replace(out="fp32", bn=128), base.replace(bm=256, bn=128, stages=3),
            GROUPED["grouped_small"].replace(bn=128, stages=6),
            GROUPED["grouped_wgrad"].replace(out="fp32", bn=128)]


@pytest.fixture(scope="module")
def compiled(nvcc):
    from batched import compile_batched
    configs = list(GROUPED.values()) + _variants()
    out = {}
    for cfg, done in zip(configs, compile_batched(configs, arch=ARCH)):
        if isinstance(done, BuildError):
            pytest.fail(f"{cfg.name}: {done}")
        out[cfg.name] = (cfg, done[0], done[1])
    return out


def test_no_spills_no_stack_and_the_parameter_table(compiled):
    for name, (cfg, cubin, res) in compiled.items():
        assert res.spills == 0 and res.stack_bytes == 0, (name, res)
        layout = param_layout(cubin, name)
        kinds = tuple(p.kind for p in cfg.params())
        assert len(layout.offsets) == len(kinds)
        assert layout.offsets[:3] == (112, 240, 368), "tensor maps 128-byte aligned in c[0x0]"
        ParamPacker(layout, tuple(p.kind for p in cfg.params()))
        if cfg.fp8:  # the block scales' transposing copy takes the fp8 pack's parameters
            assert param_layout(cubin, f"{name}_scales").offsets == TRANSPOSE_OFFSETS


def test_sass_has_hgmma_tma_and_no_local_memory(compiled):
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    from batched import sass_of, waits_before_global_access
    for name, (cfg, cubin, _) in compiled.items():
        text = sass_of(cubin, name)
        mma = "QGMMA.64x128x32.F32.E4M3.E4M3" if cfg.fp8 else "HGMMA"  # FP8 wgmma is QGMMA
        assert mma in text and "UTMALDG" in text and "UTMASTG" in text, name
        assert not re.search(r"\b(LDL|STL)\b", text), f"{name} uses local memory"
        assert ("STSM" in text) == (cfg.out_bytes == 2), name
        assert ("USETMAXREG" in text) == cfg.setmaxnreg, name
        # FP8: a window's block scales of a row in one 16-byte load (where they are
        # contiguous in K), beside the one-block loads of the fallback.
        assert ("LDG.E.128" in text) == cfg.fp8, name
        assert waits_before_global_access(cubin, name), f"{name}: global access before the PDL wait"


def test_a_broken_rule_is_the_static_assert_that_fires(nvcc):
    from gemmgen.compile.nvcc import compile_source
    cfg = _unchecked("grouped_bf16", stages=5)
    with pytest.raises(BuildError) as info:
        compile_source(render(cfg, ARCH), (ARCH,), name=cfg.name)
    assert info.value.static_assert_ids() == {"H09"}


def test_tensor_maps_and_alignment_problems(compiled):
    cfg, cubin, res = compiled[GROUPED["grouped_bf16"].name]
    k = Kernel(cfg, ARCH, cubin, res)
    p = KernelArgs(1000, 4096, 7168, 1 << 20, 7168, 1 << 30, 7168, 1 << 32, 4096,
                   stride_b=4096 * 7168, grouping="m", mode="offs", groups=8, offs=1 << 34)
    a, b, c = k.launcher.maps(p)
    assert a.dims == (7168, 1000, 1) and a.box == (64, 128, 1)
    assert b.dims == (7168, 4096, 8) and b.box == (64, 256, 1)  # [G, N, K]: K contiguous
    assert c.dims == (4096, 1000, 1) and c.box == (64, 64, 1)
    assert k.launcher.problems(p) == []
    odd = KernelArgs(1000, 4100, 7170, (1 << 20) + 2, 7170, 1 << 30, 7170, 1 << 32, 4100,
                     grouping="m", mode="offs", groups=8, offs=1 << 34)
    text = "; ".join(k.launcher.problems(odd))
    assert "A's address is not 16-byte aligned" in text and "B's group stride is 0" in text
    assert "C's rows hold N = 4100 values, not a multiple of 8 (16 bytes)" in text
    assert k.grid(p, 132) == (132, 1, 1)
    masked = KernelArgs(64, 256, 64, 0, 64, 0, 64, 0, 256, grouping="m", mode="masked",
                        groups=2)
    assert k.grid(masked, 132) == (2, 1, 1)


# ---- choice and explain -----------------------------------------------------------------------
def test_choice_follows_the_groups():
    few = hg.choose("bf16", "m", "rcr", "bf16", 8, 8192, 14336, 4096)
    assert (few.config.bm, few.config.bn) == (128, 256)
    wgrad = hg.choose("bf16", "k", "crr", "bf16", 8, 4096, 14336, 8192)
    assert wgrad.config.grouping == "k" and (wgrad.config.bm, wgrad.config.bn) == (128, 256)
    fp32 = hg.choose("bf16", "k", "crr", "fp32", 8, 4096, 14336, 8192).config
    assert fp32.out == "fp32" and not fp32.violations() and fp32.bn < 256
    for layout, out in (("rcr", "fp32"), ("rrr", "bf16"), ("rrr", "fp32")):
        cfg = hg.choose("bf16", "m", layout, out, 64, 8192, 2048, 1024).config
        assert (cfg.layout, cfg.out) == (layout, out) and not cfg.violations()
    text = hg.explain_grouped("bf16", 256, 32768, 4096, 7168, "skew90")
    assert "skew90: rows per group min 12" in text and "schedule:" in text and "*" in text
    assert "tile order (wave model, uncalibrated): forward" in text
    assert "the dispatch keeps forward" in text


def test_the_wave_model_sees_the_order_and_the_dispatch_keeps_forward():
    cfg = GROUPED["grouped_bf16"]
    ends = cfg.replace(order="ends")
    for dist in ("uniform", "skew90"):
        assert hg.choose("bf16", "m", "rcr", "bf16", 256, 32768, 4096, 7168,
                         hg.row_counts(dist, 32768, 256)).config.order == "forward"
    even = hg.row_counts("uniform", 32768, 256)
    fwd_s, ends_s = (hg.predict_waves(c, even, 4096, 7168) for c in (cfg, ends))
    assert abs(fwd_s / ends_s - 1) < 0.02, "uniform: every wave alike in either order"
    skew = hg.row_counts("skew90", 32768, 256)
    assert hg.predict_waves(ends, skew, 4096, 7168) < 0.9 * hg.predict_waves(cfg, skew, 4096,
                                                                           7168)
    assert all(c.order == "forward" for c in hg.candidates("bf16", "m", "rcr", "bf16"))
    assert {c.order for c in hg.space("bf16")} == {"forward", "ends"}
    assert {c.order for c in hg.space("bf16", "k")} == {"forward"}


def test_distributions():
    assert hg.row_counts("uniform", 10, 4) == [3, 3, 2, 2]
    assert hg.row_counts("skew90", 1000, 5) == [900, 25, 25, 25, 25]
    assert hg.row_counts("empty", 90, 8) == [15, 15, 15, 0, 15, 15, 15, 0]
    assert sum(hg.row_counts("random", 999, 7, seed=1)) == 999
    with pytest.raises(ValueError, match="unknown distribution"):
        hg.row_counts("zipf", 10, 2)


# ---- argument errors (fake device arrays: no GPU) -----------------------------------------------
class Dev:
    """A device array as __cuda_array_interface__ describes it (never dereferenced)."""

    def __init__(self, shape, typestr="<f2", strides=None, ptr=1 << 20):
        self.shape, self.ndim = tuple(shape), len(shape)
        self.dtype = np.dtype(typestr)
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": typestr,
                                         "strides": strides, "data": (ptr, False), "version": 3}


def _t(shape):
    return Dev(shape)


@pytest.mark.parametrize("call, message", [
    (lambda: check_grouped(Dev((64, 32), "<f4"), _t((2, 32, 16)), Dev((2,), "<i4")),
     "A has dtype float32; grouped_gemm takes float16, bfloat16, or float8"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 16, 16)), Dev((2,), "<i4")),
     "A's columns (32) must equal B's rows (16)"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 32, 16))), "offs is required"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((2,), "<i8")),
     "offs has dtype <i8; it must be int32"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((3,), "<i4")),
     "offs must hold one int32 per group (2)"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((2,), "<i4"), _t((64, 15))),
     "out has shape (64, 15); the result is (64, 16)"),
    (lambda: check_grouped(Dev((64, 32), strides=(2, 128)), _t((2, 32, 16)), Dev((2,), "<i4")),
     "A must be row-major"),
    (lambda: check_grouped(_t((2, 64, 32)), _t((3, 32, 16))), "A holds 2 matrices and B 3"),
    (lambda: check_grouped(_t((2, 64, 32)), _t((2, 32, 16)), Dev((2,), "<i4")),
     "with A 3-D pass counts"),
    (lambda: check_grouped(_t((64, 32)), _t((32, 16)), Dev((2,), "<i4")),
     "A must be column-major"),
    (lambda: check_grouped(_t((2, 64, 32)), _t((32, 16))), "A 3-D with B 2-D"),
    (lambda: check_grouped(_t((64,)), _t((2, 32, 16))), "A must be 2-D or 3-D"),
    (lambda: check_grouped(np.zeros((64, 32), np.float16), _t((2, 32, 16)), Dev((2,), "<i4")),
     "A is a NumPy array"),
    (lambda: check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((2,), "<i4"), out_dtype="fp16x"),
     "out_dtype: 'fp16x'"),
])
def test_argument_errors_name_the_argument(call, message):
    with pytest.raises(OperandError) as info:
        call()
    assert message in str(info.value)


def test_the_three_problems_are_recognized():
    m = check_grouped(_t((64, 32)), Dev((2, 32, 16), strides=(1024, 2, 64)), Dev((2,), "<i4"))
    assert (m.grouping, m.mode, m.layout, m.groups, m.rows, m.n, m.k) == ("m", "offs", "rcr", 2,
                                                                        64, 16, 32)
    masked = check_grouped(_t((4, 64, 32)), _t((4, 32, 16)), counts=Dev((4,), "<i4"),
                           out_dtype="fp32")
    assert (masked.mode, masked.layout, masked.out, masked.out_shape) == (
        "masked", "rrr", "fp32", (4, 64, 16))
    k = check_grouped(Dev((48, 640), strides=(2, 96)), _t((640, 16)), Dev((3,), "<i4"))
    assert (k.grouping, k.layout, k.groups, k.rows, k.k, k.out_shape) == ("k", "crr", 3, 48, 640,
                                                                        (3, 48, 16))
    p = k.problem(1, 2, 3, 4, 16, 48 * 16)
    assert (p.lda, p.ldb, p.stride_c, p.k) == (48, 16, 768, 640)


def test_torch_cpu_offsets_are_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(OperandError, match="offs is a CPU tensor"):
        check_grouped(_t((64, 32)), _t((2, 32, 16)), torch.tensor([10, 64], dtype=torch.int32))
    with pytest.raises(OperandError, match="A is a CPU torch tensor"):
        grouped_gemm(torch.zeros(64, 32, dtype=torch.bfloat16),
                     torch.zeros(2, 32, 16, dtype=torch.bfloat16),
                     torch.tensor([10, 64], dtype=torch.int32))


def test_explain_on_the_command_line():
    from click.testing import CliRunner

    from gemmgen.cli.main import main
    run = CliRunner()
    out = run.invoke(main, ["explain", "8192", "14336", "4096", "--groups", "8", "--dtype",
                            "bf16", "--dist", "skew65"])
    assert out.exit_code == 0, out.output
    assert "gemm_grouped_m_bf16_128x256x64" in out.output and "skew65" in out.output
    wgrad = run.invoke(main, ["explain", "4096", "14336", "8192", "--groups", "8",
                              "--grouping", "k", "--dtype", "bf16"])
    assert wgrad.exit_code == 0 and "K-grouped" in wgrad.output
    bad = run.invoke(main, ["explain", "64", "64", "64", "--groups", "2", "--dtype", "fp32"])
    assert bad.exit_code == 2 and "fp16 or bf16" in bad.output


def test_tuned_winners_are_keyed_by_groups_and_distribution(tmp_path):
    from gemmgen.heuristics import grouped_db
    cfg = GROUPED["grouped_small"]
    entry = {"dist": "skew90", "winner": cfg.name,
             "candidates": {cfg.name: {"config": cfg.as_dict(), "tflops": 500.0}}}
    path = tmp_path / "g.json"
    key = grouped_db.key("H200", "bf16", "bf16", "m", "rcr", 8, 8192, 14336, 4096, "skew90")
    assert key == "H200|bf16>bf16|m|rcr|G=8|8192x14336x4096|skew90"
    grouped_db.store(key, entry, path)
    entries = grouped_db.load(path)
    found = grouped_db.winner(entries, "H200", "bf16", "bf16", "m", "rcr", 8, 8192, 14336, 4096)
    assert found == (cfg.as_dict(), "skew90")
    assert grouped_db.winner(entries, "H200", "bf16", "bf16", "m", "rcr", 16, 8192, 14336,
                             4096) is None
    uniform = {**entry, "dist": "uniform", "winner": GROUPED["grouped_bf16"].name,
               "candidates": {GROUPED["grouped_bf16"].name:
                              {"config": GROUPED["grouped_bf16"].as_dict(), "tflops": 600.0}}}
    grouped_db.store(key.replace("skew90", "uniform"), uniform, path)
    found = grouped_db.winner(grouped_db.load(path), "H200", "bf16", "bf16", "m", "rcr", 8,
                              8192, 14336, 4096)
    assert found[1] == "uniform", "the host assumes an even split: the uniform entry first"
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(Exception, match="not a gemmgen grouped tuning file"):
        grouped_db.load(tmp_path / "bad.json")


def test_tune_groups_checks_its_arguments_before_the_gpu():
    from click.testing import CliRunner

    from gemmgen.cli.main import main
    out = CliRunner().invoke(main, ["tune", "--m", "64", "--n", "64", "--k", "64", "--groups",
                                    "2", "--dtype", "fp32"])
    assert out.exit_code == 2 and "fp16 or bf16" in out.output
    out = CliRunner().invoke(main, ["tune", "--m", "64", "--n", "64", "--k", "64", "--groups",
                                    "2", "--dtype", "bf16", "--dist", "zipf"])
    assert out.exit_code == 2 and "unknown distribution" in out.output
    out = CliRunner().invoke(main, ["tune", "--m", "64", "--n", "64", "--k", "64", "--groups",
                                    "2", "--dtype", "e4m3", "--grouping", "k"])
    assert out.exit_code == 2 and "M-grouped" in out.output
    for extra, hint in ((["--scaling", "tensor"], "--scaling"), (["--fast-accum"], "--fast-accum"),
                        (["--show"], "--show"), (["--plot", "p.png"], "--plot")):
        out = CliRunner().invoke(main, ["tune", "--m", "256", "--n", "128", "--k", "256",
                                        "--groups", "2", "--dtype", "e4m3", *extra])
        assert out.exit_code == 2 and hint in out.output, (extra, out.output)


def test_tune_groups_takes_fp8_experts_as_far_as_the_gpu(monkeypatch):
    """A valid FP8 grouped tuning command passes every argument check and stops, with one
    line and exit 1, only where it needs a GPU (none here)."""
    from click.testing import CliRunner

    from gemmgen.cli import tune as tune_cli
    from gemmgen.cli.main import main

    def no_gpu():
        raise SystemExit(1)
    monkeypatch.setattr(tune_cli, "device_count", no_gpu)
    out = CliRunner().invoke(main, ["tune", "--m", "256", "--n", "128", "--k", "256", "--groups",
                                    "2", "--dtype", "e4m3", "--scaling", "block"])
    assert out.exit_code == 1, out.output


def test_a_standing_default_ends_the_search_for_a_tuned_winner():
    from gemmgen.heuristics import grouped_db
    cfg = GROUPED["grouped_fp8"]
    won = {"winner": cfg.name, "candidates": {cfg.name: {"config": cfg.as_dict()}}}
    args = ("H200", "e4m3", "bf16", "m", "rcr", 8, 32768, 7168, 2048)
    entries = {grouped_db.key(*args, "skew65"): {**won, "dist": "skew65"}}
    assert grouped_db.winner(entries, *args) == (cfg.as_dict(), "skew65")
    entries[grouped_db.key(*args, "uniform")] = {"dist": "uniform", "winner": None,
                                                 "default_stands": True, "candidates": {}}
    assert grouped_db.winner(entries, *args) is None, "uniform's verdict comes first"


def test_tune_groups_shows_the_verdict_and_the_head_to_head():
    from gemmgen.heuristics.tunedb import settle
    from gemmgen.tune.grouped_tune import show
    cands = {"fast": {"tflops": 1100.0, "status": "ok"}, "dflt": {"tflops": 1000.0, "status": "ok"},
             "bad": {"tflops": 0.0, "status": "wrong"}}
    entry = {"gpu": "H200", "dtype": "e4m3", "out": "bf16", "grouping": "m", "layout": "rcr",
             "groups": 8, "rows": 32768, "n": 7168, "k": 2048, "dist": "uniform",
             "candidates": cands, "default": "dflt"}
    assert settle(entry) == "fast" and "winner: fast" in show(entry)
    entry["head_to_head"] = {"default": "dflt", "winner": "fast", "default_ms": 0.99,
                             "winner_ms": 0.98, "rounds": 6, "timing": "eager"}
    assert settle(entry) is None and entry["default_stands"], "1% in turn is under the margin"
    text = show(entry).splitlines()
    assert "the default stands: dflt" in text[0] and "0.9800 ms" in text[1]
    assert text[2].endswith(" fast") and text[3].endswith("dflt  (the default)")


def test_fp8_grouped_tuning_refuses_other_groupings_before_the_gpu():
    from gemmgen.tune.grouped_tune import tune_grouped
    with pytest.raises(ValueError, match="M-grouped with layout rcr"):
        tune_grouped("e4m3", 2, 256, 128, 256, grouping="k")
    with pytest.raises(ValueError, match="M-grouped with layout rcr"):
        tune_grouped("e4m3", 2, 256, 128, 256, layout="rrr")


# ---- the FP8 axis: block-scaled e4m3 experts ---------------------------------------------------
def test_fp8_is_an_axis_of_the_family_not_a_copy():
    """One config type and one template: the FP8 kernel is the grouped kernel with the fp8
    family's promoted main loop; 16-bit sources are untouched by the axis (no FP8 constant,
    parameter or static_assert), the FP8 source asserts the axis's rules by id."""
    fp8, bf16 = GROUPED["grouped_fp8"], GROUPED["grouped_bf16"]
    assert type(fp8) is type(bf16) and fp8.template == bf16.template == "grouped.cu.j2"
    src16, src8 = render(bf16, ARCH), render(fp8, ARCH)
    for text in ("DTYPE_FP8", "scale_a", "G26", "G27", "F20", "cuda_fp8.h"):
        assert text not in src16 and text in src8, text
    assert "promote(P0, S0)" in src8 and "mma_stage(" not in src8
    assert [p.name for p in fp8.params()][-8:] == ["scale_a", "sa_m", "sa_k", "sa_g", "scale_b",
                                                   "sb_n", "sb_k", "sb_g"]
    assert fp8.registers_needed() == 3 * 64 + 40 and fp8.as_dict()["scaling"] == "block"
    assert "scaling" not in bf16.as_dict() and fp8.name.endswith("_sblock")


def test_fp8_scales_are_patched_where_the_cubin_reads_them(compiled, monkeypatch):
    from gemmgen.runtime import driver as driver_mod
    from gemmgen.runtime.recipe import PATCH_POINTER
    cfg, cubin, res = compiled[GROUPED["grouped_fp8"].name]
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(Kernel, "function", lambda self, dev=None, suffix="": type(
        "F", (), {"handle": 9, "dynamic_smem": cfg.smem_bytes})())
    import gemmgen.runtime.tma as tma_mod
    monkeypatch.setattr(tma_mod, "encode", lambda spec, name="": bytes(128))
    k = Kernel(cfg, ARCH, cubin, res)
    args = KernelArgs(1000, 4096, 7168, Ref(0, 1 << 20), 7168, Ref(1, 1 << 30), 7168,
                      Ref(2, 1 << 32), 4096, stride_b=4096 * 7168, grouping="m", mode="offs",
                      groups=8, offs=Ref(3, 1 << 34),
                      scale_a=Scale(Ref(4, 1 << 35), 1, 1000, 0),
                      scale_b=Scale(Ref(5, 1 << 36), 56, 1, 32 * 56))
    (run,) = k.launches(args, 0).launches
    offsets = dict(zip([p.name for p in cfg.params()], param_layout(cubin, cfg.name).offsets))
    ptrs = {(p.offset, p.index) for p in run.patches if p.kind == PATCH_POINTER}
    assert {(offsets["scale_a"], 4), (offsets["scale_b"], 5), (offsets["offs"], 3),
            (offsets["C"], 2)} <= ptrs
    read = lambda name, code: struct.unpack_from(code, run.params, offsets[name])[0]  # noqa: E731
    assert (read("sa_m", "<i"), read("sa_k", "<i"), read("sa_g", "<q")) == (1, 1000, 0)
    assert (read("sb_n", "<i"), read("sb_k", "<i"), read("sb_g", "<q")) == (56, 1, 32 * 56)


@pytest.mark.parametrize("sb_k, sa_strides", [(1, None), (32, None), (1, (112, 2))])
def test_m_major_a_scales_are_copied_k_contiguous_for_a_large_call(compiled, monkeypatch, sb_k,
                                                                    sa_strides):
    """32768 rows x N 4096 x K 7168 (1.9e12 FLOP): A's M-major scales go through
    ``<name>_scales`` into a workspace of K-contiguous rows, which the GEMM reads (sa_m 56,
    sa_k 1). The call is the GEMM alone, reading the scales as given, with B's scales not
    K-contiguous (the 16-byte window loads cannot apply) or A's neither M-major nor
    K-contiguous (a strided view, which the copy does not take)."""
    from gemmgen.runtime import driver as driver_mod
    from gemmgen.runtime.recipe import PATCH_POINTER, WORK_BASE
    cfg, cubin, res = compiled[GROUPED["grouped_fp8"].name]
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(Kernel, "function", lambda self, dev=None, suffix="": type(
        "F", (), {"handle": 9, "dynamic_smem": cfg.smem_bytes})())
    import gemmgen.runtime.tma as tma_mod
    monkeypatch.setattr(tma_mod, "encode", lambda spec, name="": bytes(128))
    t = 32768
    args = KernelArgs(t, 4096, 7168, Ref(0, 1 << 20), 7168, Ref(1, 1 << 30), 7168,
                      Ref(2, 1 << 32), 4096, stride_b=4096 * 7168, grouping="m", mode="offs",
                      groups=8, offs=Ref(3, 1 << 34),
                      scale_a=Scale(Ref(4, 1 << 35), *(sa_strides or (1, t)), 0),
                      scale_b=Scale(Ref(5, 1 << 36), 56 if sb_k == 1 else 1, sb_k, 32 * 56))
    recipe = Kernel(cfg, ARCH, cubin, res).launches(args, 0)
    offsets = dict(zip([p.name for p in cfg.params()], param_layout(cubin, cfg.name).offsets))
    def read(ln, name, code):
        return struct.unpack_from(code, ln.params, offsets[name])[0]
    if sb_k != 1 or sa_strides:
        (run,) = recipe.launches
        assert "scales" not in recipe.path and not recipe.workspaces
        assert (read(run, "sa_m", "<i"), read(run, "sa_k", "<i")) == (sa_strides or (1, t))
        return
    copy, run = recipe.launches
    assert "scales K-contiguous" in recipe.path
    (slot,) = recipe.workspaces
    assert slot.nbytes == 4 * t * 56
    src, s_row, s_col, _, ldd, rows, cols = TRANSPOSE_STRUCT.unpack(copy.params)
    assert (s_row, s_col, ldd, rows, cols) == (1, t, 56, t, 56)
    assert {(p.offset, p.index) for p in copy.patches if p.kind == PATCH_POINTER} == {
        (TRANSPOSE_OFFSETS[0], 4), (TRANSPOSE_OFFSETS[3], WORK_BASE)}
    assert (offsets["scale_a"], WORK_BASE) in {(p.offset, p.index) for p in run.patches}
    assert (read(run, "sa_m", "<i"), read(run, "sa_k", "<i"), read(run, "sa_g", "<q")) == (
        56, 1, 0)


class F8(Dev):
    """An e4m3 device array as CuPy-like libraries describe it (ml_dtypes' float8 dtype)."""

    def __init__(self, shape, strides=None, ptr=1 << 20):
        super().__init__(shape, "|u1", strides, ptr)
        self.dtype = np.dtype(pytest.importorskip("ml_dtypes").float8_e4m3fn)


def _fp8_call(t=300, k=512, n=256, g=4, **change):
    args = {"A": F8((t, k)), "B": F8((g, k, n), strides=(n * k, 1, k)),
            "offs": Dev((g,), "<i4"), "scale_a": Dev((t, -(-k // 128)), "<f4"),
            "scale_b": Dev((g, -(-n // 128), -(-k // 128)), "<f4")}
    args.update(change)
    return check_grouped(args.pop("A"), args.pop("B"), args.pop("offs"), **args)


def test_the_kernel_arguments_carry_scales_for_fp8_only():
    """grouped_gemm's plan builds KernelArgs from the checked arguments and the operands'
    Refs, the scales' Refs only where there are scales (4 operands for 16-bit inputs, 6 for
    FP8)."""
    refs = [Ref(i, (i + 1) << 20) for i in range(6)]
    for args in (check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((2,), "<i4")), _fp8_call()):
        scales = refs[4:4 + len(args.scales)]
        got = args.problem(*refs[:4], 16, 0, *scales)
        assert (got.scale_a, got.scale_b) == ((None, None) if not args.scales else (
            Scale(refs[4], *args.scales[0][1:]), Scale(refs[5], *args.scales[1][1:])))
        assert (got.m, got.groups, got.offs, got.grouping) == (args.rows, args.groups, refs[3],
                                                               "m")


def test_fp8_operands_take_block_scales_of_any_strides():
    got = _fp8_call()
    assert (got.layout, got.out, got.mode) == ("rcr", "bf16", "offs")
    (_, sa_m, sa_k, sa_g), (_, sb_n, sb_k, sb_g) = got.scales
    assert (sa_m, sa_k, sa_g) == (4, 1, 0) and (sb_n, sb_k, sb_g) == (4, 1, 8)
    mn_major = _fp8_call(scale_a=Dev((300, 4), "<f4", strides=(4, 1200)))   # [kb, T] viewed .t()
    assert mn_major.scales[0][1:3] == (1, 300)
    masked = check_grouped(F8((4, 64, 512)), F8((4, 512, 256), strides=(256 * 512, 1, 512)),
                           scale_a=Dev((4, 64, 4), "<f4"), scale_b=Dev((4, 2, 4), "<f4"))
    assert masked.mode == "masked" and masked.scales[0][1:] == (4, 1, 256)


@pytest.mark.parametrize("change, message", [
    ({"scale_a": None}, "scale_a and scale_b are required with FP8 operands"),
    ({"scale_a": Dev((300, 5), "<f4")}, "scale_a has shape (300, 5); the block scales of these "
                                        "operands are [T, ceil(K/128)] = (300, 4)"),
    ({"scale_b": Dev((4, 2, 4), "<f2")}, "scale_b has dtype float16; scales are float32"),
    ({"scale_b": 2.0}, "scale_b must be a float32 device array"),
    ({"B": F8((4, 512, 256))}, "B must be K-major for FP8"),
    ({"out_dtype": "e4m3"}, "out_dtype: 'e4m3'; a e4m3 grouped GEMM writes bf16, fp16, fp32"),
])
def test_fp8_argument_errors_name_the_argument(change, message):
    with pytest.raises(OperandError, match=re.escape(message)):
        _fp8_call(**change)


def test_scales_of_16_bit_operands_and_fp8_weight_gradients_are_refused():
    with pytest.raises(OperandError, match="scale_a and scale_b are the block scales of FP8"):
        check_grouped(_t((64, 32)), _t((2, 32, 16)), Dev((2,), "<i4"),
                      scale_a=Dev((64, 1), "<f4"), scale_b=Dev((2, 1, 1), "<f4"))
    with pytest.raises(OperandError, match="FP8 grouped GEMM is M-grouped"):
        check_grouped(F8((256, 300), strides=(1, 256)), F8((300, 128)), Dev((2,), "<i4"),
                      scale_a=Dev((256, 3), "<f4"), scale_b=Dev((2, 1, 3), "<f4"))


def test_fp8_choice_is_the_block_scaled_kernel():
    cfg = hg.choose("e4m3", "m", "rcr", "bf16", 256, 32768, 4096, 7168).config
    assert cfg.fp8 and cfg.scaling == "block" and cfg.bn <= 128 and not cfg.violations()


def test_chosen_grouped_finds_the_plan_grouped_gemm_kept(monkeypatch):
    """``chosen_grouped`` looks a plan up under the key ``grouped_gemm`` stored it by (the
    operands' signatures, scales included): the MoE suite names the kernel from it."""
    torch = pytest.importorskip("torch")
    from gemmgen.runtime import grouped as runtime_grouped

    class Kept:
        def run(self, *operands, stream=None):
            return "ran"

    kept = Kept()
    monkeypatch.setattr(runtime_grouped, "_PLANS", {})
    monkeypatch.setattr(runtime_grouped, "plan_grouped", lambda *args: kept)
    a = torch.empty(64, 32, dtype=torch.bfloat16)
    b = torch.empty(2, 32, 16, dtype=torch.bfloat16)
    offs = torch.tensor([10, 64], dtype=torch.int32)
    assert runtime_grouped.grouped_gemm(a, b, offs) == "ran"
    assert runtime_grouped.chosen_grouped(a, b, offs) is kept
    assert runtime_grouped.chosen_grouped(a, b, offs, out_dtype="fp32") is None


def test_split_n_gives_each_consumer_columns_of_a_64_row_tile():
    """split="n": the two consumers share A's 64 rows and take 128 columns each (their own B
    rows of the stage, their own B scale blocks and staging tile); the kernel's figures and
    constants follow, and a row-split config's source does not declare the axis."""
    sn, rows = GROUPED["grouped_fp8_split_n"], GROUPED["grouped_fp8"]
    assert (sn.bm, sn.bn, sn.consumers, sn.split) == (64, 256, 2, "n")
    assert (sn.consumer_rows, sn.consumer_cols, sn.m_iters) == (64, 128, 1)
    assert (rows.consumer_rows, rows.consumer_cols) == (64, 128)
    assert sn.acc_regs == rows.acc_regs == 3 * 64           # sums + two partial sets
    assert sn.c_smem_bytes == 2 * 64 * 128 * 2 and sn.c_chunks == 2
    assert sn.name.endswith("_sn") and not rows.name.endswith("_sn")
    assert config_from_dict(sn.as_dict()) == sn and "split" not in rows.as_dict()
    k = sn.template_constants()
    assert (k["A_CONSUMER_BYTES"], k["B_CONSUMER_BYTES"], k["CONSUMER_COLS"]) == (0, 128 * 128, 128)
    assert (k["ACC"], k["ACC_PER_WGMMA"], k["M_SPLIT"], k["SPLIT_N"]) == (64, 64, 1, 1)
    assert sn.figures()["wgmma"].startswith("m64n128k32")
    src, plain = render(sn, "sm_90a"), render(rows, "sm_90a")
    assert "smem_b + cw * B_CONSUMER_BYTES" in src and "G29" in src and "G30" in src
    assert "SPLIT_N" not in plain and "B_CONSUMER_BYTES" not in plain and "G29" not in plain
    with pytest.raises(ConfigError, match="G29"):
        GROUPED["grouped_bf16"].replace(split="n")


@pytest.mark.parametrize("preset", ["grouped_bf16", "grouped_fp8", "grouped_fp8_split_n"])
def test_the_warpgroup_index_is_warp_uniform(preset):
    """The grouped kernel reads its warpgroup index through __shfl_sync, as the fp8 kernel
    does: the compiler then keeps each consumer's wgmma descriptors in uniform registers (the
    plain division left them in vector registers, moved by R2UR before every wgmma)."""
    src = render(GROUPED[preset], "sm_90a")
    uniform = "__shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / WARPGROUP, 0);"
    assert f"const int wg = {uniform}" in src
    assert "const int wg = threadIdx.x / WARPGROUP;" not in src


@pytest.mark.parametrize("preset", ["grouped_fp8", "grouped_fp8_split_n"])
def test_fp8_consumers_run_a_k_block_apart_on_a_barrier_of_their_own(preset):
    """Two FP8 consumers: consumer 1 waits once, before its first tile, on a named barrier
    that consumer 0 arrives at once its first K block is promoted (in every peeled first
    window: 4, 2, 1 or no K blocks). The barrier is neither a consumer's store barrier nor
    the K-grouped tail's, and a named barrier id is below 16. One consumer has none, nor has
    a single partial set (its main loop runs no hook where consumer 0 would arrive)."""
    cfg = GROUPED[preset]
    k = cfg.template_constants()
    ids = [k["BAR_STORE_BASE"] + c for c in range(cfg.consumers)] + [k["BAR_TAIL"],
                                                                      k["BAR_STAGGER"]]
    assert len(set(ids)) == len(ids) and all(0 < i < 16 for i in ids)
    src = render(cfg, "sm_90a")
    assert src.count("named_sync(BAR_STAGGER, 2 * WARPGROUP)") == 1
    assert src.count("named_arrive(BAR_STAGGER, 2 * WARPGROUP)") == 1
    loop = src[src.index("bool staggered = false;"):]
    first, steady = loop.index("stagger();"), loop.index("for (; kb + 4 <= tile.nk; kb += 4)")
    assert loop.count("stagger();") == 4 and loop.rindex("stagger();") < steady
    assert loop.index("promote(P0, W.s[0], true);") < first   # after block 0's promotion
    one = GROUPED["grouped_fp8"].replace(consumers=1, bm=64, regs_producer=0, regs_consumer=0)
    single = cfg.replace(partials=1)   # no promotion under the next wgmmas: no after_first hook
    for c in (one, single):            # so no barrier to wait on (a wait there would never end)
        assert "BAR_STAGGER" not in c.template_constants() and "stagger" not in render(c, "sm_90a")


@pytest.mark.parametrize("preset", ["grouped_fp8", "grouped_fp8_split_n"])
def test_fp8_first_promotion_writes_the_sums(preset):
    """Two partial sets: a tile's F is not zeroed before its K loop; the first promotion of
    each peeled first window (4, 2 or 1 K blocks) writes it, after the previous tile's
    deferred epilogue has read it, and only a tile without K blocks zeroes it. The epilogue
    does not zero F for empty tiles (the 16-bit kernel's does). A single partial set zeroes F
    before its loop, as before."""
    src = render(GROUPED[preset], "sm_90a")
    loop = src[src.index("bool staggered = false;"):]
    steady = loop.index("for (; kb + 4 <= tile.nk; kb += 4)")
    peel, rest = loop[:steady], loop[steady:]
    first = ", true);"                       # promote(P, scales, true): F = scales x P
    assert peel.count(first) == 3 and first not in rest
    windows, empty = peel.split("} else {  ")
    for window in windows.split("} else if"):
        assert window.index("epilogue(F, done") < window.index(first)
        assert "zero(F)" not in window
    assert empty.index("epilogue(F, done") < empty.index("zero(F)") and "zero(F)" not in rest
    assert "acc[mi][i] = 0.f" not in src
    assert "acc[mi][i] = 0.f" in render(GROUPED["grouped_bf16"], "sm_90a")
    single = render(GROUPED[preset].replace(partials=1), "sm_90a")
    assert first not in single and "zero(F);" in single


def test_the_rematch_times_the_two_in_turn_and_can_take_a_winner_back(monkeypatch):
    """_rematch: the settled winner and the default timed in turn (the order alternating),
    REMATCH_ROUNDS times each; a winner under the margin there is taken back, one above it
    kept; a default that failed, or a rematch that raises, confirms nothing."""
    from types import SimpleNamespace

    from gemmgen.heuristics.tunedb import settle
    from gemmgen.tune import grouped_tune as gt_mod
    order, speed = [], {"dflt": 1.00, "fast": 0.99}
    monkeypatch.setattr(gt_mod, "time_calls", lambda torch, fn, budget: fn())

    def timed(name):
        def run():
            order.append(name)
            return SimpleNamespace(median=speed[name] * 1e-3)
        return run
    calls = {name: timed(name) for name in speed}

    def entry(default_status="ok"):
        e = {"default": "dflt", "candidates": {
            "fast": {"status": "ok", "tflops": 1100.0},
            "dflt": {"status": default_status, "tflops": 1000.0}}}
        settle(e)
        return e
    e = entry()
    assert e["winner"] == "fast"
    gt_mod._rematch(None, e, calls)
    assert order[:4] == ["dflt", "fast", "fast", "dflt"] and len(order) == 2 * gt_mod.REMATCH_ROUNDS
    assert e["winner"] is None and e["default_stands"], "1% in turn is under the 3% margin"
    speed["fast"] = 0.9
    e = entry()
    gt_mod._rematch(None, e, calls)
    assert e["winner"] == "fast" and e["head_to_head"]["winner_ms"] == 0.9
    order.clear()
    e = entry("wrong")
    gt_mod._rematch(None, e, calls)
    assert e["winner"] == "fast" and "head_to_head" not in e and not order

    def broken():
        raise RuntimeError("launch failed")
    e = entry()
    gt_mod._rematch(None, e, {**calls, "dflt": broken})
    assert e["winner"] is None and "launch failed" in e["head_to_head"]["error"]
    assert "head to head failed" in gt_mod.show({**e, "gpu": "H200", "dtype": "e4m3",
                                                 "out": "bf16", "grouping": "m",
                                                 "layout": "rcr", "groups": 8, "rows": 1,
                                                 "n": 1, "k": 1, "dist": "uniform"})
