"""The fp8 family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....config import EPILOGUES, LAYOUTS, ConfigBase, div
from ....dtypes import FP8_DTYPES
from .. import ALIGN_SLACK, HopperTile, REGISTER_FILE
from ..split import split_tail, split_workspace
from .env import Fp8Env
from ..waiter import WAITER_RULES
from .rules import (FLAG_BYTES, FP8_A_ROWS_RULES, FP8_RULES, FP8_WAITER_RULES, QUANTS,
                    REG_RESERVE, SCALINGS, STORES)

SCALE_TAGS = {"tensor": "tensor", "row": "row", "block": "block"}


@dataclass(frozen=True, slots=True)
class Fp8Config(Fp8Env, HopperTile, ConfigBase):
    """A Hopper FP8 GEMM kernel: D[M,N] = act(dequant(A[M,K] @ B[K,N]) + bias), A and B FP8
    (e4m3 or e5m2) read K-major by TMA into 128-byte-swizzled shared memory, wgmma
    ``m64nBNk32`` with fp32 accumulators, scales applied in fp32. sm_90a only.

    Fields:
    - ``bm, bn``: block tile; ``bk`` = 128 (one 128-byte swizzle row of K per stage).
    - ``dtype``: A's FP8 dtype (``a_dtype``); ``b_dtype``: B's (e4m3 x e4m3 for inference,
      e5m2 x e4m3 and e4m3 x e5m2 for gradients); ``out``: D (bf16, fp16, fp32, or e4m3,
      saturating, for a D that feeds the next FP8 GEMM).
    - ``quant``: how an e4m3 D is quantized ("none" for the others). "tensor": q = v /
      scale_d[0] (delayed scaling: the caller's scale, as Transformer Engine keeps one per
      tensor); "1x128": per row and 128 columns, s = max(amax, FLT_MIN) / 448 of the group's
      finished values, q = v / s, s written to scale_d[m * sd_m + (n / 128) * sd_n]
      (DeepSeek-V3's activation scales, the layout ``scaled_mm``'s blockwise scale_a reads).
      Both write max |v| over D to ``amax`` (float bits), gathered in a workspace the kernel
      leaves zeroed: the caller zeroes nothing.
    - ``scaling``: "tensor" (one fp32 scale per operand), "row" (per row of A, per column of
      B; a stride of 0 broadcasts one), "block" (DeepSeek-V3: one per 1 x 128 of A, one per
      128 x 128 of B). Scales multiply (dequantize): D = sum_k (A sa)(B sb).
    - ``promote``: K elements the tensor core sums before the partial sums are added to fp32
      registers (a multiple of 128; blockwise applies its scales there), or 0 for fast
      accumulation: the tensor core sums all of K (its accumulator keeps about 14 bits).
    - ``partials``: partial accumulator sets when promoted: 2 issues the next K block's wgmmas
      before promoting the last one (the promotion overlaps the tensor core).
    - ``consumers``: consumer warpgroups (1 or 2) splitting each tile's rows; a producer
      warpgroup issues the TMA loads (always).
    - ``stages``: depth of the shared-memory ring (full/empty mbarrier pairs).
    - ``waiter``: (one consumer, fast accumulation) the producer warpgroup's second warp waits
      for each full stage and meets the consumer at a named barrier, as in the wgmma family.
    - ``a_rows``: 0 loads A's whole BM-row tile each stage; 8, 16 or 32 (a 64-row tile, one
      consumer, fast accumulation) loads that many rows, for an M of at most ``a_rows``
      (decode), where a whole tile's box would write zeros past M into every stage. The rows
      past it keep what the stage held: the rows of D they give are neither stored nor
      counted in amax. A kernel with it refuses a larger M (fp8_a_rows_*.json).
    - ``cluster_m, cluster_n``: CTAs per cluster along M (they share the B tile through TMA
      multicast) and along N (they share A).
    - ``group``: persistent grid, tiles in groups of ``group`` tile rows walked column by
      column (L2 reuse of A's row panels).
    - ``regs_producer, regs_consumer``: ``setmaxnreg`` counts.
    - ``store``: "direct" (guarded stores from registers) or "tma" (each consumer stages its
      rows in 128-byte-swizzled shared memory and one TMA store per 128-byte column chunk
      writes them while the next tile's main loop runs).
    - ``c_stages``: 0 stages a consumer's whole D tile for the TMA store; N > 0 (16- or
      32-bit D) stages it one 128-byte column chunk at a time through N chunk buffers, each
      chunk stored as soon as it is written (CUTLASS's epilogue StagesD), so that the
      staging takes N chunks of shared memory instead of the tile: room for a deeper ring.
    - ``split_k``: slices of K. Where the tiles fit one wave of the persistent grid every tile
      is split; else only the tiles past its last whole wave (``split_tiles``; the hybrid of
      data-parallel tiles and split-K in Stream-K, Osama et al., PPoPP 2023). Each slice writes
      its fp32 partial tile to a workspace; the last slice to arrive (per-tile counters) adds
      them in slice order (deterministic) and stores D: no second kernel.
    - ``overlap``: (two partial sets) each unit's epilogue is deferred until the next unit's
      first wgmmas are on the tensor cores, a window of four K blocks' scales loads a window
      ahead, and two consumers run a K block apart, so that one's drain and epilogue fall
      under the other's wgmmas: the grouped kernel's FP8 main loop (DeepGEMM's sm90 FP8
      kernels overlap promotion and epilogue with the other math warpgroup's wgmmas so).
    - ``layout``: "rcr" only (K-major A and B, row-major D); ``epilogue``: as the other
      families (bias per column, in D's dtype); ``m, n, k``: shape specialization.

    Raises ``ConfigError`` listing every broken rule of ``FP8_RULES`` with its numbers.
    """

    bm: int = 128
    bn: int = 128
    bk: int = 128
    dtype: str = "e4m3"
    b_dtype: str = "e4m3"
    out: str = "bf16"
    quant: str = "none"
    scaling: str = "tensor"
    promote: int = 0
    partials: int = 1
    consumers: int = 2
    stages: int = 7
    cluster_m: int = 1
    cluster_n: int = 1
    group: int = 8
    regs_producer: int = 40
    regs_consumer: int = 232
    store: str = "direct"
    c_stages: int = 0
    split_k: int = 1
    overlap: bool = False
    waiter: bool = False
    a_rows: int = 0
    layout: str = "rcr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None

    family = "fp8"
    template = "fp8.cu.j2"
    rules = FP8_RULES
    REG_RESERVE = REG_RESERVE  # 40: see fp8.rules
    acc = "fp32"
    min_blocks = 1
    field_types: ClassVar[dict] = {"dtype": str, "b_dtype": str, "out": str, "quant": str,
                   "scaling": str, "store": str, "overlap": bool, "waiter": bool,
                   "layout": str, "epilogue": str}
    choices: ClassVar[dict] = {"dtype": FP8_DTYPES, "b_dtype": FP8_DTYPES, "out": ("bf16", "fp16", "fp32", "e4m3"),
               "quant": QUANTS,
               "scaling": SCALINGS, "store": STORES, "layout": LAYOUTS, "epilogue": EPILOGUES}
    optional = frozenset({"m", "n", "k"})
    quiet: ClassVar[dict[str, object]] = {"overlap": False, "c_stages": 0, "waiter": False,
                                          "a_rows": 0}
    fixed_in_search = ("layout", "epilogue", "m", "n", "k", "dtype", "b_dtype", "out",
                       "quant", "scaling", "promote", "waiter", "a_rows")
    search_domain: ClassVar[dict] = {
        "bm": (64, 128, 256), "bn": (64, 96, 112, 128, 160, 192, 256), "consumers": (1, 2),
        "stages": (3, 4, 5, 6, 7, 8, 9), "cluster_m": (1, 2), "cluster_n": (1, 2),
        "partials": (1, 2), "group": (1, 8, 16), "regs_producer": (24, 40),
        "regs_consumer": (232, 240), "store": STORES, "c_stages": (0, 1, 2),
        "split_k": (1, 2, 4, 7, 8),
        "overlap": (False, True),
    }

    # ---- identity -------------------------------------------------------------------------
    @property
    def a_dtype(self) -> str:
        """A's FP8 dtype (the ``dtype`` field)."""
        return self.dtype

    @property
    def accumulation(self) -> str:
        """"fast", or "promoted every <promote>" with the partial sets."""
        if not self.promote:
            return "fast"
        return f"promoted every {self.promote}" + (" x2 partials" if self.partials == 2 else "")

    @property
    def name(self) -> str:
        """Every field in a fixed order, scaling and promotion first; the kernel symbol, file
        name and cache key."""
        acc = "fast" if not self.promote else f"p{self.promote}" + (
            f"x{self.partials}" if self.partials > 1 else "")
        return (f"gemm_fp8_{self.dtype}{self.b_dtype}_{SCALE_TAGS.get(self.scaling, 'x')}_{acc}"
                f"_{self.bm}x{self.bn}x{self.bk}_c{self.consumers}_st{self.stages}"
                f"_cl{self.cluster_m}x{self.cluster_n}_g{self.group}"
                f"_r{self.regs_producer}x{self.regs_consumer}_{self.store}"
                f"{f'_cs{self.c_stages}' if self.c_stages else ''}_out{self.out}"
                f"{'' if self.quant == 'none' else '_q' + self.quant}"
                f"{f'_sk{self.split_k}' if self.split_k > 1 else ''}"
                f"{'_ov' if self.overlap else ''}{'_wt' if self.waiter else ''}"
                f"{f'_ar{self.a_rows}' if self.a_rows else ''}{self.feature_suffix()}")

    def feature_suffix(self) -> str:
        """ConfigBase's suffix without the layout, which is always rcr here."""
        out = "" if self.epilogue == "none" else f"_e{self.epilogue}"
        if self.specialized:
            out += "_s" + "x".join(str(v) if v else d for v, d in
                                   ((self.m, "M"), (self.n, "N"), (self.k, "K")))
        if self.layout != "rcr":
            out += f"_l{self.layout}"
        return out

    def tile_shape(self) -> tuple:
        return (self.bm, self.bn, self.consumers, self.cluster_m, self.cluster_n)

    def feature_rules(self) -> tuple:
        """ConfigBase's, the waiter's (H60, H61, F32) for a config with the waiter and
        ``a_rows``'s (F33-F36) for one with it."""
        return (ConfigBase.feature_rules(self)
                + (WAITER_RULES + FP8_WAITER_RULES if self.waiter else ())
                + (FP8_A_ROWS_RULES if self.a_rows else ()))

    def brief(self) -> str:
        return (f"block {self.bm}x{self.bn}x{self.bk}  {self.dtype} x {self.b_dtype} -> {self.out}"
                f"{'' if self.quant == 'none' else f' ({self.quant} scaled)'}"
                f"  {self.scaling} scaling  {self.accumulation}  {self.consumers} consumer WG"
                f"  stages {self.stages}  cluster {self.cluster_m}x{self.cluster_n}  "
                f"store {self.store}"
                f"{f' (D through {self.c_stages} chunk buffers)' if self.c_stages else ''}"
                f"{f'  split-K {self.split_k}' if self.split_k > 1 else ''}"
                f"{'  overlap' if self.overlap else ''}{'  waiter' if self.waiter else ''}"
                f"{f'  A rows {self.a_rows}' if self.a_rows else ''}")

    @property
    def overlap_summary(self) -> str:
        """What ``overlap`` does in this kernel, in words (its header and ``explain``)."""
        return ("each unit's epilogue deferred under the next unit's first wgmmas, scales "
                "loaded a window of 4 K blocks ahead"
                + (", the two consumers a K block apart" if self.stagger else ""))

    @property
    def stagger(self) -> bool:
        """Two consumers of an overlapped kernel run a K block apart (the grouped family's
        property of the same name, which the shared main loop reads)."""
        return self.overlap and self.consumers == 2

    # ---- derived figures ------------------------------------------------------------------
    @property
    def acc_regs(self) -> int:
        """Live fp32 accumulator registers per consumer thread: m_iters x BN/2 for fast
        accumulation; promoted, the final sums plus each partial set."""
        base = self.m_iters * self.bn // 2
        return base * (1 + self.partials if self.promote else 1)

    @property
    def promote_stages(self) -> int:
        """Stages (K blocks of 128) the tensor core sums between promotions."""
        return max(1, div(self.promote, self.bk))

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * self.bk

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: stages, staging tile, barriers, split-K flags and the slack
        for aligning the base to 1024 bytes."""
        return (self.c_smem_offset + self.c_smem_bytes + self.barrier_bytes + FLAG_BYTES
                + ALIGN_SLACK)

    @property
    def entry_regs(self) -> int:
        """Registers per thread the block launches with, as ptxas (nvcc 13.0) sets them for a
        kernel with setmaxnreg: the __launch_bounds__(threads, 1) cap in steps of 8 (248 at
        most), but no more than the largest setmaxnreg count (the prototype's 256-thread
        kernels report 240 registers, its 384-thread ones 168)."""
        cap = min(248, div(REGISTER_FILE, self.threads) // 8 * 8)
        return min(cap, max(self.regs_producer, self.regs_consumer))

    def split_slices(self, k: int) -> list[tuple[int, int]]:
        """(first K block, K blocks) of each split-K slice: ceil(blocks / SPLIT_K) each, the
        last ones shorter or empty (an empty slice adds zeros)."""
        blocks = -(-k // self.bk)
        per = -(-blocks // self.split_k)
        return [(min(blocks, s * per), max(0, min(blocks, (s + 1) * per) - s * per))
                for s in range(self.split_k)]

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        """(cluster tiles along M, along N) of an M x N output."""
        return (-(-m // (self.bm * self.cluster_m)), -(-n // (self.bn * self.cluster_n)))

    def split_tiles(self, m: int, n: int, sms: int) -> int:
        """How many of an M x N output's cluster tiles split-K splits on a GPU of ``sms`` SMs:
        every tile when they fit one wave of the persistent grid (``sms // cluster`` clusters),
        else only those past its last whole wave (none when the waves are whole), so that
        whole tiles fill the waves and the split slices the tail. 0 without split-K."""
        if self.split_k == 1:
            return 0
        tm, tn = self.tiles(m, n)
        return split_tail(tm * tn, max(1, sms // self.cluster))

    def work_units(self, m: int, n: int, sms: int) -> int:
        """The work units (whole cluster tiles and slices of split ones) of an M x N output on
        ``sms`` SMs: the persistent grid's clusters take them in turn."""
        tm, tn = self.tiles(m, n)
        split = self.split_tiles(m, n, sms)
        return tm * tn - split + split * self.split_k

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """CTAs for the most work units an M x N output can have, every cluster tile split:
        (tiles x SPLIT_K x CLUSTER, 1, 1). The persistent launch (``Fp8Launch.grid``) takes
        ``work_units`` on the GPU's SMs instead, capped at them in whole clusters."""
        tm, tn = self.tiles(m, n)
        return (tm * tn * self.split_k * self.cluster, 1, 1)

    def workspace_bytes(self, m: int, n: int, sms: int) -> tuple[int, int]:
        """Split-K workspace (fp32 partial tiles of every slice of each split CTA tile) and
        counters (one int per split CTA tile and consumer), in bytes, on ``sms`` SMs; (0, 0)
        without split-K. At least one tile's worth where no tile is split (the kernel still
        takes the pointers)."""
        if self.split_k == 1:
            return 0, 0
        return split_workspace(max(1, self.split_tiles(m, n, sms)) * self.cluster, self.split_k,
                               self.bm * self.bn, self.consumers)
