"""What the families that split a block tile among warps and threads (simt, wmma, mma) share:
the rules they state in the same words, each table giving them its own ids, the command-line
help of the fields they share, the descriptor of the tensor-core families
(``tensor_core_family``), and ``WarpTiled``, the figures the tensor-core families (wmma,
mma) derive alike from the block tile, the warp tile and their tensor-core tile."""
from __future__ import annotations

from ..config import MAX_THREADS_PER_SM, WARP_SIZE, Family, div, tile_intensity
from ..dtypes import ELEM_BYTES
from ..rules import Cmp, Rule, at_least, at_most, equal, multiple_of

MAX_ACC_REGS = 128
"""Accumulator registers per thread the tensor-core families allow: half the 255-register
budget."""


# ---- rules ----------------------------------------------------------------------------------
def block_tile_rules(bm: str, bn: str, bk: str) -> tuple[Rule, ...]:
    """BM, BN and BK at least 1, under the ids ``bm``, ``bn``, ``bk``."""
    return (Rule(bm, "bm-positive", at_least("BM", 1), "the block tile needs rows"),
            Rule(bn, "bn-positive", at_least("BN", 1), "the block tile needs columns"),
            Rule(bk, "bk-positive", at_least("BK", 1), "each K step covers at least one k"))


def warp_tile_rules(wm: str, wn: str) -> tuple[Rule, ...]:
    """WM and WN at least 1, under the ids ``wm``, ``wn``."""
    return (Rule(wm, "wm-positive", at_least("WM", 1), "each warp owns at least one row"),
            Rule(wn, "wn-positive", at_least("WN", 1), "each warp owns at least one column"))


def warp_cover_rules(bm: str, bn: str, when_m: Cmp | None = None,
                     when_n: Cmp | None = None) -> tuple[Rule, ...]:
    """BM a multiple of WM and BN of WN (whole warp tiles cover the block), under the ids
    ``bm``, ``bn``; ``when_m``, ``when_n`` limit them where the warp tile is optional."""
    return (Rule(bm, "bm-wm", multiple_of("BM", "WM"), "warp tiles must cover the block rows",
                 when=when_m),
            Rule(bn, "bn-wn", multiple_of("BN", "WN"), "warp tiles must cover the block columns",
                 when=when_n))


def tile_load_rules(a: str, b: str, per_load: str, why: str,
                    when: Cmp | None = None) -> tuple[Rule, ...]:
    """The A tile (BM x BK) and the B tile (BK x BN) split evenly among the threads in loads
    of ``per_load`` elements, under the ids ``a``, ``b``; ``why`` names the operand as ``{}``."""
    return (Rule(a, "a-tile-loads", multiple_of(("BM", "BK"), ("THREADS", per_load)),
                 why.format("A"), when=when),
            Rule(b, "b-tile-loads", multiple_of(("BK", "BN"), ("THREADS", per_load)),
                 why.format("B"), when=when))


def max_threads_rule(rid: str) -> Rule:
    return Rule(rid, "max-threads", at_most("THREADS", 1024), "CUDA allows 1024 threads per block")


def skew_rule(rid: str) -> Rule:
    return Rule(rid, "skew-nonnegative", at_least("SKEW", 0), "skew pads shared-memory rows")


def acc_registers_rule(rid: str) -> Rule:
    return Rule(rid, "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
                "more accumulator registers than half the 255-register budget spill")


def min_blocks_rules(positive: str, threads: str) -> tuple[Rule, ...]:
    """MIN_BLOCKS (``__launch_bounds__``) at least 1, and that many blocks' threads fit an SM."""
    return (Rule(positive, "min-blocks-positive", at_least("MIN_BLOCKS", 1),
                 "__launch_bounds__ asks for at least one resident block"),
            Rule(threads, "min-blocks-threads",
                 at_most(("MIN_BLOCKS", "THREADS"), MAX_THREADS_PER_SM),
                 "no SM holds more than 2048 threads"))


def output_dtype_rules(fp16: str, bf16: str) -> tuple[Rule, ...]:
    """A 16-bit C only in the inputs' own dtype."""
    return (Rule(fp16, "fp16-output", equal("DTYPE_FP16", 1), "an FP16 C needs FP16 inputs",
                 when=equal("OUT_FP16", 1)),
            Rule(bf16, "bf16-output", equal("DTYPE_BF16", 1), "a BF16 C needs BF16 inputs",
                 when=equal("OUT_BF16", 1)))


# ---- command-line help ----------------------------------------------------------------------
BLOCK_TILE_HELP = {"bm": "block tile rows (M)", "bn": "block tile columns (N)",
                   "bk": "block tile depth (K)"}
WARP_TILE_HELP = {"wm": "warp tile rows", "wn": "warp tile columns"}
MIN_BLOCKS_HELP = "resident blocks per SM asked of ptxas (__launch_bounds__)"
TENSOR_CORE_HELP = {**BLOCK_TILE_HELP, **WARP_TILE_HELP, "dtype": "A and B dtype",
                    "out": "C dtype", "skew": "padding elements per shared-memory row",
                    "stages": "shared buffers, 1 to 6", "min_blocks": MIN_BLOCKS_HELP}
"""The help of the fields the tensor-core families (wmma, mma) share, in the same words."""


# ---- descriptor -----------------------------------------------------------------------------
def tensor_core_family(config, field_help: dict[str, str], **kw) -> Family:
    """The ``Family`` of a tensor-core config class tiled by warps (wmma, mma): named after
    ``config.family``; fp16, bf16 and tf32 inputs on sm_80 and newer; ``emit`` starting from a
    128x128x32 block of 64x64 warps; ``TENSOR_CORE_HELP`` updated with the family's
    ``field_help``; ``kw`` the rest."""
    return Family(name=config.family, config=config, dtypes=("fp16", "bf16", "tf32"),
                  flag_defaults={"bm": 128, "bn": 128, "bk": 32, "wm": 64, "wn": 64},
                  field_help={**TENSOR_CORE_HELP, **field_help}, min_cc=80, **kw)


# ---- figures --------------------------------------------------------------------------------
class WarpTiled:
    """Mixed into the tensor-core configs tiled by warps (wmma, mma): the figures that follow
    from the fields ``bm, bn, wm, wn, dtype`` and ``mnk``, the (M, N, K) of one tensor-core
    tile, which each family defines (mma from the dtype, wmma from its ``shape``)."""

    __slots__ = ()

    @property
    def elem_bytes(self) -> int:
        """Bytes of one A or B element."""
        return ELEM_BYTES.get(self.dtype, 4)

    @property
    def threads(self) -> int:
        """Threads per block: a warp per WM x WN warp tile of the block."""
        return WARP_SIZE * div(self.bm, self.wm) * div(self.bn, self.wn)

    @property
    def warps(self) -> int:
        return div(self.threads, WARP_SIZE)

    @property
    def frags(self) -> tuple[int, int]:
        """Tensor-core tiles (accumulator fragments) per warp along M and N: WM / M and
        WN / N of ``mnk``."""
        m, n, _ = self.mnk
        return div(self.wm, m), div(self.wn, n)

    @property
    def flops_per_byte(self) -> dict[str, float | None]:
        """FLOP per byte at the block tile (global) and warp tile (shared) levels."""
        return {"global": tile_intensity(self.bm, self.bn, self.elem_bytes),
                "shared": tile_intensity(self.wm, self.wn, self.elem_bytes)}
