"""The fp8 family's constants and rule table."""
from __future__ import annotations

from ...arch import get_arch
from ...config import WARP_SIZE
from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of

WARPGROUP = 4 * WARP_SIZE          # threads of one warpgroup
WGMMA_M = 64                       # rows of one wgmma, per warpgroup
WGMMA_K = 32                       # one FP8 wgmma consumes 32 elements (32 bytes) of K
SWIZZLE = 128                      # A and B stages: 128-byte swizzled K-major rows
BLOCK = 128                        # DeepSeek-V3 scale blocks: 1 x 128 of A, 128 x 128 of B
MAX_BOX = 256                      # cuTensorMapEncodeTiled: every box dimension <= 256
C_SWIZZLE = 128                    # the TMA-store staging tile: 128-byte swizzled rows
BARRIER_BYTES = 8                  # one mbarrier
FLAG_BYTES = 16                    # split-K: one "last arrival" flag per consumer warpgroup
ALIGN_SLACK = 1024                 # dynamic shared memory is rounded up to a 1024-byte atom
REG_RESERVE = 40
"""Registers a consumer thread needs besides its live accumulators: ptxas (nvcc 13.0) compiles
192 live accumulators under setmaxnreg 232 without spilling (the prototype's promoted 128x128
kernels), so 40 and not the 48 of the 16-bit wgmma family."""
REGISTER_FILE = 65536              # 32-bit registers per SM (sm_90)
MAX_SPLIT_K = 16                   # slices of K one problem may be split into
SCALINGS = ("tensor", "row", "block")
"""``scaling``: one scale per operand; per row of A and column of B; DeepSeek-V3 blockwise."""
STORES = ("direct", "tma")
PROMOTE_STEPS = (0, 128, 256, 512, 1024)
"""``promote``: K elements between FP32 promotions (0: the tensor core sums all of K)."""
PACK_TILE = 64                     # the transposing pack kernel moves 64 x 64 byte tiles
PACK_THREADS = 256
PTX_TYPES = {"e4m3": "e4m3", "e5m2": "e5m2"}
SMEM_OPTIN = get_arch("sm_90").smem_per_block_optin
"""The largest dynamic shared memory one block may opt in to on sm_90a (232,448 bytes)."""

_STEPS8 = tuple(range(24, 257, 8))
_BLOCK = equal("SCALE_BLOCK", 1)

FP8_RULES: tuple[Rule, ...] = (
    Rule("F01", "bm-warpgroup-rows", at_least("BM", "WGMMA_M"),
         "a consumer warpgroup computes at least the 64 rows of one wgmma"),
    Rule("F02", "bm-per-consumer", multiple_of("BM", ("WGMMA_M", "CONSUMERS")),
         "each consumer warpgroup takes whole 64-row wgmma slices of the block"),
    Rule("F03", "wgmma-n-multiple", multiple_of("BN", 8), "wgmma N is a multiple of 8"),
    Rule("F04", "wgmma-n-range", at_most("BN", 256), "wgmma N is at most 256"),
    Rule("F05", "wgmma-n-positive", at_least("BN", 8), "wgmma N is at least 8"),
    Rule("F06", "bk-swizzle", equal("BK", "SWIZZLE"),
         "one K row of a stage is one 128-byte swizzle row: BK = 128 FP8 elements"),
    Rule("F07", "stages-range", one_of("STAGES", tuple(range(2, 17))),
         "2 to 16 shared-memory stages in the TMA ring"),
    Rule("F08", "smem-limit", at_most("SMEM_BYTES", "SMEM_OPTIN"),
         "stages x (BM + BN) x BK + the C staging tile + barriers + alignment fit the opt-in "
         "shared memory of a block"),
    Rule("F09", "consumers-range", one_of("CONSUMERS", (1, 2)),
         "one or two consumer warpgroups"),
    Rule("F10", "acc-registers", at_most("ACC_REGS", "ACC_BUDGET"),
         "live fp32 accumulators (x (1 + PARTIALS) when promoted) plus 40 working registers "
         "fit a consumer thread's REGS_CONSUMER, or wgmma serializes and the kernel spills"),
    Rule("F11", "setmaxnreg-producer-count", one_of("REGS_PRODUCER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256"),
    Rule("F12", "setmaxnreg-consumer-count", one_of("REGS_CONSUMER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256"),
    Rule("F13", "setmaxnreg-pool", at_most("REG_POOL", REGISTER_FILE),
         "(REGS_PRODUCER + CONSUMERS x REGS_CONSUMER) x 128 threads fit the 65,536-register "
         "file of the SM"),
    Rule("F14", "setmaxnreg-dec", at_most("REGS_PRODUCER", "ENTRY_REGS"),
         "the producer can only give registers back: REGS_PRODUCER <= the "
         "__launch_bounds__(threads, 1) cap at entry"),
    Rule("F15", "setmaxnreg-inc", at_least("REGS_CONSUMER", "ENTRY_REGS"),
         "consumers can only grow: REGS_CONSUMER >= the __launch_bounds__(threads, 1) cap"),
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
    Rule("F20", "block-b-scale-span", at_most("BN", "BLOCK"),
         "a tile's columns span at most two 128-column B scale blocks (BN <= 128)", when=_BLOCK),
    Rule("F21", "partials-range", one_of("PARTIALS", (1, 2)),
         "one or two sets of partial accumulators"),
    Rule("F22", "partials-need-promotion", at_least("PROMOTE", 1),
         "a second partial set overlaps promotion with the next wgmmas: promoted only",
         when=equal("PARTIALS", 2)),
    Rule("F23", "partials-per-block", one_of("PROMOTE", (0, BLOCK)),
         "two partial sets alternate single 128-element K blocks (promote 128)",
         when=equal("PARTIALS", 2)),
    Rule("F24", "split-k-range", one_of("SPLIT_K", tuple(range(1, MAX_SPLIT_K + 1))),
         f"split-K into 1 to {MAX_SPLIT_K} slices of K"),
    Rule("F25", "cluster-size", one_of("CLUSTER", (1, 2)),
         "clusters of 1 or 2 CTAs (CLUSTER_M x CLUSTER_N)"),
    Rule("F26", "b-multicast-split", multiple_of("BN", (8, "CLUSTER_M")),
         "the CTAs of a cluster along M each load an equal share (whole 8-row swizzle atoms) of "
         "the B tile they multicast (A's share is whole: BM is a multiple of 64)",
         when=at_least("CLUSTER_M", 2)),
    Rule("F27", "group-positive", at_least("GROUP", 1), "raster groups hold at least one tile"),
    Rule("F28", "c-store-chunks", multiple_of("BN", "C_CHUNK"),
         "a TMA store writes C in 128-byte swizzled column chunks", when=equal("STORE_TMA", 1)),
    Rule("F29", "a-box", at_most("A_BOX_ROWS", MAX_BOX),
         "a TMA box dimension is at most 256 (cuTensorMapEncodeTiled)"),
    Rule("F30", "c-box", at_most("CONSUMER_ROWS", MAX_BOX),
         "a TMA-store box (one consumer's rows) is at most 256 rows", when=equal("STORE_TMA", 1)),
)
