"""The raw ``mma.sync`` tensor-core family for FP16, BF16 and TF32 inputs on sm_80 and newer:
its configuration model, rule table, search space and gty111's GEMM_MMA ladder."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..arch import get_arch
from ..config import (
    EPILOGUES,
    LAYOUTS,
    MAX_THREADS_PER_SM,
    WARP_SIZE,
    ConfigBase,
    Family,
    Preset,
    div,
    tile_intensity,
)
from ..dtypes import CTYPES, ELEM_BYTES, stored_as
from ..rules import Rule, at_least, at_most, equal, multiple_of, one_of

CHUNK_BYTES = 16         # one cp.async / ldmatrix row / vector load
MAX_DYNAMIC_SMEM = 227 * 1024
MAX_ACC_REGS = 128
MMA_SHAPES = {"fp16": (16, 8, 16), "bf16": (16, 8, 16), "tf32": (16, 8, 8)}
PTX_TYPES = {"fp16": "f16", "bf16": "bf16", "tf32": "tf32"}
C_PAD_FLOATS = 8         # padding of the staged C rows: conflict-free float2 fragment writes

_SWIZZLED = at_least("SWIZZLE", 1)
_STAGED_C = equal("STAGED_C", 1)

MMA_RULES: tuple[Rule, ...] = (
    Rule("M01", "bm-positive", at_least("BM", 1), "the block tile needs rows"),
    Rule("M02", "bn-positive", at_least("BN", 1), "the block tile needs columns"),
    Rule("M03", "bk-positive", at_least("BK", 1), "each K step covers at least one k"),
    Rule("M04", "wm-positive", at_least("WM", 1), "each warp owns at least one row"),
    Rule("M05", "wn-positive", at_least("WN", 1), "each warp owns at least one column"),
    Rule("M06", "bm-wm", multiple_of("BM", "WM"), "warp tiles must cover the block rows"),
    Rule("M07", "bn-wn", multiple_of("BN", "WN"), "warp tiles must cover the block columns"),
    Rule("M08", "wm-mma", multiple_of("WM", "MMA_M"), "m16 mma tiles must cover the warp rows"),
    Rule("M09", "wn-mma-pairs", multiple_of("WN", ("MMA_N", 2)),
         "B fragments come in pairs of n8 tiles (one ldmatrix.x4)"),
    Rule("M10", "bk-mma", multiple_of("BK", "MMA_K"), "mma k steps must cover the K tile"),
    Rule("M11", "max-threads", at_most("THREADS", 1024), "CUDA allows 1024 threads per block"),
    Rule("M12", "a-tile-loads", multiple_of(("BM", "BK"), ("THREADS", "LOAD_ELEMS")),
         "every thread copies the same number of A loads"),
    Rule("M13", "b-tile-loads", multiple_of(("BK", "BN"), ("THREADS", "LOAD_ELEMS")),
         "every thread copies the same number of B loads"),
    Rule("M14", "skew-nonnegative", at_least("SKEW", 0), "skew pads shared-memory rows"),
    Rule("M15", "skew-align", multiple_of(("SKEW", "ELEM_BYTES"), CHUNK_BYTES),
         "padded rows stay 16-byte aligned for cp.async and ldmatrix"),
    Rule("M16", "stages-range", one_of("STAGES", (1, 2, 3, 4, 5, 6)),
         "1 = single buffer, 2 = double buffer (prefetch), 3+ = deeper cp.async ring"),
    Rule("M17", "pipeline-cp-async", equal("CP_ASYNC", 1),
         "the multistage ring is fed by cp.async", when=at_least("STAGES", 2)),
    Rule("M18", "cp-async-vector", equal("VECTOR", 1), "cp.async copies 16-byte chunks",
         when=equal("CP_ASYNC", 1)),
    Rule("M19", "swizzle-width", one_of("SWIZZLE", (0, 32, 64, 128)),
         "XOR swizzle over 2, 4 or 8 16-byte chunks (0: none)"),
    Rule("M20", "swizzle-no-skew", equal("SKEW", 0), "the XOR swizzle replaces padding",
         when=_SWIZZLED),
    Rule("M21", "a-swizzle-row", multiple_of("A_ROW_CHUNKS", "A_SW_SPAN"),
         "the XOR stays inside an A row: its 16-byte chunks come in whole swizzle spans",
         when=_SWIZZLED),
    Rule("M22", "b-swizzle-row", multiple_of("B_ROW_CHUNKS", "B_SW_SPAN"),
         "the XOR stays inside a B row: its 16-byte chunks come in whole swizzle spans",
         when=_SWIZZLED),
    Rule("M23", "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
         "more accumulator registers than half the 255-register budget spill"),
    Rule("M24", "dynamic-smem", at_most("SMEM_BYTES", MAX_DYNAMIC_SMEM),
         "no GPU lets one block opt in to more than 227 KiB of shared memory"),
    Rule("M25", "min-blocks-positive", at_least("MIN_BLOCKS", 1),
         "__launch_bounds__ asks for at least one resident block"),
    Rule("M26", "min-blocks-threads", at_most(("MIN_BLOCKS", "THREADS"), MAX_THREADS_PER_SM),
         "no SM holds more than 2048 threads"),
    Rule("M27", "fp16-output", equal("DTYPE_FP16", 1), "an FP16 C needs FP16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("M28", "bf16-output", equal("DTYPE_BF16", 1), "a BF16 C needs BF16 inputs",
         when=equal("OUT_BF16", 1)),
    Rule("M29", "staged-c-registers", equal("ACC_SMEM", 0),
         "the staged epilogue stores register accumulators (shared ones are staged already)",
         when=_STAGED_C),
    # The staged epilogue's BM*BN % (THREADS*EPI_VEC) == 0 follows from M08 and M09 (WM*WN
    # is a multiple of 256), so it needs no rule of its own.
    Rule("M30", "group-m-positive", at_least("GROUP_M", 1),
         "rasterization groups hold at least one block row"),
)


@dataclass(frozen=True, slots=True)
class MmaConfig(ConfigBase):
    """A tensor-core GEMM from raw ``mma.sync`` PTX (gty111's GEMM_MMA steps): C[M,N] =
    act(alpha * A[M,K] @ B[K,N] + beta * C + bias) in any of the 8 layouts.

    Fields: ``bm, bn, bk`` block tile, ``wm, wn`` warp tile (elements); ``dtype`` of A and B
    (fp16, bf16: m16n8k16; tf32: float32 data rounded to TF32, m16n8k8); FP32 accumulators;
    ``out`` the dtype of C (fp32, or the input dtype for fp16/bf16). Ladder switches, each one
    technique of gty111's steps: ``vector`` 16-byte global loads (step 2), ``skew`` padding
    elements per shared row (step 3), ``cp_async`` LDGSTS copies (step 4), ``acc_smem``
    accumulators kept in shared memory (steps 1-4; False = registers, step 5), ``stages``
    shared buffers and ``frag_db`` register double-buffered fragments (step 6), ``ldmatrix``
    fragment loads with ldmatrix.x4 / .trans (step 7), ``swizzle`` XOR swizzle width in bytes
    (0, 32, 64, 128; step 8), ``staged_c`` C staged in shared memory for 16-byte coalesced
    stores (step 9); ``group_m`` block rows per rasterization group (L2 reuse; 1 = row order);
    ``min_blocks`` as in SimtConfig. Any lda/ldb/ldc and base alignment is taken: 16-byte
    copies need 16-byte aligned rows, other operands are copied element by element.

    Raises ``ConfigError`` listing every broken rule of ``MMA_RULES`` with its numbers.
    """

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    dtype: str = "fp16"
    acc: str = "fp32"
    out: str = "fp32"
    vector: bool = True
    skew: int = 0
    cp_async: bool = True
    acc_smem: bool = False
    stages: int = 3
    frag_db: bool = True
    ldmatrix: bool = True
    swizzle: int = 128
    staged_c: bool = True
    group_m: int = 8
    min_blocks: int = 1
    layout: str = "rrr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None

    family = "mma"
    template = "mma.cu.j2"
    rules = MMA_RULES
    field_types = {"dtype": str, "acc": str, "out": str, "layout": str, "epilogue": str,
                   "vector": bool, "cp_async": bool, "acc_smem": bool, "frag_db": bool,
                   "ldmatrix": bool, "staged_c": bool}
    choices = {"dtype": ("fp16", "bf16", "tf32"), "acc": ("fp32",),
               "out": ("fp32", "fp16", "bf16"), "layout": LAYOUTS, "epilogue": EPILOGUES}
    optional = frozenset({"m", "n", "k"})
    fixed_in_search = ("layout", "epilogue", "m", "n", "k", "dtype")
    search_domain = {
        "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (16, 32, 64),
        "wm": (32, 64, 128), "wn": (32, 64, 128), "stages": (2, 3, 4, 5),
        "swizzle": (0, 32, 64, 128), "skew": (0, 8), "group_m": (1, 8), "min_blocks": (1, 2),
    }

    @property
    def name(self) -> str:
        """Every field in a fixed order; the kernel symbol, file name and cache key."""
        flags = "".join(t for t, on in (("v", self.vector), ("a", self.cp_async),
                                        ("s", self.acc_smem), ("d", self.frag_db),
                                        ("l", self.ldmatrix), ("c", self.staged_c)) if on)
        skew = str(self.skew).replace("-", "m")  # a C identifier: skew -8 is "skewm8"
        return (f"gemm_mma_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}"
                f"_acc{self.acc}_out{self.out}_st{self.stages}_skew{skew}"
                f"_sw{self.swizzle}_g{self.group_m}_{flags or 'plain'}_mb{self.min_blocks}"
                f"{self.feature_suffix()}")

    # ---- derived figures ------------------------------------------------------------------
    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES.get(self.dtype, 4)

    @property
    def chunk_elems(self) -> int:
        """Elements per 16-byte chunk (the swizzle and ldmatrix granule)."""
        return CHUNK_BYTES // self.elem_bytes

    @property
    def load_elems(self) -> int:
        """Elements per global load: a 16-byte chunk with ``vector``, else one."""
        return self.chunk_elems if self.vector else 1

    @property
    def mnk(self) -> tuple[int, int, int]:
        return MMA_SHAPES.get(self.dtype, (16, 8, 16))

    @property
    def threads(self) -> int:
        return WARP_SIZE * div(self.bm, self.wm) * div(self.bn, self.wn)

    @property
    def warps(self) -> int:
        return div(self.threads, WARP_SIZE)

    @property
    def frags(self) -> tuple[int, int]:
        """mma tiles per warp along M (m16) and N (n8)."""
        m, n, _ = self.mnk
        return div(self.wm, m), div(self.wn, n)

    @property
    def acc_regs(self) -> int:
        """32-bit registers per thread holding accumulators (4 per m16n8 tile)."""
        fm, fn = self.frags
        return 0 if self.acc_smem else fm * fn * 4

    def _rows(self, operand: str) -> tuple[int, int]:
        """(rows, row length) of an operand's shared tile, as laid out in global memory:
        A [BM][BK] or [BK][BM], B [BK][BN] or [BN][BK]."""
        col = self.layout["AB".index(operand)] == "c"
        outer, inner = (self.bm, self.bk) if operand == "A" else (self.bk, self.bn)
        return (inner, outer) if col else (outer, inner)

    def row_chunks(self, operand: str) -> int:
        return div(self._rows(operand)[1] * self.elem_bytes, CHUNK_BYTES)

    def sw_span(self, operand: str) -> int:
        """16-byte chunks the XOR permutes within a row of ``operand``: the swizzle width,
        capped by the largest power of two of chunks in a row (a 64-byte row takes a 4-chunk
        XOR), 1 (the identity) without swizzle."""
        if self.swizzle <= 0:
            return 1  # rows stay as they are
        row = max(self.row_chunks(operand), 1)
        return max(1, min(self.swizzle // CHUNK_BYTES, 1 << (row.bit_length() - 1)))

    def sw_div(self, operand: str) -> int:
        """Rows that share one XOR pattern: 8 rows of 16-byte chunks fill the 32 banks, so a
        span of s chunks changes pattern every 8 / s rows."""
        return max(1, div(128 // CHUNK_BYTES, self.sw_span(operand)))

    def ld(self, operand: str) -> int:
        """Leading dimension (elements) of an operand's shared tile: its row plus skew."""
        return self._rows(operand)[1] + self.skew

    def stage_elems(self, operand: str) -> int:
        return self._rows(operand)[0] * self.ld(operand)

    @property
    def pipeline_bytes(self) -> int:
        return self.stages * (self.stage_elems("A") + self.stage_elems("B")) * self.elem_bytes

    @property
    def acc_smem_bytes(self) -> int:
        """FP32 accumulators in shared memory ([BM][BN]) when ``acc_smem``."""
        return self.bm * self.bn * 4 if self.acc_smem else 0

    @property
    def c_stage_ld(self) -> int:
        """Leading dimension of the staged C tile: BN (row-major C) or BM, plus padding."""
        return (self.bn if self.layout[2] == "r" else self.bm) + C_PAD_FLOATS

    @property
    def c_stage_bytes(self) -> int:
        if not self.staged_c:
            return 0
        return (self.bm if self.layout[2] == "r" else self.bn) * self.c_stage_ld * 4

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: the stages (and shared accumulators), or the staged
        C tile that reuses them, whichever is larger."""
        return max(self.pipeline_bytes + self.acc_smem_bytes, self.c_stage_bytes)

    @property
    def static_smem_bytes(self) -> int:
        return 0

    @property
    def dynamic_smem_bytes(self) -> int:
        return self.smem_bytes

    @property
    def epi_vec(self) -> int:
        """C elements per 16-byte store of the staged epilogue."""
        return CHUNK_BYTES // ELEM_BYTES.get(self.out, 4)

    def loads(self, operand: str) -> int:
        rows, row = self._rows(operand)
        return div(rows * row, self.threads * self.load_elems)

    def ldsm(self, operand: str) -> bool:
        """Whether ``operand``'s fragments come from ldmatrix: 16-bit data either way (.trans
        for an M- or N-major tile); TF32 only from a K-major tile (.trans moves 16-bit
        halves), otherwise 32-bit shared loads."""
        if not self.ldmatrix:
            return False
        k_major = self.layout["AB".index(operand)] == ("r" if operand == "A" else "c")
        return self.dtype != "tf32" or k_major

    def env(self) -> dict[str, int]:
        m, n, k = self.mnk
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "WM": self.wm, "WN": self.wn,
            "MMA_M": m, "MMA_N": n, "MMA_K": k, "SKEW": self.skew, "STAGES": self.stages,
            "VECTOR": int(self.vector), "CP_ASYNC": int(self.cp_async),
            "ACC_SMEM": int(self.acc_smem), "FRAG_DB": int(self.frag_db),
            "LDMATRIX": int(self.ldmatrix), "SWIZZLE": self.swizzle,
            "STAGED_C": int(self.staged_c), "GROUP_M": self.group_m,
            "MIN_BLOCKS": self.min_blocks, "LOAD_ELEMS": self.load_elems,
            "CHUNK_ELEMS": self.chunk_elems, "ELEM_BYTES": self.elem_bytes,
            "A_ROW_CHUNKS": self.row_chunks("A"), "B_ROW_CHUNKS": self.row_chunks("B"),
            "A_SW_SPAN": self.sw_span("A"), "B_SW_SPAN": self.sw_span("B"),
            "DTYPE_FP16": int(self.dtype == "fp16"), "DTYPE_BF16": int(self.dtype == "bf16"),
            "DTYPE_TF32": int(self.dtype == "tf32"), "OUT_FP16": int(self.out == "fp16"),
            "OUT_BF16": int(self.out == "bf16"), "EPI_VEC": self.epi_vec,
            "WARP_SIZE": WARP_SIZE, "THREADS": self.threads, "ACC_REGS": self.acc_regs,
            "SMEM_BYTES": self.smem_bytes, **self.feature_env(),
        }

    def template_constants(self) -> dict[str, int]:
        fm, fn = self.frags
        out = {**self.env(), "WARPS_N": div(self.bn, self.wn), "FRAGS_M": fm, "FRAGS_N": fn,
               "K_STEPS": div(self.bk, self.mnk[2]), "PIPELINE_BYTES": self.pipeline_bytes,
               "C_STAGE_LD": self.c_stage_ld,
               "EPI_ITERS": div(self.bm * self.bn, self.threads * self.epi_vec),
               "C_ROW": self.bn if self.layout[2] == "r" else self.bm}
        for op in "AB":
            out.update({f"{op}_LD": self.ld(op), f"{op}_STAGE_ELEMS": self.stage_elems(op),
                        f"{op}_LOADS": self.loads(op),
                        f"{op}_LOADS_PER_ROW": div(self._rows(op)[1], self.load_elems),
                        f"{op}_SW_DIV": self.sw_div(op),
                        f"{op}_SW_MASK": self.sw_span(op) - 1,
                        f"{op}_LDSM": int(self.ldsm(op))})
        return out

    def ctypes(self) -> dict[str, str]:
        """C++ types and PTX spellings the template uses."""
        m, n, k = self.mnk
        return {"in_t": CTYPES.get(self.dtype, "float"), "out_t": CTYPES.get(self.out, "float"),
                "mma_shape": f"m{m}n{n}k{k}", "mma_ab": PTX_TYPES.get(self.dtype, "f16")}

    @property
    def flops_per_byte(self) -> dict[str, float | None]:
        """FLOP per byte at the block tile (global) and warp tile (shared) levels."""
        return {"global": tile_intensity(self.bm, self.bn, self.elem_bytes),
                "shared": tile_intensity(self.wm, self.wn, self.elem_bytes)}

    def figures(self, arch: str = "sm_90") -> dict:
        return {"threads": self.threads, "warps": self.warps,
                "mma_shape": self.ctypes()["mma_shape"],
                "smem_bytes_dynamic": self.smem_bytes, "acc_regs": self.acc_regs,
                "a_loads_per_thread": self.loads("A"), "b_loads_per_thread": self.loads("B"),
                "a_swizzle_span_chunks": self.sw_span("A"),
                "b_swizzle_span_chunks": self.sw_span("B"),
                "a_ldmatrix": self.ldsm("A"), "b_ldmatrix": self.ldsm("B"),
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}":
                    self.blocks_per_sm(arch) if self.smem_bytes >= 0 else 0}

    def brief(self) -> str:
        return (f"block {self.bm}x{self.bn}x{self.bk}  warp {self.wm}x{self.wn}  "
                f"stages {self.stages}  swizzle {self.swizzle}  skew {self.skew}")

    def registers_needed(self) -> int:
        """Registers per thread estimated before compiling: accumulators, one or two K steps
        of A and B fragments (6 per m16 x n16 pair), addressing. Not calibrated like WMMA's."""
        fm, fn = self.frags
        frag = (4 * fm + 2 * fn) * (2 if self.frag_db else 1)
        return self.acc_regs + frag + 24 + self.loads("A") + self.loads("B")


