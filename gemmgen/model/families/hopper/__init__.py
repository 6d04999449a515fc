"""The Hopper (sm_90a) kernels, one package: this module holds what all of them share (the
sm_90a constants and the rules of warpgroups, wgmma shapes, the TMA ring, setmaxnreg, TMA
boxes, clusters, rasters and split-K, each written once, and the ``HopperTile`` geometry;
``split`` holds the split-K arithmetic); its modules are the operand and grouping axes built
on it: ``wgmma`` (fp16, bf16, tf32 and 3xTF32 operands), ``fp8`` (e4m3/e5m2 with tensor, row
or block scales) and ``grouped`` (the M- and K-grouped scheduler, 16-bit or FP8 operands).

A rule reads names every Hopper family's ``env()`` defines (a family without a feature states
it: ``SETMAXNREG`` 1 where setmaxnreg is always used, ``B_MN_MAJOR`` 0 where B is K-major only,
``CLUSTER`` 1 without clusters), so one table checks all three and renders the same
``static_assert``s. The ids are the wgmma family's (H..). A family's own table is this one plus
the rules of its own axes."""
from __future__ import annotations

from dataclasses import dataclass

from ...arch import get_arch
from ...config import WARP_SIZE, Family, div
from ...dtypes import ELEM_BYTES
from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of

WARPGROUP = 4 * WARP_SIZE          # threads of one warpgroup
WGMMA_M = 64                       # rows of one wgmma, per warpgroup
WGMMA_K_BYTES = 32                 # one wgmma takes 32 bytes of K: k8 tf32, k16 16-bit, k32 FP8
MAX_BOX = 256                      # cuTensorMapEncodeTiled: every box dimension <= 256
C_SWIZZLE = 128                    # the C staging tile's rows: 128-byte swizzled unless narrower
BARRIER_BYTES = 8                  # one mbarrier
ALIGN_SLACK = 1024                 # dynamic shared memory is rounded up to a 1024-byte atom
REGISTER_FILE = 65536              # 32-bit registers per SM (sm_90)
MAX_SPLIT_K = 16                   # slices of K one problem may be split into
MAX_STAGES = 16                    # stages of the TMA ring
SMEM_OPTIN = get_arch("sm_90").smem_per_block_optin
"""The largest dynamic shared memory one block may opt in to on the only arch these families
run on (sm_90a: 232,448 bytes)."""

_SETMAXNREG = equal("SETMAXNREG", 1)
_STEPS8 = tuple(range(24, 257, 8))

