"""The wmma family's configuration: fields, identity and derived figures."""
from __future__ import annotations

from dataclasses import dataclass

from ...arch import get_arch
from ...config import LAYOUTS, WARP_SIZE, ConfigBase, div
from ...dtypes import CTYPES, ELEM_BYTES
from ..tiled import WarpTiled
from .rules import FRAG_CTYPES, LOAD_BYTES, SHAPES, WMMA_RULES


@dataclass(frozen=True, slots=True)
class WmmaConfig(WarpTiled, ConfigBase):
    """A tensor-core GEMM through the WMMA API (Lei Mao's v07; gty111's steps): C[M,N] =
    alpha * A[M,K] @ B[K,N] + beta * C, row-major.

    Fields: ``bm, bn, bk`` block tile, ``wm, wn`` warp tile (elements); ``shape`` the WMMA tile
    (m16n16k16, m32n8k16, m8n32k16 for fp16/bf16; m16n16k8 for tf32); ``dtype`` of A and B
    (fp16, bf16, or tf32: float32 storage rounded to TF32 in the fragments); ``acc`` fp32 (or
    fp16 for fp16 inputs); ``out`` the dtype of C (fp32, or the input dtype for fp16/bf16);
    ``skew`` padding elements per shared-memory row (a multiple of 16 bytes); ``stages`` shared
    buffers (1, 2, or 3+ for a deeper cp.async pipeline); ``min_blocks`` as in SimtConfig.
    Global -> shared copies are 16-byte ``cp.async`` (sm_80+). B is kept in WMMA_N-wide panels
    so every fragment pointer is 32-byte aligned, m32n8k16 included.

    Raises ``ConfigError`` listing every broken rule of ``WMMA_RULES`` with its numbers.
    """

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    shape: str = "m16n16k16"
    dtype: str = "fp16"
    acc: str = "fp32"
    out: str = "fp32"
    skew: int = 8
    stages: int = 3
    min_blocks: int = 1
    layout: str = "rrr"
    epilogue: str = "none"
    m: int | None = None
    n: int | None = None
    k: int | None = None

    family = "wmma"
    template = "wmma.cu.j2"
    rules = WMMA_RULES
    field_types = {"shape": str, "dtype": str, "acc": str, "out": str, "layout": str,
                   "epilogue": str}
    choices = {"shape": tuple(SHAPES), "dtype": ("fp16", "bf16", "tf32"),
               "acc": ("fp32", "fp16"), "out": ("fp32", "fp16", "bf16"), "layout": LAYOUTS}
    optional = frozenset({"m", "n", "k"})
    fixed_in_search = ("layout", "epilogue", "m", "n", "k", "dtype")
    search_domain = {
        "bm": (32, 64, 128, 256), "bn": (32, 64, 128, 256), "bk": (8, 16, 32, 64),
        "wm": (16, 32, 64, 128), "wn": (16, 32, 64, 128), "shape": tuple(SHAPES),
        "acc": ("fp32", "fp16"), "out": ("fp32", "fp16", "bf16"), "skew": (0, 4, 8, 16),
        "stages": (1, 2, 3, 4), "min_blocks": (1, 2),
    }

    @property
    def name(self) -> str:
        """Every field in a fixed order; the kernel symbol, file name and cache key."""
        return (f"gemm_wmma_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}"
                f"_{self.shape}_acc{self.acc}_out{self.out}_skew{self.skew}_st{self.stages}"
                f"_mb{self.min_blocks}{self.feature_suffix()}")

    # ---- derived figures ------------------------------------------------------------------
    @property
    def vec(self) -> int:
        """Elements per 16-byte copy."""
        return LOAD_BYTES // self.elem_bytes

    @property
    def mnk(self) -> tuple[int, int, int]:
        """(M, N, K) of the WMMA ``shape``."""
        return SHAPES.get(self.shape, (16, 16, 16))

    @property
    def acc_regs(self) -> int:
        """32-bit registers per thread holding accumulators."""
        m, n, _ = self.mnk
        fm, fn = self.frags
        return fm * fn * m * n // WARP_SIZE * ELEM_BYTES[self.acc] // 4

    @property
    def as_ld(self) -> int:
        """Leading dimension of the A stage: BK+SKEW (row-major A) or BM+SKEW (column-major)."""
        return (self.bk if self.layout[0] == "r" else self.bm) + self.skew

    @property
    def bs_ld(self) -> int:
        """Leading dimension of B: WMMA_N+SKEW (row-major panels) or BK+SKEW (column-major)."""
        return (self.mnk[1] if self.layout[1] == "r" else self.bk) + self.skew

    @property
    def cs_ld(self) -> int:
        """Leading dimension of a warp's C staging tile: its row (row-major C) or column
        (column-major C) plus 16 bytes."""
        m, n, _ = self.mnk
        return (n if self.layout[2] == "r" else m) + LOAD_BYTES // ELEM_BYTES[self.acc]

    @property
    def a_stage_elems(self) -> int:
        """One A stage: [BM][BK+SKEW] if A is row-major, [BK][BM+SKEW] if column-major."""
        return self.bm * self.as_ld if self.layout[0] == "r" else self.bk * self.as_ld

    @property
    def b_stage_elems(self) -> int:
        """One B stage: BN/WMMA_N panels [BK][WMMA_N+SKEW] (row-major B) or [BN][BK+SKEW]."""
        if self.layout[1] == "r":
            return div(self.bn, self.mnk[1]) * self.bk * self.bs_ld
        return self.bn * self.bs_ld

    @property
    def pipeline_bytes(self) -> int:
        return self.stages * (self.a_stage_elems + self.b_stage_elems) * self.elem_bytes

    @property
    def c_tile_elems(self) -> int:
        m, n, _ = self.mnk
        return (m if self.layout[2] == "r" else n) * self.cs_ld

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: the stages plus one C staging tile per warp."""
        return self.pipeline_bytes + self.warps * self.c_tile_elems * ELEM_BYTES[self.acc]

    @property
    def a_loads(self) -> int:
        return div(self.bm * self.bk, self.threads * self.vec)

    @property
    def b_loads(self) -> int:
        return div(self.bk * self.bn, self.threads * self.vec)

    def env(self) -> dict[str, int]:
        m, n, k = self.mnk
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "WM": self.wm, "WN": self.wn,
            "WMMA_M": m, "WMMA_N": n, "WMMA_K": k, "SKEW": self.skew, "STAGES": self.stages,
            "MIN_BLOCKS": self.min_blocks, "VEC": self.vec, "ELEM_BYTES": self.elem_bytes,
            "DTYPE_FP16": int(self.dtype == "fp16"), "DTYPE_BF16": int(self.dtype == "bf16"),
            "DTYPE_TF32": int(self.dtype == "tf32"), "ACC_FP16": int(self.acc == "fp16"),
            "OUT_FP16": int(self.out == "fp16"), "OUT_BF16": int(self.out == "bf16"),
            "WARP_SIZE": WARP_SIZE, "THREADS": self.threads, "ACC_REGS": self.acc_regs,
            "SMEM_BYTES": self.smem_bytes, **self.feature_env(),
        }

    def template_constants(self) -> dict[str, int]:
        m, n, _ = self.mnk
        fm, fn = self.frags
        return {**self.env(), "WARPS_N": div(self.bn, self.wn), "FRAGS_M": fm, "FRAGS_N": fn,
                "A_LOADS": self.a_loads, "B_LOADS": self.b_loads,
                "A_VECS_PER_ROW": div(self.bk if self.layout[0] == "r" else self.bm, self.vec),
                "B_VECS_PER_ROW": div(self.bn if self.layout[1] == "r" else self.bk, self.vec),
                "AS_LD": self.as_ld, "BS_LD": self.bs_ld, "CS_LD": self.cs_ld,
                "A_STAGE_ELEMS": self.a_stage_elems, "B_STAGE_ELEMS": self.b_stage_elems,
                "PIPELINE_BYTES": self.pipeline_bytes, "C_TILE_ELEMS": self.c_tile_elems,
                "LANE_ELEMS": div(m * n, WARP_SIZE), "LOAD_BYTES": LOAD_BYTES}

    def ctypes(self) -> dict[str, str]:
        """C++ types the template declares: inputs, fragments, accumulator, output."""
        return {"in_t": CTYPES.get(self.dtype, "float"), "frag_t": FRAG_CTYPES.get(self.dtype, "half"),
                "acc_t": CTYPES[self.acc] if self.acc in CTYPES else "float",
                "out_t": CTYPES.get(self.out, "float")}

    def figures(self, arch: str = "sm_90") -> dict:
        return {"threads": self.threads, "warps": self.warps, "vec_elems": self.vec,
                "smem_bytes_dynamic": self.smem_bytes, "acc_regs": self.acc_regs,
                "a_copies_per_thread": self.a_loads, "b_copies_per_thread": self.b_loads,
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self._blocks_per_sm(arch)}

    def brief(self) -> str:
        return (f"block {self.bm}x{self.bn}x{self.bk}  warp {self.wm}x{self.wn}  {self.shape}  "
                f"acc {self.acc}  out {self.out}  skew {self.skew}  stages {self.stages}")

    @property
    def frag_regs(self) -> int:
        """32-bit registers per thread holding one K step's A and B fragments of the warp."""
        m, n, k = self.mnk
        fm, fn = self.frags
        return (fm * m * k + fn * n * k) * self.elem_bytes // 4 // WARP_SIZE

    def registers_needed(self) -> int:
        """Registers per thread the kernel needs to run without spilling, estimated before
        compiling: 1.4 per accumulator register (fragment layout and the staged epilogue),
        the A and B fragments of a K step (1/8 more per further step of the unrolled K
        tile, up to 4; TF32 fragments twice and BF16 1.75 times as costly, for their
        conversions), and one per 16-byte copy; then what the layouts add: a row-major
        (N-major) B of 16-bit data costs 6 registers and, except with the m32n8k16 shape, 2
        more per copy of it; a column-major (M-major) A half a register per copy. First
        calibrated on 201 configurations; the layout terms come from the spill sweep (CUDA
        13, sm_90; benchmarks/investigations/spill_sweep.py, results in
        benchmarks/results/spill_sweep.json), where one tile spilled in the layouts with a
        row-major B and not in the others. No spilling kernel the sweep compiled is left in;
        the price is false alarms near the cap, the preset wmma_bf16 among them (254 of 255
        registers: it fits, with no register to spare). BF16 or TF32 with 4 k steps adds 2
        per fragment register and 4 per copy: ptxas holds more of the unrolled K tile's
        fragments and copies in flight (a CUDA 13 spill sample: 8 of 18 such tiles spilled,
        32 to 328 bytes, at estimates of 91 to 176; none with BK <= 32 or FP16; TF32 64x64x32
        with 64x32 warps in crc: 72 bytes at 166)."""
        steps = min(div(self.bk, self.mnk[2]), 4)
        deep = self.dtype in ("bf16", "tf32") and steps >= 4
        scale = 8 + max(steps - 1, 0) + 8 * (self.dtype == "tf32") + 6 * (self.dtype == "bf16")
        b_row = self.layout[1] == "r" and self.dtype != "tf32"
        layout = (-(-self.a_loads * (self.layout[0] == "c") // 2) + 6 * b_row
                  + 2 * self.b_loads * (b_row and self.shape != "m32n8k16"))
        return (14 * self.acc_regs // 10 + self.frag_regs * scale // 8
                + self.a_loads + self.b_loads + layout
                + deep * (2 * self.frag_regs + 4 * (self.a_loads + self.b_loads)))
