"""What the grouped family's template and emitted header read from a config: the named
quantities (``env``, which the rules check too), the kernel's compile-time constants, its C++
and PTX types, the wgmma inline-asm operand numbers and the header's derived figures."""
from __future__ import annotations

from ...config import div, tile_intensity
from ...dtypes import CTYPES
from ..hopper import ALIGN_SLACK, C_SWIZZLE, WGMMA_K_BYTES, WGMMA_M, Param, ints, tensor_maps
from ..wgmma.rules import PTX_TYPES

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
            # row-major C
            "M_SPLIT": self.consumers, "PRODUCER": 1, "SWIZZLE": C_SWIZZLE, "CLUSTER": 1,
            "SPLIT_K": 1, "STORE_TMA": 1, "ROW_MAJOR_TMA_STORE": 1,
            "C_BOX_ROWS": self.consumer_rows,
        }

    def params(self) -> tuple[Param, ...]:
        """The grouped kernel's parameters, in order: tensor maps of A, B and C; the group
        offsets (or counts), groups, rows, N, K, mode; C, ldc, stride_c."""
        return (*tensor_maps("tmap_a", "tmap_b", "tmap_c"),
                Param("offs", "const int* __restrict__", "Q"),
                *ints("groups", "rows", "n_arg", "k_arg", "mode"),
                Param("C", "{ns}::out_t* __restrict__", "Q"), *ints("ldc"),
                Param("stride_c", "long long", "q"))

    def template_constants(self) -> dict[str, int]:
        """Every compile-time constant the kernel declares: the env plus shared-memory offsets,
        wgmma descriptor strides (bytes; the wgmma family's formulas) and the epilogue's
        copy geometry."""
        e = self.env()
        if not e["ORDER_ENDS"]:  # a "forward" kernel's source stays as before the field
            del e["ORDER_ENDS"]
        sbo = 8 * C_SWIZZLE
        mn_lbo = self.bk * C_SWIZZLE
        units = div(self.bn * self.out_bytes, TILE_UNIT_BYTES)
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
                "ACC_PER_WGMMA": self.bn // 2,
                "C_CONSUMER_BYTES": self.consumer_rows * self.bn * self.out_bytes,
                "C_CHUNK_BYTES": self.consumer_rows * C_SWIZZLE,
                "UNIT_BYTES": TILE_UNIT_BYTES, "UNIT_ELEMS": div(TILE_UNIT_BYTES, self.out_bytes),
                "UNITS_PER_ROW": units, "UNITS_PER_CHUNK": div(C_SWIZZLE, TILE_UNIT_BYTES),
                "TAIL_UNITS": div(self.stage_bytes, TILE_UNIT_BYTES),
                "BAR_STORE_BASE": 1, "BAR_TAIL": 1 + self.consumers}

    def ctypes(self) -> dict[str, str]:
        return {"in_t": CTYPES.get(self.dtype, "half"), "out_t": CTYPES.get(self.out, "float"),
                "ptx_in": PTX_TYPES.get(self.dtype, "f16")}

    @property
    def flops_per_byte(self) -> dict[str, float]:
        return {"global": tile_intensity(self.bm, self.bn, self.elem_bytes),
                "shared": tile_intensity(self.consumer_rows, self.bn, self.elem_bytes)}

    def launch_summary(self) -> str:
        return (f"grid = (min(SMs, an upper bound of the tiles), 1, 1) over the tiles of every "
                f"group ({self.bm}x{self.bn} each), block = ({self.threads}, 1, 1); tensor maps "
                f"of A, B and C are the first three parameters, the group offsets the fourth")
