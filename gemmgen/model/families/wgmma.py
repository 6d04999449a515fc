"""The Hopper tensor-core family: ``wgmma.mma_async`` fed by TMA (``cp.async.bulk.tensor``)
through an mbarrier ring, with warp specialization, ``setmaxnreg``, a persistent tile scheduler,
TMA multicast across a 2-CTA cluster and a TMA-store epilogue. sm_90a only.

Techniques and the figures they are checked against come from public Hopper kernels (see
``../shared/reference/hopper-gemm-notes.md``): fast.cu kernels 2-12 (the ladder), CUTLASS's
sm90 warp-specialized cooperative and ping-pong kernels, DeepGEMM (stage count from the
shared-memory budget, BK = 128 bytes / element size) and ThunderKittens (wgmma descriptors for
MN-major operands).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..arch import get_arch
from ..config import EPILOGUES, LAYOUTS, WARP_SIZE, ConfigBase, Family, Preset, div, tile_intensity
from ..dtypes import CTYPES, ELEM_BYTES, stored_as
from ..rules import Rule, at_least, at_most, equal, multiple_of, one_of
from .simt import PRESETS as SIMT_PRESETS
from .wmma import WmmaConfig

WARPGROUP = 4 * WARP_SIZE          # threads of one warpgroup
WGMMA_M = 64                       # rows of one wgmma, per warpgroup
WGMMA_K_BYTES = 32                 # one wgmma consumes 32 bytes of K: k16 (fp16/bf16), k8 (tf32)
MAX_BOX = 256                      # cuTensorMapEncodeTiled: every box dimension <= 256
C_SWIZZLE = 128                    # the C staging tile uses 128-byte swizzled rows
BARRIER_BYTES = 8                  # one mbarrier
ALIGN_SLACK = 1024                 # dynamic shared memory is rounded up to a 1024-byte atom
REG_RESERVE = 48                   # registers a consumer needs besides its accumulators
REGISTER_FILE = 65536              # 32-bit registers per SM (sm_90)
MAX_SPLIT_K = 16                   # slices of K one problem may be split into
MATHS = ("native", "3xtf32")
"""``math``: the dtype's own products, or 3xTF32 (three tf32 products per float32 product)."""
PACK_TILE = 32                     # the pack kernels move 32 x 32 element tiles
PACK_ROWS = 8                      # ... with 32 x 8 threads
PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32"}
SMEM_OPTIN = get_arch("sm_90").smem_per_block_optin
"""The largest dynamic shared memory one block may opt in to on the only arch this family
runs on (sm_90a: 232,448 bytes)."""

_SETMAXNREG = equal("SETMAXNREG", 1)
_STEPS8 = tuple(range(24, 257, 8))

