"""The grouped family's constants and rule table."""
from __future__ import annotations

from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of
from ..wgmma.rules import C_SWIZZLE, MAX_BOX, REGISTER_FILE, SMEM_OPTIN

GROUPINGS = ("m", "k")
"""``grouping``: "m" (groups share N and K and differ in M: MoE forward and dgrad) or "k"
(groups share M and N and differ in K: the weight gradient)."""
ORDERS = ("forward", "ends")
"""``order`` of the M-grouped tiles: "forward" (tile t of the sequence "group 0's tiles, then
group 1's, ...") or "ends" (even t from the front of that sequence, odd t from its back, so
about half the CTAs work through the first groups while the others work through the last)."""
ROW_BYTES = 128                    # one K row of a stage (BK x element size): a 128-byte swizzle row
MAX_STAGES = 16
_STEPS8 = tuple(range(24, 257, 8))
_K_GROUPED = equal("GROUPING_K", 1)
_SETMAXNREG = equal("SETMAXNREG", 1)

GROUPED_RULES: tuple[Rule, ...] = (
    Rule("G01", "consumers-range", one_of("CONSUMERS", (1, 2)),
         "one or two consumer warpgroups (cooperative: they split each tile's rows)"),
    Rule("G02", "bm-warpgroup-rows", at_least("BM", ("WGMMA_M", "CONSUMERS")),
         "each consumer warpgroup computes at least the 64 rows of one wgmma"),
    Rule("G03", "bm-per-consumer", multiple_of("BM", ("WGMMA_M", "CONSUMERS")),
         "each consumer warpgroup takes whole 64-row wgmma tiles of the block"),
    Rule("G04", "wgmma-n-range", at_most("BN", 256), "wgmma N is at most 256"),
    Rule("G05", "wgmma-n-positive", at_least("BN", 8), "wgmma N is at least 8"),
    Rule("G06", "bk-row", equal(("BK", "ELEM_BYTES"), ROW_BYTES),
         "one K row of a tile is one 128-byte swizzle row (BK = 128 B / element size)"),
    Rule("G07", "stages-range", one_of("STAGES", tuple(range(1, MAX_STAGES + 1))),
         f"1 to {MAX_STAGES} shared-memory stages in the TMA ring"),
    Rule("G08", "smem-limit", at_most("SMEM_BYTES", "SMEM_OPTIN"),
         "stages x stage bytes + C staging + barriers + alignment fit the opt-in shared "
         "memory per block of sm_90a"),
    Rule("G09", "acc-registers", at_most("ACC_REGS", "ACC_BUDGET"),
         "accumulators plus 48 working registers fit a consumer thread's registers "
         "(REGS_CONSUMER with setmaxnreg, else the __launch_bounds__ cap), or wgmma "
         "serializes and the kernel spills"),
    Rule("G10", "setmaxnreg-producer-count", one_of("REGS_PRODUCER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("G11", "setmaxnreg-consumer-count", one_of("REGS_CONSUMER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("G12", "setmaxnreg-pool", at_most("REG_POOL", REGISTER_FILE),
         "(REGS_PRODUCER + CONSUMERS x REGS_CONSUMER) x 128 threads fit the 65,536-register "
         "file of the SM (one block per SM)", when=_SETMAXNREG),
    Rule("G13", "setmaxnreg-dec", at_most("REGS_PRODUCER", "ENTRY_REGS"),
         "the producer can only give registers back: REGS_PRODUCER <= the "
         "__launch_bounds__(threads, 1) cap at entry", when=_SETMAXNREG),
    Rule("G14", "setmaxnreg-inc", at_least("REGS_CONSUMER", "ENTRY_REGS"),
         "consumers can only grow: REGS_CONSUMER >= the __launch_bounds__(threads, 1) cap",
         when=_SETMAXNREG),
    Rule("G15", "a-box", at_most("A_BOX_ROWS", MAX_BOX),
         "a TMA box dimension is at most 256 (cuTensorMapEncodeTiled)"),
    Rule("G16", "b-mn-blocks", multiple_of("BN", "SW_ELEMS"),
         "an MN-major B tile is loaded as whole 64-element column blocks",
         when=equal("B_MN_MAJOR", 1)),
    Rule("G17", "c-store-chunks", multiple_of("BN", "C_CHUNK"),
         "C is staged and stored in 128-byte swizzled column chunks (so BN is also a multiple "
         "of 8, as wgmma N must be)"),
    Rule("G18", "c-box", at_most("CONSUMER_ROWS", MAX_BOX),
         "a TMA-store box (one consumer's rows) is at most 256 rows"),
    Rule("G19", "group-positive", at_least("GROUP", 1), "raster groups hold at least one tile"),
    Rule("G20", "fp16-output", equal("DTYPE_FP16", 1), "an fp16 C needs fp16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("G21", "bf16-output", equal("DTYPE_BF16", 1), "a bf16 C needs bf16 inputs",
         when=equal("OUT_BF16", 1)),
    Rule("G22", "a-layout", equal("A_MN_MAJOR", "GROUPING_K"),
         "M-grouped A is the token matrix, row-major (layout 'r??'); K-grouped A is its "
         "transpose, column-major (layout 'c??')"),
    Rule("G23", "k-grouped-b", equal("B_MN_MAJOR", 1),
         "K-grouped B holds the groups' rows one after another: row-major (layout '?r?')",
         when=_K_GROUPED),
    Rule("G24", "c-row-major", equal("LAYOUT_C_COL", 0),
         "C is row-major: the groups' rows (or matrices) one after another"),
    Rule("G25", "ends-order-m-grouped", equal("GROUPING_K", 0),
         "order 'ends' takes tiles from both ends of the M-grouped tile sequence; the "
         "K-grouped scheduler has one order", when=equal("ORDER_ENDS", 1)),
)
"""Every rule of the grouped family, in the order ``violations`` reports them."""

__all__ = ["C_SWIZZLE", "GROUPED_RULES", "GROUPINGS", "ORDERS", "ROW_BYTES", "SMEM_OPTIN"]
