"""The wmma family's constants and rule table."""
from __future__ import annotations

from ...config import MAX_THREADS_PER_SM
from ...rules import Rule, at_least, at_most, equal, multiple_of, one_of

LOAD_BYTES = 16          # every global -> shared copy is one 16-byte cp.async
MAX_DYNAMIC_SMEM = 227 * 1024  # the largest opt-in on any supported arch (sm_90)
MAX_ACC_REGS = 128
SHAPES = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16),
          "m16n16k8": (16, 16, 8)}
FRAG_CTYPES = {"fp16": "half", "bf16": "__nv_bfloat16", "tf32": "wmma::precision::tf32"}

_TF32 = equal("DTYPE_TF32", 1)

WMMA_RULES: tuple[Rule, ...] = (
    Rule("W01", "bm-positive", at_least("BM", 1), "the block tile needs rows"),
    Rule("W02", "bn-positive", at_least("BN", 1), "the block tile needs columns"),
    Rule("W03", "bk-positive", at_least("BK", 1), "each K step covers at least one k"),
    Rule("W04", "wm-positive", at_least("WM", 1), "each warp owns at least one row"),
    Rule("W05", "wn-positive", at_least("WN", 1), "each warp owns at least one column"),
    Rule("W06", "skew-nonnegative", at_least("SKEW", 0), "skew pads shared-memory rows"),
    Rule("W07", "stages-range", one_of("STAGES", (1, 2, 3, 4, 5, 6)),
         "1 = single buffer, 2 = double buffer, 3+ = cp.async pipeline"),
    Rule("W08", "tf32-shape", equal("WMMA_K", 8), "TF32 WMMA exists only as m16n16k8",
         when=_TF32),
    Rule("W09", "half-shape", equal("WMMA_K", 16),
         "FP16 and BF16 WMMA shapes are m16n16k16, m32n8k16 and m8n32k16",
         when=equal("DTYPE_TF32", 0)),
    Rule("W10", "fp16-accumulator", equal("DTYPE_FP16", 1),
         "only FP16 inputs can accumulate in FP16", when=equal("ACC_FP16", 1)),
    Rule("W11", "fp16-output", equal("DTYPE_FP16", 1), "an FP16 C needs FP16 inputs",
         when=equal("OUT_FP16", 1)),
    Rule("W12", "bf16-output", equal("DTYPE_BF16", 1), "a BF16 C needs BF16 inputs",
         when=equal("OUT_BF16", 1)),
    Rule("W13", "bm-wm", multiple_of("BM", "WM"), "warp tiles must cover the block rows"),
    Rule("W14", "bn-wn", multiple_of("BN", "WN"), "warp tiles must cover the block columns"),
    Rule("W15", "wm-fragment", multiple_of("WM", "WMMA_M"), "WMMA tiles must cover the warp rows"),
    Rule("W16", "wn-fragment", multiple_of("WN", "WMMA_N"),
         "WMMA tiles must cover the warp columns"),
    Rule("W17", "bk-fragment", multiple_of("BK", "WMMA_K"), "WMMA steps must cover the K tile"),
    Rule("W18", "max-threads", at_most("THREADS", 1024), "CUDA allows 1024 threads per block"),
    Rule("W19", "a-tile-loads", multiple_of(("BM", "BK"), ("THREADS", "VEC")),
         "every thread copies the same number of 16-byte A chunks"),
    Rule("W20", "b-tile-loads", multiple_of(("BK", "BN"), ("THREADS", "VEC")),
         "every thread copies the same number of 16-byte B chunks"),
    Rule("W21", "skew-align", multiple_of("SKEW", "VEC"),
         "padded rows stay 16-byte aligned for cp.async and WMMA's ldm"),
    Rule("W22", "acc-registers", at_most("ACC_REGS", MAX_ACC_REGS),
         "more accumulator registers than half the 255-register budget spill"),
    Rule("W23", "dynamic-smem", at_most("SMEM_BYTES", MAX_DYNAMIC_SMEM),
         "no GPU lets one block opt in to more than 227 KiB of shared memory; emit and tune "
         "also check the target arch's own limit"),
    Rule("W24", "min-blocks-positive", at_least("MIN_BLOCKS", 1),
         "__launch_bounds__ asks for at least one resident block"),
    Rule("W25", "min-blocks-threads", at_most(("MIN_BLOCKS", "THREADS"), MAX_THREADS_PER_SM),
         "no SM holds more than 2048 threads"),
    Rule("W26", "col-a-fragment-align", multiple_of(("WMMA_M", "ELEM_BYTES"), 32),
         "a column-major A tile is read in WMMA_M-row steps that must stay 32-byte aligned",
         when=equal("LAYOUT_A_COL", 1)),
)
