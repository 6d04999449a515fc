"""The fp8 family's kernel choice without a GPU: decode tiles and splits, the tile and tail-split
rule above decode, split-K over the tail in the config's figures, the cost model and explain."""
import pytest

from gemmgen import PRESETS
from gemmgen.heuristics import cost, fp8
from gemmgen.heuristics.fp8 import choose_fp8, explain_fp8

FP8 = {n: p.config for n, p in PRESETS.items() if p.config.family == "fp8"}


def test_split_k_splits_the_tail_past_the_last_whole_wave():
    cfg = FP8["fp8_block_overlap"].replace(split_k=4)
    # 17 x 17 = 289 tiles on 132 SMs: 2 whole waves, the last 25 tiles split 4 ways
    assert cfg.split_tiles(2100, 2090, 132) == 25
    assert cfg.work_units(2100, 2090, 132) == 264 + 25 * 4
    assert cfg.workspace_bytes(2100, 2090, 132) == (25 * 4 * 128 * 128 * 4, 25 * 2 * 4)
    assert cfg.split_tiles(1536, 5632, 132) == 0          # 12 x 44 = 528 tiles: whole waves
    assert cfg.workspace_bytes(1536, 5632, 132)[1] == 2 * 4  # one tile's worth, never 0
    assert cfg.split_tiles(300, 520, 132) == 15            # 3 x 5 tiles in one wave: all split
    assert cfg.grid(300, 520) == (60, 1, 1)
    # a 2 x 1 cluster: 66 cluster slots, the workspace per CTA of the split cluster tiles
    cl = FP8["fp8_tensor_cluster"].replace(split_k=2)
    assert cl.split_tiles(2049, 2117, 132) == 81 - 66
    assert cl.workspace_bytes(2049, 2117, 132)[0] == 15 * 2 * 2 * 128 * 256 * 4
    assert "split_tiles" in [p.name for p in cfg.params()]
    assert "split_tiles" not in [p.name for p in FP8["fp8_block_overlap"].params()]
    assert FP8["fp8_block_overlap"].split_tiles(2100, 2090, 132) == 0


@pytest.mark.parametrize("m, n, k, want", [
    (64, 2112, 7168, (64, 64, 4)),      # the grid's best on the H100 and the H200 (9.5-10.9 us)
    (128, 7168, 16384, (64, 128, 1)),   # 112 tiles of 64 x 128 in one wave
    (16, 7168, 16384, (64, 64, 1)),     # 112 tiles of 64 columns, unsplit
    (64, 24576, 1536, (64, 64, 1)),     # 384 tiles: three waves of 12 K blocks
    (128, 14336, 4096, (128, 128, 1)),  # 112 tiles of 128 rows against 224 of 64
    (16, 1024, 4096, (64, 64, 4)),      # 16 tiles: four slices of 8 K blocks (no more)
])
def test_block_decode_tiles_and_split(m, n, k, want):
    cfg = choose_fp8(m, n, k, "block", False, sms=132).config
    assert (cfg.bm, cfg.bn, cfg.split_k) == want and cfg.overlap
    assert cfg.consumers == cfg.bm // 64 and not cfg.violations()
    q = choose_fp8(m, n, k, "block", False, sms=132, out="e4m3", quant="1x128").config
    assert q.bn == 128 and not q.violations()   # 1 x 128 output scales: whole groups


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_promoted_decode_takes_the_blockwise_model_without_overlap(scaling):
    for m, n, k in ((64, 2112, 7168), (128, 14336, 4096), (16, 1024, 4096)):
        block = choose_fp8(m, n, k, "block", False, sms=132).config
        cfg = choose_fp8(m, n, k, scaling, False, sms=132).config
        assert (cfg.bm, cfg.bn, cfg.split_k) == (block.bm, block.bn, block.split_k)
        assert not cfg.overlap and cfg.consumers == cfg.bm // 64 and not cfg.violations()


@pytest.mark.parametrize("m, n, k, want", [
    (128, 7168, 16384, (64, 128, 1)),   # 112 tiles of 64 x 128 reach half the 132 SMs
    (16, 7168, 16384, (64, 64, 1)),     # 56 of 64 x 128 do not; 112 of 64 x 64 do
    (16, 2112, 7168, (64, 64, 2)),      # 33 tiles: split 2 reaches 66 units (28 blocks a slice)
    (16, 1024, 4096, (64, 64, 1)),      # 16 tiles, but a split would keep < 24 K blocks a slice
    (64, 1024, 16384, (64, 64, 4)),
])
def test_fast_decode_tiles_and_split(m, n, k, want):
    for scaling in ("tensor", "row"):
        cfg = choose_fp8(m, n, k, scaling, True, sms=132).config
        assert (cfg.bm, cfg.bn, cfg.split_k, cfg.promote, cfg.consumers) == (*want, 0, 1)
    cfg = choose_fp8(m, n, k, "tensor", True, sms=132, out="e4m3", quant="1x128").config
    assert cfg.bn == 128 and not cfg.violations()   # 1 x 128 output scales: whole groups