HOPPER_RULES: tuple[Rule, ...] = (
    Rule("H01", "bm-warpgroup-rows", at_least("BM", "WGMMA_M"),
         "a consumer warpgroup computes at least the 64 rows of one wgmma"),
    Rule("H02", "bm-per-consumer", multiple_of("BM", ("WGMMA_M", "M_SPLIT")),
         "each consumer warpgroup takes whole 64-row wgmma tiles of the block"),
    Rule("H03", "wgmma-n-multiple", multiple_of("BN", 8), "wgmma N is a multiple of 8"),
    Rule("H04", "wgmma-n-range", at_most("BN", 256), "wgmma N is at most 256"),
    Rule("H05", "wgmma-n-positive", at_least("BN", 8), "wgmma N is at least 8"),
    Rule("H06", "swizzle-mode", one_of("SWIZZLE", (32, 64, 128)),
         "TMA and wgmma swizzle 32-, 64- or 128-byte rows"),
    Rule("H07", "bk-swizzle", equal(("BK", "ELEM_BYTES"), "SWIZZLE"),
         "one K row of a K-major tile is one swizzle row (DeepGEMM: BK = 128 B / element)"),
    Rule("H08", "stages-range", one_of("STAGES", tuple(range(1, MAX_STAGES + 1))),
         f"1 to {MAX_STAGES} shared-memory stages in the TMA ring"),
    Rule("H53", "stages-ring", at_least("STAGES", (2, "PRODUCER")),
         "with a producer warpgroup the ring holds at least two stages: a consumer releases a "
         "stage once it waits on the next one (with one stage it would wait on itself)",
         when=at_least("STAGES", 1)),  # fewer: H08 (stages-range) says so
    Rule("H09", "smem-limit", at_most("SMEM_BYTES", "SMEM_OPTIN"),
         "stages x stage bytes + C staging + barriers + alignment fit the arch's opt-in "
         "shared memory per block"),
    Rule("H10", "consumers-range", one_of("CONSUMERS", (1, 2)),
         "one or two consumer warpgroups"),
    Rule("H11", "acc-registers", at_most(("ACC_REGS",), "ACC_BUDGET"),
         "live accumulators plus the working registers a consumer needs (REG_RESERVE) must "
         "fit its registers (REGS_CONSUMER with setmaxnreg, else the __launch_bounds__ cap), "
         "or wgmma serializes and the kernel spills"),
    Rule("H12", "setmaxnreg-producer", equal("PRODUCER", 1),
         "setmaxnreg moves registers from a producer warpgroup to the consumers",
         when=_SETMAXNREG),
    Rule("H13", "setmaxnreg-producer-count", one_of("REGS_PRODUCER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("H14", "setmaxnreg-consumer-count", one_of("REGS_CONSUMER", _STEPS8),
         "setmaxnreg takes a multiple of 8 from 24 to 256", when=_SETMAXNREG),
    Rule("H15", "setmaxnreg-pool", at_most("REG_POOL", REGISTER_FILE),
         "(REGS_PRODUCER + CONSUMERS x REGS_CONSUMER) x 128 threads fit the 65,536-register "
         "file of the SM (one block per SM)", when=_SETMAXNREG),
    Rule("H16", "setmaxnreg-dec", at_most("REGS_PRODUCER", "ENTRY_REGS"),
         "the producer can only give registers back: REGS_PRODUCER <= the "
         "__launch_bounds__(threads, 1) cap at entry", when=_SETMAXNREG),
    Rule("H17", "setmaxnreg-inc", at_least("REGS_CONSUMER", "ENTRY_REGS"),
         "consumers can only grow: REGS_CONSUMER >= the __launch_bounds__(threads, 1) cap",
         when=_SETMAXNREG),
    Rule("H20", "a-box", at_most("A_BOX_ROWS", MAX_BOX),
         "a TMA box dimension is at most 256 (cuTensorMapEncodeTiled)"),
    Rule("H21", "b-mn-blocks", multiple_of("BN", "SW_ELEMS"),
         "an MN-major B tile is loaded as whole swizzle-width column blocks",
         when=equal("B_MN_MAJOR", 1)),
    Rule("H22", "cluster-size", one_of("CLUSTER", (1, 2)),
         "clusters of 1 or 2 CTAs (CLUSTER_M x CLUSTER_N)"),
    Rule("H30", "group-positive", at_least("GROUP", 1), "raster groups hold at least one tile"),
    Rule("H31", "c-store-chunks", multiple_of("BN", "C_CHUNK"),
         "a TMA store writes row-major C in swizzled column chunks of one 128-, 64- or 32-byte "
         "row (C_SWIZZLE_ROW)",
         when=equal("ROW_MAJOR_TMA_STORE", 1)),
    Rule("H34", "c-box", at_most("C_BOX_ROWS", MAX_BOX),
         "a TMA-store box dimension (a consumer's rows, or BN for a column-major C) is at most "
         "256 (cuTensorMapEncodeTiled)", when=equal("STORE_TMA", 1)),
    Rule("H35", "split-k-range", one_of("SPLIT_K", tuple(range(1, MAX_SPLIT_K + 1))),
         f"split-K into 1 to {MAX_SPLIT_K} slices of K"),
)
"""The rules of every Hopper kernel, in the order ``violations`` reports them."""

C_STAGED = at_least("C_STAGES", 1)
C_STAGES_RULES: tuple[Rule, ...] = (
    Rule("H57", "c-stages-store", equal("ROW_MAJOR_TMA_STORE", 1),
         "C staged chunk by chunk through buffers (c_stages) is a row-major C stored through "
         "TMA", when=C_STAGED),
    Rule("H58", "c-stages-chunks", at_most("C_STAGES", "C_CHUNKS"),
         "no more C staging buffers than a consumer's tile has chunks", when=C_STAGED),
)
"""The rules of C staged chunk by chunk through buffers (``c_stages``: the wgmma and fp8
families), which only such kernels assert; a family adds those of its own axes."""

OUTPUT_RULES: tuple[Rule, ...] = (
    Rule("H32", "fp16-output", equal("DTYPE_FP16", 1), "an fp16 C needs fp16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("H33", "bf16-output", equal("DTYPE_BF16", 1), "a bf16 C needs bf16 inputs",
         when=equal("OUT_BF16", 1)),
)
"""The 16-bit-input families' output rules (wgmma, grouped): a 16-bit C in the inputs' dtype."""


HOPPER_HELP = {
    "bn": "block tile columns (N) = wgmma N: 8 to 256 in steps of 8",
    "consumers": "consumer warpgroups (1 or 2)",
    "stages": "TMA ring depth",
    "cluster_m": "CTAs per cluster along M (B multicast)",
    "cluster_n": "CTAs per cluster along N (A multicast)",
    "group": "M tile rows per raster group",
    "regs_producer": "setmaxnreg count of the producer (0: none)",
    "regs_consumer": "setmaxnreg count of the consumers (0: none)",
}
"""Command-line help of the Hopper families' shared fields, in their words (a family takes
those it has, ``hopper_help``, adds its own and may say more of one)."""


def hopper_help(config) -> dict[str, str]:
    """``HOPPER_HELP``'s entries for the fields of the config class ``config``."""
    return {k: v for k, v in HOPPER_HELP.items() if k in config.__dataclass_fields__}


def hopper_family(config, field_help: dict[str, str], **kw) -> Family:
    """The ``Family`` of a Hopper config class ``config``: named after ``config.family``, for
    sm_90a alone, no flag defaults (the config's own defaults are a working kernel), the help
    of ``hopper_help(config)`` updated with the family's ``field_help``; ``kw`` the rest."""
    return Family(name=config.family, config=config, flag_defaults={},
                  field_help={**hopper_help(config), **field_help},
                  min_cc=90, max_cc=90, arch_suffix="a", **kw)


@dataclass(frozen=True)
class Param:
    """One kernel parameter, declared once for the kernel's signature (``signature``) and for
    packing its value into the launch's parameter block: ``name``; ``ctype``, its C++ type
    (``{ns}`` stands for the kernel's namespace); ``kind``, its struct code ("128s" a tensor
    map, "i" int, "f" float, "q" long long, "Q" a pointer, "<n>s" a struct of n bytes)."""

    name: str
    ctype: str
    kind: str


MAP = "const __grid_constant__ CUtensorMap"


def tensor_maps(*names: str) -> tuple[Param, ...]:
    """A tensor-map parameter (passed by value, 128 bytes) for each of ``names``."""
    return tuple(Param(n, MAP, "128s") for n in names)


def ints(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n, "int", "i") for n in names)


