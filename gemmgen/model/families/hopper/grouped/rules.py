"""The grouped family's constants and rule table: the rules every Hopper kernel obeys
(``families.hopper``), the 16-bit output rules, and those of the groupings."""
from __future__ import annotations

from ....rules import Rule, equal, multiple_of
from ..fp8.rules import BLOCK, FP8_RULES, REG_RESERVE as FP8_REG_RESERVE, b_scale_span
from .. import C_SWIZZLE, HOPPER_RULES, MAX_STAGES, OUTPUT_RULES, SMEM_OPTIN

GROUPINGS = ("m", "k")
"""``grouping``: "m" (groups share N and K and differ in M: MoE forward and dgrad) or "k"
(groups share M and N and differ in K: the weight gradient)."""
ORDERS = ("forward", "ends")
"""``order`` of the M-grouped tiles: "forward" (tile t of the sequence "group 0's tiles, then
group 1's, ...") or "ends" (even t from the front of that sequence, odd t from its back, so
about half the CTAs work through the first groups while the others work through the last)."""
SCALINGS = ("none", "block")
"""``scaling``: "none" for 16-bit inputs; "block" for FP8 inputs, DeepSeek-V3's 1 x 128 scales
of A (per row and 128-element K block) and 128 x 128 scales of B (per expert)."""
SPLITS = ("m", "n")
"""``split``: how two consumer warpgroups share a tile: "m", each takes BM/2 rows of every
column (cooperative; both read all of B's stage); "n", each takes BN/2 columns of every row
(both read all of A's stage), so a tile of 64 rows still keeps two warpgroups busy: less
padding where groups hold few rows (FP8 axis)."""

ROW_BYTES = 128                    # one K row of a stage (BK x element size): a 128-byte swizzle row
_K_GROUPED = equal("GROUPING_K", 1)
_FP8 = equal("DTYPE_FP8", 1)
_SPLIT_N = equal("SPLIT_N", 1)

GROUPED_RULES: tuple[Rule, ...] = HOPPER_RULES + OUTPUT_RULES + (
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
"""Every rule of the 16-bit grouped kernels, in the order ``violations`` reports them."""

FP8_GROUPED_RULES: tuple[Rule, ...] = (
    Rule("G26", "fp8-block-scales", equal("SCALE_BLOCK", "DTYPE_FP8"),
         "FP8 inputs carry block scales (scaling 'block': 1 x 128 of A, 128 x 128 of each "
         "expert's B); 16-bit inputs none"),
    Rule("G27", "fp8-k-major-b", equal("B_MN_MAJOR", 0),
         "FP8 wgmma reads B K-major only: the experts' [G, N, K] weights (layout rcr; so FP8 "
         "is M-grouped: the K-grouped B is row-major, G23)", when=_FP8),
    *(r for r in FP8_RULES if r.id in ("F20", "F21")),  # block-b-scale-span, partials-range
    Rule("G28", "partials-fp8-only", equal("PARTIALS", 2),
         "16-bit inputs accumulate in the tensor core: partials stays at its default, 2",
         when=equal("DTYPE_FP8", 0)),
)
"""The rules of the operand axis (FP8 with block scales), each with its predicate; a 16-bit
kernel's source leaves them out (it cannot break them)."""

SPLIT_RULES: tuple[Rule, ...] = (
    Rule("G29", "split-n-fp8", equal("DTYPE_FP8", 1), "consumers split the columns in the FP8 "
         "main loop; the 16-bit one (the wgmma family's) splits the rows", when=_SPLIT_N),
    Rule("G30", "split-n-chunks", multiple_of("CONSUMER_COLS", "C_CHUNK"), "each consumer "
         "stores whole 128-byte column chunks of its staged columns", when=_SPLIT_N),
)
"""The rules of the column split, which a row-split kernel's source leaves out."""

__all__ = ["BLOCK", "C_SWIZZLE", "FP8_GROUPED_RULES", "FP8_REG_RESERVE", "GROUPED_RULES",
           "GROUPINGS", "MAX_STAGES", "ORDERS", "OUTPUT_RULES", "ROW_BYTES",
           "SCALINGS", "SMEM_OPTIN", "SPLIT_RULES", "SPLITS", "b_scale_span"]
