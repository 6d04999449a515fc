"""The wgmma family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....config import LAYOUTS, ConfigBase, div
from ....epilogue_rules import EPILOGUE_RULES
from .. import BARRIER_BYTES, C_SWIZZLE, HopperTile, WARPGROUP
from .env import WgmmaEnv
from ..waiter import WAITER_RULES
from .rules import (MATHS, OVERLAP_RESERVE, SPLIT_CLUSTER_RULES, STREAM_K_RULES,
                    WGMMA_FEATURE_RULES, WGMMA_RULES)
from .vectors import consumer_bytes, residual_staged, staged_vectors


@dataclass(frozen=True, slots=True)
class WgmmaConfig(WgmmaEnv, HopperTile, ConfigBase):
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
    - ``c_stages``: 0 stages a consumer's whole C tile for the TMA store; N > 0 (row-major C)
      stages it chunk by chunk through N chunk buffers taken in turn, each chunk stored once
      written (CUTLASS's epilogue StagesD): room for a deeper ring (128 x 256: 4 stages, not 3).
    - ``split_k``: slices of K (1: none). Each slice stores fp32 partial sums in a workspace
      (SPLIT_K x batch x M x N, in C's layout); ``<name>_reduce`` sums them in slice order
      (deterministic) and applies alpha, beta, bias and the activation once (CUTLASS's
      "parallel" split-K). For skinny problems whose tiles cannot fill the SMs.
    - ``split_cluster``: with split-K, the slices of a tile are the CTAs of one cluster
      (1 x 1 x SPLIT_K, one tile per CTA); each leaves its fp32 partials in its own shared
      memory and every CTA sums a 1/SPLIT_K share of the tile's elements over the cluster's
      slices, in slice order, through distributed shared memory, then stores that share of C:
      no workspace, counter or second launch (DeepGEMM PR #186 reduces split-K so).
    - ``split_inline``: with split-K, the reduction runs in the GEMM kernel itself instead of
      ``<name>_reduce``: each slice stores its partial sums (in the accumulators' fragment
      order, per tile) and bumps a counter of its tile; the slice that arrives last sums every
      slice's partials in slice order (deterministic), every slice's loads of a pass issued
      together, and runs the epilogue (CUTLASS's serial split-K reduction, here by the last
      arrival): one launch instead of two. A persistent kernel whose tiles outnumber the SMs
      splits only the tiles past its last whole wave (``split_tiles``): the whole waves' tiles
      run unsplit and the split slices fill the tail (data-parallel tiles and a split tail, a
      hybrid in Stream-K's terms: Osama et al., PPoPP 2023).
    - ``stream_k``: with an inline split-K on a persistent grid, the split tiles' K tiles are
      shared out in equal contiguous ranges among the grid's CTAs instead of in ``split_k``
      slices a tile (Stream-K, Osama et al., PPoPP 2023; CUTLASS's stream-K scheduler): a
      tail of T tiles of K_t K tiles each gives every CTA T x K_t / CTAs of them, a piece
      of one tile or the end of one and the start of the next. A tile's pieces (at most
      ``split_k``: a range holds at least ceil(K_t / (split_k - 1)) K tiles, fewer CTAs
      take part where that leaves too few) are summed in K order by the last to arrive,
      as the slices of the inline split-K are: reproducible from run to run on one GPU (the
      ranges depend on its SM count).
    - ``waiter``: the producer warpgroup's second warp waits for each full stage, then meets
      the one consumer at a named barrier: the consumer's own mbarrier poll would queue behind
      its in-flight wgmmas' shared-memory reads (an m64n32k64 stage: 305 cycles with the poll,
      139 with the waiter; smem_poll_NVIDIA_H200.json).
    - ``math``: "native", or "3xtf32" (dtype tf32): the module's ``<name>_split3`` kernel
      writes each float32 operand as tf32 big = rna(x) and small = rna(x - big) parts,
      K-major, per BK chunk of K (A: small, big, big; B: big, small, big), and the kernel
      runs over 3x K, so each chunk sums small*big + big*small before big*big in fp32: the
      order of CUTLASS's 3xTF32 (examples 27/28; Ootomo & Yokota 2022). FP32-level accuracy
      on tf32 tensor cores; any caller layout (the pack transposes).
    - ``flush``: with 3xTF32, chunks of K whose products the tensor core sums before they are
      added to the accumulators in FP32 (round to nearest; the tensor core truncates).
    - ``layout``, ``epilogue``, ``m, n, k``: as in the other families; ``epilogue`` also takes
      an epilogue tree (``gemmgen.model.epilogue``), e.g. ``silu(acc*row_scale*col_scale +
      bias) + R``, whose device arguments come in one trailing ``EpilogueArgs`` parameter
      (docs-notes/epilogue_abi.md).
    - ``dual``: one kernel reads A once and computes two products, gate = A @ Bg and up = A @
      Bu, into two accumulator sets; its epilogue combines them (``silu(gate)*up``: SwiGLU).
      Bg and Bu are nn.Linear weights (N x K, K-major: layout ``?c?``), read through B's tensor
      map as z = 2 x batch entry + 0 (gate) or 1 (up). A stage holds A, Bg and Bu.
    - ``overlap``: the epilogue of tile i overlaps the main loop of the CTA's next tile. Each
      consumer computes the pre-activation in registers, stages it in C's dtype (where the
      TMA store reads it) and starts the next tile at once; between that tile's wgmma batches
      it applies the rest (activation, residual, casts, aux, amax) to the staged tile in
      passes of DEFER_UNITS 16-byte units per thread, then issues the TMA store, which drains
      under the rest of the main loop. The activation then sees the pre-activation rounded to
      C's dtype (as an unfused GEMM followed by the activation does).

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
    split_inline: bool = False
    split_cluster: bool = False
    math: str = "native"
    flush: int = 1
    layout: str = "rrr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None
    dual: bool = False
    overlap: bool = False
    stream_k: bool = False
    c_stages: int = 0
    waiter: bool = False

    family = "wgmma"
    template = "wgmma.cu.j2"
    rules = WGMMA_RULES
    acc = "fp32"
    min_blocks = 1
    field_types = {"dtype": str, "out": str, "pingpong": bool, "producer": bool,
                   "split_inline": bool, "split_cluster": bool,
                   "persistent": bool, "raster": str, "store": str, "math": str, "layout": str,
                   "epilogue": str, "dual": bool, "overlap": bool, "stream_k": bool,
                   "waiter": bool}
    choices = {"dtype": ("fp16", "bf16", "tf32"), "out": ("fp16", "bf16", "fp32"),
               "raster": ("grouped", "snake"), "store": ("tma", "direct"), "math": MATHS,
               "layout": LAYOUTS}
    optional = frozenset({"m", "n", "k"})
    fixed_in_search = ("layout", "epilogue", "m", "n", "k", "dtype", "out", "math", "dual",
                       "overlap", "stream_k", "waiter", "split_cluster")
    quiet: ClassVar[dict[str, object]] = {"dual": False, "overlap": False, "stream_k": False,
                                          "c_stages": 0, "waiter": False,
                                          "split_cluster": False}
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
                f"{f'_cs{self.c_stages}' if self.c_stages else ''}"
                f"_out{self.out}{f'_sk{self.split_k}' if self.split_k > 1 else ''}"
                f"{'i' if self.split_inline else 'c' * self.split_cluster}"
                f"{'_streamk' if self.stream_k else ''}"
                f"{'_3xtf32' if self.math == '3xtf32' else ''}"
                f"{f'_f{self.flush}' if self.flush != 1 else ''}{'_dual' if self.dual else ''}"
                f"{'_ov' if self.overlap else ''}{'_wt' if self.waiter else ''}"
                f"{self.feature_suffix()}")

    def tile_shape(self) -> tuple:
        return (self.bm, self.bn, self.bk, self.consumers, self.pingpong, self.cluster_m,
                self.cluster_n)

    def brief(self) -> str:
        kind = "ping-pong" if self.pingpong else "cooperative"
        return (f"block {self.bm}x{self.bn}x{self.bk}  {self.consumers} consumer WG ({kind})"
                f"{' + producer' if self.producer else ''}  stages {self.stages}  swizzle "
                f"{self.swizzle}  cluster {self.cluster_m}x{self.cluster_n}  "
                f"{'persistent ' + self.raster if self.persistent else 'one tile per CTA'}  "
                f"store {self.store}"
                f"{f' ({self.c_swizzle}-byte C chunks)' if self.c_swizzle != C_SWIZZLE else ''}"
                f"{f' (C through {self.c_stages} chunk buffers)' if self.c_stages else ''}"
                f"  out {self.out}"
                f"{f'  split-K {self.split_k}' if self.split_k > 1 else ''}"
                f"{' inline' if self.split_inline else ' in a cluster' * self.split_cluster}"
                f"{'  stream-K' if self.stream_k else ''}"
                f"{'  3xTF32' if self.math == '3xtf32' else ''}"
                f"{'  dual' if self.dual else ''}{'  overlap' if self.overlap else ''}"
                f"{'  waiter' if self.waiter else ''}")

    # ---- features beyond the family's table -------------------------------------------------
    @property
    def extended(self) -> bool:
        """The config uses a feature added after the family's table (an epilogue tree, the dual
        GEMM or the overlap): its kernel renders the epilogue from the tree's program."""
        return self.epilogue_tree or self.dual or self.overlap

    def feature_rules(self) -> tuple:
        """The epilogue rules (E01-E11) and the wgmma feature rules (H42-H51), for a config
        that uses a feature (``extended``), the stream-K rules (H54-H56) for a stream-K config
        the waiter's (H60, H61) for one with the waiter and the cluster split-K's (H62-H71)
        for one with ``split_cluster``; none otherwise."""
        return ((EPILOGUE_RULES + WGMMA_FEATURE_RULES if self.extended else ())
                + (STREAM_K_RULES if self.stream_k else ())
                + (WAITER_RULES if self.waiter else ())
                + (SPLIT_CLUSTER_RULES if self.split_cluster else ()))

    def rendered_rules(self) -> tuple:
        """The Hopper tile's rendered rules (``HopperTile.rendered_rules``) but H52
        (c-col-scatter-rows) for a config that writes no column-major C element by element,
        whose source then declares no C_COL_SCATTER: it cannot break it."""
        rules = HopperTile.rendered_rules(self)  # slots=True: no zero-argument super()
        if self.layout[2] == "c" and (self.store == "tma" or self.split_k > 1):
            return rules
        return tuple(r for r in rules if r.id != "H52")

    # ---- derived figures ------------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads per block: 128 per consumer warpgroup, plus 128 for the producer."""
        return WARPGROUP * (self.consumers + int(self.producer))

    @property
    def consumer_rows(self) -> int:
        """Rows of C one consumer warpgroup computes per tile: BM/consumers (cooperative) or
        BM (ping-pong)."""
        return self.bm if self.pingpong else div(self.bm, self.consumers)

    @property
    def acc_regs(self) -> int:
        """fp32 accumulator registers per consumer thread: m_iters x BN/2, twice that with
        3xTF32 (a chunk's products gather in a second set before the FP32 add) or for the
        dual GEMM (gate and up)."""
        return self.m_iters * self.bn // 2 * (2 if self.math == "3xtf32" or self.dual else 1)

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
    def b_stage_bytes(self) -> int:
        """B's part of a stage: one BN x BK tile, or the dual GEMM's two (Bg, then Bu)."""
        return self.b_part_bytes * (2 if self.dual else 1)

    @property
    def b_part_bytes(self) -> int:
        return self.bn * self.bk * self.elem_bytes

    @property
    def c_swizzle(self) -> int:
        """Bytes of one row of a C staging chunk (the TMA store's swizzle): 128, or for a
        row-major C staged for the TMA store whose tile rows are not whole 128-byte rows, the
        wider of 64 and 32 that divides them, so that tiles such as 128 x 144 (cuBLASLt's
        widths in steps of 16, chosen to fill the SMs' waves) store through TMA too. The
        overlap's deferred passes read 128-byte rows: it keeps 128."""
        if self.layout[2] == "c" or self.store != "tma" or self.overlap:
            return C_SWIZZLE
        return next((s for s in (C_SWIZZLE, 64, 32) if self.bn * self.out_bytes % s == 0),
                    C_SWIZZLE)

    @property
    def c_chunks(self) -> int:
        """TMA-store boxes per consumer tile: 128-byte chunks along C's contiguous dimension."""
        extent = self.consumer_rows if self.layout[2] == "c" else self.bn
        return div(extent, self.c_chunk)

    @property
    def barrier_bytes(self) -> int:
        """The full/empty mbarriers, and with an inline split-K one word per consumer (the
        flag that says its tile's slices are all in), with a cluster split-K the mbarrier that
        says every slice's partials are in."""
        return 2 * self.stages * BARRIER_BYTES + (16 if self.split_inline or self.split_cluster
                                                   else 0)

    @property
    def vectors(self) -> tuple:
        """The epilogue's vectors staged in shared memory (``vectors.staged_vectors``)."""
        return staged_vectors(self)

    @property
    def residual_staged(self) -> bool:
        """R copied into the C staging tile at each tile's start (``vectors.residual_staged``)."""
        return residual_staged(self)

    @property
    def stages_operands(self) -> bool:
        """The consumers copy epilogue operands into shared memory at each tile's start."""
        return bool(self.vectors) or self.residual_staged

    @property
    def vector_smem_bytes(self) -> int:
        """Shared memory of the staged vectors: two slots per consumer warpgroup."""
        return self.consumers * consumer_bytes(self.vectors)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: stages, C staging, barriers, the staged vectors
        and the slack for rounding the base up to a 1024-byte atom."""
        return HopperTile.smem_bytes.fget(self) + self.vector_smem_bytes

    def registers_needed(self) -> int:
        """Registers a consumer thread needs: accumulators plus REG_RESERVE, plus
        OVERLAP_RESERVE for the deferred passes that run beside the next tile's
        accumulators."""
        return self.acc_regs + self.REG_RESERVE + (OVERLAP_RESERVE if self.overlap else 0)

    def stack_risk(self) -> str | None:
        """Why ptxas would likely spill whatever the estimate says, or None: a ping-pong
        consumer (a whole tile's accumulators in one warpgroup) storing split-K partial sums
        to a column-major C (40 bytes of spill stores at 128x128, split-K 4, rcc, GELU: a
        CI spill sample on sm_90a)."""
        if self.pingpong and self.split_k > 1 and self.layout[2] == "c":
            return "ping-pong with split-K partials stored to a column-major C"
        return None

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """CTAs for every tile of an M x N output, in whole clusters:
        (ceil(M/(BM*CLUSTER_M)) * ceil(N/(BN*CLUSTER_N)) * CLUSTER, 1, 1). A non-persistent
        launch uses it as is (z = batch x split_k); a persistent one (``WgmmaLaunch.grid``) caps
        x at the SMs, rounded down to whole clusters. Block = (threads, 1, 1)."""
        tiles = (-(-m // (self.bm * self.cluster_m))) * (-(-n // (self.bn * self.cluster_n)))
        return (tiles * self.cluster, 1, 1)
