"""What the fp8 family's template and emitted header read from a config: the named quantities
(``env``, which the rules check too), the kernel's compile-time constants, its C++ and PTX
types, the wgmma inline-asm operand numbers and the header's derived figures."""
from __future__ import annotations

from ....arch import get_arch
from ....config import div
from ....dtypes import CTYPES
from .. import ALIGN_SLACK, C_SWIZZLE, WARPGROUP, WGMMA_M, Param, ints, tensor_maps
from ..waiter import BAR_WAITER
from .rules import BLOCK, PACK_THREADS, b_scale_span, PACK_TILE, PTX_TYPES, SWIZZLE, WGMMA_K


class Fp8Env:
    """Mixed into ``Fp8Config``: everything here derives from its fields and geometry."""

    __slots__ = ()

    def env(self) -> dict[str, int]:
        """The named quantities the rules and the template's constants use."""
        return {
            **self.hopper_env(), "SWIZZLE": SWIZZLE, "BLOCK": BLOCK,
            "B_SCALE_SPAN": b_scale_span(self.bn),
            "K_MAJOR": int(self.layout == "rcr"), "PROMOTE": self.promote,
            "PROMOTE_STAGES": self.promote_stages, "PARTIALS": self.partials,
            "SCALE_TENSOR": int(self.scaling == "tensor"), "SCALE_ROW": int(self.scaling == "row"),
            "SCALE_BLOCK": int(self.scaling == "block"),
            "BLOCK_PROMOTED": int(self.scaling == "block" and self.promote > 0),
            "OUT_FP8": int(self.out == "e4m3"),
            "QUANT": {"none": 0, "tensor": 1, "1x128": 2}.get(self.quant, -1),
            "SPLIT_K": self.split_k, "CLUSTER_M": self.cluster_m, "CLUSTER_N": self.cluster_n,
            "CLUSTER": self.cluster, "STORE_TMA": int(self.store == "tma"),
            "A_BOX_ROWS": self.a_rows or div(self.bm, self.cluster_n),
            "B_BOX_ROWS": div(self.bn, self.cluster_m),
            # the Hopper rules' names for what this family fixes: cooperative consumers, one
            # byte per element, a producer warpgroup with setmaxnreg, K-major B, row-major C
            "M_SPLIT": self.consumers, "PRODUCER": 1, "B_MN_MAJOR": 0, "SW_ELEMS": SWIZZLE,
            "ROW_MAJOR_TMA_STORE": int(self.store == "tma"), "C_BOX_ROWS": self.consumer_rows,
            "OVERLAP": int(self.overlap), "C_STAGES": self.c_stages,
            **({"C_CHUNKS": self.c_chunks} if self.c_stages else {}),
            **({"A_ROWS": self.a_rows} if self.a_rows else {}),
            **self.feature_env(),
        }

    def params(self) -> tuple[Param, ...]:
        """The GEMM kernel's parameters, in order: tensor maps of A, B and D; M, N, K; the
        scales of A and B with their extents; D, ldd, bias; the split-K workspace and arrival
        counters, and how many of the last cluster tiles are split (``Fp8Config.split_tiles``;
        with split-K only); for an e4m3 D, its scales (``scale_d``: read per tensor, written per 1 x 128,
        element (m, nb) at m * sd_m + nb * sd_n), ``amax`` (written, as float bits) and the
        workspace it is gathered in (one slot per CTA and a counter, zero between launches)."""
        scale = "const float* __restrict__"
        quant = (Param("scale_d", "float* __restrict__", "Q"), *ints("sd_m", "sd_n"),
                 Param("amax", "unsigned int* __restrict__", "Q"),
                 Param("amax_slots", "unsigned int* __restrict__", "Q"),
                 Param("amax_count", "int* __restrict__", "Q")) if self.out == "e4m3" else ()
        return (*tensor_maps("tmap_a", "tmap_b", "tmap_d"), *ints("m_arg", "n_arg", "k_arg"),
                Param("scale_a", scale, "Q"), *ints("sa_m", "sa_k"),
                Param("scale_b", scale, "Q"), *ints("sb_n", "sb_k"),
                Param("D", "{ns}::out_t* __restrict__", "Q"), *ints("ldd"),
                Param("bias", "const {ns}::bias_t* __restrict__", "Q"),
                Param("workspace", "float* __restrict__", "Q"),
                Param("counters", "int* __restrict__", "Q"),
                *(ints("split_tiles") if self.split_k > 1 else ()), *quant)

    def template_constants(self) -> dict[str, int]:
        """Every compile-time constant the kernel declares: the env plus shared-memory offsets,
        descriptor strides and wgmma shape figures (bytes)."""
        e = self.env()
        if not self.c_stages:  # a kernel that stages whole tiles keeps its source
            del e["C_STAGES"]
        bar = self.c_smem_offset + self.c_smem_bytes
        return {**e, "ACC": self.bn // 2, "K_STEPS": div(self.bk, WGMMA_K),
                "A_STAGE_BYTES": self.a_stage_bytes, "B_STAGE_BYTES": self.b_stage_bytes,
                "STAGE_BYTES": self.stage_bytes, "A_SMEM_OFFSET": 0,
                "B_SMEM_OFFSET": self.stages * self.a_stage_bytes,
                "C_SMEM_OFFSET": self.c_smem_offset, "BAR_OFFSET": bar,
                "FLAG_OFFSET": bar + self.barrier_bytes, "ALIGN_SLACK": ALIGN_SLACK,
                "A_BOX_BYTES": e["A_BOX_ROWS"] * self.bk, "B_BOX_BYTES": e["B_BOX_ROWS"] * self.bk,
                "A_M64_BYTES": WGMMA_M * self.bk, "A_CONSUMER_BYTES": self.consumer_rows * self.bk,
                "DESC_LBO": 16, "DESC_SBO": 8 * SWIZZLE, "SWIZZLE_MODE": 1,  # 128-byte swizzle
                "K_STEP_BYTES": WGMMA_K,
                "EMPTY_ARRIVALS": self.consumers * self.cluster,
                "FAST": int(self.promote == 0),
                "OUT_GROUPS": self.bn // BLOCK if self.quant == "1x128" else 0,
                "B_SCALE_SPLIT": int(self.scaling == "block" and BLOCK % self.bn != 0),
                "C_CHUNKS": self.c_chunks if self.store == "tma" or self.c_stages else 0,
                "C_CHUNK_BYTES": self.consumer_rows * C_SWIZZLE,
                "C_CONSUMER_BYTES": self.c_smem_bytes // self.consumers if self.c_stages
                                    else self.consumer_rows * self.bn * self.out_bytes,
                "PACK_TILE": PACK_TILE, "PACK_THREADS": PACK_THREADS,
                "BAR_CONSUMER_BASE": 1,
                **({"BAR_STAGGER": 1 + self.consumers} if self.stagger else {}),
                **({"BAR_WAITER": BAR_WAITER} if self.waiter else {}),
                # a_rows: a stage expects A_ROWS rows of A and B's tile
                **({"STAGE_TX_BYTES": self.a_rows * self.bk + self.b_stage_bytes}
                   if self.a_rows else {})}

    def ctypes(self) -> dict[str, str]:
        """C++ types of A, B, D and bias (bf16 for an e4m3 D) and the PTX types of the wgmma
        inputs."""
        out_t = CTYPES.get(self.out, "float")
        return {"a_t": CTYPES.get(self.dtype, "__nv_fp8_e4m3"),
                "b_t": CTYPES.get(self.b_dtype, "__nv_fp8_e4m3"),
                "out_t": out_t, "bias_t": CTYPES["bf16"] if self.out == "e4m3" else out_t,
                "ptx_a": PTX_TYPES.get(self.dtype, "e4m3"),
                "ptx_b": PTX_TYPES.get(self.b_dtype, "e4m3")}

    @property
    def c_chunks(self) -> int:
        """128-byte column chunks of a consumer's D tile (the TMA store's, one per chunk)."""
        return div(self.bn, self.c_chunk)

    @property
    def flops_per_byte(self) -> dict[str, float]:
        """FLOP per byte of A and B moved into shared memory, per CTA (global; multicast
        shares count once per cluster) and per consumer (shared)."""
        cm, cn = self.bm * self.cluster_m, self.bn * self.cluster_n
        per_cta = (cm * self.bn / self.cluster_m + self.bm * cn / self.cluster_n) / self.cluster
        glob = 2 * self.bm * self.bn / max(per_cta, 1)
        shared = 2 * self.consumer_rows * self.bn / max(self.consumer_rows + self.bn, 1)
        return {"global": glob, "shared": shared}

    def figures(self, arch: str = "sm_90") -> dict:
        """The derived figures the emitted header and ``gemmgen list`` report."""
        return {"threads": self.threads, "warpgroups": self.threads // WARPGROUP,
                "smem_bytes_dynamic": self.smem_bytes, "stage_bytes": self.stage_bytes,
                "c_staging_bytes": self.c_smem_bytes,
                **({"c_staging_buffers": self.c_stages} if self.c_stages else {}),
                "acc_regs_per_consumer": self.acc_regs,
                "consumer_registers": self.regs_consumer, "entry_registers": self.entry_regs,
                "wgmma": f"m64n{self.bn}k32.f32.{self.dtype}.{self.b_dtype} x {self.m_iters} "
                         f"x 4 per consumer per stage",
                "accumulation": self.accumulation,
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self.blocks_per_sm(arch)}

    @property
    def header_lines(self) -> list[str]:
        """What the kernel computes, for the emitted header: operands, scaling, accumulation."""
        scaling = {
            "tensor": "one fp32 scale per operand: scale_a[0], scale_b[0]",
            "row": "scale_a[m * sa_m] per row of A, scale_b[n * sb_n] per column of B (a stride "
                   "of 0 broadcasts one)",
            "block": "DeepSeek-V3: scale_a[m * sa_m + kb * sa_k] per 1 x 128 of A, "
                     "scale_b[nb * sb_n + kb * sb_k] per 128 x 128 of B (kb = k / 128, nb = n / 128)",
        }[self.scaling]
        acc = ("fast: the tensor core sums all of K, the scales are applied in the epilogue"
               if not self.promote else
               f"promoted: every {self.promote} K elements the tensor core's partial sums are "
               f"added to fp32 registers" + (", the block scales applied there"
                                             if self.scaling == "block" else "")
               + (f"; {self.partials} partial sets" if self.partials > 1 else "")
               + (f"; {self.overlap_summary}" if self.overlap else ""))
        return [(f"D[M,N] = act(sum_k (A[m,k] sa) (B[k,n] sb) + bias[n]): A {self.dtype} (M x K, "
                 f"row-major, lda), B {self.b_dtype} (K x N column-major, i.e. N rows of K, ldb),"),
                f"fp32 accumulation, D {self.out} (row-major, ldd).",
                f"Scaling {self.scaling}: {scaling}.", f"Accumulation {acc}.", *self._quant_lines()]

    def _quant_lines(self) -> list[str]:
        """How an e4m3 D is quantized, for the header (nothing for other D dtypes)."""
        if self.out != "e4m3":
            return []
        how = {"tensor": "q = v / scale_d[0] (the caller's per-tensor scale)",
               "1x128": "per row and 128 columns, s = max(amax, FLT_MIN) / 448 of the group's "
                        "values v, q = v / s, s stored at scale_d[m * sd_m + (n / 128) * sd_n]"
               }.get(self.quant, self.quant)
        return [f"D e4m3 (saturating to +-448, bias bf16): {how}; max |v| over D folded into "
                f"amax (float bits; the last warp of the grid writes it)."]

    def launch_summary(self) -> str:
        cl = f", cluster = ({self.cluster}, 1, 1)" if self.cluster > 1 else ""
        tiles = f"ceil(M/{self.bm * self.cluster_m}) * ceil(N/{self.bn * self.cluster_n})"
        units = (f"tiles = {tiles}" if self.split_k == 1 else
                 f"tiles + split_tiles * {self.split_k - 1}, tiles = {tiles} (split_tiles: all "
                 f"tiles within one wave, else those past the last whole wave)")
        return (f"grid = (min(units, SMs / {self.cluster}) * {self.cluster}, 1, 1) over units = "
                f"{units}{cl}, block = ({self.threads}, 1, 1); tensor maps of A, B and D are the "
                f"first three parameters")