WGMMA_RULES: tuple[Rule, ...] = (
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
    Rule("H08", "stages-range", one_of("STAGES", tuple(range(1, 17))),
         "1 to 16 shared-memory stages in the TMA ring"),
    Rule("H09", "smem-limit", at_most("SMEM_BYTES", "SMEM_OPTIN"),
         "stages x stage bytes + C staging + barriers + alignment fit the arch's opt-in "
         "shared memory per block"),
    Rule("H10", "consumers-range", one_of("CONSUMERS", (1, 2)),
         "one or two consumer warpgroups"),
    Rule("H11", "acc-registers", at_most(("ACC_REGS",), "ACC_BUDGET"),
         "accumulators plus 48 working registers must fit a consumer thread's registers "
         "(REGS_CONSUMER with setmaxnreg, else the __launch_bounds__ cap), or wgmma "
         "serializes and the kernel spills"),
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
    Rule("H18", "a-mn-major-16bit", equal("A_MN_MAJOR", 0),
         "an MN-major (column-major) A exists only for 16-bit wgmma inputs, not tf32",
         when=equal("DTYPE_TF32", 1)),
    Rule("H19", "b-mn-major-16bit", equal("B_MN_MAJOR", 0),
         "an MN-major (row-major) B exists only for 16-bit wgmma inputs, not tf32: take "
         "layout 'rc?' or the WMMA family", when=equal("DTYPE_TF32", 1)),
    Rule("H20", "a-box", at_most("A_BOX_ROWS", MAX_BOX),
         "a TMA box dimension is at most 256 (cuTensorMapEncodeTiled)"),
    Rule("H21", "b-mn-blocks", multiple_of("BN", "SW_ELEMS"),
         "an MN-major B tile is loaded as whole swizzle-width column blocks",
         when=equal("B_MN_MAJOR", 1)),
    Rule("H22", "cluster-size", one_of("CLUSTER", (1, 2)),
         "clusters of 1 or 2 CTAs (CLUSTER_M x CLUSTER_N)"),
    Rule("H23", "cluster-persistent", equal("PERSISTENT", 1),
         "a cluster launch uses the persistent grid, whose size is a multiple of the cluster",
         when=at_least("CLUSTER", 2)),
    Rule("H24", "b-multicast-split", multiple_of("B_SPLIT_UNITS", "CLUSTER_M"),
         "the CTAs of a cluster along M each load an equal share of the B tile they multicast"),
    Rule("H25", "a-multicast-split", multiple_of("A_SPLIT_UNITS", "CLUSTER_N"),
         "the CTAs of a cluster along N each load an equal share of the A tile they multicast"),
    Rule("H26", "pingpong-consumers", equal("CONSUMERS", 2),
         "ping-pong alternates tiles between two consumer warpgroups",
         when=equal("PINGPONG", 1)),
    Rule("H27", "pingpong-persistent", equal("PERSISTENT", 1),
         "ping-pong hands out tiles from the persistent scheduler", when=equal("PINGPONG", 1)),
    Rule("H28", "persistent-producer", equal("PRODUCER", 1),
         "a persistent kernel loads the next tile while consumers finish this one: it needs "
         "the producer warpgroup", when=equal("PERSISTENT", 1)),
    Rule("H29", "no-producer-one-consumer", equal("CONSUMERS", 1),
         "without a producer warpgroup one warpgroup both loads and computes",
         when=equal("PRODUCER", 0)),
    Rule("H30", "group-positive", at_least("GROUP", 1), "raster groups hold at least one tile"),
    Rule("H31", "c-store-chunks", multiple_of("BN", "C_CHUNK"),
         "a TMA store writes row-major C in 128-byte swizzled column chunks",
         when=equal("ROW_MAJOR_TMA_STORE", 1)),
    Rule("H32", "fp16-output", equal("DTYPE_FP16", 1), "an fp16 C needs fp16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("H33", "bf16-output", equal("DTYPE_BF16", 1), "a bf16 C needs bf16 inputs",
         when=equal("OUT_BF16", 1)),
    Rule("H34", "c-box", at_most("C_BOX_ROWS", MAX_BOX),
         "a TMA-store box dimension (a consumer's rows, or BN for a column-major C) is at most "
         "256 (cuTensorMapEncodeTiled)", when=equal("STORE_TMA", 1)),
    Rule("H35", "split-k-range", one_of("SPLIT_K", tuple(range(1, MAX_SPLIT_K + 1))),
         f"split-K into 1 to {MAX_SPLIT_K} slices of K"),
    Rule("H36", "split-k-direct", equal("STORE_TMA", 0),
         "split-K slices store fp32 partial sums from registers (store direct); the reduction "
         "kernel applies alpha, beta, bias and the activation once", when=at_least("SPLIT_K", 2)),
    Rule("H37", "3xtf32-dtype", equal("DTYPE_TF32", 1),
         "3xTF32 splits float32 operands into tf32 big + small parts: dtype tf32",
         when=equal("MATH_3XTF32", 1)),
    Rule("H38", "flush-range", one_of("FLUSH", (1, 2, 4, 8)),
         "3xTF32 adds the tensor core's sums into the FP32 accumulators every 1, 2, 4 or 8 "
         "chunks of K"),
)


