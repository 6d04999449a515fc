"""The wmma family's constants and rule table."""
from __future__ import annotations

from ...rules import Rule, at_most, equal, multiple_of, one_of
from ..tiled import (acc_registers_rule, block_tile_rules, max_threads_rule, min_blocks_rules,
                     output_dtype_rules, skew_rule, tile_load_rules, warp_cover_rules,
                     warp_tile_rules)

LOAD_BYTES = 16          # every global -> shared copy is one 16-byte cp.async
MAX_DYNAMIC_SMEM = 227 * 1024  # the largest opt-in on any supported arch (sm_90)
SHAPES = {"m16n16k16": (16, 16, 16), "m32n8k16": (32, 8, 16), "m8n32k16": (8, 32, 16),
          "m16n16k8": (16, 16, 8)}
FRAG_CTYPES = {"fp16": "half", "bf16": "__nv_bfloat16", "tf32": "wmma::precision::tf32"}

_TF32 = equal("DTYPE_TF32", 1)

WMMA_RULES: tuple[Rule, ...] = (
    *block_tile_rules("W01", "W02", "W03"),
    *warp_tile_rules("W04", "W05"),
    skew_rule("W06"),
    Rule("W07", "stages-range", one_of("STAGES", (1, 2, 3, 4, 5, 6)),
         "1 = single buffer, 2 = double buffer, 3+ = cp.async pipeline"),
    Rule("W08", "tf32-shape", equal("WMMA_K", 8), "TF32 WMMA exists only as m16n16k8",
         when=_TF32),
    Rule("W09", "half-shape", equal("WMMA_K", 16),
         "FP16 and BF16 WMMA shapes are m16n16k16, m32n8k16 and m8n32k16",
         when=equal("DTYPE_TF32", 0)),
    Rule("W10", "fp16-accumulator", equal("DTYPE_FP16", 1),
         "only FP16 inputs can accumulate in FP16", when=equal("ACC_FP16", 1)),
    *output_dtype_rules("W11", "W12"),
    *warp_cover_rules("W13", "W14"),
    Rule("W15", "wm-fragment", multiple_of("WM", "WMMA_M"), "WMMA tiles must cover the warp rows"),
    Rule("W16", "wn-fragment", multiple_of("WN", "WMMA_N"),
         "WMMA tiles must cover the warp columns"),
    Rule("W17", "bk-fragment", multiple_of("BK", "WMMA_K"), "WMMA steps must cover the K tile"),
    max_threads_rule("W18"),
    *tile_load_rules("W19", "W20", "VEC",
                     "every thread copies the same number of 16-byte {} chunks"),
    Rule("W21", "skew-align", multiple_of("SKEW", "VEC"),
         "padded rows stay 16-byte aligned for cp.async and WMMA's ldm"),
    acc_registers_rule("W22"),
    Rule("W23", "dynamic-smem", at_most("SMEM_BYTES", MAX_DYNAMIC_SMEM),
         "no GPU lets one block opt in to more than 227 KiB of shared memory; emit and tune "
         "also check the target arch's own limit"),
    *min_blocks_rules("W24", "W25"),
    Rule("W26", "col-a-fragment-align", multiple_of(("WMMA_M", "ELEM_BYTES"), 32),
         "a column-major A tile is read in WMMA_M-row steps that must stay 32-byte aligned",
         when=equal("LAYOUT_A_COL", 1)),
)
