"""Odd and skinny shapes, split-K and 3xTF32 without a GPU: the cost model, the shape rules
of ``dispatch.decide``, ``gemmgen explain``, and the model's split-K and 3xTF32 arithmetic."""
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from gemmgen.__main__ import main
from gemmgen.heuristics import cost
from gemmgen.heuristics.explain import explain
from gemmgen.heuristics.select import Choice, decide
from gemmgen.model.config import EPILOGUES, LAYOUTS, ConfigError
from gemmgen.model.presets import PRESETS

H = "NVIDIA H200"


def test_wave_efficiency_prefers_the_tile_without_a_ragged_last_wave():
    assert cost.tiles_of(4095, 4097, 128, 256) == 544
    assert cost.wave_efficiency(544) == pytest.approx(544 / 660)
    assert cost.wave_efficiency(cost.tiles_of(4095, 4097, 256, 128)) == 1.0


def test_split_k_only_below_a_quarter_wave_and_never_into_short_slices():
    assert cost.split_k_for(4096, 4096, 4096, 1, 128, 256, 64) == 1
    assert cost.split_k_for(8192, 128, 8192, 1, 128, 128, 64) == 1  # 64 tiles: half a wave
    s = cost.split_k_for(256, 256, 65536, 1, 128, 256, 64)
    assert s > 1 and 2 * s <= cost.SMS and 1024 / s >= cost.MIN_SLICE_TILES
    # 16 K tiles: two slices measured slower
    assert cost.split_k_for(1024, 1024, 1024, 1, 128, 256, 64) == 1
    assert cost.split_k_for(64, 64, 256, 1, 128, 64, 64) == 1  # 4 K tiles: nothing to split


def test_repack_beats_the_fallback_on_large_odd_shapes_only():
    big = cost.unaligned(4095, 4097, 4093, 1, "fp16", {"A": (4095, 4093, 1),
                                                       "B": (4093, 4097, 1)})
    assert big[0].path == "repack" and big[0].seconds < big[1].seconds
    tiny = cost.unaligned(33, 17, 9, 1, "fp16", {"A": (33, 9, 1)})
    assert tiny[0].path == "fallback"
    assert "pack" in str(big[0]) and "us" in str(big[0])


