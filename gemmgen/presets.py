"""Presets: the FP32 SIMT optimization ladder of the reference articles, one config per step."""
from __future__ import annotations

from dataclasses import dataclass

from .config import SimtConfig


@dataclass(frozen=True)
class Preset:
    """A named step of the ladder: its config, the technique it adds and where it comes from."""

    name: str
    config: SimtConfig
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
)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; raises ``KeyError`` listing the known names."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
