"""What every Hopper kernel (the wgmma, FP8 and grouped families) shares: the sm_90a constants
and the rules of warpgroups, wgmma shapes, the TMA ring, setmaxnreg, TMA boxes, clusters,
rasters and split-K, each written once.

A rule reads names every Hopper family's ``env()`` defines (a family without a feature states
it: ``SETMAXNREG`` 1 where setmaxnreg is always used, ``B_MN_MAJOR`` 0 where B is K-major only,
``CLUSTER`` 1 without clusters), so one table checks all three and renders the same
``static_assert``s. The ids are the wgmma family's (H..). A family's own table is this one plus
the rules of its own axes."""
from __future__ import annotations

from ..arch import get_arch
from ..config import WARP_SIZE
from ..rules import Rule, at_least, at_most, equal, multiple_of, one_of

WARPGROUP = 4 * WARP_SIZE          # threads of one warpgroup
WGMMA_M = 64                       # rows of one wgmma, per warpgroup
MAX_BOX = 256                      # cuTensorMapEncodeTiled: every box dimension <= 256
C_SWIZZLE = 128                    # the C staging tile uses 128-byte swizzled rows
BARRIER_BYTES = 8                  # one mbarrier
ALIGN_SLACK = 1024                 # dynamic shared memory is rounded up to a 1024-byte atom
REGISTER_FILE = 65536              # 32-bit registers per SM (sm_90)
MAX_SPLIT_K = 16                   # slices of K one problem may be split into
MAX_STAGES = 16                    # stages of the TMA ring
SMEM_OPTIN = get_arch("sm_90").smem_per_block_optin
"""The largest dynamic shared memory one block may opt in to on the only arch these families
run on (sm_90a: 232,448 bytes)."""

_SETMAXNREG = equal("SETMAXNREG", 1)
_STEPS8 = tuple(range(24, 257, 8))

HOPPER_RULES: tuple[Rule, ...] = (
    Rule("H01", "bm-warpgroup-rows", at_least("BM", "WGMMA_M"),
         "a consumer warpgroup computes at least the 64 rows of one wgmma"),
    Rule("H02", "bm-per-consumer", multiple_of("BM", ("WGMMA_M", "M_SPLIT")),
         "each consumer warpgroup takes whole 64-row wgmma tiles of the block"),
    Rule("H03", "wgmma-n-multiple", multiple_of("BN", 8), "wgmma N is a multiple of 8"),
    Rule("H04", "wgmma-n-range", at_most("BN", 256), "wgmma N is at most 256"),
    Rule("H05", "wgmma-n-positive", at_least("BN", 8), "wgmma N is at least 8"),
    Rule("H06", "swizzle-mode", one_of("SWIZZLE", (32, 64, 128)),
         "TMA and wgmma swizzle 32-, 64- or 128-byte rows"),
    Rule("H07", "bk-swizzle", equal(("BK", "ELEM_BYTES"), "SWIZZLE"),
         "one K row of a K-major tile is one swizzle row (DeepGEMM: BK = 128 B / element)"),
    Rule("H08", "stages-range", one_of("STAGES", tuple(range(1, MAX_STAGES + 1))),
         f"1 to {MAX_STAGES} shared-memory stages in the TMA ring"),
    Rule("H09", "smem-limit", at_most("SMEM_BYTES", "SMEM_OPTIN"),
         "stages x stage bytes + C staging + barriers + alignment fit the arch's opt-in "
         "shared memory per block"),
    Rule("H10", "consumers-range", one_of("CONSUMERS", (1, 2)),
         "one or two consumer warpgroups"),
    Rule("H11", "acc-registers", at_most(("ACC_REGS",), "ACC_BUDGET"),
         "live accumulators plus the working registers a consumer needs (REG_RESERVE) must "
         "fit its registers (REGS_CONSUMER with setmaxnreg, else the __launch_bounds__ cap), "
         "or wgmma serializes and the kernel spills"),
    Rule("H12", "setmaxnreg-producer", equal("PRODUCER", 1),
         "setmaxnreg moves registers from a producer warpgroup to the consumers",
         when=_SETMAXNREG),
    Rule("H13", "setmaxnreg-producer-count", one_of("REGS_PRODUCER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("H14", "setmaxnreg-consumer-count", one_of("REGS_CONSUMER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("H15", "setmaxnreg-pool", at_most("REG_POOL", REGISTER_FILE),
         "(REGS_PRODUCER + CONSUMERS x REGS_CONSUMER) x 128 threads fit the 65,536-register "
         "file of the SM (one block per SM)", when=_SETMAXNREG),
    Rule("H16", "setmaxnreg-dec", at_most("REGS_PRODUCER", "ENTRY_REGS"),
         "the producer can only give registers back: REGS_PRODUCER <= the "
         "__launch_bounds__(threads, 1) cap at entry", when=_SETMAXNREG),
    Rule("H17", "setmaxnreg-inc", at_least("REGS_CONSUMER", "ENTRY_REGS"),
         "consumers can only grow: REGS_CONSUMER >= the __launch_bounds__(threads, 1) cap",
         when=_SETMAXNREG),
    Rule("H20", "a-box", at_most("A_BOX_ROWS", MAX_BOX),
         "a TMA box dimension is at most 256 (cuTensorMapEncodeTiled)"),
    Rule("H21", "b-mn-blocks", multiple_of("BN", "SW_ELEMS"),
         "an MN-major B tile is loaded as whole swizzle-width column blocks",
         when=equal("B_MN_MAJOR", 1)),
    Rule("H22", "cluster-size", one_of("CLUSTER", (1, 2)),
         "clusters of 1 or 2 CTAs (CLUSTER_M x CLUSTER_N)"),
    Rule("H30", "group-positive", at_least("GROUP", 1), "raster groups hold at least one tile"),
    Rule("H31", "c-store-chunks", multiple_of("BN", "C_CHUNK"),
         "a TMA store writes row-major C in 128-byte swizzled column chunks",
         when=equal("ROW_MAJOR_TMA_STORE", 1)),
    Rule("H34", "c-box", at_most("C_BOX_ROWS", MAX_BOX),
         "a TMA-store box dimension (a consumer's rows, or BN for a column-major C) is at most "
         "256 (cuTensorMapEncodeTiled)", when=equal("STORE_TMA", 1)),
    Rule("H35", "split-k-range", one_of("SPLIT_K", tuple(range(1, MAX_SPLIT_K + 1))),
         f"split-K into 1 to {MAX_SPLIT_K} slices of K"),
)
"""The rules of every Hopper kernel, in the order ``violations`` reports them."""

OUTPUT_RULES: tuple[Rule, ...] = (
    Rule("H32", "fp16-output", equal("DTYPE_FP16", 1), "an fp16 C needs fp16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("H33", "bf16-output", equal("DTYPE_BF16", 1), "a bf16 C needs bf16 inputs",
         when=equal("OUT_BF16", 1)),
)
"""The 16-bit-input families' output rules (wgmma, grouped): a 16-bit C in the inputs' dtype."""
