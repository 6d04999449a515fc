"""The simt family's constants and rule table."""
from __future__ import annotations

from ...arch import STATIC_SMEM_LIMIT
from ...config import WARP_SIZE
from ...rules import Cmp, Rule, at_least, at_most, equal, multiple_of, not_equal, one_of
from ..tiled import (block_tile_rules, max_threads_rule, min_blocks_rules, skew_rule,
                     tile_load_rules, warp_cover_rules)

FLOAT_BYTES = 4
LANES_M, LANES_N = 8, 4  # lanes of a warp along M and N, as in Lei Mao's v06
MAX_ACC_REGS = 128
SMEM_ALIGN = 16  # the __align__ of the As and Bs shared arrays (bytes)


def _when_stages0(check: Cmp, rid: str, name: str, why: str) -> Rule:
    return Rule(rid, name, check, why, when=equal("STAGES", 0))


_STAGED = at_least("STAGES", 1)
_WARP_TILED = not_equal("WM", 0)
_SMEM_STORE = equal("STORE_SMEM", 1)
_SWIZZLED = equal("SWIZZLE_A", 1)

SIMT_RULES: tuple[Rule, ...] = (
    *block_tile_rules("R01", "R02", "R03"),
    Rule("R04", "tm-positive", at_least("TM", 1), "each thread owns at least one row"),
    Rule("R05", "tn-positive", at_least("TN", 1), "each thread owns at least one column"),
    Rule("R06", "wm-nonnegative", at_least("WM", 0), "WM is a tile size, 0 meaning no warp tile"),
    Rule("R07", "wn-nonnegative", at_least("WN", 0), "WN is a tile size, 0 meaning no warp tile"),
    Rule("R08", "vec-width", one_of("VEC", (1, 2, 4)), "float, float2 or float4 accesses"),
    skew_rule("R09"),
    Rule("R10", "stages-range", one_of("STAGES", (0, 1, 2)),
         "0 = no shared memory, 1 = single buffer, 2 = double buffer"),
    Rule("R11", "wm-needs-wn", not_equal("WN", 0), "a warp tile needs both WM and WN",
         when=_WARP_TILED),
    Rule("R12", "wn-needs-wm", not_equal("WM", 0), "a warp tile needs both WM and WN",
         when=not_equal("WN", 0)),
    Rule("R13", "bm-tm", multiple_of("BM", "TM"), "thread tiles must cover the block rows"),
    Rule("R14", "bn-tn", multiple_of("BN", "TN"), "thread tiles must cover the block columns"),
    *warp_cover_rules("R15", "R16", when_m=_WARP_TILED, when_n=not_equal("WN", 0)),
    Rule("R17", "wm-lanes", multiple_of("WM", ("LANES_M", "TM")),
         "the warp's 8 lane rows of TM must cover WM", when=_WARP_TILED),
    Rule("R18", "wn-lanes", multiple_of("WN", ("LANES_N", "TN")),
         "the warp's 4 lane columns of TN must cover WN", when=not_equal("WN", 0)),
    Rule("R19", "whole-warps", multiple_of("THREADS", WARP_SIZE), "blocks are whole warps"),
    max_threads_rule("R20"),
    Rule("R21", "a-contig-vec", multiple_of("A_CONTIG", "VEC"),
         "A is loaded in vectors along its contiguous dimension (K if row-major, M if not)",
         when=_STAGED),
    *tile_load_rules("R22", "R23", "VEC", "every thread loads the same number of {} vectors",
                     when=_STAGED),
    Rule("R24", "tn-vec", multiple_of("TN", "VEC"),
         "B fragments are read from shared memory as vectors", when=_STAGED),
    Rule("R25", "tm-vec", multiple_of("TM", "VEC"),
         "A fragments of the transposed tile are read as vectors", when=equal("TRANSPOSE_A", 1)),
    Rule("R26", "skew-vec", multiple_of("SKEW", "VEC"), "padded rows must stay vector-aligned"),
    Rule("R27", "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
         "more accumulators than half the 255-register budget spill"),
    Rule("R28", "static-smem", at_most("SMEM_BYTES", STATIC_SMEM_LIMIT),
         "static shared memory is limited to 48 KiB per block"),
    _when_stages0(equal(("TM", "TN"), 1), "R29", "stages0-thread-tile",
                  "without shared memory each thread computes one element"),
    _when_stages0(equal("BK", 1), "R30", "stages0-bk", "without shared memory K steps by one"),
    _when_stages0(equal("VEC", 1), "R31", "stages0-vec", "without shared memory loads are scalar"),
    _when_stages0(equal("SKEW", 0), "R32", "stages0-skew", "without shared memory there is no padding"),
    _when_stages0(equal("WM", 0), "R33", "stages0-warp-tile",
                  "without shared memory there is no warp tile"),
    _when_stages0(equal("TRANSPOSE_A", 0), "R34", "stages0-transpose",
                  "without shared memory there is no A tile to transpose"),
    Rule("R35", "thread-order", equal("STAGES", 0),
         "only the naive kernel walks M with consecutive threads", when=equal("THREAD_ORDER_M", 1)),
    *min_blocks_rules("R36", "R37"),
    Rule("R38", "b-contig-vec", multiple_of("B_CONTIG", "VEC"),
         "B is loaded in vectors along its contiguous dimension (N if row-major, K if not)",
         when=_STAGED),
    # (a) the maxas output stage: registers -> shared memory -> coalesced 128-bit stores
    Rule("R39", "smem-store-warp-tile", not_equal("WM", 0),
         "the shared-memory output stage stages one warp tile at a time", when=_SMEM_STORE),
    Rule("R40", "smem-store-tn", one_of("TN", (4, 8)),
         "the staged rows are written as float4 and are conflict-free for TN of 4 or 8",
         when=_SMEM_STORE),
    Rule("R41", "smem-store-row-major-c", equal("LAYOUT_C_COL", 0),
         "the staged rows are stored along N, so C must be row-major", when=_SMEM_STORE),
    # (b) XOR-swizzled transposed A tile
    Rule("R42", "swizzle-transposed", equal("TRANSPOSE_A", 1),
         "the swizzle permutes the columns of the transposed (K-major) A tile",
         when=_SWIZZLED),
    Rule("R43", "swizzle-bm", multiple_of("BM", "WARP_SIZE"),
         "the XOR reaches 32 columns, which must stay inside one A row", when=_SWIZZLED),
    Rule("R44", "swizzle-bk", multiple_of("WARP_SIZE", "BK"),
         "32 banks split into BK/VEC groups of whole vectors", when=_SWIZZLED),
    Rule("R45", "swizzle-skew", equal("SKEW", 0),
         "the swizzle replaces padding (its bank mapping assumes unpadded rows)",
         when=_SWIZZLED),
    _when_stages0(equal("FRAG_DB", 0), "R46", "stages0-frag-db",
                  "without shared memory there are no fragments to double-buffer"),
    _when_stages0(equal("PEEL", 0), "R47", "stages0-peel",
                  "only the tiled kernels have an unchecked interior path"),
    _when_stages0(equal("ALIGN_ROW", 0), "R48", "stages0-align",
                  "without shared memory loads are scalar, so there is no vector body"),
)