def test_split_slices_cover_every_k_tile_once():
    cfg = PRESETS["wgmma_tma_store"].config.replace(store="direct", split_k=3)
    for k in (1, 64, 65, 1000, 4093):
        tiles = -(-k // cfg.bk)
        covered = [t for first, count in cfg.split_slices(k) for t in range(first, first + count)]
        assert covered == list(range(tiles)), k
    assert cfg.replace(split_k=16).split_slices(64)[1:] == [(1, 0)] * 15  # empty slices


def test_3xtf32_runs_three_parts_of_every_bk_chunk():
    cfg = PRESETS["wgmma_3xtf32"].config
    assert cfg.packed_k(4093) == 3 * 4096 and cfg.packed_k(32) == 96
    assert not cfg.a_mn_major and not cfg.b_mn_major  # the split writes K-major parts
    assert cfg.replace(layout="crr").violations() == []  # so any layout is valid
    assert cfg.acc_regs == 2 * cfg.replace(math="native", layout="rcr").acc_regs  # 2 sets
    with pytest.raises(ConfigError, match="H37"):
        PRESETS["wgmma_bf16"].config.replace(math="3xtf32", store="direct", bn=128)


def test_decode_shapes_swap_operands_onto_wgmma_n():
    ch = decide(None, H, "fp16", 1, 8192, 8192, cc=90)
    assert ch.swap and ch.config.bn == 8 and ch.config.layout == "ccc"
    assert ch.config.store == "direct" and ch.config.split_k == 1
    assert any("C^T = B^T A^T" in r for r in ch.reasons)
    col = decide(None, H, "bf16", 16, 8192, 8192, cc=90, layout="rcr")
    assert col.swap and col.config.layout == "rcc" and col.config.bn == 16


def test_small_m_rules_split_long_k_and_say_where_the_slices_are_summed():
    """Decode tiles split K into the most slices (up to 8) whose tiles x slices are at most
    96 CTAs, each tile's slices one cluster, and not at all where none fits; an M of 128
    over a K at least twice N is swapped too, its wide column-major C summed by a second
    kernel (an inline sum would spill); at 256 and 512 rows the mid-M rule splits; at 1024
    rows 64 x 64 tiles are weighed, never with a split tail."""
    decode = decide(None, H, "bf16", 1, 576, 7168, cc=90, layout="rcr")  # 9 tiles x 8
    assert decode.swap and decode.config.split_k == 8 and decode.config.split_cluster
    assert not decode.config.persistent and not decode.config.split_inline
    assert any("one cluster of 8 CTAs" in r for r in decode.reasons)
    wide = decide(None, H, "bf16", 1, 4096, 4096, cc=90, layout="rcr")  # 64 tiles: 2 x 64 > 96
    assert wide.swap and wide.config.split_k == 1
    assert any("no split of at most 96 CTAs" in r for r in wide.reasons)
    long_k = decide(None, H, "bf16", 128, 576, 7168, cc=90, layout="rcr")
    assert long_k.swap and long_k.config.bn == 128 and long_k.config.split_k == 8
    assert not long_k.config.split_inline
    assert any("second kernel" in r and "spill" in r for r in long_k.reasons)
    assert not decide(None, H, "bf16", 128, 4096, 4096, cc=90, layout="rcr").swap  # K < 2N
    small = decide(None, H, "bf16", 256, 576, 7168, cc=90, layout="rcr").config
    assert (small.bm, small.bn, small.split_k) == (64, 64, 3)
    mid = decide(None, H, "bf16", 512, 576, 7168, cc=90, layout="rcr").config
    assert (mid.bm, mid.bn, mid.split_k, mid.split_inline) == (64, 128, 3, True)
    big = decide(None, H, "bf16", 1024, 576, 7168, cc=90, layout="rcr").config
    assert big.split_k == 1 and (big.bm, big.bn) == (64, 128), big.name
    narrow = decide(None, H, "bf16", 1024, 512, 3584, cc=90, layout="rcr").config
    assert (narrow.bm, narrow.bn, narrow.split_k) == (64, 64, 1), narrow.name  # 128 tiles


def test_m_of_256_to_512_rows_takes_the_tile_and_split_of_least_estimated_time():
    """The mid-M rule: from MID_TILES and the splits up to 8, the least of whole waves x (K
    tiles per slice x time per K tile + time per tile) + split-K's cost, checked here against
    the same sum written out; only with a K-major B and an N that is not narrow. An unsplit
    tile stores C through TMA, in 32-byte swizzled chunks or wider (128 x 160 and 64 x 96: 64
    bytes)."""
    from gemmgen.heuristics.shapes import MID_SPLIT, MID_TILES, mid_tile

    def estimate(m, n, k, bm, bn, split):
        step, fixed = MID_TILES[bm, bn]
        waves = -(-(-(-m // bm) * -(-n // bn) * split) // 132)
        extra = MID_SPLIT["split"] + MID_SPLIT["per_slice"] * split if split > 1 else 0
        return waves * (-(-(-(-k // 64)) // split) * step + fixed) + extra
    picked = {}
    for m, n, k in ((256, 4544, 4544), (512, 18176, 4544), (512, 4544, 18176), (384, 4096, 4096),
                    (256, 3072, 3072)):
        ch = decide(None, H, "bf16", m, n, k, cc=90, layout="rcr")
        picked[m, n, k] = ch.config
        c = ch.config
        assert not ch.swap and any("mid-M rule" in r for r in ch.reasons), (m, n, k)
        assert {key: getattr(c, key) for key in mid_tile(c.bm, c.bn)} == mid_tile(c.bm, c.bn)
        got = estimate(m, n, k, c.bm, c.bn, c.split_k)
        for bm, bn in MID_TILES:
            for split in (1, 2, 3, 4, 6, 8):
                units = -(-m // bm) * -(-n // bn) * split
                if split == 1 or (-(-k // 64) / split >= 8 and units <= 2 * 132):
                    assert got <= estimate(m, n, k, bm, bn, split) + 1e-9, (m, n, k, bm, bn)
        assert c.store == ("direct" if c.split_k > 1 else "tma"), c.name
    c = picked[512, 4544, 18176]
    assert (c.bm, c.bn, c.store, c.c_swizzle) == (128, 160, "tma", 64)
    c = picked[256, 3072, 3072]  # 4 x 32 tiles of 64 x 96: one wave of 128 CTAs, as cuBLASLt
    assert (c.bm, c.bn, c.split_k, c.store, c.c_swizzle) == (64, 96, 1, "tma", 64), c.name
    for m, layout, n in ((256, "rrr", 4544), (128, "rcr", 4544), (1024, "rcr", 4544),
                         (256, "rcr", 8)):
        ch = decide(None, H, "bf16", m, n, 4544, cc=90, layout=layout)
        assert not any("mid-M rule" in r for r in ch.reasons), (m, layout, n)


def test_tiles_past_the_last_whole_wave_split_k_where_the_estimate_says_so():
    """Above 256 rows, each block tile's time is its whole waves, or, where its tiles outnumber
    the SMs and the last wave is part full, the whole waves plus the tail's tiles split into
    the slices of least TAIL_SPLIT cost (inline, C stored as the whole tiles store it): the
    least of all, checked here against the same sum written out. A wide column-major C would
    sum its slices in a second kernel over every tile: no tail split there."""
    from gemmgen.heuristics.shapes import K_OVERHEAD, TAIL_SPLIT, TILE_EFFICIENCY

    def estimate(m, n, k, bm, bn, split):
        waves, tail = divmod(-(-m // bm) * -(-n // bn), 132)
        work = bm * bn / TILE_EFFICIENCY[bm, bn]
        if split == 1:
            return -(-(waves * 132 + tail) // 132) * (k + K_OVERHEAD) * work
        slice_k = -(-(-(-k // 64)) // split) * 64
        return (waves * (k + K_OVERHEAD) + slice_k + K_OVERHEAD + TAIL_SPLIT["split"]
                + TAIL_SPLIT["per_slice"] * split) * work
    tails = 0
    for m, n, k in ((1024, 4544, 18176), (1024, 14336, 4096), (4096, 1536, 7168),
                    (2048, 4544, 4544), (4096, 4096, 4096), (1024, 18944, 3584)):
        ch = decide(None, H, "bf16", m, n, k, cc=90, layout="rcr")
        c = ch.config
        got = estimate(m, n, k, c.bm, c.bn, c.split_k)
        for bm, bn in (t for t in TILE_EFFICIENCY if t != (64, 64) or m <= 1024):
            waves, tail = divmod(-(-m // bm) * -(-n // bn), 132)
            for split in (1, 2, 3, 4, 6, 8, 12, 16):  # 64 x 64: to 1024 rows, with no tail
                if split == 1 or ((bm, bn) != (64, 64) and waves and tail and tail * split <= 132
                                  and -(-k // 64) / split >= TAIL_SPLIT["min_slice_tiles"]):
                    assert got <= estimate(m, n, k, bm, bn, split) * (1 + 1e-9), (m, n, k, bm)
        if c.split_k > 1:
            tails += 1
            assert c.split_inline and c.store == "tma", c.name
            assert any("whole wave" in r for r in ch.reasons), ch.reasons
    assert tails >= 3
    assert decide(None, H, "bf16", 4096, 4096, 4096, cc=90, layout="rcr").config.split_k == 1
    wide_col = decide(None, H, "bf16", 1024, 4544, 18176, cc=90, layout="rcc").config
    assert wide_col.split_k == 1 or wide_col.bn < 128, wide_col.name


def test_m_of_33_to_64_rows_takes_narrow_n_tiles_in_one_wave():
    """One 64-row tile over M, the narrow N tiles and K split of least estimated time among
    those that run in one wave (132 SMs), with a K-major B; not at M = 32, not with a row-major
    B; where even 64-column tiles overflow the wave, the mid-M rule's wider 64-row tiles."""
    ch = decide(None, H, "bf16", 64, 3072, 768, cc=90, layout="rcr")
    c = ch.config
    assert not ch.swap and (c.bm, c.bn, c.split_k, c.consumers) == (64, 24, 1, 1)
    assert c.store == "direct" and c.layout == "rcr"
    assert any("share the stream of B" in r for r in ch.reasons)
    long_k = decide(None, H, "bf16", 48, 576, 7168, cc=90, layout="rcr").config
    assert (long_k.bn, long_k.split_k, long_k.split_cluster) == (32, 4, True)  # 18 x 4 CTAs
    biased = decide(None, H, "bf16", 64, 3072, 768, cc=90, layout="rcr", epilogue="bias")
    assert not biased.swap and biased.config.bn == 24
    wide = decide(None, H, "bf16", 64, 14336, 4096, cc=90, layout="rcr")  # 224 tiles of 64
    assert not wide.swap and any("mid-M rule" in r for r in wide.reasons), wide.reasons
    assert any("no narrow tiles" in r and "one wave" in r for r in wide.reasons), wide.reasons
    assert wide.config.bm == 64 and -(-14336 // wide.config.bn) <= 132, wide.config.name
    for kw in (dict(epilogue="bias"), dict(batch=4)):  # not measured: the tile as before
        kept = decide(None, H, "bf16", 64, 14336, 4096, cc=90, layout="rcr", **kw)
        assert not any("mid-M rule" in r for r in kept.reasons), (kw, kept.reasons)
    assert decide(None, H, "bf16", 32, 3072, 768, cc=90, layout="rcr").swap
    assert decide(None, H, "bf16", 64, 3072, 768, cc=90, layout="rrr").config.bn >= 64


def test_m_of_65_to_128_rows_takes_two_rows_of_narrow_tiles_where_the_sms_sit_idle():
    """Two 64-row tiles over M and narrow N tiles where 64 x 64 tiles fill at most half the
    SMs, unless the long-K swap's tiles and slices fill more than half."""
    ch = decide(None, H, "bf16", 128, 2048, 2048, cc=90, layout="rcr")
    c = ch.config
    assert not ch.swap and (c.bm, c.bn, c.split_k, c.consumers) == (64, 32, 1, 1), c.name
    assert any("two 64-row tiles over M" in r for r in ch.reasons)
    short_k = decide(None, H, "bf16", 96, 512, 2048, cc=90, layout="rcr")  # swap: 16 units
    assert not short_k.swap and short_k.config.bn < 64, short_k.config.name
    assert decide(None, H, "bf16", 128, 576, 7168, cc=90, layout="rcr").swap  # 9 x 8 units
    assert decide(None, H, "bf16", 128, 2304, 2048, cc=90, layout="rcr").config.bn >= 64
    assert decide(None, H, "bf16", 256, 512, 2048, cc=90, layout="rcr").config.bn >= 64


def test_one_consumer_meets_the_waiter_warp_and_takes_a_deeper_ring():
    """Kernels of one consumer warpgroup (64-row tiles) take the waiter warp and a ring of up to
    16 stages; those of two keep their own polls and at most 8."""
    ones, twos = 0, 0
    for m, n, k, layout in ((1, 4096, 4096, "rcr"), (64, 3072, 3072, "rcr"),
                            (128, 2048, 2048, "rcr"), (256, 768, 3072, "rrr"),
                            (512, 512, 2048, "crr"), (4096, 4096, 4096, "rcr"),
                            (128, 14336, 4096, "rcr")):
        ch = decide(None, H, "bf16", m, n, k, cc=90, layout=layout)
        c = ch.config
        if c.consumers == 1:
            ones += 1
            assert c.waiter and c.stages <= 16, c.name
            assert c.stages == 16 or c.replace(check=False, stages=c.stages + 1).violations()
            assert any("waiter warp" in r for r in ch.reasons), ch.reasons
        else:
            twos += 1
            assert not c.waiter and c.stages <= 8, c.name
    assert ones >= 4 and twos >= 1, (ones, twos)


def test_a_bias_keeps_the_operands_and_splits_k_instead():
    ch = decide(None, H, "fp16", 8, 8192, 8192, cc=90, epilogue="bias_gelu")
    assert not ch.swap and ch.config.bm == 64 and ch.config.consumers == 1
    assert ch.config.split_k > 1
    assert any("bias runs along N" in r for r in ch.reasons)


def test_odd_shapes_take_the_tile_that_fills_the_last_wave_and_direct_stores():
    ch = decide(None, H, "fp16", 4095, 4097, 4093, cc=90, c_aligned=False)
    assert (ch.config.bm, ch.config.bn) == (256, 128) and ch.config.store == "direct"
    square = decide(None, H, "fp16", 4096, 4096, 4096, cc=90)  # its ring one stage deeper
    assert square.config == PRESETS["wgmma_tma_store"].config.replace(stages=4, c_stages=2)


def test_3xtf32_is_explicit_and_falls_back_to_ieee_fp32_off_hopper():
    ch = decide(None, H, "fp32", 512, 512, 512, cc=90, layout="crc", math_="3xtf32")
    assert ch.config.math == "3xtf32" and ch.config.layout == "crc"
    assert decide(None, H, "fp32", 512, 512, 512, cc=90).config.family == "simt"
    assert decide(None, "A100", "fp32", 512, 512, 512, cc=80, math_="3xtf32").config.family \
        == "simt"
    with pytest.raises(ValueError, match="float32"):
        decide(None, H, "fp16", 64, 64, 64, cc=90, math_="3xtf32")
    with pytest.raises(ValueError, match="unknown math"):
        decide(None, H, "fp32", 64, 64, 64, cc=90, math_="4xtf32")


@settings(max_examples=150, deadline=None)
@given(m=st.integers(1, 70000), n=st.integers(1, 70000), k=st.integers(1, 70000),
       dtype=st.sampled_from(["fp16", "bf16", "tf32"]), layout=st.sampled_from(LAYOUTS),
       epilogue=st.sampled_from(EPILOGUES), c_aligned=st.booleans(),
       batch=st.integers(1, 8))
def test_every_shape_gets_a_valid_kernel(m, n, k, dtype, layout, epilogue, c_aligned, batch):
    """Whatever the problem, decide's kernel passes its family's rules, keeps the caller's
    epilogue and dtype, and lays out the (possibly swapped) problem consistently."""
    ch = decide(None, H, dtype, m, n, k, 90, layout, epilogue, c_aligned, batch=batch)
    assert isinstance(ch, Choice) and not ch.config.violations()
    assert ch.config.epilogue == epilogue and ch.config.dtype == dtype
    flip = {"r": "c", "c": "r"}
    want = (flip[layout[1]] + flip[layout[0]] + flip[layout[2]]) if ch.swap else layout
    assert ch.config.layout == want
    if ch.swap:
        assert m <= 128 and not epilogue.startswith("bias")
    if ch.config.family == "wgmma" and not c_aligned:
        assert ch.config.store == "direct"


def test_explain_names_the_path_of_unaligned_operands():
    text = explain("fp16", 4095, 4097, 4093)
    assert "repack" in text and "256x128" in text and "C is not 16-byte aligned" in text
    assert "TMA reads them as they are" in explain("fp16", 4096, 4096, 4096)


def test_explain_command():
    run = CliRunner().invoke(main, ["explain", "1", "8192", "8192", "--dtype", "bf16"])
    assert run.exit_code == 0, run.output
    assert "swap" not in run.output or "C^T" in run.output
    assert "gemm_wgmma_bf16_64x8x64" in run.output and "16 stages" in run.output
    assert "a waiter warp tells the one consumer" in run.output
    sm80 = CliRunner().invoke(main, ["explain", "512", "512", "512", "--cc", "80"])
    assert sm80.exit_code == 0 and "- mma family" in sm80.output  # mma.sync below sm_90


@pytest.mark.parametrize("args, message", [
    (["0", "1", "1"], "0 is not in the range"),
    (["8", "8", "8", "--ldb", "4"], "below the 8 elements"),
    (["8", "8", "8", "--math", "3xtf32"], "3xtf32 takes float32 data"),
    (["8", "8", "8", "--dtype", "fp64"], "'fp64' is not one of"),
])
def test_explain_rejects_bad_input_without_a_traceback(args, message):
    run = CliRunner().invoke(main, ["explain", *args])
    assert run.exit_code == 2 and message in run.output
    assert "Traceback" not in run.output
