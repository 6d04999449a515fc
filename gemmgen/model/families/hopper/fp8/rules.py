"""The fp8 family's constants and rule table: the rules every Hopper kernel obeys
(``families.hopper``) and those of FP8 operands and their scaling."""
from __future__ import annotations

import math

from ....rules import Rule, at_least, at_most, equal, multiple_of, one_of
from .. import C_STAGED, C_STAGES_RULES, HOPPER_RULES

WGMMA_K = 32                       # one FP8 wgmma consumes 32 elements (32 bytes) of K
SWIZZLE = 128                      # A and B stages: 128-byte swizzled K-major rows
BLOCK = 128                        # DeepSeek-V3 scale blocks: 1 x 128 of A, 128 x 128 of B


def b_scale_span(bn: int) -> int:
    """The widest tile whose columns meet at most two 128-column B scale blocks wherever a
    multiple of ``bn`` puts it: it starts at most 128 - gcd(bn, 128) columns into a block, so
    BLOCK + gcd(bn, BLOCK) (rule F20 checks BN against it)."""
    return BLOCK + math.gcd(bn, BLOCK)
FLAG_BYTES = 16                    # split-K: one "last arrival" flag per consumer warpgroup
REG_RESERVE = 40
"""Registers a consumer thread needs besides its live accumulators: ptxas (nvcc 13.0) compiles
192 live accumulators under setmaxnreg 232 without spilling (the prototype's promoted 128x128
kernels), so 40 and not the 48 of the 16-bit wgmma family."""
SCALINGS = ("tensor", "row", "block")
"""``scaling``: one scale per operand; per row of A and column of B; DeepSeek-V3 blockwise."""
STORES = ("direct", "tma")
QUANTS = ("none", "tensor", "1x128")
"""``quant``, how an e4m3 D is scaled: not at all (a 16- or 32-bit D), by the given per-tensor
scale, or by one scale per row and 128 columns computed from the tile (DeepSeek-V3's
activations)."""
PROMOTE_STEPS = (0, 128, 256, 512, 1024)
"""``promote``: K elements between FP32 promotions (0: the tensor core sums all of K)."""
PACK_TILE = 64                     # the transposing pack kernel moves 64 x 64 byte tiles
PACK_THREADS = 256
PTX_TYPES = {"e4m3": "e4m3", "e5m2": "e5m2"}

_BLOCK = equal("SCALE_BLOCK", 1)

FP8_RULES: tuple[Rule, ...] = HOPPER_RULES + (
    Rule("F16", "k-major-only", equal("K_MAJOR", 1),
         "FP8 wgmma reads A and B K-major only (layout rcr: A row-major, B column-major, C "
         "row-major); other layouts go through the module's transposing pack at launch"),
    Rule("F17", "promote-interval", one_of("PROMOTE", PROMOTE_STEPS),
         "promotion every 128, 256, 512 or 1024 K elements (whole stages), or 0 for fast "
         "accumulation"),
    Rule("F18", "fast-needs-tensor-or-row", equal("SCALE_BLOCK", 0),
         "fast accumulation (promote 0) applies the scales once in the epilogue: tensor or row "
         "scaling only (block scales change every 128 K elements)", when=equal("PROMOTE", 0)),
    Rule("F19", "block-promote-128", equal("PROMOTE", "BLOCK"),
         "blockwise scales are applied at each promotion, once per 128-element K block",
         when=equal("BLOCK_PROMOTED", 1)),
    Rule("F20", "block-b-scale-span", at_most("BN", "B_SCALE_SPAN"),
         "a tile's columns meet at most two 128-column B scale blocks wherever it starts: BN <= "
         "128 + gcd(BN, 128) (any BN up to 128, and 136, 144, 160, 192 and 256)", when=_BLOCK),
    Rule("F21", "partials-range", one_of("PARTIALS", (1, 2)),
         "one or two sets of partial accumulators"),
    Rule("F22", "partials-need-promotion", at_least("PROMOTE", 1),
         "a second partial set overlaps promotion with the next wgmmas: promoted only",
         when=equal("PARTIALS", 2)),
    Rule("F23", "partials-per-block", one_of("PROMOTE", (0, BLOCK)),
         "two partial sets alternate single 128-element K blocks (promote 128)",
         when=equal("PARTIALS", 2)),
    Rule("F27", "quant-for-fp8-out", one_of("QUANT", (1, 2)),
         "an e4m3 D is quantized: per tensor (the given scale) or per 1 x 128 (scales from the "
         "tile)", when=equal("OUT_FP8", 1)),
    Rule("F28", "quant-only-fp8-out", equal("QUANT", 0),
         "only an e4m3 D is quantized (quant none for bf16, fp16 and fp32)",
         when=equal("OUT_FP8", 0)),
    Rule("F29", "quant-1x128-tile", multiple_of("BN", BLOCK),
         "1 x 128 output scales: each tile holds whole 128-column groups of its rows",
         when=equal("QUANT", 2)),
    Rule("F30", "overlap-needs-partials", equal("PARTIALS", 2),
         "an overlapped kernel defers each unit's epilogue under the next unit's first wgmmas, "
         "which two partial sets leave the registers for (F holds the finished unit meanwhile)",
         when=equal("OVERLAP", 1)),
    Rule("F26", "b-multicast-split", multiple_of("BN", (8, "CLUSTER_M")),
         "the CTAs of a cluster along M each load an equal share (whole 8-row swizzle atoms) of "
         "the B tile they multicast (A's share is whole: BM is a multiple of 64)",
         when=at_least("CLUSTER_M", 2)),
) + C_STAGES_RULES + (
    Rule("F31", "c-stages-wide-d", equal("OUT_FP8", 0),
         "C staged chunk by chunk writes 16- or 32-bit D values (stmatrix or float pairs); an "
         "e4m3 D stages its whole tile: c_stages 0", when=C_STAGED),
)

FP8_WAITER_RULES: tuple[Rule, ...] = (
    Rule("F32", "waiter-fast", equal("PROMOTE", 0),
         "the waiter meets the fast-accumulation loop, whose one wait a stage it stands for"),
)
"""The fp8 family's own rule of the waiter (beside the shared ``hopper.waiter`` rules): part
of a config's table, and its kernel's asserts, only when it uses it."""

FP8_A_ROWS_RULES: tuple[Rule, ...] = (
    Rule("F33", "a-rows-range", one_of("A_ROWS", (8, 16, 32)),
         "a_rows loads 8, 16 or 32 rows of A a tile (a decode M), or 0 for the whole tile"),
    Rule("F34", "a-rows-one-tile", equal("BM", 64),
         "a_rows loads part of one consumer's 64-row tile: BM 64"),
    Rule("F35", "a-rows-no-a-multicast", equal("CLUSTER_N", 1),
         "a_rows loads A in one box per CTA: no cluster along N sharing A's tile"),
    Rule("F36", "a-rows-fast", equal("PROMOTE", 0),
         "a_rows is measured with fast accumulation (the decode rules' loop) only"),
)
"""The rules of ``a_rows`` (part of a config's table, and its asserts, only when it uses it)."""
