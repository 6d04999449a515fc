"""What the wgmma family's template and emitted header read from a config: the named
quantities (``env``, which the rules check too), the kernel's compile-time constants, its C++
and PTX types, the wgmma inline-asm operand numbers and the derived figures of the header."""
from __future__ import annotations

from ....config import div, tile_intensity
from ....dtypes import CTYPES
from ....epilogue_program import program
from ....epilogue_rules import (
    EPILOGUE_ARGS,
    EPILOGUE_ARGS_BYTES,
    deferral,
    epilogue_of,
    residual_col,
    residual_dtype,
)
from .. import (
    ALIGN_SLACK,
    WARPGROUP,
    WGMMA_K_BYTES,
    WGMMA_M,
    Param,
    ints,
    tensor_maps,
)
from ..split import split_tail, split_workspace
from ..waiter import BAR_WAITER
from .rules import DEFER_UNITS, PACK_ROWS, PACK_TILE, PTX_TYPES
from .vectors import consumer_bytes, slot_bytes

SPLIT_LOADS = 64
"""Registers an inline split-K's last slice gives to one pass of its reduction: every slice's
loads of SPLIT_LOADS / SPLIT_K elements go out together, one round trip to L2 per pass."""
BAR_SPLIT = 14
"""The named barrier a cluster split-K's consumers meet at before they overwrite the ring."""


