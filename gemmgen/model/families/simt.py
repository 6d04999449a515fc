"""The FP32 SIMT family: its configuration model, rule table, derived figures, search space and
the optimization ladder of the reference articles (siboehm, Lei Mao, tgautam, gty111)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..arch import STATIC_SMEM_LIMIT, get_arch
from ..config import (
    EPILOGUES,
    LAYOUTS,
    MAX_THREADS_PER_SM,
    WARP_SIZE,
    ConfigBase,
    Family,
    Preset,
    div as _div,
    tile_intensity,
)
from ..rules import Cmp, Rule, at_least, at_most, equal, multiple_of, not_equal, one_of

FLOAT_BYTES = 4
LANES_M, LANES_N = 8, 4  # lanes of a warp along M and N, as in Lei Mao's v06
MAX_ACC_REGS = 128
SMEM_ALIGN = 16  # the __align__ of the As and Bs shared arrays (bytes)


def _when_stages0(check: Cmp, rid: str, name: str, why: str) -> Rule:
    return Rule(rid, name, check, why, when=equal("STAGES", 0))


_STAGED = at_least("STAGES", 1)
_WARP_TILED = not_equal("WM", 0)
_SMEM_STORE = equal("STORE_SMEM", 1)
_SWIZZLED = equal("SWIZZLE_A", 1)

SIMT_RULES: tuple[Rule, ...] = (
    Rule("R01", "bm-positive", at_least("BM", 1), "the block tile needs rows"),
    Rule("R02", "bn-positive", at_least("BN", 1), "the block tile needs columns"),
    Rule("R03", "bk-positive", at_least("BK", 1), "each K step covers at least one k"),
    Rule("R04", "tm-positive", at_least("TM", 1), "each thread owns at least one row"),
    Rule("R05", "tn-positive", at_least("TN", 1), "each thread owns at least one column"),
    Rule("R06", "wm-nonnegative", at_least("WM", 0), "WM is a tile size, 0 meaning no warp tile"),
    Rule("R07", "wn-nonnegative", at_least("WN", 0), "WN is a tile size, 0 meaning no warp tile"),
    Rule("R08", "vec-width", one_of("VEC", (1, 2, 4)), "float, float2 or float4 accesses"),
    Rule("R09", "skew-nonnegative", at_least("SKEW", 0), "skew pads shared-memory rows"),
    Rule("R10", "stages-range", one_of("STAGES", (0, 1, 2)),
         "0 = no shared memory, 1 = single buffer, 2 = double buffer"),
    Rule("R11", "wm-needs-wn", not_equal("WN", 0), "a warp tile needs both WM and WN",
         when=_WARP_TILED),
    Rule("R12", "wn-needs-wm", not_equal("WM", 0), "a warp tile needs both WM and WN",
         when=not_equal("WN", 0)),
    Rule("R13", "bm-tm", multiple_of("BM", "TM"), "thread tiles must cover the block rows"),
    Rule("R14", "bn-tn", multiple_of("BN", "TN"), "thread tiles must cover the block columns"),
    Rule("R15", "bm-wm", multiple_of("BM", "WM"), "warp tiles must cover the block rows",
         when=_WARP_TILED),
    Rule("R16", "bn-wn", multiple_of("BN", "WN"), "warp tiles must cover the block columns",
         when=not_equal("WN", 0)),
    Rule("R17", "wm-lanes", multiple_of("WM", ("LANES_M", "TM")),
         "the warp's 8 lane rows of TM must cover WM", when=_WARP_TILED),
    Rule("R18", "wn-lanes", multiple_of("WN", ("LANES_N", "TN")),
         "the warp's 4 lane columns of TN must cover WN", when=not_equal("WN", 0)),
    Rule("R19", "whole-warps", multiple_of("THREADS", WARP_SIZE), "blocks are whole warps"),
    Rule("R20", "max-threads", at_most("THREADS", 1024), "CUDA allows 1024 threads per block"),
    Rule("R21", "a-contig-vec", multiple_of("A_CONTIG", "VEC"),
         "A is loaded in vectors along its contiguous dimension (K if row-major, M if not)",
         when=_STAGED),
    Rule("R22", "a-tile-loads", multiple_of(("BM", "BK"), ("THREADS", "VEC")),
         "every thread loads the same number of A vectors", when=_STAGED),
    Rule("R23", "b-tile-loads", multiple_of(("BK", "BN"), ("THREADS", "VEC")),
         "every thread loads the same number of B vectors", when=_STAGED),
    Rule("R24", "tn-vec", multiple_of("TN", "VEC"),
         "B fragments are read from shared memory as vectors", when=_STAGED),
    Rule("R25", "tm-vec", multiple_of("TM", "VEC"),
         "A fragments of the transposed tile are read as vectors", when=equal("TRANSPOSE_A", 1)),
    Rule("R26", "skew-vec", multiple_of("SKEW", "VEC"), "padded rows must stay vector-aligned"),
    Rule("R27", "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
         "more accumulators than half the 255-register budget spill"),
    Rule("R28", "static-smem", at_most("SMEM_BYTES", STATIC_SMEM_LIMIT),
         "static shared memory is limited to 48 KiB per block"),
    _when_stages0(equal(("TM", "TN"), 1), "R29", "stages0-thread-tile",
                  "without shared memory each thread computes one element"),
    _when_stages0(equal("BK", 1), "R30", "stages0-bk", "without shared memory K steps by one"),
    _when_stages0(equal("VEC", 1), "R31", "stages0-vec", "without shared memory loads are scalar"),
    _when_stages0(equal("SKEW", 0), "R32", "stages0-skew", "without shared memory there is no padding"),
    _when_stages0(equal("WM", 0), "R33", "stages0-warp-tile",
                  "without shared memory there is no warp tile"),
    _when_stages0(equal("TRANSPOSE_A", 0), "R34", "stages0-transpose",
                  "without shared memory there is no A tile to transpose"),
    Rule("R35", "thread-order", equal("STAGES", 0),
         "only the naive kernel walks M with consecutive threads", when=equal("THREAD_ORDER_M", 1)),
    Rule("R36", "min-blocks-positive", at_least("MIN_BLOCKS", 1),
         "__launch_bounds__ asks for at least one resident block"),
    Rule("R37", "min-blocks-threads", at_most(("MIN_BLOCKS", "THREADS"), MAX_THREADS_PER_SM),
         "no SM holds more than 2048 threads"),
    Rule("R38", "b-contig-vec", multiple_of("B_CONTIG", "VEC"),
         "B is loaded in vectors along its contiguous dimension (N if row-major, K if not)",
         when=_STAGED),
    # (a) the maxas output stage: registers -> shared memory -> coalesced 128-bit stores
    Rule("R39", "smem-store-warp-tile", not_equal("WM", 0),
         "the shared-memory output stage stages one warp tile at a time", when=_SMEM_STORE),
    Rule("R40", "smem-store-tn", one_of("TN", (4, 8)),
         "the staged rows are written as float4 and are conflict-free for TN of 4 or 8",
         when=_SMEM_STORE),
    Rule("R41", "smem-store-row-major-c", equal("LAYOUT_C_COL", 0),
         "the staged rows are stored along N, so C must be row-major", when=_SMEM_STORE),
    # (b) XOR-swizzled transposed A tile
    Rule("R42", "swizzle-transposed", equal("TRANSPOSE_A", 1),
         "the swizzle permutes the columns of the transposed (K-major) A tile",
         when=_SWIZZLED),
    Rule("R43", "swizzle-bm", multiple_of("BM", "WARP_SIZE"),
         "the XOR reaches 32 columns, which must stay inside one A row", when=_SWIZZLED),
    Rule("R44", "swizzle-bk", multiple_of("WARP_SIZE", "BK"),
         "32 banks split into BK/VEC groups of whole vectors", when=_SWIZZLED),
    Rule("R45", "swizzle-skew", equal("SKEW", 0),
         "the swizzle replaces padding (its bank mapping assumes unpadded rows)",
         when=_SWIZZLED),
    _when_stages0(equal("FRAG_DB", 0), "R46", "stages0-frag-db",
                  "without shared memory there are no fragments to double-buffer"),
    _when_stages0(equal("PEEL", 0), "R47", "stages0-peel",
                  "only the tiled kernels have an unchecked interior path"),
    _when_stages0(equal("ALIGN_ROW", 0), "R48", "stages0-align",
                  "without shared memory loads are scalar, so there is no vector body"),
)


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

    The fields of the last steps (issue 12, "SIMT: the last 15%"):
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
    choices = {"thread_order": ("n", "m"), "layout": LAYOUTS, "epilogue": EPILOGUES,
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
        """Name parts for the issue-12 fields, only where they differ from the defaults (so
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

    def _blocks_per_sm(self, arch: str) -> int:
        """``blocks_per_sm``, or 0 for an unchecked config whose shared memory comes out
        negative (render() must work on any config; the static_asserts reject it)."""
        return self.blocks_per_sm(arch) if self.smem_bytes >= 0 else 0


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
        exactly the cap). The issue-12 fields add what they keep live: a second set of
        fragments (frag_db), 4 registers of staging addresses (store smem) and 8 for the
        unchecked copy's own addresses (peel); these terms are not part of that calibration
        (checked against ptxas on a dozen configs around the new presets)."""
        frags = self.tm * self.wm_iter + self.tn * self.wn_iter
        loads = self.a_loads + self.b_loads
        live_k = 2 * frags * max(0, min(self.bk, 64) - 16) // 16
        rows_a = 0 if self.transpose_a else 4 * self.tm * self.wm_iter
        return (self.acc_regs + frags * (1 + self.frag_db) + loads * (self.vec + 3) + live_k
                + rows_a + 4 * self.layout.count("c") + 8 + 4 * (self.store == "smem")
                + 8 * self.peel)


# The ladder's last steps (issue 12), each adding one technique to the step before it.
_STEPS_CS = {"store": "smem"}
_STEPS_SWZ = {**_STEPS_CS, "swizzle_a": True, "skew": 0}
_STEPS_FDB = {**_STEPS_SWZ, "frag_db": True}
_STEPS_BIG = {**_STEPS_FDB, "bm": 256, "bk": 8, "wm": 64, "wn": 64, "min_blocks": 1}
_STEPS_PEEL = {**_STEPS_BIG, "peel": True}
_STEPS_BEST = {**_STEPS_PEEL, "align": "row"}
_LAST_STEPS = (
    ("simt_cs", _STEPS_CS,
     "maxas output stage: each warp passes its accumulators through shared memory (STS.128) "
     "and stores whole 256-byte rows of C with 128-bit stores (LDS.128 -> STG.128)",
     "maxas SGEMM output stage (../shared/reference/maxas-sgemm-output-zh.txt)"),
    ("simt_swizzle", _STEPS_SWZ,
     "the transposed A tile is XOR-swizzled per k group instead of padded: conflict-free "
     "transposing stores, vector fragment reads",
     "CUTLASS crosswise/XOR shared-memory layouts; gty111 step 8's swizzle, applied to SIMT"),
    ("simt_fragdb", _STEPS_FDB,
     "register double buffering: k-slice k+1's fragments are read while slice k is multiplied",
     "maxas inner loop; CUTLASS's warp-level fragment double buffer"),
    ("simt_256x128", _STEPS_BIG,
     "cuBLAS's FFMA tile: 256x128x8 blocks of 64x64 warps, 128 accumulators per thread, one "
     "block per SM within 255 registers",
     "cuBLAS sm80_xmma_gemm_f32f32 ... tilesize256x128x8 ffma (Nsight Compute, README)"),
    ("simt_peel", _STEPS_PEEL,
     "edges peeled: CTAs inside M x N run a copy without M/N bounds checks, and whole K tiles "
     "load without K checks",
     "CUTLASS's predicated tile iterators: bounds predicates only where a tile crosses an edge"),
    ("simt_best", _STEPS_BEST,
     "aligned vector bodies per row: a row whose tile segment is 16-byte aligned loads float4, "
     "the others scalars, so odd lda keeps the vector loads it can",
     "per-row 16-byte alignment checks, after CUTLASS's predicated iterators"),
)
_TUNED = SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, vec=4, skew=4, stages=2, min_blocks=2)

PRESETS: tuple[Preset, ...] = (
    Preset("naive", SimtConfig(32, 32, 1, 1, 1, vec=1, stages=0, transpose_a=False,
                               thread_order="m"),
           "one thread per C element; consecutive threads walk M, so A and C accesses are strided",
           "Lei Mao v00; siboehm kernel 1"),
    Preset("coalesced", SimtConfig(32, 32, 1, 1, 1, vec=1, stages=0, transpose_a=False),
           "consecutive threads walk N, so B loads and C stores coalesce",
           "Lei Mao v01; siboehm kernel 2"),
    Preset("smem", SimtConfig(32, 32, 32, 1, 1, vec=1, stages=1, transpose_a=False),
           "32x32 A and B tiles staged in shared memory, one element per thread",
           "Lei Mao v02; siboehm kernel 3"),
    Preset("tile1d", SimtConfig(64, 64, 8, 8, 1, vec=1, stages=1, transpose_a=False),
           "each thread computes a column of TM=8 elements, reusing one B value 8 times",
           "Lei Mao v03; siboehm kernel 4"),
    Preset("tile2d", SimtConfig(128, 128, 16, 8, 8, vec=1, stages=1, transpose_a=False),
           "each thread computes an 8x8 register tile from an outer product per k",
           "Lei Mao v04; siboehm kernel 5"),
    Preset("vectorized", SimtConfig(128, 128, 16, 8, 8, vec=4, skew=4, stages=1),
           "float4 global and shared accesses; A stored transposed (K-major) in shared memory, "
           "rows padded by 4 floats so the transposing stores avoid bank conflicts",
           "Lei Mao v05; siboehm kernel 6; tgautam xGeMM step 6"),
    Preset("warptile", SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4, stages=1),
           "warp tiles of 64x32 with lanes 8 (M) x 4 (N); each thread owns 2x2 sub-tiles of 4x4",
           "Lei Mao v06; siboehm kernel 10"),
    Preset("warptile_db", SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4, stages=2),
           "warp tiling plus double buffering: the next K tile is loaded into registers while "
           "the current one is computed, one barrier per K tile",
           "gty111 step 5 (prefetch), applied to the SIMT warp-tiled kernel"),
    Preset("warptile_tuned", _TUNED,
           "double-buffered warp tiling with 32x64 warp tiles and __launch_bounds__(256, 2), "
           "which caps registers at 128 so two blocks share an SM",
           "the sweep in benchmarks/explore.py (H200, 4096^3); CUTLASS's min blocks per SM"),
) + tuple(Preset(name, _TUNED.replace(**fields), technique, source) for name, fields, technique,
          source in _LAST_STEPS)

# The values each field takes in the tuning search (a product of these, then validation).
SPACE = {
    "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (8, 16, 32),
    "warp": ((None, None), (32, 32), (32, 64), (64, 32), (64, 64)),
    "tm": (4, 8), "tn": (4, 8), "skew": (0, 4), "stages": (1, 2), "min_blocks": (1, 2),
    # (store, swizzle_a, frag_db, peel, align): the earlier kernel, the issue-12 techniques
    # together, and the output stage alone (the swizzle needs skew 0, so those combinations
    # drop the skew-4 half: the space grows about 2.5x, not 3x)
    "technique": (("direct", False, False, False, "matrix"), ("smem", True, True, True, "row"),
                  ("smem", False, False, False, "matrix")),
}


def space(dtype: str = "fp32") -> list[SimtConfig]:
    """Every configuration of the SIMT search space that passes the rules (fp32 only)."""
    s = SPACE
    out = []
    for bm, bn, bk, (wm, wn), tm, tn, skew, st, mb, (store, swz, fdb, peel, align) in \
            itertools.product(s["bm"], s["bn"], s["bk"], s["warp"], s["tm"], s["tn"], s["skew"],
                              s["stages"], s["min_blocks"], s["technique"]):
        cfg = SimtConfig.unchecked(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, wm=wm, wn=wn, vec=4,
                                   skew=skew, stages=st, min_blocks=mb, store=store,
                                   swizzle_a=swz, frag_db=fdb, peel=peel, align=align)
        if not cfg.violations():
            out.append(cfg)
    return out


FAMILY = Family(
    name="simt", config=SimtConfig, summary="FP32 on the CUDA cores (FFMA), any NVIDIA GPU",
    dtypes=("fp32",), presets=PRESETS, defaults={"fp32": "warptile_tuned"},
    flag_defaults={"bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "skew": 4},
    field_help={
        "bm": "block tile rows (M)", "bn": "block tile columns (N)", "bk": "block tile depth (K)",
        "wm": "warp tile rows (omit for no warp tiling)", "wn": "warp tile columns",
        "tm": "thread tile rows", "tn": "thread tile columns",
        "vec": "floats per global/shared access: 1, 2 or 4",
        "skew": "padding floats per shared-memory row",
        "stages": "0 none, 1 single, 2 double buffer",
        "transpose_a": "store the A tile K-major in shared memory",
        "thread_order": "n: consecutive threads take columns; m: rows, the naive order",
        "min_blocks": "resident blocks per SM asked of ptxas (__launch_bounds__)",
        "store": "direct: from registers; smem: maxas output stage, 128-bit coalesced stores",
        "swizzle_a": "XOR-swizzle the transposed A tile instead of padding it",
        "frag_db": "double-buffer the k-slice fragments in registers",
        "peel": "interior CTAs run without bounds checks; edge CTAs keep them",
        "align": "matrix: vector loads if the whole operand is aligned; row: per row",
    },
    space=space, min_cc=70)
