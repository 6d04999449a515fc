"""The grouped family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....config import LAYOUTS, ConfigBase, div
from ....dtypes import FP8_DTYPES
from .. import C_SWIZZLE, HopperTile
from .env import GroupedEnv
from .rules import (FP8_GROUPED_RULES, FP8_REG_RESERVE, GROUPED_RULES, GROUPINGS, ORDERS,
                    OUTPUT_RULES, SCALINGS, SPLIT_RULES, SPLITS)


@dataclass(frozen=True, slots=True)
class GroupedConfig(GroupedEnv, HopperTile, ConfigBase):
    """A Hopper grouped GEMM for mixture-of-experts: G groups in one persistent launch, read
    through one tensor map per operand with offset arithmetic, scheduled on the device from a
    group-offset array (no host copy, so a CUDA graph can capture it). sm_90a only.

    - ``grouping`` "m": C[rows of g] = A[rows of g] @ B[g] for groups of rows that share N and K
      (MoE forward and dgrad). The rows come as ``offs`` (cumulative row ends, as
      ``torch._grouped_mm`` takes them) or as a padded batch with per-group row counts on the
      device (masked: CUDA-graph decode). B is [G, K, N] (layout "rrr") or [G, N, K] ("rcr").
    - ``grouping`` "k": C[g] = A[:, cols of g] @ B[rows of g] for groups of the reduction
      dimension (the weight gradient, dW_g = X_g^T dY_g): A column-major, B row-major (layout
      "crr"), C [G, M, N]; the tail of each group's last K tile is zeroed in shared memory.

    Fields: ``bm, bn, bk`` the block tile (BK x element size = 128 bytes); ``dtype`` A and B
    (fp16, bf16, or FP8 e4m3/e5m2 with ``scaling`` "block"); ``out`` C (the input dtype or
    fp32; bf16, fp16 or fp32 for FP8); ``consumers`` cooperative consumer
    warpgroups (1: 64-row tiles for small groups, 2: each takes BM/2 rows); ``stages`` the
    TMA ring; ``group`` M tiles per raster group inside a group of rows; ``regs_producer,
    regs_consumer`` the setmaxnreg counts; ``layout`` A, B, C each r or c; ``partials``
    (FP8) one or two sets of partial sums; ``split`` how two consumers share a tile: "m" its
    rows (each BM/2 x BN) or "n" (FP8) its columns (each BM x BN/2, so 64-row tiles, which
    waste less on groups of few rows, still run two warpgroups).

    The main loop is the wgmma family's (producer warpgroup, mbarrier ring, wgmma from
    128-byte-swizzled shared memory); the scheduler and the epilogue (staged through shared
    memory, TMA-stored when the tile lies inside its group, else copied with row guards) are
    this family's. FP8 inputs (M-grouped, layout rcr) carry DeepSeek-V3 block scales, 1 x 128
    of A and 128 x 128 of each expert's B: the consumers run the fp8 family's promoted main loop
    (one or two partial sets, promoted with the scales every 128-element K block, as DeepGEMM's
    m-grouped FP8 kernels do). Raises ``ConfigError`` listing every broken rule of
    ``GROUPED_RULES`` (and, for FP8, ``FP8_GROUPED_RULES``).
    """

    bm: int = 128
    bn: int = 256
    bk: int = 64
    dtype: str = "bf16"
    out: str = "bf16"
    consumers: int = 2
    stages: int = 3
    group: int = 8
    regs_producer: int = 40
    regs_consumer: int = 232
    grouping: str = "m"
    layout: str = "rcr"
    order: str = "forward"
    scaling: str = "none"
    partials: int = 2
    split: str = "m"

    family = "grouped"
    template = "grouped.cu.j2"
    rules = GROUPED_RULES + FP8_GROUPED_RULES + SPLIT_RULES
    acc = "fp32"
    min_blocks = 1
    m = n = k = None           # groups differ in an extent: no shape specialization
    epilogue = "none"          # C = A @ B per group
    waiter = False             # not an axis here: the shared FP8 loop it reads always promotes
    field_types: ClassVar[dict] = {"dtype": str, "out": str, "grouping": str, "layout": str,
                                   "order": str, "scaling": str, "partials": int,
                                   "split": str}
    choices: ClassVar[dict] = {"dtype": ("fp16", "bf16", *FP8_DTYPES),
                               "out": ("fp16", "bf16", "fp32"), "grouping": GROUPINGS,
                               "layout": LAYOUTS, "order": ORDERS, "scaling": SCALINGS,
                               "split": SPLITS}
    optional = frozenset()
    fixed_in_search = ("dtype", "out", "grouping", "layout", "scaling")
    search_domain: ClassVar[dict] = {
        "bm": (64, 128, 256), "bn": (64, 128, 192, 256), "consumers": (1, 2),
        "stages": (2, 3, 4, 5, 6), "group": (1, 8, 16), "regs_producer": (0, 24, 40),
        "regs_consumer": (0, 232, 240)}

    # ---- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """Every field in a fixed order; the kernel symbol, file name and cache key."""
        return (f"gemm_grouped_{self.grouping}_{self.dtype}_{self.bm}x{self.bn}x{self.bk}"
                f"_c{self.consumers}_st{self.stages}_g{self.group}"
                f"_r{self.regs_producer}x{self.regs_consumer}_out{self.out}_l{self.layout}"
                + ("" if self.order == "forward" else f"_o{self.order}")
                + ("" if self.scaling == "none" else f"_s{self.scaling}")
                + ("" if self.partials == 2 else f"_p{self.partials}")
                + (f"_s{self.split}" if self.split_n else ""))

    def as_dict(self) -> dict:
        """The fields, ``order``, ``scaling``, ``partials`` and ``split`` only when they are
        not their defaults ("forward", "none", 2, "m")."""
        out = ConfigBase.as_dict(self)
        for key, default in (("order", "forward"), ("scaling", "none"), ("partials", 2),
                             ("split", "m")):
            if out[key] == default:
                del out[key]
        return out

    @property
    def fp8(self) -> bool:
        """FP8 inputs (the operand axis: block-scaled e4m3/e5m2)."""
        return self.dtype in FP8_DTYPES

    @property
    def stagger(self) -> bool:
        """Two FP8 consumers with two partial sets run a K block apart: consumer 1 starts once
        consumer 0 has promoted its first block (a single partial set has no point to wait
        for: the main loop runs its ``after_first`` code only with two)."""
        return self.fp8 and self.consumers == 2 and self.partials == 2

    @property
    def promote(self) -> int:
        """K elements between promotions of the partial sums (the fp8 family's field): 128,
        one scale block, for FP8 inputs; 0 (the tensor core sums all of K) otherwise."""
        return 128 if self.fp8 else 0

    def rule_table(self) -> tuple:
        """The family's table; for FP8 inputs without the 16-bit output rules (an FP8 GEMM
        writes bf16, fp16 or fp32)."""
        table = ConfigBase.rule_table(self)
        return tuple(r for r in table if not (self.fp8 and r in OUTPUT_RULES))

    def rendered_rules(self) -> tuple:
        """The rule table less what the source cannot break and does not declare: G25
        (ends-order-m-grouped) for a "forward" config (no ORDER_ENDS), the FP8 axis's rules
        for 16-bit inputs (no DTYPE_FP8) but G28 (partials-fp8-only) where ``partials`` is not
        its default, the column split's rules for a row split (no SPLIT_N)."""
        drop = ({"G25"} if self.order == "forward" else set()) | (
            set() if self.fp8 else {r.id for r in FP8_GROUPED_RULES} - self._partials_rule()) | (
            set() if self.split_n else {r.id for r in SPLIT_RULES})
        return tuple(r for r in self.rule_table() if r.id not in drop)

    def _partials_rule(self) -> set:
        """{"G28"} where a 16-bit config sets ``partials`` (its source then declares the rule
        and the names it reads), else nothing."""
        return {"G28"} if self.partials != 2 else set()

    def tile_shape(self) -> tuple:
        return (self.bm, self.bn, self.bk, self.consumers)

    def brief(self) -> str:
        what = "M-grouped (forward/dgrad)" if self.grouping == "m" else "K-grouped (wgrad)"
        return (f"{what}  block {self.bm}x{self.bn}x{self.bk}  {self.consumers} consumer WG "
                f"+ producer  stages {self.stages}  raster {self.group}  out {self.out}  "
                f"layout {self.layout}" + ("" if self.order == "forward" else
                                           f"  order {self.order}")
                + ("  consumers split the columns" if self.split_n else ""))

    # ---- derived figures ------------------------------------------------------------------
    @property
    def split_n(self) -> bool:
        """The consumers split the tile's columns (``split`` "n")."""
        return self.split == "n"

    @property
    def consumer_rows(self) -> int:
        """Rows of C one consumer warpgroup computes per tile: BM / consumers, or BM when the
        consumers split the columns."""
        return self.bm if self.split_n else div(self.bm, self.consumers)

    @property
    def consumer_cols(self) -> int:
        """Columns of C one consumer warpgroup computes per tile (its wgmma N): BN, or
        BN / consumers when they split the columns."""
        return div(self.bn, self.consumers) if self.split_n else self.bn

    @property
    def acc_regs(self) -> int:
        """fp32 accumulators per consumer thread: m_iters x (its columns)/2; FP8, the sums
        plus the partial sets of the promotion."""
        return self.m_iters * self.consumer_cols // 2 * (1 + self.partials if self.fp8 else 1)

    @property
    def REG_RESERVE(self) -> int:  # noqa: N802 - HopperTile's name
        """Registers a consumer needs besides its accumulators: the fp8 family's 40 for FP8
        inputs, else the Hopper 48."""
        return FP8_REG_RESERVE if self.fp8 else HopperTile.REG_RESERVE

    @property
    def sw_elems(self) -> int:
        """Elements in one 128-byte swizzle row."""
        return div(C_SWIZZLE, self.elem_bytes)

    @property
    def a_mn_major(self) -> bool:
        """A column-major (M contiguous): the K-grouped kernel's A, X^T."""
        return self.layout[0] == "c"

    @property
    def b_mn_major(self) -> bool:
        """B row-major (N contiguous): [G, K, N] experts, or the K-grouped kernel's dY."""
        return self.layout[1] == "r"

    def _box(self, rows: int, mn_major: bool) -> dict:
        if mn_major:
            return {"box": (self.sw_elems, self.bk), "count": div(rows, self.sw_elems)}
        return {"box": (self.bk, rows), "count": 1}

    @property
    def a_box(self) -> dict:
        """A's TMA box (inner, outer) in elements and the boxes per stage."""
        return self._box(self.bm, self.a_mn_major)

    @property
    def b_box(self) -> dict:
        return self._box(self.bn, self.b_mn_major)

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * self.bk * self.elem_bytes

    @property
    def c_chunks(self) -> int:
        """128-byte column chunks of one consumer's staged columns."""
        return div(self.consumer_cols, self.c_chunk)

    @property
    def c_smem_bytes(self) -> int:
        """C staging: each consumer's rows x columns in C's dtype."""
        return self.consumers * self.consumer_rows * self.consumer_cols * self.out_bytes

    cluster_m = cluster_n = 1
    """No clusters (``cluster`` is 1): the Hopper templates this family shares read them."""

    def tiles_n(self, n: int) -> int:
        return -(-n // self.bn)

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """Tiles of one M x N group (the persistent launch caps them at the SMs)."""
        return (-(-m // self.bm) * self.tiles_n(n), 1, 1)
