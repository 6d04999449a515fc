"""The grouped family's constants and rule table: the rules every Hopper kernel obeys
(``families.hopper``), the 16-bit output rules, and those of the groupings."""
from __future__ import annotations

from ...rules import Rule, equal
from ..hopper import C_SWIZZLE, HOPPER_RULES, MAX_STAGES, OUTPUT_RULES, SMEM_OPTIN

GROUPINGS = ("m", "k")
"""``grouping``: "m" (groups share N and K and differ in M: MoE forward and dgrad) or "k"
(groups share M and N and differ in K: the weight gradient)."""
ORDERS = ("forward", "ends")
"""``order`` of the M-grouped tiles: "forward" (tile t of the sequence "group 0's tiles, then
group 1's, ...") or "ends" (even t from the front of that sequence, odd t from its back, so
about half the CTAs work through the first groups while the others work through the last)."""
ROW_BYTES = 128                    # one K row of a stage (BK x element size): a 128-byte swizzle row
_K_GROUPED = equal("GROUPING_K", 1)

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
"""Every rule of the grouped family, in the order ``violations`` reports them."""

__all__ = ["C_SWIZZLE", "GROUPED_RULES", "GROUPINGS", "MAX_STAGES", "ORDERS", "ROW_BYTES", "SMEM_OPTIN"]
