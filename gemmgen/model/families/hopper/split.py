"""The arithmetic of the Hopper kernels' in-kernel split-K, written once for the wgmma and fp8
families: which tiles a split tail splits, the bytes of its workspaces, and the pieces of a
stream-K tail (the wgmma scheduler's, mirrored for the tests)."""
from __future__ import annotations


def split_tail(tiles: int, wave: int) -> int:
    """How many of ``tiles`` a split-K over the tail splits on a persistent grid that runs
    ``wave`` tiles at once: every tile when they fit one wave, else those past the last whole
    wave (none when the waves are whole), so that whole tiles fill the waves and the split
    slices the last one (data-parallel tiles and a split tail, a hybrid in Stream-K's terms:
    Osama et al., PPoPP 2023)."""
    return tiles if tiles <= wave else tiles % wave


def split_workspace(split_tiles: int, split_k: int, tile_elems: int,
                    consumers: int) -> tuple[int, int]:
    """Bytes of the workspaces of an in-kernel split-K over ``split_tiles`` split CTA tiles:
    the fp32 partial sums of each one's ``split_k`` slices of ``tile_elems`` elements, and one
    int counter per tile and consumer; one tile's worth where none is split (the kernel still
    takes the pointers)."""
    tiles = max(1, split_tiles)
    return tiles * split_k * tile_elems * 4, tiles * consumers * 4


def stream_k_pieces(split_tiles: int, k_tiles: int, ctas: int, most: int) -> list[list[tuple]]:
    """The pieces each of ``ctas`` CTAs takes of a stream-K tail of ``split_tiles`` tiles of
    ``k_tiles`` K tiles each, as the wgmma kernel's scheduler computes them: per CTA, a list
    of (split tile, first K tile, K tiles, piece of the tile, pieces of the tile). The tail's
    K tiles, tile after tile, are cut into equal contiguous ranges, one per CTA that takes
    part: as many CTAs as leave each range ceil(K tiles / (most - 1)) K tiles or more, so
    that no tile has more than ``most`` pieces (Stream-K, Osama et al., PPoPP 2023). With no
    K tiles (K == 0, alpha == 0) each tile is one piece of none."""
    kt = max(k_tiles, 1)
    iters = split_tiles * kt
    taking = min(ctas, iters // -(-kt // (most - 1))) if iters else 0
    owner = lambda x: ((x + 1) * taking - 1) // iters  # noqa: E731  the CTA holding K tile x
    out = []
    for c in range(ctas):
        lo, hi = (c * iters // taking, (c + 1) * iters // taking) if c < taking else (0, 0)
        pieces = []
        for i in range(lo // kt, -(-hi // kt)):
            first, last = owner(i * kt), owner(i * kt + kt - 1)
            k0, k1 = max(lo, i * kt) - i * kt, min(hi, i * kt + kt) - i * kt
            pieces.append((i, k0, (k1 - k0) if k_tiles else 0, c - first, last - first + 1))
        out.append(pieces)
    return out