def _step(**changes) -> MmaConfig:
    """A ladder step: the 128x128x32 block, 8 warps of 64x32 and FP16 C of every rung, with
    the switches given (the rest at the baseline: everything off)."""
    base = dict(vector=False, skew=0, cp_async=False, acc_smem=True, stages=1, frag_db=False,
                ldmatrix=False, swizzle=0, staged_c=False, group_m=1)
    return MmaConfig(128, 128, 32, 64, 32, out="fp16", **{**base, **changes})


_S2 = dict(vector=True)
_S3 = dict(_S2, skew=8)
_S4 = dict(_S3, cp_async=True)
_S5 = dict(_S4, acc_smem=False)
_S6 = dict(_S5, stages=2, frag_db=True)
_S7 = dict(_S6, ldmatrix=True)
_S8 = dict(_S7, skew=0, swizzle=128)
_S9 = dict(_S8, staged_c=True)

PRESETS: tuple[Preset, ...] = (
    Preset("mma_base", _step(), "raw mma.sync m16n8k16, element-wise global loads, "
           "accumulators in shared memory", "gty111 baseline"),
    Preset("mma_vec", _step(**_S2), "16-byte vectorized global loads", "gty111 step vector"),
    Preset("mma_bfco", _step(**_S3), "rows padded by 8 halves: conflict-free, coalesced "
           "shared memory", "gty111 step bfco"),
    Preset("mma_ldgsts", _step(**_S4), "cp.async (LDGSTS) global -> shared copies",
           "gty111 step ldgsts"),
    Preset("mma_reg", _step(**_S5), "accumulators in registers", "gty111 step reg"),
    Preset("mma_prefetch", _step(**_S6), "double-buffered shared stages and register "
           "fragments: the next tile loads while this one computes", "gty111 step prefetch"),
    Preset("mma_ldmatrix", _step(**_S7), "fragments loaded by ldmatrix.x4 (.trans for "
           "N-major B)", "gty111 GEMM_MMA ldmatrix step"),
    Preset("mma_swizzle", _step(**_S8), "128-byte XOR swizzle instead of padding",
           "gty111 GEMM_MMA swizzle step"),
    Preset("mma_epilogue", _step(**_S9), "C staged in shared memory, 16-byte coalesced "
           "stores", "gty111 GEMM_MMA epilogue step"),
    # Aimed at the H100/H200 bar: 135 KiB of shared memory (the staged FP32 C tile), so they
    # run on sm_80 (163 KiB) and sm_90 (227 KiB) but not sm_86/sm_89 (99 KiB).
    Preset("mma_tuned", MmaConfig(128, 256, 32, 64, 64, out="fp16", stages=4),
           "128x256x32 block, 8 warps of 64x64, 4-stage cp.async ring, ldmatrix, 128-byte "
           "swizzle, grouped rasterization", "CUTLASS sm80 tile shapes"),
    Preset("mma_tuned_bf16", MmaConfig(128, 256, 32, 64, 64, dtype="bf16", out="bf16", stages=4),
           "mma_tuned in BF16", "CUTLASS sm80 tile shapes"),
    Preset("mma_tuned_tf32", MmaConfig(128, 256, 16, 64, 64, dtype="tf32", stages=4),
           "TF32 m16n8k8: 128x256x16 block, 8 warps of 64x64, 4 stages, FP32 C",
           "CUTLASS sm80 tile shapes"),
    # The family's defaults: under 99 KiB of shared memory, so they run on every arch from
    # sm_80 on (RTX 30/40, L4/L40 included).
    Preset("mma_fp16", MmaConfig(128, 128, 32, 64, 64, out="fp16", stages=4),
           "128x128x32 block, 4 warps of 64x64, 4 stages: fits sm_86/sm_89's 99 KiB",
           "CUTLASS sm80 tile shapes"),
    Preset("mma_bf16", MmaConfig(128, 128, 32, 64, 64, dtype="bf16", out="bf16", stages=4),
           "mma_fp16 in BF16", "CUTLASS sm80 tile shapes"),
    Preset("mma_tf32", MmaConfig(128, 128, 16, 64, 32, dtype="tf32", stages=4),
           "TF32 m16n8k8: 128x128x16 block, 8 warps of 64x32, 4 stages, FP32 C; fits 99 KiB",
           "CUTLASS sm80 tile shapes"),
)