def signature(name: str, params: tuple[Param, ...], ns: str, width: int = 100) -> str:
    """``name(`` and the kernel's parameter declarations, four spaces in, as many to a line as
    fit ``width`` columns, then ``)``."""
    decls = [f"{p.ctype.format(ns=ns)} {p.name}" for p in params]
    lines, line = [name + "("], "   "
    for i, decl in enumerate(decls):
        piece = decl + ("," if i < len(decls) - 1 else ")")
        if line.strip() and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = "   "
        line += " " + piece
    lines.append(line)
    return "\n".join(lines)


def wgmma_asm(bn: int) -> dict:
    """Operand numbers of the inline asm of a wgmma of ``bn`` columns (fp32 accumulators,
    bn / 2 per thread): accumulators %0..%(n-1), then descriptor A, descriptor B and the
    scale-d flag (``templates/_wgmma_ptx.cu.j2``)."""
    n = bn // 2
    return {"acc": n, "desc_a": n, "desc_b": n + 1, "scale_d": n + 2,
            "acc_operands": [f"%{i}" for i in range(n)],
            "acc_constraints": [f'"+f"(d[{i}])' for i in range(n)]}


class HopperTile:
    """Mixed into the Hopper configs (wgmma, FP8, grouped): the derived figures their kernels
    share, from the fields ``bm, bn, bk, dtype, out, consumers, stages, regs_producer,
    regs_consumer`` (and ``cluster_m, cluster_n`` where the family has clusters). A family
    overrides what its own axes change: ping-pong rows and an optional producer (wgmma), the
    split-K flags in shared memory and ptxas's entry registers (FP8), no cluster (grouped).
    ``REG_RESERVE``: registers a consumer thread needs besides its accumulators."""

    __slots__ = ()
    REG_RESERVE = 48
    """Registers a consumer thread needs besides its accumulators (16-bit and tf32 wgmma)."""
    dual = False
    """The dual GEMM (gate and up sharing A) is an axis of the wgmma family; the other Hopper
    kernels compute one product (their shared templates read ``dual``)."""
    pdl = True
    """Programmatic dependent launch: the kernel waits for the stream's previous kernel
    (``griddepcontrol.wait``) only after its set-up (barrier init, tensor-map prefetch) and
    before its first global memory access, so it is launched with
    ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` and that set-up, and the launch
    itself, overlap the previous kernel's last wave (CUDA programming guide, "Programmatic
    Dependent Launch and Synchronization")."""
    c_stages = 0
    """C staging buffers per consumer (the wgmma family's ``c_stages``); 0: the other Hopper
    kernels stage each consumer's whole C tile."""
    split_n = False
    """Whether the consumers split a tile's columns (the grouped family's ``split`` "n"); the
    other Hopper kernels' consumers split its rows (the shared templates read ``split_n``)."""

    @property
    def elem_bytes(self) -> int:
        """Bytes of one A or B element."""
        return ELEM_BYTES.get(self.dtype, 2)

    @property
    def out_bytes(self) -> int:
        """Bytes of one C (D) element."""
        return ELEM_BYTES.get(self.out, 4)

    @property
    def wgmma_k(self) -> int:
        """K of one wgmma: 32 bytes of elements (8 tf32, 16 fp16/bf16, 32 FP8)."""
        return WGMMA_K_BYTES // self.elem_bytes

    @property
    def threads(self) -> int:
        """Threads per block: 128 per consumer warpgroup plus the producer warpgroup."""
        return WARPGROUP * (self.consumers + 1)

    @property
    def warps(self) -> int:
        return self.threads // WARP_SIZE

    @property
    def consumer_rows(self) -> int:
        """Rows of C one consumer warpgroup computes per tile: BM / consumers (cooperative)."""
        return div(self.bm, self.consumers)

    @property
    def consumer_cols(self) -> int:
        """Columns of C one consumer warpgroup computes per tile (its wgmma N): BN, the
        consumers splitting the rows (the grouped family may split the columns instead)."""
        return self.bn

    @property
    def m_iters(self) -> int:
        """64-row wgmma tiles per consumer warpgroup."""
        return div(self.consumer_rows, WGMMA_M)

    @property
    def a_stage_bytes(self) -> int:
        return self.bm * self.bk * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        """Bytes TMA lands in one stage of this CTA (the full mbarrier's transactions)."""
        return self.a_stage_bytes + self.b_stage_bytes

    @property
    def c_swizzle(self) -> int:
        """Bytes of one row of a C staging chunk, which is also the TMA store's swizzle: 128
        (a family whose tiles may end in a narrower chunk overrides this)."""
        return C_SWIZZLE

    @property
    def c_chunk(self) -> int:
        """Elements of C in one staging row (``c_swizzle`` bytes)."""
        return self.c_swizzle // self.out_bytes

    @property
    def c_smem_bytes(self) -> int:
        """C staging for the TMA store: each consumer's rows x its columns in C's dtype, or
        with ``c_stages`` its rows x that many chunks of ``c_swizzle`` bytes (0 for direct
        stores)."""
        row = (self.c_stages * self.c_swizzle if self.c_stages
               else self.consumer_cols * self.out_bytes)
        return self.consumers * self.consumer_rows * row if self.store == "tma" else 0

    def rendered_rules(self) -> tuple:
        """The rule table but, for a config that stages whole tiles (``c_stages`` 0), the rules
        of C staging buffers (those asserted only ``when`` C_STAGED), which its source cannot
        break and whose C_STAGES it does not declare."""
        rules = self.rule_table()
        return rules if self.c_stages else tuple(r for r in rules if r.when is not C_STAGED)

    @property
    def c_smem_offset(self) -> int:
        """Where the C staging tile starts: after the stages, rounded up to a 1024-byte atom
        (the TMA store's 128-byte swizzle is a function of the address bits)."""
        return -(-self.stages * self.stage_bytes // ALIGN_SLACK) * ALIGN_SLACK

    @property
    def barrier_bytes(self) -> int:
        """The full and empty mbarrier of each stage."""
        return 2 * self.stages * BARRIER_BYTES

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory per block: stages, C staging (1024-byte aligned), barriers and
        the slack for rounding the base up to a 1024-byte atom."""
        return self.c_smem_offset + self.c_smem_bytes + self.barrier_bytes + ALIGN_SLACK

    @property
    def cluster(self) -> int:
        """CTAs of one cluster."""
        return self.cluster_m * self.cluster_n

    @property
    def setmaxnreg(self) -> bool:
        """setmaxnreg moves registers from the producer to the consumers (0, 0: it does not)."""
        return bool(self.regs_producer or self.regs_consumer)

    @property
    def entry_regs(self) -> int:
        """Registers per thread at entry under __launch_bounds__(threads, 1): the register
        file over the threads, in steps of 8, at most 255."""
        return min(255, div(REGISTER_FILE, self.threads) // 8 * 8)

    @property
    def consumer_regs(self) -> int:
        """Registers a consumer thread has for its work: REGS_CONSUMER, or the entry cap
        without setmaxnreg."""
        return self.regs_consumer if self.setmaxnreg else self.entry_regs

    def registers_needed(self) -> int:
        """Registers a consumer thread needs: its accumulators plus ``REG_RESERVE``."""
        return self.acc_regs + self.REG_RESERVE

    def launch_registers(self) -> int:
        """Registers per thread the block launches with: the __launch_bounds__(threads, 1)
        cap (setmaxnreg then moves them between warpgroups)."""
        return self.entry_regs

    def register_cap(self) -> int:
        """Registers a consumer thread may use: REGS_CONSUMER after setmaxnreg, else the
        __launch_bounds__(threads, 1) cap (gemmgen.model.registers reads this instead of its
        own)."""
        return self.consumer_regs

    def hopper_env(self) -> dict[str, int]:
        """The named quantities of every Hopper kernel (``HOPPER_RULES`` read them, the
        templates declare them); a family's ``env`` adds those of its own axes, and states the
        ones the Hopper rules read that it fixes."""
        return {
            "BM": self.bm, "BN": self.bn, "BK": self.bk, "ELEM_BYTES": self.elem_bytes,
            "OUT_BYTES": self.out_bytes, "CONSUMERS": self.consumers, "STAGES": self.stages,
            "GROUP": self.group, "SETMAXNREG": int(self.setmaxnreg),
            "REGS_PRODUCER": self.regs_producer, "REGS_CONSUMER": self.regs_consumer,
            "REG_POOL": (self.regs_producer + self.consumers * self.regs_consumer) * WARPGROUP,
            "ENTRY_REGS": self.entry_regs, "ACC_BUDGET": self.consumer_regs - self.REG_RESERVE,
            "WGMMA_M": WGMMA_M, "WGMMA_N": self.consumer_cols, "WGMMA_K": self.wgmma_k,
            "K_STEPS": div(self.bk, self.wgmma_k), "CONSUMER_ROWS": self.consumer_rows,
            "M_ITERS": self.m_iters, "ACC_REGS": self.acc_regs, "THREADS": self.threads,
            "WARPGROUP": WARPGROUP, "C_CHUNK": self.c_chunk, "C_SWIZZLE_ROW": self.c_swizzle,
            "SMEM_BYTES": self.smem_bytes, "SMEM_OPTIN": SMEM_OPTIN,
        }

    def figures(self, arch: str = "sm_90") -> dict:
        """The derived figures the emitted header and ``gemmgen list`` report."""
        return {"threads": self.threads, "warpgroups": self.threads // WARPGROUP,
                "smem_bytes_dynamic": self.smem_bytes, "stage_bytes": self.stage_bytes,
                "c_staging_bytes": self.c_smem_bytes,
                **({"c_chunk_row_bytes": self.c_swizzle} if self.c_swizzle != C_SWIZZLE else {}),
                **({"c_staging_buffers": self.c_stages} if self.c_stages else {}),
                "acc_regs_per_consumer": self.acc_regs,
                "consumer_registers": self.consumer_regs, "entry_registers": self.entry_regs,
                "wgmma": f"m64n{self.consumer_cols}k{self.wgmma_k} x {self.m_iters} per consumer",
                "flops_per_byte": {k: round(v, 3) for k, v in self.flops_per_byte.items()},
                f"blocks_per_sm_{get_arch(arch).name}": self.blocks_per_sm(arch)}

    def params(self) -> tuple[Param, ...]:
        """The GEMM kernel's parameters, in order: its signature (``kernel_signature``) and
        the launch's parameter block (``gemmgen.runtime``) both come from this one list."""
        raise NotImplementedError

    def kernel_signature(self, name: str, ns: str) -> str:
        """The kernel's name and parameter list as the template writes it (``signature``)."""
        return signature(name, self.params(), ns)

    @property
    def wgmma_asm(self) -> dict:
        """Operand numbers of the wgmma inline asm (``wgmma_asm``)."""
        return wgmma_asm(self.consumer_cols)
