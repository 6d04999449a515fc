"""Presets: the FP32 SIMT optimization ladder of the reference articles, one config per step."""
from __future__ import annotations

from dataclasses import dataclass

from .config import SimtConfig
from .config_wmma import WmmaConfig


@dataclass(frozen=True)
class Preset:
    """A named step of the ladder: its config, the technique it adds and where it comes from."""

    name: str
    config: SimtConfig | WmmaConfig
    technique: str
    source: str


PRESETS: dict[str, Preset] = {p.name: p for p in (
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
    Preset("warptile_tuned", SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, vec=4, skew=4, stages=2,
                                        min_blocks=2),
           "double-buffered warp tiling with 32x64 warp tiles and __launch_bounds__(256, 2), "
           "which caps registers at 128 so two blocks share an SM",
           "the sweep in benchmarks/explore.py (H200, 4096^3); CUTLASS's min blocks per SM"),
    # Tensor cores (WMMA). Every kernel of this family copies global -> shared with 16-byte
    # cp.async, keeps accumulators in registers and stores C through a per-warp staging tile.
    Preset("wmma_v07", WmmaConfig(128, 128, 16, 64, 32, dtype="fp16", acc="fp16", out="fp16",
                                  skew=16, stages=1),
           "WMMA m16n16k16 fragments from shared memory padded by 16 halves; FP16 accumulate",
           "Lei Mao v07"),
    Preset("wmma_noskew", WmmaConfig(128, 128, 32, 64, 64, out="fp16", skew=0, stages=3),
           "64x64 warp tiles, FP32 accumulators, 3-stage cp.async, but no skew: fragment loads "
           "conflict in shared-memory banks", "gty111 step 2 (the conflicts it removes)"),
    Preset("wmma_regacc", WmmaConfig(128, 128, 32, 64, 64, out="fp16", skew=8, stages=1),
           "FP32 accumulators in registers, 64x64 warp tiles, skew 8, coalesced staged stores; "
           "one shared buffer", "gty111 steps 1, 2 and 4"),
    Preset("wmma_db", WmmaConfig(128, 128, 32, 64, 64, out="fp16", skew=8, stages=2),
           "cp.async double buffering: the next K tile streams in while this one is computed",
           "gty111 steps 3 and 5"),
    Preset("wmma_pipeline", WmmaConfig(128, 128, 32, 64, 64, out="fp16", skew=8, stages=4),
           "4-stage cp.async pipeline, one barrier per K tile", "gty111 step 5, deeper"),
    Preset("wmma_m32n8", WmmaConfig(128, 128, 32, 64, 64, shape="m32n8k16", out="fp16", skew=8,
                                    stages=3),
           "m32n8k16 fragments; B kept in 8-column panels so fragment pointers stay 32-byte "
           "aligned", "CUDA C Programming Guide, WMMA shapes"),
    Preset("wmma_bf16", WmmaConfig(128, 128, 32, 64, 64, shape="m8n32k16", dtype="bf16",
                                   out="bf16", skew=8, stages=3),
           "BF16 inputs and output, m8n32k16 fragments, FP32 accumulators, 3-stage pipeline",
           "the sweep in benchmarks/explore.py"),
    Preset("wmma_tf32", WmmaConfig(128, 256, 16, 64, 64, shape="m16n16k8", dtype="tf32",
                                   skew=4, stages=3),
           "TF32: float32 data rounded to TF32 in the fragments, m16n16k8, 128x256 block",
           "the sweep in benchmarks/explore.py"),
)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``KeyError`` listing the known names."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