SPACE = {
    "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (32, 64),
    "warp": ((32, 64), (64, 32), (64, 64)), "stages": (2, 3, 4, 5), "group_m": (8,),
}


def space(dtype: str = "fp16") -> list[MmaConfig]:
    """Every configuration of the mma search space for ``dtype`` (fp16, bf16, tf32) that
    passes the rules: the full ladder on, C in the input dtype (float32 for tf32)."""
    out_dtype = stored_as(dtype)
    out = []
    for bm, bn, bk, (wm, wn), st, g in itertools.product(
            SPACE["bm"], SPACE["bn"], SPACE["bk"], SPACE["warp"], SPACE["stages"],
            SPACE["group_m"]):
        cfg = MmaConfig.unchecked(bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, dtype=dtype,
                                  out=out_dtype, stages=st, group_m=g)
        if not cfg.violations():
            out.append(cfg)
    return out


def _adjust(values: dict, given: set) -> dict:
    """Follow --dtype: C takes the input dtype (float32 for tf32) unless --out is given, and
    tf32 takes BK = 16 unless --bk is given (a 32-deep TF32 tile with 64x64 warps spills)."""
    if "dtype" in given:
        d = values["dtype"]
        if "out" not in given:
            values = {**values, "out": stored_as(d)}
        if d == "tf32" and "bk" not in given:
            values = {**values, "bk": 16}
    return values


