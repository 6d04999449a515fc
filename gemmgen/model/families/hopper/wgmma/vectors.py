"""The epilogue's vectors staged in shared memory: the bias, and an epilogue tree's
``col_scale``, ``row_scale`` and ``row_bias``, copied by each consumer warpgroup with
``cp.async`` when it starts a tile, so the copy lands under the tile's main loop and the
epilogue reads shared memory instead of waiting on global loads.

Read straight from global memory in the epilogue, each 16-column block's bias loads wait
behind the previous block's ``stmatrix`` (an ``asm volatile`` with a memory clobber): one L2
round trip per block, 16 per 256-column tile, with the tensor cores idle. The vectors sit
after the barriers, two slots per consumer: a tile's copy goes to one slot while the previous
tile's epilogue may still read the other. ``cp.async`` is sm_80's asynchronous global-to-shared
copy (16 bytes, zero-filled past the end), the loads of the mma family's main loop."""
from __future__ import annotations

from dataclasses import dataclass

from ....epilogue_program import program
from ....epilogue_rules import deferral, epilogue_of, residual_col, residual_dtype
from .. import SMEM_OPTIN, HopperTile

VECTOR_LEAVES: dict[str, tuple[str, str, str]] = {
    # leaf: (axis, element: "out" (C's dtype) or "fp32", its first element for batch entry b)
    "bias": ("col", "out", "bias"),
    "col_scale": ("col", "fp32", "epi.col_scale + (size_t)tile.batch * epi.stride_col"),
    "row_scale": ("row", "fp32", "epi.row_scale + (size_t)tile.batch * epi.stride_row"),
    "row_bias": ("row", "out", "epi.row_bias + (size_t)tile.batch * epi.stride_row"),
}
"""The leaves that read one value per column (``col``: BN per tile) or per row (``row``: the
consumer's CONSUMER_ROWS) and may be staged."""
SLOTS = 2
"""Slots per consumer warpgroup: a tile's copy lands in one while the previous tile's epilogue
may still read the other."""
CHUNK = 16
"""Bytes per ``cp.async`` (the vector's global address must be 16-byte aligned for it; a
vector that is not is copied element by element at the tile's start)."""


@dataclass(frozen=True)
class StagedVector:
    """One staged vector: the leaf it serves, its axis, C++ element type, elements per tile,
    its byte offset inside a consumer's slot and the bytes it takes there (a whole number of
    chunks)."""

    leaf: str
    axis: str
    ctype: str
    count: int
    offset: int
    source: str
    nbytes: int

    @property
    def constant(self) -> str:
        """The template constant of its offset in a slot, e.g. ``VEC_BIAS_AT``."""
        return f"VEC_{self.leaf.upper()}_AT"

    @property
    def pointer(self) -> str:
        """C++: a generic pointer to the element of the tile's first column (row) in the
        slot of the tile in its epilogue (``vec_at``)."""
        return (f"reinterpret_cast<const {self.ctype}*>(__cvta_shared_to_generic((size_t)"
                f"(vec_at + {self.constant})))")

    @property
    def read(self) -> str:
        """C++: an epilogue tree's pair of values at (gm, gn) and (gm + dm, gn + dn)."""
        at = "gn - vec_n0, dn" if self.axis == "col" else "gm - vec_m0, dm"
        return f"epi_vec2({self.pointer}, {at})"


def staged_vectors(cfg) -> tuple[StagedVector, ...]:
    """The vectors ``cfg``'s epilogue stages: with an epilogue tree, those its register
    program reads (an overlap's deferred part reads global memory). None with split-K (its
    slices store partial sums; the vectors are read where the slices are summed), nor where
    the two slots per consumer would not fit beside the ring (the epilogue then reads global
    memory, as before)."""
    if cfg.split_k > 1:
        return ()
    epi = epilogue_of(cfg)
    if cfg.extended:
        cut = deferral(epi) if cfg.overlap else None
        pre = program(cut[0] if cut else epi.root)
        leaves = [leaf for leaf in VECTOR_LEAVES if pre.uses(leaf)]
    else:
        leaves = ["bias"] if (epi.shorthand or "").startswith("bias") else []
    out, at = [], 0
    for leaf in leaves:
        axis, elem, source = VECTOR_LEAVES[leaf]
        count = cfg.bn if axis == "col" else cfg.consumer_rows
        nbytes = -(-count * (cfg.out_bytes if elem == "out" else 4) // CHUNK) * CHUNK
        out.append(StagedVector(leaf, axis, "out_t" if elem == "out" else "float", count, at,
                                source, nbytes))
        at += nbytes
    if HopperTile.smem_bytes.fget(cfg) + cfg.consumers * consumer_bytes(out) > SMEM_OPTIN:
        return ()
    return tuple(out)


def slot_bytes(vectors) -> int:
    """Bytes of one consumer's slot: every vector's."""
    return sum(v.nbytes for v in vectors)


def consumer_bytes(vectors) -> int:
    """Bytes of one consumer warpgroup's SLOTS slots."""
    return SLOTS * slot_bytes(vectors)


def residual_staged(cfg) -> bool:
    """Whether the residual R is copied (cp.async, 16 bytes at a time) into the consumer's
    C staging tile at the tile's start, in the staging's swizzled layout, so the epilogue reads
    each R pair from shared memory where it then writes C's (in place: a warp's stmatrix
    overwrites only the 16 x 16 block whose R its lanes have read). For a TMA-stored 16-bit
    row-major C and an R of C's dtype and layout, read by the tree's register program. R rows
    that are not 16-byte aligned are copied element by element (at the tile's start)."""
    if not cfg.extended or cfg.split_k > 1 or cfg.overlap or cfg.store != "tma":
        return False
    if cfg.out_bytes != 2 or cfg.layout[2] != "r":
        return False
    epi = epilogue_of(cfg)
    return (program(epi.root).uses("R") and not residual_col(epi, "r")
            and residual_dtype(epi, cfg.out) == cfg.out)
