"""The mma family's constants and rule table."""
from __future__ import annotations

from ...config import MAX_THREADS_PER_SM
from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of

CHUNK_BYTES = 16         # one cp.async / ldmatrix row / vector load
MAX_DYNAMIC_SMEM = 227 * 1024
MAX_ACC_REGS = 128
MMA_SHAPES = {"fp16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8)}
PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32"}
C_PAD_FLOATS = 8         # padding of the staged C rows: conflict-free float2 fragment writes

_SWIZZLED = at_least("SWIZZLE", 1)
_STAGED_C = equal("STAGED_C", 1)

MMA_RULES: tuple[Rule, ...] = (
    Rule("M01", "bm-positive", at_least("BM", 1), "the block tile needs rows"),
    Rule("M02", "bn-positive", at_least("BN", 1), "the block tile needs columns"),
    Rule("M03", "bk-positive", at_least("BK", 1), "each K step covers at least one k"),
    Rule("M04", "wm-positive", at_least("WM", 1), "each warp owns at least one row"),
    Rule("M05", "wn-positive", at_least("WN", 1), "each warp owns at least one column"),
    Rule("M06", "bm-wm", multiple_of("BM", "WM"), "warp tiles must cover the block rows"),
    Rule("M07", "bn-wn", multiple_of("BN", "WN"), "warp tiles must cover the block columns"),
    Rule("M08", "wm-mma", multiple_of("WM", "MMA_M"), "m16 mma tiles must cover the warp rows"),
    Rule("M09", "wn-mma-pairs", multiple_of("WN", ("MMA_N", 2)),
         "B fragments come in pairs of n8 tiles (one ldmatrix.x4)"),
    Rule("M10", "bk-mma", multiple_of("BK", "MMA_K"), "mma k steps must cover the K tile"),
    Rule("M11", "max-threads", at_most("THREADS", 1024), "CUDA allows 1024 threads per block"),
    Rule("M12", "a-tile-loads", multiple_of(("BM", "BK"), ("THREADS", "LOAD_ELEMS")),
         "every thread copies the same number of A loads"),
    Rule("M13", "b-tile-loads", multiple_of(("BK", "BN"), ("THREADS", "LOAD_ELEMS")),
         "every thread copies the same number of B loads"),
    Rule("M14", "skew-nonnegative", at_least("SKEW", 0), "skew pads shared-memory rows"),
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
    Rule("M23", "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
         "more accumulator registers than half the 255-register budget spill"),
    Rule("M24", "dynamic-smem", at_most("SMEM_BYTES", MAX_DYNAMIC_SMEM),
         "no GPU lets one block opt in to more than 227 KiB of shared memory"),
    Rule("M25", "min-blocks-positive", at_least("MIN_BLOCKS", 1),
         "__launch_bounds__ asks for at least one resident block"),
    Rule("M26", "min-blocks-threads", at_most(("MIN_BLOCKS", "THREADS"), MAX_THREADS_PER_SM),
         "no SM holds more than 2048 threads"),
    Rule("M27", "fp16-output", equal("DTYPE_FP16", 1), "an FP16 C needs FP16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("M28", "bf16-output", equal("DTYPE_BF16", 1), "a BF16 C needs BF16 inputs",
         when=equal("OUT_BF16", 1)),
    Rule("M29", "staged-c-registers", equal("ACC_SMEM", 0),
         "the staged epilogue stores register accumulators (shared ones are staged already)",
         when=_STAGED_C),
    # The staged epilogue's BM*BN % (THREADS*EPI_VEC) == 0 follows from M08 and M09 (WM*WN
    # is a multiple of 256), so it needs no rule of its own.
    Rule("M30", "group-m-positive", at_least("GROUP_M", 1),
         "rasterization groups hold at least one block row"),
)