def fallback_of(cfg) -> MmaConfig:
    """The mma configuration (128x128x32, warps 64x64, 3 stages) computing what ``cfg`` (a
    config of another family) computes; it reads any alignment."""
    return MmaConfig(128, 128, 32, 64, 64, dtype=cfg.dtype, out=cfg.out, stages=3,
                     layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)


FAMILY = Family(
    name="mma", config=MmaConfig,
    summary="raw mma.sync PTX, ldmatrix, XOR swizzle, cp.async ring; sm_80 and newer",
    dtypes=("fp16", "bf16", "tf32"), presets=PRESETS,
    defaults={"fp16": "mma_fp16", "bf16": "mma_bf16", "tf32": "mma_tf32"},
    flag_defaults={"bm": 128, "bn": 128, "bk": 32, "wm": 64, "wn": 64},
    field_help={
        "bm": "block tile rows (M)", "bn": "block tile columns (N)", "bk": "block tile depth (K)",
        "wm": "warp tile rows", "wn": "warp tile columns", "dtype": "A and B dtype",
        "acc": "accumulator dtype (fp32)", "out": "C dtype",
        "vector": "16-byte global loads", "skew": "padding elements per shared-memory row",
        "cp_async": "cp.async global -> shared copies", "acc_smem": "accumulators in shared memory",
        "stages": "shared buffers, 1 to 6", "frag_db": "register double-buffered fragments",
        "ldmatrix": "fragments loaded by ldmatrix", "swizzle": "XOR swizzle width in bytes",
        "staged_c": "C staged in shared memory for 16-byte stores",
        "group_m": "block rows per rasterization group",
        "min_blocks": "resident blocks per SM asked of ptxas (__launch_bounds__)",
    },
    space=space, min_cc=80, adjust=_adjust)
