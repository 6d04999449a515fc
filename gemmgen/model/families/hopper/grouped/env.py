"""What the grouped family's template and emitted header read from a config: the named
quantities (``env``, which the rules check too), the kernel's compile-time constants, its C++
and PTX types, the wgmma inline-asm operand numbers and the header's derived figures."""
from __future__ import annotations

from ....config import div, tile_intensity
from ....dtypes import CTYPES
from ..fp8.rules import PACK_THREADS, PACK_TILE, PTX_TYPES as FP8_PTX_TYPES
from .. import ALIGN_SLACK, C_SWIZZLE, WGMMA_K_BYTES, WGMMA_M, Param, ints, tensor_maps
from ..wgmma.rules import PTX_TYPES
from .rules import BLOCK, b_scale_span

FP8_KEYS = ("DTYPE_FP8", "SCALE_BLOCK", "BLOCK", "B_SCALE_SPAN", "PARTIALS", "PACK_TILE",
            "PACK_THREADS")
"""The env's names of the FP8 axis, which a 16-bit kernel's source does not declare."""

TILE_UNIT_BYTES = 16
"""The guarded epilogue copies C in 16-byte units (one swizzle unit of the staging tile)."""


class GroupedEnv:
    """Mixed into ``GroupedConfig``: everything here derives from its fields and geometry."""

    __slots__ = ()

    def env(self) -> dict[str, int]:
        """The named quantities the rules and the template's constants use."""
        a, b = self.a_box, self.b_box
        return {
            **self.hopper_env(), "SW_ELEMS": self.sw_elems,
            "GROUPING_K": int(self.grouping == "k"), "ORDER_ENDS": int(self.order == "ends"),
            "DTYPE_FP16": int(self.dtype == "fp16"), "DTYPE_BF16": int(self.dtype == "bf16"),
            "OUT_FP16": int(self.out == "fp16"), "OUT_BF16": int(self.out == "bf16"),
            "A_MN_MAJOR": int(self.a_mn_major), "B_MN_MAJOR": int(self.b_mn_major),
            "LAYOUT_C_COL": int(self.layout[2] == "c"), "A_BOX_INNER": a["box"][0],
            "A_BOX_ROWS": a["box"][1], "A_BOXES": a["count"], "B_BOX_INNER": b["box"][0],
            "B_BOX_ROWS": b["box"][1], "B_BOXES": b["count"], "A_STAGE_BYTES": self.a_stage_bytes,
            "B_STAGE_BYTES": self.b_stage_bytes, "STAGE_BYTES": self.stage_bytes,
            "C_CHUNKS": self.c_chunks, "C_SMEM_BYTES": self.c_smem_bytes,
            # the Hopper rules' names for what this family fixes: cooperative consumers, a
            # producer warpgroup, 128-byte swizzle, no cluster, no split-K, a TMA store of a
            # row-major C (the consumers split the rows unless they split the columns)
            "M_SPLIT": 1 if self.split_n else self.consumers, "PRODUCER": 1,
            "SWIZZLE": C_SWIZZLE, "CLUSTER": 1,
            "SPLIT_K": 1, "STORE_TMA": 1, "ROW_MAJOR_TMA_STORE": 1,
            "C_BOX_ROWS": self.consumer_rows,
            "DTYPE_FP8": int(self.fp8), "SCALE_BLOCK": int(self.scaling == "block"),
            "BLOCK": BLOCK, "B_SCALE_SPAN": b_scale_span(self.consumer_cols),
            "PARTIALS": self.partials, "PACK_TILE": PACK_TILE, "PACK_THREADS": PACK_THREADS,
            "SPLIT_N": int(self.split_n), "CONSUMER_COLS": self.consumer_cols,
        }

    def params(self) -> tuple[Param, ...]:
        """The grouped kernel's parameters, in order: tensor maps of A, B and C; the group
        offsets (or counts), groups, rows, N, K, mode; C, ldc, stride_c; FP8: the block scales
        of A (per row and K block, and per matrix when masked) and of B (per 128-column block,
        K block and expert), each with its strides in elements."""
        scale = "const float* __restrict__"
        fp8 = (Param("scale_a", scale, "Q"), *ints("sa_m", "sa_k"), Param("sa_g", "long long", "q"),
               Param("scale_b", scale, "Q"), *ints("sb_n", "sb_k"), Param("sb_g", "long long", "q"))
        return (*tensor_maps("tmap_a", "tmap_b", "tmap_c"),
                Param("offs", "const int* __restrict__", "Q"),
                *ints("groups", "rows", "n_arg", "k_arg", "mode"),
                Param("C", "{ns}::out_t* __restrict__", "Q"), *ints("ldc"),
                Param("stride_c", "long long", "q"), *(fp8 if self.fp8 else ()))

    def template_constants(self) -> dict[str, int]:
        """Every compile-time constant the kernel declares: the env plus shared-memory offsets,
        wgmma descriptor strides (bytes; the wgmma family's formulas) and the epilogue's
        copy geometry."""
        e = self.env()
        if not e["ORDER_ENDS"]:  # a "forward" kernel's source stays as before the field
            del e["ORDER_ENDS"]
        if not e["SPLIT_N"]:     # and a row-split one as before the column split
            del e["SPLIT_N"], e["CONSUMER_COLS"]
        if not self.fp8:         # and a 16-bit one as before the FP8 axis
            kept = {"DTYPE_FP8", "PARTIALS"} if self.partials != 2 else set()  # G28's names
            kept |= {"DTYPE_FP8"} if self.split_n else set()                   # G29's
            for key in set(FP8_KEYS) - kept:
                del e[key]
        sbo = 8 * C_SWIZZLE
        mn_lbo = self.bk * C_SWIZZLE
        units = div(self.consumer_cols * self.out_bytes, TILE_UNIT_BYTES)
        return {**e, "A_SMEM_OFFSET": 0, "B_SMEM_OFFSET": self.stages * self.a_stage_bytes,
                "C_SMEM_OFFSET": self.c_smem_offset,
                "BAR_OFFSET": self.c_smem_offset + self.c_smem_bytes,
                "ALIGN_SLACK": ALIGN_SLACK,
                "A_BOX_BYTES": e["A_BOX_INNER"] * e["A_BOX_ROWS"] * self.elem_bytes,
                "B_BOX_BYTES": e["B_BOX_INNER"] * e["B_BOX_ROWS"] * self.elem_bytes,
                "DESC_SBO": sbo,
                "A_DESC_LBO": mn_lbo if self.a_mn_major else 16,
                "B_DESC_LBO": mn_lbo if self.b_mn_major else 16,
                "A_K_STEP_BYTES": 16 * C_SWIZZLE if self.a_mn_major else WGMMA_K_BYTES,
                "B_K_STEP_BYTES": 16 * C_SWIZZLE if self.b_mn_major else WGMMA_K_BYTES,
                "A_M64_BYTES": WGMMA_M * self.bk * self.elem_bytes,
                "SWIZZLE_MODE": 1, "ROW_BYTES": C_SWIZZLE,
                "ACC_PER_WGMMA": self.consumer_cols // 2,
                "C_CONSUMER_BYTES": self.consumer_rows * self.consumer_cols * self.out_bytes,
                "C_CHUNK_BYTES": self.consumer_rows * C_SWIZZLE,
                "UNIT_BYTES": TILE_UNIT_BYTES, "UNIT_ELEMS": div(TILE_UNIT_BYTES, self.out_bytes),
                "UNITS_PER_ROW": units, "UNITS_PER_CHUNK": div(C_SWIZZLE, TILE_UNIT_BYTES),
                "TAIL_UNITS": div(self.stage_bytes, TILE_UNIT_BYTES),
                "BAR_STORE_BASE": 1, "BAR_TAIL": 1 + self.consumers,
                **(self._fp8_constants() if self.fp8 else {})}

    def _fp8_constants(self) -> dict[str, int]:
        """The names the fp8 family's promoted main loop reads (``_fp8_mainloop.cu.j2``):
        wgmma k32 steps of a K-major 128-byte-swizzled stage, the accumulator count, where a
        consumer's A rows (and, split by columns, its B rows) start in a stage, one stage per
        promotion, whether a consumer's columns straddle two B scale blocks."""
        return {"ACC": self.consumer_cols // 2,
                "K_STEPS": div(self.bk * self.elem_bytes, WGMMA_K_BYTES),
                "K_STEP_BYTES": WGMMA_K_BYTES, "DESC_LBO": 16,
                # a column split shares A's stage and gives each consumer its B rows
                "A_CONSUMER_BYTES": 0 if self.split_n else self.consumer_rows * self.bk
                * self.elem_bytes,
                **({"B_CONSUMER_BYTES": self.consumer_cols * self.bk * self.elem_bytes}
                   if self.split_n else {}),
                "PROMOTE_STAGES": 1,
                # consumer 1 starts a K block after consumer 0 (the named barrier it waits on)
                **({"BAR_STAGGER": 2 + self.consumers} if self.stagger else {}),
                "B_SCALE_SPLIT": int(BLOCK % self.consumer_cols != 0)}

    def ctypes(self) -> dict[str, str]:
        return {"in_t": CTYPES.get(self.dtype, "half"), "out_t": CTYPES.get(self.out, "float"),
                "ptx_in": {**PTX_TYPES, **FP8_PTX_TYPES}.get(self.dtype, "f16")}

    @property
    def flops_per_byte(self) -> dict[str, float]:
        return {"global": tile_intensity(self.bm, self.bn, self.elem_bytes),
                "shared": tile_intensity(self.consumer_rows, self.consumer_cols, self.elem_bytes)}

    def launch_summary(self) -> str:
        return (f"grid = (min(SMs, an upper bound of the tiles), 1, 1) over the tiles of every "
                f"group ({self.bm}x{self.bn} each), block = ({self.threads}, 1, 1); tensor maps "
                f"of A, B and C are the first three parameters, the group offsets the fourth")
