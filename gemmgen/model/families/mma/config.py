"""The mma family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass

from ...arch import get_arch
from ...config import LAYOUTS, WARP_SIZE, ConfigBase, div
from ...dtypes import CTYPES, ELEM_BYTES
from ..tiled import WarpTiled
from .rules import C_PAD_FLOATS, CHUNK_BYTES, MMA_RULES, MMA_SHAPES, PTX_TYPES


@dataclass(frozen=True, slots=True)
class MmaConfig(WarpTiled, ConfigBase):
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
               "out": ("fp32", "fp16", "bf16"), "layout": LAYOUTS}
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
    def chunk_elems(self) -> int:
        """Elements per 16-byte chunk (the swizzle and ldmatrix granule)."""
        return CHUNK_BYTES // self.elem_bytes

    @property
    def load_elems(self) -> int:
        """Elements per global load: a 16-byte chunk with ``vector``, else one."""
        return self.chunk_elems if self.vector else 1

    @property
    def mnk(self) -> tuple[int, int, int]:
        """(M, N, K) of one mma: m16n8k16, or m16n8k8 for TF32."""
        return MMA_SHAPES.get(self.dtype, (16, 8, 16))

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

    def figures(self, arch: str = "sm_90") -> dict:
        return {"threads": self.threads, "warps": self.warps,
                "mma_shape": self.ctypes()["mma_shape"],
                "smem_bytes_dynamic": self.smem_bytes, "acc_regs": self.acc_regs,
                "a_loads_per_thread": self.loads("A"), "b_loads_per_thread": self.loads("B"),
                "a_swizzle_span_chunks": self.sw_span("A"),
                "b_swizzle_span_chunks": self.sw_span("B"),
                "a_ldmatrix": self.ldsm("A"), "b_ldmatrix": self.ldsm("B"),
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self._blocks_per_sm(arch)}

    def brief(self) -> str:
        return (f"block {self.bm}x{self.bn}x{self.bk}  warp {self.wm}x{self.wn}  "
                f"stages {self.stages}  swizzle {self.swizzle}  skew {self.skew}")

    def registers_needed(self) -> int:
        """Registers per thread estimated before compiling: the accumulators, one K step of A
        and B fragments (4 per m16 and 2 per n8 tile), 2 per 16-byte copy of a stage, and 28
        of addressing and loop state (29 for TF32); then what ptxas keeps live across the unrolled K tile:
        a TF32 operand read without ldmatrix (32-bit shared loads, an M- or N-major tile) holds
        its fragment words for every k step, and with 4 or more k steps each copy of an M- or
        N-major tile holds 2 more. Calibrated against ptxas (CUDA 13, sm_90) by the spill
        sweep (benchmarks/investigations/spill_sweep.py; benchmarks/results/spill_sweep.json):
        no spilling kernel of the space in any layout and epilogue is left in, the nearest 5
        registers over the cap, at the cost of some false alarms among warp tiles of 64 x 64
        with 4 k steps (the old estimate, 1 K step of fragments, let kernels of 1264 spill
        bytes through)."""
        fm, fn = self.frags
        frag = 4 * fm + 2 * fn
        steps = div(self.bk, self.mnk[2])
        words = 0 if self.dtype != "tf32" else (4 * fm * (not self.ldsm("A"))
                                                  + 2 * fn * (not self.ldsm("B")))
        mn_loads = (self.loads("A") * (self.layout[0] == "c")
                    + self.loads("B") * (self.layout[1] == "r"))
        return (self.acc_regs + frag + 2 * (self.loads("A") + self.loads("B")) + 28
                + (self.dtype == "tf32") + words * steps + 2 * mn_loads * (steps >= 4))
