"""The mma family's constants and rule table."""
from __future__ import annotations

from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of
from ..tiled import (acc_registers_rule, block_tile_rules, max_threads_rule, min_blocks_rules,
                     output_dtype_rules, skew_rule, tile_load_rules, warp_cover_rules,
                     warp_tile_rules)

CHUNK_BYTES = 16         # one cp.async / ldmatrix row / vector load
MAX_DYNAMIC_SMEM = 227 * 1024
MMA_SHAPES = {"fp16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8)}
PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32"}
C_PAD_FLOATS = 8         # padding of the staged C rows: conflict-free float2 fragment writes

_SWIZZLED = at_least("SWIZZLE", 1)
_STAGED_C = equal("STAGED_C", 1)

MMA_RULES: tuple[Rule, ...] = (
    *block_tile_rules("M01", "M02", "M03"),
    *warp_tile_rules("M04", "M05"),
    *warp_cover_rules("M06", "M07"),
    Rule("M08", "wm-mma", multiple_of("WM", "MMA_M"), "m16 mma tiles must cover the warp rows"),
    Rule("M09", "wn-mma-pairs", multiple_of("WN", ("MMA_N", 2)),
         "B fragments come in pairs of n8 tiles (one ldmatrix.x4)"),
    Rule("M10", "bk-mma", multiple_of("BK", "MMA_K"), "mma k steps must cover the K tile"),
    max_threads_rule("M11"),
    *tile_load_rules("M12", "M13", "LOAD_ELEMS", "every thread copies the same number of {} loads"),
    skew_rule("M14"),
    Rule("M15", "skew-align", multiple_of(("SKEW", "ELEM_BYTES"), CHUNK_BYTES),
         "padded rows stay 16-byte aligned for cp.async and ldmatrix"),
    Rule("M16", "stages-range", one_of("STAGES", (1, 2, 3, 4, 5, 6)),
         "1 = single buffer, 2 = double buffer (prefetch), 3+ = deeper cp.async ring"),
    Rule("M17", "pipeline-cp-async", equal("CP_ASYNC", 1),
         "the multistage ring is fed by cp.async", when=at_least("STAGES", 2)),
    Rule("M18", "cp-async-vector", equal("VECTOR", 1), "cp.async copies 16-byte chunks",
         when=equal("CP_ASYNC", 1)),
    Rule("M19", "swizzle-width", one_of("SWIZZLE", (0, 32, 64, 128)),
         "XOR swizzle over 2, 4 or 8 16-byte chunks (0: none)"),
    Rule("M20", "swizzle-no-skew", equal("SKEW", 0), "the XOR swizzle replaces padding",
         when=_SWIZZLED),
    Rule("M21", "a-swizzle-row", multiple_of("A_ROW_CHUNKS", "A_SW_SPAN"),
         "the XOR stays inside an A row: its 16-byte chunks come in whole swizzle spans",
         when=_SWIZZLED),
    Rule("M22", "b-swizzle-row", multiple_of("B_ROW_CHUNKS", "B_SW_SPAN"),
         "the XOR stays inside a B row: its 16-byte chunks come in whole swizzle spans",
         when=_SWIZZLED),
    acc_registers_rule("M23"),
    Rule("M24", "dynamic-smem", at_most("SMEM_BYTES", MAX_DYNAMIC_SMEM),
         "no GPU lets one block opt in to more than 227 KiB of shared memory"),
    *min_blocks_rules("M25", "M26"),
    *output_dtype_rules("M27", "M28"),
    Rule("M29", "staged-c-registers", equal("ACC_SMEM", 0),
         "the staged epilogue stores register accumulators (shared ones are staged already)",
         when=_STAGED_C),
    # The staged epilogue's BM*BN % (THREADS*EPI_VEC) == 0 follows from M08 and M09 (WM*WN
    # is a multiple of 256), so it needs no rule of its own.
    Rule("M30", "group-m-positive", at_least("GROUP_M", 1),
         "rasterization groups hold at least one block row"),
)