def test_large_shapes_take_the_tile_and_tail_split_of_least_modelled_time():
    tensor = choose_fp8(4096, 4096, 4096, "tensor", True)
    assert tensor.config.store == "tma" and "least modelled time" in tensor.reasons[-1]
    # the whole tile staged: 3 stages; through two chunk buffers there is room for a fourth,
    # which ran no faster (fp8.C_STAGES), so the rules leave them out
    assert (tensor.config.stages, tensor.config.c_stages) == (3, 0), tensor.config.name
    deeper = fp8._deepen(tensor.config, (2, 1))
    assert (deeper.stages, deeper.c_stages) == (4, 2) and not deeper.violations()
    assert fp8._deepen(tensor.config) == tensor.config
    row = choose_fp8(4096, 4096, 4096, "row", True).config
    assert row == tensor.config.replace(scaling="row")
    # 128 x 256 clustered tiles would fill 32 of 66 cluster slots; 128 x 128 fill 128 SMs
    narrow = choose_fp8(4096, 512, 3584, "tensor", True).config
    assert (narrow.bm, narrow.bn, narrow.cluster, narrow.split_k) == (128, 128, 1, 1)
    assert choose_fp8(256, 4096, 4096, "tensor", True).config.bm == 64   # 128 tiles, not 64
    # blockwise 4096 x 2112: 544 tiles, 4 whole waves and 16 tiles split over the last
    tail = choose_fp8(4096, 2112, 7168, "block", False).config
    assert tail.split_k > 1 and tail.split_tiles(4096, 2112, 132) == 16 and tail.overlap
    assert tail.work_units(4096, 2112, 132) == 528 + 16 * tail.split_k
    # the pick is the least modelled time among the options, a split one below the unsplit
    for m, n, k, scaling in ((1024, 1024, 8192, "block"), (2048, 3584, 18944, "tensor"),
                             (2048, 28672, 8192, "tensor")):
        cfg = choose_fp8(m, n, k, scaling, scaling != "block").config
        opts = fp8.prefill_options(cfg, m, n, k, 132)
        c = fp8.PREFILL["block" if scaling == "block" else "fast"]
        assert fp8.prefill_pick(opts, m, n, k, 132, c)[1].name == cfg.name
        times = {o.split_k: fp8.prefill_time(o, m, n, k, 132, c)
                 for label, o in opts if (o.bm, o.bn, o.cluster) == (cfg.bm, cfg.bn, cfg.cluster)}
        assert cfg.split_k == 1 or times[cfg.split_k] * c["split_kernel"] < times[1], times
        assert cfg.split_k > 1 or m == 2048 and n == 28672   # a split and an unsplit pick
    # with a bias epilogue: the ladder presets as they store (blockwise straight from registers)
    block = FP8["fp8_block_prom2"]
    assert choose_fp8(4096, 4096, 4096, "tensor", True, epilogue="bias").config == FP8[
        "fp8_tensor_cluster"].replace(epilogue="bias")
    biased = choose_fp8(4096, 7168, 16384, "block", False, epilogue="bias").config
    assert biased == block.replace(epilogue="bias", overlap=True)
    # decode too (one consumer: nothing to stagger); promoted per tensor and row keep the
    # plain loop
    decode = choose_fp8(64, 2112, 7168, "block", False).config
    assert decode.overlap and not decode.stagger and decode.split_k > 1
    assert FP8["fp8_block_overlap"].stagger
    assert not choose_fp8(4096, 4096, 4096, "tensor", False).config.overlap
    promoted = choose_fp8(4096, 4096, 4096, "row", False).config
    assert promoted.promote == 128 and promoted.scaling == "row" and promoted.bn == 128
    with pytest.raises(ValueError, match="block scaling needs promoted"):
        choose_fp8(4096, 4096, 4096, "block", True)


def test_cost_model_and_explain():
    est = cost.fp8_estimate(4096, 4096, 4096, "tensor", {}, fast=True)
    assert est.path == "direct" and 100e-6 < est.seconds < 120e-6  # 137 GFLOP at 1300 TFLOP/s
    dec = cost.fp8_estimate(64, 2112, 7168, "block", {"A": (64, 7168)}, split=7, fast=False)
    assert dec.path == "repack" and "pack A" in dec.terms and dec.terms["gemm"] > 3.5e-6
    text = explain_fp8(64, 2112, 7168, "block", False, b_k_major=False)
    assert "split 4 ways" in text and "B not K-major" in text and "predicted: repack" in text


def test_one_consumer_fast_kernels_meet_the_waiter_warp_with_a_deeper_ring():
    """Decode picks of one consumer with fast accumulation take the waiter warp and their ring
    as deep as fits up to 16 stages; promoted or two-consumer picks do not."""
    for m, n, k in ((16, 57344, 8192), (64, 8192, 8192), (128, 4096, 4096)):
        for scaling in ("tensor", "row"):
            ch = choose_fp8(m, n, k, scaling, True)
            c = ch.config
            assert c.consumers == 1 and c.waiter, c.name
            assert c.stages == 16 or c.replace(check=False, stages=c.stages + 1).violations()
            assert any("waiter warp" in r for r in ch.reasons), ch.reasons
        assert not choose_fp8(m, n, k, "block", False).config.waiter
    assert not choose_fp8(4096, 4096, 4096, "tensor", True).config.waiter
    # measured at decode only: a one-consumer pick above it keeps the plain wait
    above = choose_fp8(200, 1000, 512, "tensor", True).config
    assert above.consumers == 1 and not above.waiter, above.name
    # the e4m3 D of the GPU output tests runs with the waiter at these shapes
    for m, n, k in ((1, 2112, 1024), (64, 2112, 7168)):
        for quant in ("tensor", "1x128"):
            assert choose_fp8(m, n, k, "row", True, out="e4m3", quant=quant).config.waiter