@dataclass(frozen=True, slots=True)
class WgmmaConfig(ConfigBase):
    """A Hopper GEMM kernel: C[M,N] = act(alpha * A[M,K] @ B[K,N] + beta * C + bias), with
    ``wgmma.mma_async`` reading A and B from 128/64/32-byte-swizzled shared memory that TMA
    fills. fp32 accumulators. sm_90a only.

    Fields:
    - ``bm, bn, bk``: block tile (elements). One wgmma is m64 x n``bn`` x k(32 bytes); BK x
      element size is the swizzle width (64 for fp16/bf16 with 128-byte swizzle, 32 for tf32).
    - ``dtype``: A and B (fp16, bf16, or tf32 on float32 storage); ``out``: C (fp16 or fp32
      for fp16 inputs, bf16 or fp32 for bf16, fp32 for tf32).
    - ``consumers``: consumer warpgroups (1 or 2). ``pingpong``: with 2, each takes whole
      tiles in turn (CUTLASS ping-pong) instead of splitting one tile's rows (cooperative).
    - ``producer``: a producer warpgroup issues the TMA loads (warp specialization, fast.cu
      kernel 4); without it the one consumer warpgroup issues them itself.
    - ``stages``: depth of the shared-memory ring (full/empty mbarrier pairs).
    - ``swizzle``: bytes per swizzled shared-memory row (128, 64, 32).
    - ``cluster_m, cluster_n``: CTAs per cluster along M and N; the CTAs of a cluster along M
      share one B tile through TMA multicast (along N: one A tile).
    - ``persistent``: one CTA per SM loops over tiles (fast.cu kernel 6); ``raster`` orders
      the tiles: "grouped" (``group`` tile rows of M walked column by column, as in Triton's
      grouped ordering) or "snake" (the same, alternating direction from group to group).
    - ``regs_producer, regs_consumer``: ``setmaxnreg`` counts (0, 0: none).
    - ``store``: "tma" (accumulators -> swizzled shared memory (stmatrix for 16-bit row-major
      C) -> ``cp.async.bulk.tensor`` store) or "direct" (guarded stores from registers).
    - ``split_k``: slices of K (1: none). Each slice stores fp32 partial sums in a workspace
      (SPLIT_K x batch x M x N, in C's layout) and the module's ``<name>_reduce`` kernel sums
      them in slice order (deterministic) and applies alpha, beta, bias and the activation
      once. For skinny problems whose tiles cannot fill the SMs (CUTLASS's split-K serial
      reduction, with a separate pass as in its "parallel" split-K).
    - ``math``: "native", or "3xtf32" (dtype tf32): the module's ``<name>_split3`` kernel
      writes each float32 operand as tf32 big = rna(x) and small = rna(x - big) parts,
      K-major, per BK chunk of K (A: small, big, big; B: big, small, big), and the kernel
      runs over 3x K, so each chunk sums small*big + big*small before big*big in fp32: the
      order of CUTLASS's 3xTF32 (examples 27/28; Ootomo & Yokota 2022). FP32-level accuracy
      on tf32 tensor cores; any caller layout (the pack transposes).
    - ``flush``: with 3xTF32, chunks of K whose products the tensor core sums before they are
      added to the accumulators in FP32 (round to nearest; the tensor core truncates).
    - ``layout``, ``epilogue``, ``m, n, k``: as in the other families.

    Raises ``ConfigError`` listing every broken rule of ``WGMMA_RULES`` with its numbers.
    """

    bm: int = 128
    bn: int = 256
    bk: int = 64
    dtype: str = "fp16"
    out: str = "fp16"
    consumers: int = 2
    pingpong: bool = False
    producer: bool = True
    stages: int = 3
    swizzle: int = 128
    cluster_m: int = 1
    cluster_n: int = 1
    persistent: bool = True
    raster: str = "grouped"
    group: int = 8
    regs_producer: int = 40
    regs_consumer: int = 232
    store: str = "tma"
    split_k: int = 1
    math: str = "native"
    flush: int = 1
    layout: str = "rrr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None

    family = "wgmma"
    template = "wgmma.cu.j2"
    rules = WGMMA_RULES
    acc = "fp32"
    min_blocks = 1
    field_types = {"dtype": str, "out": str, "pingpong": bool, "producer": bool,
                   "persistent": bool, "raster": str, "store": str, "math": str, "layout": str,
                   "epilogue": str}
    choices = {"dtype": ("fp16", "bf16", "tf32"), "out": ("fp16", "bf16", "fp32"),
               "raster": ("grouped", "snake"), "store": ("tma", "direct"), "math": MATHS,
               "layout": LAYOUTS, "epilogue": EPILOGUES}
    optional = frozenset({"m", "n", "k"})
    fixed_in_search = ("layout", "epilogue", "m", "n", "k", "dtype", "out", "math")
    search_domain = {
        "bm": (64, 128, 192, 256), "bn": (64, 96, 128, 160, 192, 224, 256), "bk": (16, 32, 64),
        "consumers": (1, 2), "pingpong": (False, True), "producer": (False, True),
        "stages": (1, 2, 3, 4, 5, 6), "swizzle": (32, 64, 128), "cluster_m": (1, 2),
        "cluster_n": (1, 2), "persistent": (False, True), "group": (1, 8, 16),
        "regs_producer": (0, 24, 40), "regs_consumer": (0, 232, 240), "store": ("tma", "direct"),
        "split_k": (1, 2, 3, 4, 6, 8),
    }

    # ---- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """Every field in a fixed order; the kernel symbol, file name and cache key."""
        kind = "pp" if self.pingpong else "co"
        ws = "ws" if self.producer else "nows"
        sched = f"p{self.raster[0]}{self.group}" if self.persistent else f"np{self.raster[0]}{self.group}"
        return (f"gemm_wgmma_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_c{self.consumers}{kind}"
                f"_{ws}_st{self.stages}_sw{self.swizzle}_cl{self.cluster_m}x{self.cluster_n}"
                f"_{sched}_r{self.regs_producer}x{self.regs_consumer}_{self.store}"
                f"_out{self.out}{f'_sk{self.split_k}' if self.split_k > 1 else ''}"
                f"{'_3xtf32' if self.math == '3xtf32' else ''}"
                f"{f'_f{self.flush}' if self.flush != 1 else ''}{self.feature_suffix()}")

    def tile_shape(self) -> tuple:
        return (self.bm, self.bn, self.bk, self.consumers, self.pingpong, self.cluster_m,
                self.cluster_n)

    def brief(self) -> str:
        kind = "ping-pong" if self.pingpong else "cooperative"
        return (f"block {self.bm}x{self.bn}x{self.bk}  {self.consumers} consumer WG ({kind})"
                f"{' + producer' if self.producer else ''}  stages {self.stages}  swizzle "
                f"{self.swizzle}  cluster {self.cluster_m}x{self.cluster_n}  "
                f"{'persistent ' + self.raster if self.persistent else 'one tile per CTA'}  "
                f"store {self.store}  out {self.out}"
                f"{f'  split-K {self.split_k}' if self.split_k > 1 else ''}"
                f"{'  3xTF32' if self.math == '3xtf32' else ''}")

    # ---- derived figures ------------------------------------------------------------------
    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES.get(self.dtype, 2)

    @property
    def out_bytes(self) -> int:
        return ELEM_BYTES.get(self.out, 4)

    @property
    def wgmma_k(self) -> int:
        """K of one wgmma: 16 for fp16/bf16, 8 for tf32."""
        return WGMMA_K_BYTES // self.elem_bytes

    @property
    def threads(self) -> int:
        """Threads per block: 128 per consumer warpgroup, plus 128 for the producer."""
        return WARPGROUP * (self.consumers + int(self.producer))

    @property
    def warps(self) -> int:
        return self.threads // WARP_SIZE

    @property
    def consumer_rows(self) -> int:
        """Rows of C one consumer warpgroup computes per tile: BM/consumers (cooperative) or
        BM (ping-pong)."""
        return self.bm if self.pingpong else div(self.bm, self.consumers)

    @property
    def m_iters(self) -> int:
        """64-row wgmma tiles per consumer warpgroup."""
        return div(self.consumer_rows, WGMMA_M)

    @property
    def acc_regs(self) -> int:
        """fp32 accumulator registers per consumer thread: m_iters x BN/2, twice that with
        3xTF32 (a chunk's products gather in a second set before the FP32 add)."""
        return self.m_iters * self.bn // 2 * (2 if self.math == "3xtf32" else 1)

    @property
    def sw_elems(self) -> int:
        """Elements in one swizzle row."""
        return div(self.swizzle, self.elem_bytes)

    @property
    def a_mn_major(self) -> bool:
        """A column-major: M is contiguous (wgmma's 'transposed' A). Never with 3xTF32: its
        pack kernel writes A K-major whatever the caller's layout."""
        return self.layout[0] == "c" and self.math != "3xtf32"

    @property
    def b_mn_major(self) -> bool:
        """B row-major: N is contiguous (wgmma's 'transposed' B). Never with 3xTF32."""
        return self.layout[1] == "r" and self.math != "3xtf32"

    def packed_k(self, k: int) -> int:
        """K the kernel runs over for a caller's K: K itself, or with 3xTF32 three parts per
        BK chunk of K rounded up to BK (small, big, big of A against big, small, big of B)."""
        if self.math != "3xtf32":
            return k
        return 3 * -(-k // self.bk) * self.bk

    def split_slices(self, k: int) -> list[tuple[int, int]]:
        """(first K tile, K tiles) of each split-K slice for a K of ``k``: ceil(K tiles /
        SPLIT_K) tiles each, the last slices shorter or empty (an empty slice stores zeros)."""
        tiles = -(-self.packed_k(k) // self.bk)
        per = -(-tiles // self.split_k)
        return [(min(tiles, s * per), max(0, min(tiles, (s + 1) * per) - s * per))
                for s in range(self.split_k)]

    def _box(self, rows: int, mn_major: bool, split: int) -> dict:
        """TMA boxes of one operand's stage: K-major: BK x rows/split (one box per CTA
        share); MN-major: sw_elems x BK column blocks."""
        if mn_major:
            return {"box": (self.sw_elems, self.bk), "count": div(rows, self.sw_elems),
                    "split_units": div(rows, self.sw_elems)}
        return {"box": (self.bk, div(rows, split)), "count": 1, "split_units": div(rows, 8)}

    @property
    def a_box(self) -> dict:
        """A's TMA box (inner, outer) in elements, the boxes per stage and the units a
        multicast can split it into."""
        return self._box(self.bm, self.a_mn_major, self.cluster_n)

    @property
    def b_box(self) -> dict:
        return self._box(self.bn, self.b_mn_major, self.cluster_m)

    @property
    def a_stage_bytes(self) -> int:
        return self.bm * self.bk * self.elem_bytes

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * self.bk * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA lands in one stage of this CTA (the mbarrier's expected transaction)."""
        return self.a_stage_bytes + self.b_stage_bytes

    @property
    def c_chunk(self) -> int:
        """Elements of C in one 128-byte staging row."""
        return C_SWIZZLE // self.out_bytes

    @property
    def c_smem_bytes(self) -> int:
        """C staging for the TMA store: each consumer's rows x BN in C's dtype (0 for direct)."""
        if self.store != "tma":
            return 0
        return self.consumers * self.consumer_rows * self.bn * self.out_bytes

    @property
    def c_chunks(self) -> int:
        """TMA-store boxes per consumer tile: 128-byte chunks along C's contiguous dimension."""
        extent = self.consumer_rows if self.layout[2] == "c" else self.bn
        return div(extent, self.c_chunk)

    @property
    def barrier_bytes(self) -> int:
        return 2 * self.stages * BARRIER_BYTES

    @property
    def c_smem_offset(self) -> int:
        """Where the C staging tiles start: after the stages, rounded up to a 1024-byte atom
        (the TMA store's 128-byte swizzle is a function of the address bits)."""
        return -(-self.stages * self.stage_bytes // ALIGN_SLACK) * ALIGN_SLACK

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: stages, C staging (1024-byte aligned), barriers and
        the slack for rounding the base up to a 1024-byte atom."""
        return self.c_smem_offset + self.c_smem_bytes + self.barrier_bytes + ALIGN_SLACK

    @property
    def static_smem_bytes(self) -> int:
        return 0

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.smem_bytes

    @property
    def cluster(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def setmaxnreg(self) -> bool:
        return bool(self.regs_producer or self.regs_consumer)

    @property
    def entry_regs(self) -> int:
        """Registers per thread at entry under __launch_bounds__(threads, 1): the register
        file over the threads, in steps of 8, at most 255."""
        return min(255, div(REGISTER_FILE, self.threads) // 8 * 8)

    @property
    def consumer_regs(self) -> int:
        """Registers a consumer thread has for its work: REGS_CONSUMER or the entry cap."""
        return self.regs_consumer if self.setmaxnreg else self.entry_regs

    def registers_needed(self) -> int:
        """Registers a consumer thread needs: accumulators plus REG_RESERVE."""
        return self.acc_regs + REG_RESERVE

    def launch_registers(self) -> int:
        """Registers per thread the block launches with: the __launch_bounds__(threads, 1)
        cap (setmaxnreg then moves them between warpgroups)."""
        return self.entry_regs

    def register_cap(self) -> int:
        """Registers a consumer thread may use: REGS_CONSUMER after setmaxnreg, else the
        __launch_bounds__(threads, 1) cap (gemmgen.space reads this instead of its own)."""
        return self.consumer_regs

    def env(self) -> dict[str, int]:
        """The named quantities the rules and the template's constants use."""
        a, b = self.a_box, self.b_box
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "ELEM_BYTES": self.elem_bytes,
            "OUT_BYTES": self.out_bytes, "CONSUMERS": self.consumers,
            "PINGPONG": int(self.pingpong), "PRODUCER": int(self.producer),
            "M_SPLIT": 1 if self.pingpong else self.consumers, "STAGES": self.stages,
            "EMPTY_ARRIVALS": (1 if self.pingpong else self.consumers) * self.cluster,
            "SWIZZLE": self.swizzle, "SW_ELEMS": self.sw_elems, "CLUSTER_M": self.cluster_m,
            "CLUSTER_N": self.cluster_n, "CLUSTER": self.cluster,
            "PERSISTENT": int(self.persistent), "GROUP": self.group,
            "RASTER_SNAKE": int(self.raster == "snake"),
            "SETMAXNREG": int(self.setmaxnreg), "REGS_PRODUCER": self.regs_producer,
            "REGS_CONSUMER": self.regs_consumer,
            "REG_POOL": (self.regs_producer + self.consumers * self.regs_consumer) * WARPGROUP,
            "ENTRY_REGS": self.entry_regs, "ACC_BUDGET": self.consumer_regs - REG_RESERVE,
            "STORE_TMA": int(self.store == "tma"),
            "ROW_MAJOR_TMA_STORE": int(self.store == "tma" and self.layout[2] == "r"),
            "DTYPE_FP16": int(self.dtype == "fp16"), "DTYPE_BF16": int(self.dtype == "bf16"),
            "DTYPE_TF32": int(self.dtype == "tf32"), "OUT_FP16": int(self.out == "fp16"),
            "OUT_BF16": int(self.out == "bf16"), "OUT_16BIT": int(self.out_bytes == 2),
            "A_MN_MAJOR": int(self.a_mn_major), "B_MN_MAJOR": int(self.b_mn_major),
            "SPLIT_K": self.split_k, "MATH_3XTF32": int(self.math == "3xtf32"),
            "FLUSH": self.flush, "FLUSH_TILES": 3 * self.flush,
            "PACK_TILE": PACK_TILE, "PACK_ROWS": PACK_ROWS,
            "WGMMA_M": WGMMA_M, "WGMMA_N": self.bn, "WGMMA_K": self.wgmma_k,
            "K_STEPS": div(self.bk, self.wgmma_k), "CONSUMER_ROWS": self.consumer_rows,
            "M_ITERS": self.m_iters, "ACC_REGS": self.acc_regs, "THREADS": self.threads,
            "WARPGROUP": WARPGROUP,
            "A_BOX_INNER": a["box"][0], "A_BOX_ROWS": a["box"][1], "A_BOXES": a["count"],
            "B_BOX_INNER": b["box"][0], "B_BOX_ROWS": b["box"][1], "B_BOXES": b["count"],
            "A_SPLIT_UNITS": a["split_units"], "B_SPLIT_UNITS": b["split_units"],
            "A_STAGE_BYTES": self.a_stage_bytes, "B_STAGE_BYTES": self.b_stage_bytes,
            "STAGE_BYTES": self.stage_bytes, "C_CHUNK": self.c_chunk,
            "C_CHUNKS": self.c_chunks, "C_SMEM_BYTES": self.c_smem_bytes,
            "C_BOX_ROWS": self.consumer_rows if self.layout[2] == "r" else self.bn,
            "SMEM_BYTES": self.smem_bytes, "SMEM_OPTIN": SMEM_OPTIN,
            **self.feature_env(),
            **({"K_SPEC": self.packed_k(self.k)} if self.k and self.math == "3xtf32" else {}),
        }

    def template_constants(self) -> dict[str, int]:
        """Every compile-time constant the kernel declares: the env plus shared-memory offsets
        and wgmma descriptor strides (bytes)."""
        e = self.env()
        a_off = 0
        b_off = self.stages * self.a_stage_bytes
        c_off = self.c_smem_offset
        bar_off = c_off + self.c_smem_bytes
        # wgmma matrix descriptors: K-major tiles step 8 rows (SBO) of one swizzle row each and
        # advance 32 bytes per wgmma K; MN-major tiles hold BK rows per swizzle-wide column
        # block (LBO between blocks), 8 K rows per SBO, and advance 16 K rows per wgmma K.
        sbo = 8 * self.swizzle
        mn_lbo = self.bk * self.swizzle
        k_step_kmajor = WGMMA_K_BYTES
        k_step_mnmajor = 16 * self.swizzle
        c_rows = self.consumer_rows
        return {**e, "A_SMEM_OFFSET": a_off, "B_SMEM_OFFSET": b_off, "C_SMEM_OFFSET": c_off,
                "BAR_OFFSET": bar_off, "ALIGN_SLACK": ALIGN_SLACK,
                "A_BOX_BYTES": e["A_BOX_INNER"] * e["A_BOX_ROWS"] * self.elem_bytes,
                "B_BOX_BYTES": e["B_BOX_INNER"] * e["B_BOX_ROWS"] * self.elem_bytes,
                "DESC_SBO": sbo,
                "A_DESC_LBO": mn_lbo if self.a_mn_major else 16,
                "B_DESC_LBO": mn_lbo if self.b_mn_major else 16,
                "A_K_STEP_BYTES": k_step_mnmajor if self.a_mn_major else k_step_kmajor,
                "B_K_STEP_BYTES": k_step_mnmajor if self.b_mn_major else k_step_kmajor,
                "A_M64_BYTES": WGMMA_M * self.bk * self.elem_bytes,
                "SWIZZLE_MODE": {128: 1, 64: 2, 32: 3}.get(self.swizzle, 0),
                "ACC_PER_WGMMA": self.bn // 2,
                "C_CONSUMER_BYTES": c_rows * self.bn * self.out_bytes if self.store == "tma" else 0,
                "C_CHUNK_BYTES": (c_rows if self.layout[2] == "r" else self.bn) * C_SWIZZLE,
                "BAR_STORE_BASE": 1, "BAR_ORDER_BASE": 1 + self.consumers}

    def ctypes(self) -> dict[str, str]:
        """C++ types the template declares and the PTX type of the wgmma inputs."""
        return {"in_t": CTYPES.get(self.dtype, "half"), "out_t": CTYPES.get(self.out, "float"),
                "ptx_in": PTX_TYPES.get(self.dtype, "f16")}

    @property
    def flops_per_byte(self) -> dict[str, float | None]:
        """FLOP per byte at the block tile (global) and at one consumer's wgmma tile
        (shared: the A rows it reads against the whole B tile)."""
        def tile(a: int, b: int) -> float:
            return tile_intensity(a, b, self.elem_bytes)
        return {"global": tile(self.bm * self.cluster_m, self.bn * self.cluster_n),
                "shared": tile(self.consumer_rows, self.bn)}

    def figures(self, arch: str = "sm_90") -> dict:
        """The derived figures the emitted header and ``gemmgen list`` report."""
        return {"threads": self.threads, "warpgroups": self.threads // WARPGROUP,
                "smem_bytes_dynamic": self.smem_bytes, "stage_bytes": self.stage_bytes,
                "c_staging_bytes": self.c_smem_bytes, "acc_regs_per_consumer": self.acc_regs,
                "consumer_registers": self.consumer_regs, "entry_registers": self.entry_regs,
                "wgmma": f"m64n{self.bn}k{self.wgmma_k} x {self.m_iters} per consumer",
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self.blocks_per_sm(arch)}

    def launch_summary(self) -> str:
        cl = f", cluster = ({self.cluster}, 1, 1)" if self.cluster > 1 else ""
        if self.persistent:
            grid = (f"grid = (min(tiles, SMs / {self.cluster} * {self.cluster}), 1, 1) over "
                    f"tiles = ceil(M/{self.bm * self.cluster_m}) * ceil(N/{self.bn * self.cluster_n}) "
                    f"* {self.cluster} * batch")
        else:
            grid = (f"grid = (ceil(M/{self.bm}) * ceil(N/{self.bn}), 1, batch)")
        return (f"{grid}{cl}, block = ({self.threads}, 1, 1); tensor maps of A, B and C are "
                f"the first three parameters")

    @property
    def wgmma_asm(self) -> dict:
        """Operand numbers of the wgmma inline asm: accumulators %0..%(n-1), then descriptor
        A, descriptor B and the scale-d flag."""
        n = self.bn // 2
        return {"acc": n, "desc_a": n, "desc_b": n + 1, "scale_d": n + 2,
                "acc_operands": [f"%{i}" for i in range(n)],
                "acc_constraints": [f'"+f"(d[{i}])' for i in range(n)]}

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """CTAs for every tile of an M x N output, in whole clusters:
        (ceil(M/(BM*CLUSTER_M)) * ceil(N/(BN*CLUSTER_N)) * CLUSTER, 1, 1). A non-persistent
        launch uses it as is (z = batch); a persistent one (``TmaKernel.grid``) caps x at the
        SMs, rounded down to whole clusters. Block = (threads, 1, 1)."""
        tiles = (-(-m // (self.bm * self.cluster_m))) * (-(-n // (self.bn * self.cluster_n)))
        return (tiles * self.cluster, 1, 1)


# ---- the ladder ---------------------------------------------------------------------------
def _c(**kw) -> WgmmaConfig:
    return WgmmaConfig(**kw)


_BASE = dict(bm=128, bn=128, bk=64, consumers=1, producer=False, persistent=False,
             regs_producer=0, regs_consumer=0, store="direct", stages=1)

PRESETS: tuple[Preset, ...] = (
    Preset("wgmma_tma", _c(**_BASE),
           "one warpgroup: TMA loads a 128x64 A and 64x128 B tile into 128-byte-swizzled shared "
           "memory, wgmma m64n128k16 reads them through matrix descriptors; one stage",
           "fast.cu kernels 2-3"),
    Preset("wgmma_ring", _c(**{**_BASE, "stages": 3}),
           "a 3-stage ring of mbarrier-tracked TMA loads: two K tiles in flight while one is "
           "computed (97 KiB: two CTAs still fit an SM)",
           "fast.cu kernel 3 with a queue; CUTLASS PipelineTmaAsync"),
    Preset("wgmma_ws", _c(**{**_BASE, "stages": 5, "producer": True}),
           "warp specialization: a producer warpgroup issues TMA into a full/empty barrier ring, "
           "the consumer keeps one wgmma batch in flight (wait_group 1)",
           "fast.cu kernel 4; CUTLASS warp-specialized mainloop"),
    Preset("wgmma_2c", _c(**{**_BASE, "bn": 256, "stages": 4, "producer": True, "consumers": 2,
                             "regs_producer": 40, "regs_consumer": 232}),
           "128x256 tiles: two consumer warpgroups of 64x256 (128 fp32 accumulators each), "
           "setmaxnreg 40/232 moves registers from the producer to them",
           "fast.cu kernel 5; ThunderKittens 40/232"),
    Preset("wgmma_persistent", _c(**{**_BASE, "bn": 256, "stages": 4, "producer": True,
                                     "consumers": 2, "regs_producer": 40,
                                     "regs_consumer": 232, "persistent": True, "group": 8}),
           "persistent grid, one CTA per SM, tiles in groups of 8 M-rows: the producer loads "
           "the next tile while consumers store this one",
           "fast.cu kernel 6; Triton grouped ordering"),
    Preset("wgmma_tma_store", _c(**{**_BASE, "bn": 256, "stages": 3, "producer": True,
                                    "consumers": 2, "regs_producer": 40, "regs_consumer": 232,
                                    "persistent": True, "group": 8, "store": "tma"}),
           "epilogue through stmatrix into 128-byte-swizzled shared memory and an asynchronous "
           "TMA store that overlaps the next tile's main loop",
           "fast.cu kernels 10 and 12; DeepGEMM epilogue"),
    Preset("wgmma_cluster", _c(**{**_BASE, "bn": 256, "stages": 3, "producer": True,
                                  "consumers": 2, "regs_producer": 40, "regs_consumer": 232,
                                  "persistent": True, "group": 8, "store": "tma",
                                  "cluster_m": 2}),
           "2-CTA clusters along M: each CTA loads half of the shared B tile and TMA multicasts "
           "it to both", "fast.cu kernels 8-9; CUTLASS multicast TMA"),
    Preset("wgmma_bf16", _c(**{**_BASE, "bn": 256, "stages": 3, "producer": True,
                               "consumers": 2, "regs_producer": 40, "regs_consumer": 232,
                               "persistent": True, "group": 8, "store": "tma",
                               "dtype": "bf16", "out": "bf16"}),
           "the TMA-store kernel on bf16 inputs and output", "fast.cu kernel 12 (bf16)"),
    Preset("wgmma_tf32", _c(**{**_BASE, "bk": 32, "bn": 256, "stages": 4, "producer": True,
                               "consumers": 2, "regs_producer": 40, "regs_consumer": 232,
                               "persistent": True, "group": 8, "store": "direct",
                               "dtype": "tf32", "out": "fp32", "layout": "rcr"}),
           "tf32 wgmma (m64n256k8) on float32 data, 4 stages, direct stores (an fp32 C tile "
           "would take the fourth stage's shared memory); K-major B (layout rcr): tf32 wgmma "
           "reads no MN-major operand", "CUTLASS sm90 tf32 GEMM; benchmarks/explore.py"),
    Preset("wgmma_3xtf32", _c(**{**_BASE, "bk": 32, "bn": 128, "stages": 6, "producer": True,
                                 "consumers": 2, "regs_producer": 40, "regs_consumer": 232,
                                 "persistent": True, "group": 8, "store": "direct",
                                 "dtype": "tf32", "out": "fp32", "math": "3xtf32"}),
           "FP32-accurate GEMM on tf32 tensor cores: float32 A and B split into tf32 big + "
           "small parts, three products per chunk of K, each chunk added to the accumulators "
           "in FP32 outside the tensor core; any layout",
           "CUTLASS examples 27/28 (3xTF32); Ootomo & Yokota 2022"),
)

SPACE = {
    "bm": (128, 256), "bn": (128, 192, 256), "stages": (3, 4, 5), "cluster": ((1, 1), (2, 1)),
    "group": (8, 16), "store": ("tma", "direct"), "kind": ("cooperative", "pingpong"),
    "split_k": (1, 2, 4),
}


def space(dtype: str = "fp16") -> list[WgmmaConfig]:
    """Every configuration of the wgmma search space for ``dtype`` that passes the rules:
    warp-specialized, persistent, setmaxnreg 40/232, 128-byte swizzle, TMA or direct stores,
    split-K 1, 2 or 4 (direct stores);
    C in the input dtype (float32 for tf32), K-major B for tf32 (layout rcr; ``tune`` lays the
    space out in the layout it tunes)."""
    s = SPACE
    out_dtype = stored_as(dtype)
    bk = 128 // ELEM_BYTES[dtype]
    layout = "rcr" if dtype == "tf32" else "rrr"
    out = []
    for bm, bn, st, (cm, cn), group, store, kind, split in itertools.product(
            s["bm"], s["bn"], s["stages"], s["cluster"], s["group"], s["store"], s["kind"],
            s["split_k"]):
        cfg = WgmmaConfig.unchecked(
            bm=bm, bn=bn, bk=bk, dtype=dtype, out=out_dtype, consumers=2,
            pingpong=kind == "pingpong", producer=True, stages=st, swizzle=128, cluster_m=cm,
            cluster_n=cn, persistent=True, raster="grouped", group=group, regs_producer=40,
            regs_consumer=232, store=store, split_k=split, layout=layout)
        if not cfg.violations():
            out.append(cfg)
    return out


def fallback(cfg: WgmmaConfig):
    """The WMMA configuration (128x128x32, warps 64x64, 3 stages) that computes what ``cfg``
    computes, for operands TMA cannot describe: a row or batch stride that is not a multiple
    of 16 bytes, or a base address off 16-byte alignment. With 3xTF32, whose pack takes any
    operand, only a C that a TMA store cannot take falls back: to the SIMT preset
    warptile_tuned, which keeps float32 accuracy (WMMA's tf32 would not)."""
    if cfg.math == "3xtf32":
        simt = next(p.config for p in SIMT_PRESETS if p.name == "warptile_tuned")
        return simt.replace(layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)
    tf32 = cfg.dtype == "tf32"
    return WmmaConfig(128, 128, 32, 64, 64, shape="m16n16k8" if tf32 else "m16n16k16",
                      dtype=cfg.dtype, out=cfg.out, skew=4 if tf32 else 8, stages=3,
                      layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)


def _adjust(values: dict, given: set) -> dict:
    """Follow --dtype: tf32 takes BK = 32, an fp32 C, a K-major B and direct stores with 4
    stages (an fp32 C staging tile would not leave room for them) unless the command line
    says otherwise; 16-bit inputs default C to their own dtype."""
    if "dtype" in given:
        d = values["dtype"]
        if "out" not in given:
            values = {**values, "out": stored_as(d)}
        if "bk" not in given:
            values = {**values, "bk": values.get("swizzle", 128) // ELEM_BYTES[d]}
        if d == "tf32" and "layout" not in given:
            values = {**values, "layout": "rcr"}
        if d == "tf32" and "store" not in given and "stages" not in given:
            values = {**values, "store": "direct", "stages": 4}  # as the tf32 preset
    return values


FAMILY = Family(
    name="wgmma", config=WgmmaConfig,
    summary="Hopper wgmma fed by TMA: warp specialization, persistent clusters; sm_90a only",
    dtypes=("fp16", "bf16", "tf32"), presets=PRESETS,
    defaults={"fp16": "wgmma_tma_store", "bf16": "wgmma_bf16", "tf32": "wgmma_tf32"},
    flag_defaults={},
    field_help={
        "bm": "block tile rows (M), a multiple of 64 per consumer warpgroup",
        "bn": "block tile columns (N) = wgmma N: 8 to 256 in steps of 8",
        "bk": "block tile depth (K): swizzle bytes / element size",
        "dtype": "A and B dtype", "out": "C dtype",
        "consumers": "consumer warpgroups (1 or 2)",
        "pingpong": "two consumers take alternate tiles instead of sharing one",
        "producer": "a producer warpgroup issues the TMA loads (warp specialization)",
        "stages": "TMA ring depth (wgmma)",
        "swizzle": "shared-memory swizzle width in bytes: 128, 64 or 32",
        "cluster_m": "CTAs per cluster along M (B multicast)",
        "cluster_n": "CTAs per cluster along N (A multicast)",
        "persistent": "one CTA per SM looping over tiles",
        "raster": "tile order: grouped or snake", "group": "M tile rows per raster group",
        "regs_producer": "setmaxnreg count of the producer (0: none)",
        "regs_consumer": "setmaxnreg count of the consumers (0: none)",
        "store": "epilogue: tma (stmatrix + TMA store) or direct",
        "split_k": "slices of K, reduced by a second kernel (1: none)",
        "math": "native, or 3xtf32 (FP32-accurate tf32 products; dtype tf32)",
        "flush": "3xTF32: K chunks summed in the tensor core per FP32 add",
    },
    space=space, min_cc=90, max_cc=90, arch_suffix="a", adjust=_adjust, tma=True,
    fallback=fallback)
