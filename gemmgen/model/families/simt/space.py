"""The simt family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ...config import Family, Preset
from ..tiled import BLOCK_TILE_HELP, MIN_BLOCKS_HELP
from .config import SimtConfig

# The ladder's last steps, each adding one technique to the step before it.
_STEPS_CS = {"store": "smem"}
_STEPS_SWZ = {**_STEPS_CS, "swizzle_a": True, "skew": 0}
_STEPS_FDB = {**_STEPS_SWZ, "frag_db": True}
_STEPS_BIG = {**_STEPS_FDB, "bm": 256, "bk": 8, "wm": 64, "wn": 64, "min_blocks": 1}
_STEPS_PEEL = {**_STEPS_BIG, "peel": True}
_STEPS_BEST = {**_STEPS_PEEL, "align": "row"}
_LAST_STEPS = (
    ("simt_cs", _STEPS_CS,
     "maxas output stage: each warp passes its accumulators through shared memory (STS.128) "
     "and stores whole 256-byte rows of C with 128-bit stores (LDS.128 -> STG.128)",
     "maxas SGEMM output stage (../shared/reference/maxas-sgemm-output-zh.txt)"),
    ("simt_swizzle", _STEPS_SWZ,
     "the transposed A tile is XOR-swizzled per k group instead of padded: conflict-free "
     "transposing stores, vector fragment reads",
     "CUTLASS crosswise/XOR shared-memory layouts; gty111 step 8's swizzle, applied to SIMT"),
    ("simt_fragdb", _STEPS_FDB,
     "register double buffering: k-slice k+1's fragments are read while slice k is multiplied",
     "maxas inner loop; CUTLASS's warp-level fragment double buffer"),
    ("simt_256x128", _STEPS_BIG,
     "cuBLAS's FFMA tile: 256x128x8 blocks of 64x64 warps, 128 accumulators per thread, one "
     "block per SM within 255 registers",
     "cuBLAS sm80_xmma_gemm_f32f32 ... tilesize256x128x8 ffma (its Nsight Compute kernel name)"),
    ("simt_peel", _STEPS_PEEL,
     "edges peeled: CTAs inside M x N run a copy without M/N bounds checks, and whole K tiles "
     "load without K checks",
     "CUTLASS's predicated tile iterators: bounds predicates only where a tile crosses an edge"),
    ("simt_best", _STEPS_BEST,
     "aligned vector bodies per row: a row whose tile segment is 16-byte aligned loads float4, "
     "the others scalars, so odd lda keeps the vector loads it can",
     "per-row 16-byte alignment checks, after CUTLASS's predicated iterators"),
)
_TUNED = SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, vec=4, skew=4, stages=2, min_blocks=2)

PRESETS: tuple[Preset, ...] = (
    Preset("naive", SimtConfig(32, 32, 1, 1, 1, vec=1, stages=0, transpose_a=False,
                               thread_order="m"),
           "one thread per C element; consecutive threads walk M, so A and C accesses are strided",
           "Lei Mao v00; siboehm kernel 1"),
    Preset("coalesced", SimtConfig(32, 32, 1, 1, 1, vec=1, stages=0, transpose_a=False),
           "consecutive threads walk N, so B loads and C stores coalesce",
           "Lei Mao v01; siboehm kernel 2"),
    Preset("smem", SimtConfig(32, 32, 32, 1, 1, vec=1, stages=1, transpose_a=False),
           "32x32 A and B tiles staged in shared memory, one element per thread",
           "Lei Mao v02; siboehm kernel 3"),
    Preset("tile1d", SimtConfig(64, 64, 8, 8, 1, vec=1, stages=1, transpose_a=False),
           "each thread computes a column of TM=8 elements, reusing one B value 8 times",
           "Lei Mao v03; siboehm kernel 4"),
    Preset("tile2d", SimtConfig(128, 128, 16, 8, 8, vec=1, stages=1, transpose_a=False),
           "each thread computes an 8x8 register tile from an outer product per k",
           "Lei Mao v04; siboehm kernel 5"),
    Preset("vectorized", SimtConfig(128, 128, 16, 8, 8, vec=4, skew=4, stages=1),
           "float4 global and shared accesses; A stored transposed (K-major) in shared memory, "
           "rows padded by 4 floats so the transposing stores avoid bank conflicts",
           "Lei Mao v05; siboehm kernel 6; tgautam xGeMM step 6"),
    Preset("warptile", SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4, stages=1),
           "warp tiles of 64x32 with lanes 8 (M) x 4 (N); each thread owns 2x2 sub-tiles of 4x4",
           "Lei Mao v06; siboehm kernel 10"),
    Preset("warptile_db", SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4, stages=2),
           "warp tiling plus double buffering: the next K tile is loaded into registers while "
           "the current one is computed, one barrier per K tile",
           "gty111 step 5 (prefetch), applied to the SIMT warp-tiled kernel"),
    Preset("warptile_tuned", _TUNED,
           "double-buffered warp tiling with 32x64 warp tiles and __launch_bounds__(256, 2), "
           "which caps registers at 128 so two blocks share an SM",
           "the sweep in benchmarks/explore.py (H200, 4096^3); CUTLASS's min blocks per SM"),
) + tuple(Preset(name, _TUNED.replace(**fields), technique, source) for name, fields, technique,
          source in _LAST_STEPS)

# The values each field takes in the tuning search (a product of these, then validation).
SPACE = {
    "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (8, 16, 32),
    "warp": ((None, None), (32, 32), (32, 64), (64, 32), (64, 64)),
    "tm": (4, 8), "tn": (4, 8), "skew": (0, 4), "stages": (1, 2), "min_blocks": (1, 2),
    # (store, swizzle_a, frag_db, peel, align): the earlier kernel, the last steps' techniques
    # together, and the output stage alone (the swizzle needs skew 0, so those combinations
    # drop the skew-4 half: the space grows about 2.5x, not 3x)
    "technique": (("direct", False, False, False, "matrix"), ("smem", True, True, True, "row"),
                  ("smem", False, False, False, "matrix")),
}


def space(dtype: str = "fp32") -> list[SimtConfig]:
    """Every configuration of the SIMT search space that passes the rules (fp32 only)."""
    s = SPACE
    out = []
    for bm, bn, bk, (wm, wn), tm, tn, skew, st, mb, (store, swz, fdb, peel, align) in \
            itertools.product(s["bm"], s["bn"], s["bk"], s["warp"], s["tm"], s["tn"], s["skew"],
                              s["stages"], s["min_blocks"], s["technique"]):
        cfg = SimtConfig.unchecked(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, wm=wm, wn=wn, vec=4,
                                   skew=skew, stages=st, min_blocks=mb, store=store,
                                   swizzle_a=swz, frag_db=fdb, peel=peel, align=align)
        if not cfg.violations():
            out.append(cfg)
    return out


FAMILY = Family(
    name="simt", config=SimtConfig, summary="FP32 on the CUDA cores (FFMA), any NVIDIA GPU",
    dtypes=("fp32",), presets=PRESETS, defaults={"fp32": "warptile_tuned"},
    flag_defaults={"bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "skew": 4},
    field_help={
        **BLOCK_TILE_HELP, "wm": "warp tile rows (omit for no warp tiling)",
        "wn": "warp tile columns", "tm": "thread tile rows", "tn": "thread tile columns",
        "vec": "floats per global/shared access: 1, 2 or 4",
        "skew": "padding floats per shared-memory row",
        "stages": "0 none, 1 single, 2 double buffer",
        "transpose_a": "store the A tile K-major in shared memory",
        "thread_order": "n: consecutive threads take columns; m: rows, the naive order",
        "min_blocks": MIN_BLOCKS_HELP,
        "store": "direct: from registers; smem: maxas output stage, 128-bit coalesced stores",
        "swizzle_a": "XOR-swizzle the transposed A tile instead of padding it",
        "frag_db": "double-buffer the k-slice fragments in registers",
        "peel": "interior CTAs run without bounds checks; edge CTAs keep them",
        "align": "matrix: vector loads if the whole operand is aligned; row: per row",
    },
    space=space, min_cc=70)
