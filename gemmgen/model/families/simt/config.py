"""The simt family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass

from ...arch import get_arch
from ...config import LAYOUTS, WARP_SIZE, ConfigBase, div as _div, tile_intensity
from ...epilogue import Epilogue
from .rules import FLOAT_BYTES, LANES_M, LANES_N, SIMT_RULES, SMEM_ALIGN

HEADROOM = {(True, False, False): 6, (True, True, False): 15, (True, True, True): 40,
            (False, True, True): 4}
"""Registers the estimate adds, by (double-buffered and held to 128 registers: stages 2 and
min_blocks >= 2; an epilogue other than none, bias or relu; frag_db): one more than the most
any kernel of that kind spilled by in the spill sweep (``registers_needed``), 0 where none
did; 40 for the double-buffered frag_db kind with a heavy epilogue, whose spread (32 so far)
kept growing as the sweep went on: in effect it leaves that kind out."""


@dataclass(frozen=True, slots=True)
class SimtConfig(ConfigBase):
    """An FP32 SIMT GEMM kernel: C[M,N] = alpha * A[M,K] @ B[K,N] + beta * C, row-major, fp32.

    Fields (elements, not bytes): ``bm, bn, bk`` block tile; ``wm, wn`` warp tile (``None``:
    no warp tiling, each thread owns one contiguous TM x TN tile); ``tm, tn`` thread tile per
    warp sub-tile; ``vec`` floats per global/shared access (1, 2, 4); ``skew`` padding floats per
    shared-memory row; ``stages`` 0 (operands straight from global memory), 1 (one shared buffer)
    or 2 (double buffering); ``transpose_a`` stores the A tile K-major in shared memory (Lei
    Mao's v05, siboehm's kernel 6); ``thread_order`` "n" (consecutive threads take consecutive
    columns: coalesced) or "m" (consecutive rows: the naive kernel's order); ``min_blocks`` the
    resident blocks per SM asked of ptxas through ``__launch_bounds__(threads, min_blocks)``,
    which caps registers per thread at 65536 / (threads * min_blocks) (CUTLASS's
    kMinBlocksPerMultiprocessor).

    The fields of the ladder's last steps:
    ``store`` "direct" (each thread stores its TN-wide rows from registers) or "smem" (the
    maxas output stage: each warp passes its accumulators through shared memory, one row of
    its sub-tiles at a time, and stores whole 256-byte rows with 128-bit stores);
    ``swizzle_a`` stores the transposed A tile with its columns XOR-permuted per k group
    instead of padded (no bank conflicts on the transposing stores, as in CUTLASS's
    crosswise layouts); ``frag_db`` double-buffers the fragments in registers, loading
    k-slice k+1 while slice k is multiplied (the maxas / CUTLASS inner loop); ``peel``
    gives CTAs whose tile lies inside M x N a copy of the main loop and epilogue without
    M/N bounds checks, and runs every K tile but a partial last one without K checks;
    ``align`` "matrix" (vector loads only when the whole operand is aligned) or "row" (each
    row decides: a row whose first element of the tile is 16-byte aligned loads vectors,
    the others scalars, so an odd lda keeps vector loads on the rows that allow them).

    Raises ``ConfigError`` listing every broken rule of ``SIMT_RULES`` with its numbers.
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    wm: int | None = None
    wn: int | None = None
    vec: int = 4
    skew: int = 0
    stages: int = 2
    transpose_a: bool = True
    thread_order: str = "n"
    min_blocks: int = 1
    store: str = "direct"
    swizzle_a: bool = False
    frag_db: bool = False
    peel: bool = False
    align: str = "matrix"
    layout: str = "rrr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None

    family = "simt"
    dtype = "fp32"
    acc = "fp32"
    out = "fp32"
    template = "simt.cu.j2"
    rules = SIMT_RULES
    field_types = {"transpose_a": bool, "thread_order": str, "layout": str, "epilogue": str,
                   "store": str, "swizzle_a": bool, "frag_db": bool, "peel": bool,
                   "align": str}
    choices = {"thread_order": ("n", "m"), "layout": LAYOUTS,
               "store": ("direct", "smem"), "align": ("matrix", "row")}
    optional = frozenset({"wm", "wn", "m", "n", "k"})
    search_domain = {
        "bm": (16, 32, 64, 128, 256), "bn": (16, 32, 64, 128, 256), "bk": (1, 4, 8, 16, 32),
        "tm": (1, 2, 4, 8, 16), "tn": (1, 2, 4, 8, 16), "wm": (None, 16, 32, 64, 128),
        "wn": (None, 16, 32, 64, 128), "vec": (1, 2, 4), "skew": (0, 1, 2, 4, 8),
        "stages": (0, 1, 2), "transpose_a": (False, True), "thread_order": ("n", "m"),
        "min_blocks": (1, 2), "store": ("direct", "smem"), "swizzle_a": (False, True),
        "frag_db": (False, True), "peel": (False, True), "align": ("matrix", "row"),
    }
    fixed_in_search = ("layout", "epilogue", "m", "n", "k")

    # ---- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """Every field in a fixed order; the kernel symbol, file name and cache key."""
        warp = f"w{self.wm}x{self.wn}" if self.warp_tiled else "wnone"
        a = "at" if self.transpose_a else "an"
        return (f"gemm_simt_f32_{self.bm}x{self.bn}x{self.bk}_{warp}_t{self.tm}x{self.tn}"
                f"_v{self.vec}_skew{self.skew}_st{self.stages}_{a}_o{self.thread_order}"
                f"_mb{self.min_blocks}{self.technique_suffix()}{self.feature_suffix()}")

    def technique_suffix(self) -> str:
        """Name parts for the last steps' fields, only where they differ from the defaults (so
        the earlier presets keep their names): _cs (smem output stage), _swz, _fdb, _peel,
        _arow."""
        return ("_cs" * (self.store == "smem") + "_swz" * self.swizzle_a
                + "_fdb" * self.frag_db + "_peel" * self.peel + "_arow" * (self.align == "row"))

    # ---- derived figures ------------------------------------------------------------------
    @property
    def warp_tiled(self) -> bool:
        return bool(self.wm) or bool(self.wn)

    @property
    def threads(self) -> int:
        """Threads per block."""
        if self.warp_tiled:
            return WARP_SIZE * _div(self.bm, self.wm or 0) * _div(self.bn, self.wn or 0)
        return _div(self.bm, self.tm) * _div(self.bn, self.tn)

    @property
    def warps(self) -> int:
        return _div(self.threads, WARP_SIZE)

    @property
    def wm_iter(self) -> int:
        """Warp sub-tiles along M each thread visits (1 without warp tiling)."""
        return _div(self.wm or 0, LANES_M * self.tm) if self.warp_tiled else 1

    @property
    def wn_iter(self) -> int:
        return _div(self.wn or 0, LANES_N * self.tn) if self.warp_tiled else 1

    @property
    def acc_regs(self) -> int:
        """fp32 accumulator registers per thread."""
        return self.tm * self.tn * self.wm_iter * self.wn_iter

    @property
    def a_smem_shape(self) -> tuple[int, int]:
        """Rows x columns (floats) of one A buffer: [BK][BM+skew] if transposed, else [BM][BK+skew]."""
        return (self.bk, self.bm + self.skew) if self.transpose_a else (self.bm, self.bk + self.skew)

    @property
    def b_smem_shape(self) -> tuple[int, int]:
        return (self.bk, self.bn + self.skew)

    @property
    def swz_groups(self) -> int:
        """k groups of the A swizzle: BK / VEC vectors of one row of a row-major A tile (at
        least 1). k's group g XORs the A column with g * swz_span."""
        return max(1, self.bk // max(1, self.vec))

    @property
    def swz_span(self) -> int:
        """Columns each swizzle group spans: 32 banks / groups (the lanes of one transposing
        store cover 32 / groups consecutive rows of A, one bank group per k group)."""
        return max(1, WARP_SIZE // self.swz_groups)

    @property
    def c_skew(self) -> int:
        """Padding floats of a staged C row: makes a row start 16 (TN=4) or 4 (TN=8) banks
        after the one above it, so the 8 lanes of one float4 store phase hit 32 distinct banks."""
        shift = 16 if self.tn == 4 else 4
        return (shift - (self.wn or 0)) % WARP_SIZE

    @property
    def cs_cols(self) -> int:
        """Floats per row of a warp's C staging buffer: WN + c_skew."""
        return (self.wn or 0) + self.c_skew

    @property
    def cs_bytes(self) -> int:
        """Shared memory of the C staging buffers ([warps][8][cs_cols] floats; 0 unless
        store is "smem"). They overlay the A and B tiles, which are dead by then."""
        return self.warps * LANES_M * self.cs_cols * FLOAT_BYTES if self.store == "smem" else 0

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block in bytes (all stages): the As array, padded to
        SMEM_ALIGN bytes because Bs is declared ``__align__(16)`` after it, then Bs (ptxas
        places them in that order). With the smem output stage the tiles and the C staging
        buffers share one 16-byte-aligned union: the larger of the two, rounded up to 16."""
        a, b = self.a_smem_shape, self.b_smem_shape
        a_bytes = self.stages * FLOAT_BYTES * a[0] * a[1]
        ab = -(-a_bytes // SMEM_ALIGN) * SMEM_ALIGN + self.stages * FLOAT_BYTES * b[0] * b[1]
        if self.store != "smem":
            return ab
        return -(-max(ab, self.cs_bytes) // SMEM_ALIGN) * SMEM_ALIGN

    @property
    def static_smem_bytes(self) -> int:
        """What ptxas reports as ``smem``: all of it is static in this family."""
        return self.smem_bytes

    @property
    def dynamic_smem_bytes(self) -> int:
        """Dynamic shared memory passed at launch (none in this family)."""
        return 0

    @property
    def a_loads(self) -> int:
        """Vector loads of A per thread per K tile."""
        return _div(self.bm * self.bk, self.threads * self.vec) if self.stages else 0

    @property
    def b_loads(self) -> int:
        return _div(self.bk * self.bn, self.threads * self.vec) if self.stages else 0

    @property
    def global_loads_per_thread(self) -> int:
        """Global load instructions per thread per K tile (A and B vectors)."""
        return self.a_loads + self.b_loads if self.stages else 2 * self.bk

    def env(self) -> dict[str, int]:
        """The named quantities the rules and the template's constants use."""
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "TM": self.tm, "TN": self.tn,
            "WM": self.wm or 0, "WN": self.wn or 0, "VEC": self.vec, "SKEW": self.skew,
            "STAGES": self.stages, "TRANSPOSE_A": int(self.transpose_a),
            "THREAD_ORDER_M": int(self.thread_order == "m"), "MIN_BLOCKS": self.min_blocks,
            "LANES_M": LANES_M,
            "LANES_N": LANES_N, "WARP_SIZE": WARP_SIZE, "THREADS": self.threads, "ACC_REGS": self.acc_regs,
            "SMEM_BYTES": self.smem_bytes, "A_CONTIG": self.a_contig, "B_CONTIG": self.b_contig,
            "STORE_SMEM": int(self.store == "smem"), "SWIZZLE_A": int(self.swizzle_a),
            "FRAG_DB": int(self.frag_db), "PEEL": int(self.peel),
            "ALIGN_ROW": int(self.align == "row"),
            **self.feature_env(),
        }

    @property
    def a_contig(self) -> int:
        """Extent of the A tile along A's contiguous dimension: BK if A is row-major, else BM."""
        return self.bm if self.layout[0] == "c" else self.bk

    @property
    def b_contig(self) -> int:
        """Extent of the B tile along B's contiguous dimension: BN if row-major, else BK."""
        return self.bk if self.layout[1] == "c" else self.bn

    @property
    def flops_per_byte(self) -> dict[str, float | None]:
        """Arithmetic intensity (FLOP per byte moved) at each level of the tiling hierarchy.

        ``global``: block tile, bytes a block loads from global memory per K step;
        ``shared``: warp footprint, distinct shared-memory bytes a warp reads (None if stages 0);
        ``register``: thread tile, bytes each thread loads into registers per k.
        """
        def tile(m: int, n: int) -> float:
            return tile_intensity(m, n, FLOAT_BYTES)
        tm, tn = self.tm * self.wm_iter, self.tn * self.wn_iter
        if self.warp_tiled:
            wm, wn = self.wm or 0, self.wn or 0
        else:  # the rows and columns the 32 threads of one warp cover
            across = max(1, min(WARP_SIZE, _div(self.bn, self.tn)))
            wm, wn = self.tm * max(1, WARP_SIZE // across), self.tn * across
        return {"global": tile(self.bm, self.bn) if self.stages else tile(tm, tn),
                "shared": tile(wm, wn) if self.stages else None,
                "register": tile(tm, tn)}

    def ctypes(self) -> dict[str, str]:
        """C++ types the template declares (always float in this family)."""
        return {"in_t": "float", "out_t": "float"}

    def template_constants(self) -> dict[str, int]:
        """Every compile-time constant the kernel declares: fields plus derived values."""
        a_rows, a_cols = self.a_smem_shape
        return {**self.env(), "WARPS_N": _div(self.bn, self.wn or 0) if self.warp_tiled else 0,
                "THREADS_N": _div(self.bn, self.tn), "WM_ITER": self.wm_iter,
                "WN_ITER": self.wn_iter,
                "WM_STEP": LANES_M * self.tm, "WN_STEP": LANES_N * self.tn,
                "A_LOADS": self.a_loads, "B_LOADS": self.b_loads,
                "A_VECS_PER_ROW": _div(self.a_contig, self.vec),
                "B_VECS_PER_ROW": _div(self.b_contig, self.vec),
                "AS_ROWS": a_rows, "AS_COLS": a_cols, "BS_COLS": self.b_smem_shape[1],
                "VEC_BYTES": FLOAT_BYTES * self.vec,
                "WARPS": self.warps, "SWZ_GROUPS": self.swz_groups, "SWZ_SPAN": self.swz_span,
                "CS_COLS": self.cs_cols, "CS_VECS_PER_ROW": _div(self.wn or 0, 4),
                "CS_READS": _div(LANES_M * (self.wn or 0), 4 * WARP_SIZE)}

    def figures(self, arch: str = "sm_90") -> dict:
        """The derived figures the emitted header and ``gemmgen list`` report."""
        return {"threads": self.threads, "warps": self.warps, "smem_bytes": self.smem_bytes,
                "acc_regs": self.acc_regs, "global_loads_per_thread": self.global_loads_per_thread,
                "flops_per_byte": {k: None if v is None else round(v, 3)
                                   for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self._blocks_per_sm(arch)}

    def brief(self) -> str:
        warp = f"{self.wm}x{self.wn}" if self.warp_tiled else "-"
        a = "transposed" if self.transpose_a else "row-major"
        extra = " ".join(t for t in ("store smem" * (self.store == "smem"),
                                     "swizzle A" * self.swizzle_a, "frag db" * self.frag_db,
                                     "peeled" * self.peel, "row align" * (self.align == "row"))
                         if t)
        return (f"block {self.bm}x{self.bn}x{self.bk}  warp {warp}  thread {self.tm}x{self.tn}  "
                f"vec {self.vec}  A {a} in smem  skew {self.skew}  stages {self.stages}"
                + (f"  {extra}" if extra else ""))

    def registers_needed(self) -> int:
        """Registers per thread the kernel needs to run without spilling, estimated before
        compiling: the accumulators and operand fragments, each global load's VEC values and
        about 3 registers of addressing, fragments kept live across the unrolled K tile when
        BK > 16, the row addresses of a non-transposed A tile, 4 per column-major operand and
        8 of loop state. Calibrated against ptxas (CUDA 13, sm_90) on 317 configurations of
        the search space and around the presets, in random layouts and epilogues: it calls
        304 right (1 spill missed, 12 false alarms, most of them kernels that ptxas fits at
        exactly the cap). The last steps' fields add what they keep live: a second set of
        fragments (frag_db), 4 registers of staging addresses (store smem) and 8 for the
        unchecked copy's own addresses (peel); these terms are not part of that calibration
        (checked against ptxas on a dozen configs around the new presets).

        The spill sweep (benchmarks/investigations/spill_sweep.py, CUDA 13, sm_90; results in
        benchmarks/results/spill_sweep.json) found kernels spilling under this estimate in
        some layouts and epilogues and not in others: double-buffered ones held to 128
        registers (stages 2, min_blocks 2), most with GELU or bias+ReLU, and frag_db ones
        with them. HEADROOM adds, per kind, one register more than the most any of them
        spilled by, so none the sweep compiled is left in; the price is false alarms near
        the cap, the presets simt_cs and simt_swizzle among them (124 estimated, 128 of 128
        registers used)."""
        frags = self.tm * self.wm_iter + self.tn * self.wn_iter
        loads = self.a_loads + self.b_loads
        live_k = 2 * frags * max(0, min(self.bk, 64) - 16) // 16
        rows_a = 0 if self.transpose_a else 4 * self.tm * self.wm_iter
        heavy = Epilogue.parse(self.epilogue).spelling not in ("none", "bias", "relu")
        kind = (self.stages == 2 and self.min_blocks >= 2, heavy, self.frag_db)
        headroom = HEADROOM.get(kind, 0)
        return (self.acc_regs + frags * (1 + self.frag_db) + loads * (self.vec + 3) + live_k
                + rows_a + 4 * self.layout.count("c") + 8 + 4 * (self.store == "smem")
                + 8 * self.peel + headroom)

    def stack_risk(self) -> str | None:
        """Why ptxas would likely give the kernel a stack frame whatever its registers, or
        None: double-buffered fragments (frag_db) with a K tile of 32 or more, whose
        unrolled K loop ptxas may leave rolled, indexing the fragment buffers at run time
        (local memory: 18 of the 56 such kernels of the spill sweep, several with no spill
        at all). With ``peel`` (the main loop rendered twice, interior and edge) from BK = 16
        on: 96 to 128 bytes of stack in every layout at 64x64x16 (a CUDA 13 spill sample),
        none without peel or at BK = 8."""
        if self.frag_db and (self.bk >= 32 or (self.peel and self.bk >= 16)):
            why = "BK >= 32" if self.bk >= 32 else "BK >= 16 and peel"
            return (f"frag_db with {why}: ptxas may keep the fragment buffers in local "
                    "memory (a stack frame)")
        return None
