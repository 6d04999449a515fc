"""Inline split-K over the tail: a persistent kernel whose C tiles outnumber the SMs computes
the tiles of its whole waves unsplit and splits only those past the last whole wave (data-
parallel tiles, then a split tail); fewer tiles than SMs are all split, as before. The
config's arithmetic, the launch recipe it gives (CPU, a compiled cubin) and the shape rules
that choose it."""
import struct

import pytest

from gemmgen import PRESETS
from gemmgen.runtime.recipe import WORK_BASE, KernelArgs, Ref
from test_recipe import _tma_kernel

TMA = PRESETS["wgmma_tma_store"].config


def test_split_tiles_are_the_tail_past_the_last_whole_wave():
    cfg = TMA.replace(bn=128, stages=6, split_k=4, split_inline=True)
    assert cfg.split_tiles(100, 132) == 100 and cfg.work_units(100, 132) == 400
    assert cfg.split_tiles(132, 132) == 132, "one whole wave: every tile is split, as before"
    assert cfg.split_tiles(153, 132) == 21 and cfg.work_units(153, 132) == 132 + 4 * 21
    assert cfg.split_tiles(264, 132) == 0 and cfg.work_units(264, 132) == 264
    apart = cfg.replace(split_inline=False, store="direct")  # the reduce kernel: all slices
    assert apart.split_tiles(153, 132) == 0 and apart.work_units(153, 132) == 4 * 153
    assert cfg.replace(split_k=1, split_inline=False).work_units(153, 132) == 153
    whole = cfg.replace(persistent=False, cluster_m=1)
    assert whole.split_tiles(153, 132) == 153, "one tile per CTA: every tile is split"


def test_the_workspace_holds_the_split_tiles_slices_and_a_counter_per_consumer():
    cfg = TMA.replace(bn=128, stages=6, split_k=4, split_inline=True)
    assert cfg.workspace_bytes(153, 132) == (21 * 4 * 128 * 128 * 4, 21 * 2 * 4)
    assert cfg.workspace_bytes(264, 132) == (4 * 128 * 128 * 4, 2 * 4)  # none split: one tile's
    assert cfg.replace(split_inline=False, store="direct").workspace_bytes(153, 132) == (0, 0)


def test_an_inline_split_k_may_store_c_through_tma():
    assert not TMA.replace(split_k=4, split_inline=True).violations()
    broken = TMA.replace(check=False, split_k=4).violations()
    assert [v.rule.id for v in broken] == ["H36"], broken


def _launch(k, m, n):
    refs = [Ref(i, 0x100000 * (i + 1)) for i in range(4)]
    return k.launches(KernelArgs.blas(
        m, n, 4096, 1.0, refs[0], 4096, refs[1], n, 0.0, refs[2], n, 0, 0, 0, refs[3], 1), 0)