class WgmmaEnv:
    """Mixed into ``WgmmaConfig``: everything here derives from its fields and geometry."""

    __slots__ = ()

    def env(self) -> dict[str, int]:
        """The named quantities the rules and the template's constants use."""
        a, b = self.a_box, self.b_box
        return {
            **self.hopper_env(), "PINGPONG": int(self.pingpong), "PRODUCER": int(self.producer),
            "M_SPLIT": 1 if self.pingpong else self.consumers,
            "EMPTY_ARRIVALS": (1 if self.pingpong else self.consumers) * self.cluster,
            "SWIZZLE": self.swizzle, "SW_ELEMS": self.sw_elems, "CLUSTER_M": self.cluster_m,
            "CLUSTER_N": self.cluster_n, "CLUSTER": self.cluster,
            "PERSISTENT": int(self.persistent), "RASTER_SNAKE": int(self.raster == "snake"),
            "STORE_TMA": int(self.store == "tma"),
            "ROW_MAJOR_TMA_STORE": int(self.store == "tma" and self.layout[2] == "r"),
            "C_COL_SCATTER": int(self.layout[2] == "c" and (self.store == "tma"
                                                            or self.split_k > 1)),
            "DTYPE_FP16": int(self.dtype == "fp16"), "DTYPE_BF16": int(self.dtype == "bf16"),
            "DTYPE_TF32": int(self.dtype == "tf32"), "OUT_FP16": int(self.out == "fp16"),
            "OUT_BF16": int(self.out == "bf16"), "OUT_16BIT": int(self.out_bytes == 2),
            "A_MN_MAJOR": int(self.a_mn_major), "B_MN_MAJOR": int(self.b_mn_major),
            "SPLIT_K": self.split_k, "SPLIT_INLINE": int(self.split_inline),
            "SPLIT_APART": int(self.split_apart),
            "MATH_3XTF32": int(self.math == "3xtf32"), "FLUSH": self.flush,
            "FLUSH_TILES": 3 * self.flush, "PACK_TILE": PACK_TILE, "PACK_ROWS": PACK_ROWS,
            "A_BOX_INNER": a["box"][0], "A_BOX_ROWS": a["box"][1], "A_BOXES": a["count"],
            "B_BOX_INNER": b["box"][0], "B_BOX_ROWS": b["box"][1], "B_BOXES": b["count"],
            "A_SPLIT_UNITS": a["split_units"], "B_SPLIT_UNITS": b["split_units"],
            "A_STAGE_BYTES": self.a_stage_bytes, "B_STAGE_BYTES": self.b_stage_bytes,
            "STAGE_BYTES": self.stage_bytes, "C_CHUNKS": self.c_chunks,
            "C_STAGES": self.c_stages,
            "C_WHOLE_TILE": int(self.overlap or self.residual_staged),
            "C_SMEM_BYTES": self.c_smem_bytes,
            "C_BOX_ROWS": self.consumer_rows if self.layout[2] == "r" else self.bn,
            **self.feature_env(),
            **({"K_SPEC": self.packed_k(self.k)} if self.k and self.math == "3xtf32" else {}),
            **(self._feature_env() if self.extended else {}),
            **(self._split_cluster_env() if self.split_cluster else {}),
        }

    def split_slices(self, k: int) -> list[tuple[int, int]]:
        """(first K tile, K tiles) of each split-K slice for a K of ``k``: ceil(K tiles /
        SPLIT_K) tiles each, the last slices shorter or empty (an empty slice stores zeros)."""
        tiles = -(-self.packed_k(k) // self.bk)
        per = -(-tiles // self.split_k)
        return [(min(tiles, s * per), max(0, min(tiles, (s + 1) * per) - s * per))
                for s in range(self.split_k)]

    def split_tiles(self, tiles: int, sms: int) -> int:
        """How many of a launch's ``tiles`` C tiles (over the batch) an inline split-K splits,
        on a GPU of ``sms`` SMs: every tile when they fit one wave of the persistent grid (or
        the kernel is not persistent), else only those past its last whole wave (none when the
        waves are whole), so whole tiles fill the waves and the split slices the tail. 0
        without an inline split-K."""
        if self.split_k == 1 or not self.split_inline:
            return 0
        return split_tail(tiles, sms) if self.persistent else tiles

    def workspace_bytes(self, tiles: int, sms: int) -> tuple[int, int]:
        """An inline split-K's workspace (fp32 partials of every slice of each split tile, in
        fragment order) and counters (one int per split tile and consumer), in bytes, for a
        launch of ``tiles`` C tiles on ``sms`` SMs; (0, 0) without one."""
        if not self.split_inline:
            return 0, 0
        return split_workspace(self.split_tiles(tiles, sms), self.split_k, self.bm * self.bn,
                               self.consumers)

    def work_units(self, tiles: int, sms: int) -> int:
        """The work units (whole tiles and slices of split tiles) of a launch of ``tiles``
        C tiles on ``sms`` SMs: the persistent grid's CTAs take them in turn."""
        if not self.split_inline:
            return tiles * self.split_k
        split = self.split_tiles(tiles, sms)
        return tiles - split + split * self.split_k

    def params(self) -> tuple[Param, ...]:
        """The GEMM kernel's parameters, in order: tensor maps of A, B and C; M, N, K, alpha, A,
        lda, B, ldb, beta, C, ldc, the batch strides, bias, batch; with an inline split-K the
        partials' workspace (``SPLIT_K`` slices of ``BM x BN`` fp32 per split tile, in order,
        each slice in fragment order), the split tiles' arrival counters and how many of the
        last tiles are split (``split_tiles``, from ``split_tiles``); with an epilogue tree
        that has operands, its ``EpilogueArgs``."""
        out = (*tensor_maps("tmap_a", "tmap_b", "tmap_c"), *ints("m_arg", "n_arg", "k_arg"),
               Param("alpha", "float", "f"), Param("A", "const {ns}::in_t* __restrict__", "Q"),
               *ints("lda"), Param("B", "const {ns}::in_t* __restrict__", "Q"), *ints("ldb"),
               Param("beta", "float", "f"), Param("C", "{ns}::out_t* __restrict__", "Q"),
               *ints("ldc"), *(Param(f"stride_{x}", "long long", "q") for x in "abc"),
               Param("bias", "const {ns}::out_t* __restrict__", "Q"), *ints("batch"))
        if self.split_inline:
            out += (Param("split_ws", "float* __restrict__", "Q"),
                    Param("split_sem", "int* __restrict__", "Q"), *ints("split_tiles"))
        if self.extended and self.env()["EPI_ARGS"]:
            out += (Param("epi", "const __grid_constant__ {ns}::EpilogueArgs",
                          f"{EPILOGUE_ARGS_BYTES}s"),)
        return out

    @property
    def split_apart(self) -> bool:
        """Whether a split-K's slices are summed apart: partials to a workspace laid out as C,
        then ``<name>_reduce`` (neither inline by the last slice nor in a cluster)."""
        return self.split_k > 1 and not self.split_inline and not self.split_cluster

    @property
    def cta_cluster(self) -> int:
        """CTAs of one launched cluster: the multicast cluster, or a cluster split-K's slices."""
        return self.split_k if self.split_cluster else self.cluster

    def _split_cluster_env(self) -> dict[str, int]:
        """Named quantities of a cluster split-K (only for configs with one): whether the
        epilogue is a tree (or the dual GEMM, or the overlap), the bytes of a tile's fp32
        partials and of the ring they are left in, and the named barrier the consumers meet
        at before either overwrites the ring."""
        return {"SPLIT_CLUSTER": 1, "EXTENDED": int(self.extended),
                "SPLIT_PARTIAL_BYTES": self.bm * self.bn * 4,
                "RING_BYTES": self.stages * self.stage_bytes, "BAR_SPLIT": BAR_SPLIT}

    def _feature_env(self) -> dict[str, int]:
        """Named quantities of the features beyond the family's table (only for configs
        that use one, so other kernels declare the constants they always did)."""
        units = div(self.consumer_rows * self.bn * self.out_bytes, 16) if self.store == "tma" else 0
        return {"DUAL": int(self.dual), "OVERLAP": int(self.overlap),
                "B_PART_BYTES": self.b_part_bytes, "DEFER_UNITS": DEFER_UNITS,
                "DEFER_UNITS_TOTAL": units,
                # the consumer's registers less what it needs beside its accumulators
                "ACC_BUDGET": self.consumer_regs - (self.registers_needed() - self.acc_regs)}

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
        if not e["C_COL_SCATTER"]:  # a kernel that cannot break H52 keeps its source
            del e["C_COL_SCATTER"]
        if not self.c_stages:  # nor one that stages whole tiles the C_STAGES_RULES
            del e["C_STAGES"], e["C_WHOLE_TILE"]
        return {**e, "A_SMEM_OFFSET": a_off, "B_SMEM_OFFSET": b_off, "C_SMEM_OFFSET": c_off,
                "BAR_OFFSET": bar_off, "ALIGN_SLACK": ALIGN_SLACK,
                "SPLIT_FLAG_OFFSET": bar_off + 2 * self.stages * 8,
                **({"SPLIT_TILE_ELEMS": self.bm * self.bn, "SPLIT_LOADS": SPLIT_LOADS}
                   if self.split_inline else {}),
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
                "C_CONSUMER_BYTES": self.c_smem_bytes // self.consumers,
                "C_CHUNK_BYTES": (c_rows if self.layout[2] == "r" else self.bn) * self.c_swizzle,
                "BAR_STORE_BASE": 1, "BAR_ORDER_BASE": 1 + self.consumers,
                **({"BAR_WAITER": BAR_WAITER} if self.waiter else {}),
                **(self._feature_constants(e) if self.extended else {}),
                **self._vector_constants(bar_off + self.barrier_bytes)}

    def _vector_constants(self, offset: int) -> dict[str, int]:
        """Where the staged vectors live (only for a kernel that stages some): after the
        barriers, each consumer's two slots, each vector's offset in a slot."""
        vectors = self.vectors
        if not vectors:
            return {}
        return {"VEC_SMEM_OFFSET": offset, "VEC_SLOT_BYTES": slot_bytes(vectors),
                "VEC_CONSUMER_BYTES": consumer_bytes(vectors),
                **{v.constant: v.offset for v in vectors}}

    def _feature_constants(self, e: dict[str, int]) -> dict[str, int]:
        return {"DEFER_PASSES": div(e["DEFER_UNITS_TOTAL"], WARPGROUP * DEFER_UNITS),
                "EPI_ARGS_BYTES": EPILOGUE_ARGS_BYTES,
                "R_COL": int(residual_col(epilogue_of(self), self.layout[2]))}

    def epilogue_view(self) -> dict:
        """What the template reads to render an epilogue tree: the program of the whole tree
        (``pre``), or with ``overlap`` the pre-activation's program (``pre``) and that of the
        rest on the staged values (``post``); the EpilogueArgs fields when the tree needs
        them; the tree for the header."""
        epi = epilogue_of(self)
        cut = deferral(epi) if self.overlap else None
        pre = program(cut[0] if cut else epi.root)
        return {"tree": self.extended, "expr": epi.expr, "lines": epi.tree_lines(),
                "pre": pre, "post": program(cut[1]) if cut else None,
                "args": EPILOGUE_ARGS if self.extended and self.env()["EPI_ARGS"] else (),
                "alpha": bool(epi.count("alpha")), "amax": bool(epi.count("amax")),
                "beta": bool(epi.count("beta_c"))}

    def ctypes(self) -> dict[str, str]:
        """C++ types the template declares and the PTX type of the wgmma inputs."""
        types = {"in_t": CTYPES.get(self.dtype, "half"), "out_t": CTYPES.get(self.out, "float"),
                 "ptx_in": PTX_TYPES.get(self.dtype, "f16")}
        if self.extended:
            r = residual_dtype(epilogue_of(self), self.out)
            types["r_t"] = CTYPES.get(r, "__nv_fp8_e4m3")
        return types

    @property
    def flops_per_byte(self) -> dict[str, float | None]:
        """FLOP per byte at the block tile (global) and at one consumer's wgmma tile
        (shared: the A rows it reads against the whole B tile)."""
        def tile(a: int, b: int) -> float:
            return tile_intensity(a, b, self.elem_bytes)
        return {"global": tile(self.bm * self.cluster_m, self.bn * self.cluster_n),
                "shared": tile(self.consumer_rows, self.bn)}

    def launch_summary(self) -> str:
        cl = (f", cluster = (1, 1, {self.split_k}): a tile's slices" if self.split_cluster
              else f", cluster = ({self.cluster}, 1, 1)" if self.cluster > 1 else "")
        if self.persistent:
            grid = (f"grid = (min(tiles, SMs / {self.cluster} * {self.cluster}), 1, 1) over "
                    f"tiles = ceil(M/{self.bm * self.cluster_m}) * ceil(N/{self.bn * self.cluster_n}) "
                    f"* {self.cluster} * batch")
        else:
            grid = (f"grid = (ceil(M/{self.bm}) * ceil(N/{self.bn}), 1, batch"
                    f"{f' * {self.split_k}' if self.split_k > 1 else ''})")
        return (f"{grid}{cl}, block = ({self.threads}, 1, 1); tensor maps of A, B and C are "
                f"the first three parameters")