@pytest.mark.parametrize("m, n, split", [(1100, 2112, 21), (64, 1024, 8), (1408, 3072, 0)])
def test_the_recipe_passes_the_split_tiles_and_sizes_their_workspace(nvcc, monkeypatch, m, n,
                                                                      split):
    """The launch passes how many tiles are split, the workspace holds their slices only
    (128 x 128 tiles: 1100 x 2112 has 153 on 132 SMs, the last 21 split; 64 x 1024 has 8, all
    split; 1408 x 3072 has two whole waves, none split) and the persistent grid is the SMs or
    the work units, whichever is fewer."""
    k, offsets = _tma_kernel(monkeypatch, "wgmma_tma_store", bn=128, stages=6, split_k=4,
                             split_inline=True)
    r = _launch(k, m, n)
    (gemm,) = r.launches
    tiles, c = -(-m // 128) * -(-n // 128), k.config
    assert r.path == ("tma + split-K 4 inline" if split == tiles else
                      f"tma + split-K 4 inline on the last {split} of {tiles} tiles" if split else
                      "tma + split-K 4 inline: whole waves, none split")
    assert struct.unpack_from("i", gemm.params, offsets[21]) == (split,)
    assert [(w.tag, w.nbytes, w.zero) for w in r.workspaces] == [  # never empty
        ("split-K", max(1, split) * 4 * c.bm * c.bn * 4, False),
        ("split-K counters", max(1, split) * c.consumers * 4, True)]
    assert {p.index for p in gemm.patches if p.offset in (offsets[19], offsets[20])} == {
        WORK_BASE, WORK_BASE + 1}
    assert gemm.grid == (min(132, tiles - split + 4 * split), 1, 1)


def _pieces_cover_the_tail(tail: int, kt: int, ctas: int, most: int) -> None:
    from gemmgen.model.families.hopper.split import stream_k_pieces
    pieces = stream_k_pieces(tail, kt, ctas, most)
    of_tile: dict = {}
    for cta in pieces:
        assert len(cta) <= 2, cta  # a range is at most one tile long
        for tile, k0, nk, piece, count in cta:
            assert count <= most
            of_tile.setdefault(tile, []).append((piece, k0, nk, count))
    assert sorted(of_tile) == list(range(tail))
    for got in of_tile.values():
        got.sort()
        assert [p for p, *_ in got] == list(range(got[0][3])), got  # pieces 0 .. count - 1
        assert [k0 for _, k0, _, _ in got] == [sum(g[2] for g in got[:i]) for i in
                                               range(len(got))], got  # in K order, no gaps
        assert sum(g[2] for g in got) == kt, got


@pytest.mark.parametrize("tail, kt, ctas, most", [
    (72, 71, 132, 3), (128, 64, 132, 3), (21, 16, 132, 4), (1, 1, 132, 8), (5, 0, 132, 3),
    (132, 200, 132, 3), (37, 9, 7 * 19, 4), (3, 1000, 132, 8)])
def test_stream_k_pieces_cover_each_tail_tile_once_in_k_order(tail, kt, ctas, most):
    """Every K tile of every split tile belongs to exactly one piece; a tile's pieces are
    numbered in K order (the order they are summed in), at most ``most`` of them; a CTA takes
    at most two pieces (the end of one tile, the start of the next); with no K tiles each tile
    is one empty piece."""
    _pieces_cover_the_tail(tail, kt, ctas, most)


def test_stream_k_spreads_the_tail_over_every_sm():
    """72 tiles of 71 K tiles on 132 SMs: 132 ranges of 38 or 39 K tiles (unsplit, 72 SMs
    would run 71 each); with at most 2 pieces a tile only whole tiles could be ranges, which
    rule H56 refuses."""
    from gemmgen.model.families.hopper.split import stream_k_pieces
    pieces = stream_k_pieces(72, 71, 132, 3)
    assert {sum(p[2] for p in cta) for cta in pieces} == {38, 39}
    cfg = TMA.replace(bn=128, stages=6, split_k=3, split_inline=True, stream_k=True)
    assert not cfg.violations() and cfg.name.endswith("_sk3i_streamk")
    broken = {v.rule.id for c in (cfg.replace(check=False, split_k=2),
                                  cfg.replace(check=False, split_inline=False, store="direct"),
                                  cfg.replace(check=False, persistent=False))
              for v in c.violations()}
    assert {"H54", "H55", "H56"} <= broken, broken


def test_stream_k_launches_one_cta_per_sm_over_a_split_tail():
    """The grid of a stream-K kernel with a split tail is every SM (the tail's K tiles are
    shared among them all); with whole waves it is the tiles', as for the inline split."""
    from types import SimpleNamespace

    from gemmgen.runtime.hopper.wgmma import WgmmaLaunch
    cfg = TMA.replace(bn=128, stages=6, split_k=3, split_inline=True, stream_k=True)
    launch = SimpleNamespace(config=cfg)
    grid = lambda m, n: WgmmaLaunch.grid(launch, SimpleNamespace(m=m, n=n, batch=1), 132)  # noqa
    assert grid(256, 4544) == (132, 1, 1)       # 72 tiles, all split
    assert grid(1100, 2112) == (132, 1, 1)      # 153 tiles, the last 21 split
    assert grid(1408, 3072) == (132, 1, 1)      # 264 tiles: two whole waves
    assert grid(128, 512) == (132, 1, 1)        # 4 tiles: 8 of the 132 CTAs take part
