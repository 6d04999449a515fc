"""The cost model behind gemmgen's choices of path: repack or fallback for unaligned operands,
split-K for problems whose tiles cannot fill the GPU, swapped operands for a small M.

Every figure is a measurement on an H200 (``benchmarks/results/``, named per constant); the
model is checked against measurements of both sides of each choice in
``benchmarks/results/paths_NVIDIA_H200.json`` (``benchmarks/paths.py``). Times are seconds,
rates FLOP/s, bandwidths bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.dtypes import ELEM_BYTES

LAUNCH_SECONDS = 4e-6
"""One extra kernel launch in a stream of launches (gemm's call overhead is ~15 us in all:
overhead_NVIDIA_H200.json)."""

COPY_BANDWIDTH = 3.6e12
"""Device-to-device bytes/s (read + write) a simple copy kernel reaches on an H200: the pack
kernels are such copies (paths_NVIDIA_H200.json measures them)."""

RATE = {
    # (family, dtype): TFLOP/s at 4096^3 or 4095 x 4097 x 4093, NVIDIA_H200.json
    ("wgmma", "fp16"): 700e12, ("wgmma", "bf16"): 700e12, ("wgmma", "tf32"): 350e12,
    ("wmma", "fp16"): 58e12, ("wmma", "bf16"): 56e12, ("wmma", "tf32"): 27e12,
    ("simt", "fp32"): 40e12,
    # FP8 with block scales, promoted: the fp8_block preset's 880-1020 TFLOP/s on large
    # problems (fp8_NVIDIA_H200.json); the grouped kernel's FP8 axis runs the same main loop
    ("wgmma", "e4m3"): 950e12, ("wgmma", "e5m2"): 950e12,
}
"""Sustained rate of each family on a large problem."""

SMS = 132
"""Multiprocessors of an H100 SXM / H200 (the GPU each figure was measured on)."""


@dataclass(frozen=True)
class Estimate:
    """A path's predicted time (seconds) and the terms it adds up."""

    path: str
    seconds: float
    terms: dict

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in self.terms.items())
        return f"{self.path}: {self.seconds * 1e6:.1f} us ({parts})"


def pack_bytes(rows: int, cols: int, batch: int, elem: int, expand: int = 1) -> int:
    """Bytes a pack kernel moves: one read of rows x cols (x batch) and ``expand`` writes
    (1 for a repack, 3 for the 3xTF32 split)."""
    return rows * cols * max(batch, 1) * elem * (1 + expand)


def stored_shape(name: str, layout: str, m: int, n: int, k: int) -> tuple[int, int]:
    """(rows, cols) of operand ``name`` ("A": M x K, "B": K x N) as stored in ``layout``:
    cols is the contiguous extent."""
    rows, cols = (m, k) if name == "A" else (k, n)
    return (cols, rows) if layout[0 if name == "A" else 1] == "c" else (rows, cols)


def unaligned(m: int, n: int, k: int, batch: int, dtype: str, packs: dict[str, tuple]) -> list:
    """Estimates for operands TMA cannot describe, fastest first: "repack" (pack each operand
    in ``packs``, name -> (rows, cols, batch), then the wgmma kernel) and "fallback" (the
    WMMA kernel on the operands as they are)."""
    flops = 2.0 * m * n * k * max(batch, 1)
    elem = ELEM_BYTES[dtype]
    moved = sum(pack_bytes(r, c, b, elem) for r, c, b in packs.values())
    repack = Estimate("repack", 0.0, {
        "pack": moved / COPY_BANDWIDTH + LAUNCH_SECONDS * len(packs),
        "gemm": flops / RATE[("wgmma", dtype)]})
    fallback = Estimate("fallback", 0.0, {"gemm": flops / RATE[("wmma", dtype)]})
    out = [Estimate(e.path, sum(e.terms.values()), e.terms) for e in (repack, fallback)]
    return sorted(out, key=lambda e: e.seconds)


def waves(tiles: int, sms: int = SMS) -> float:
    """Tiles over SMs: below 1 the GPU is partly idle."""
    return tiles / sms


def tiles_of(m: int, n: int, bm: int, bn: int, batch: int = 1) -> int:
    """Output tiles of a BM x BN tiling, over the batch."""
    return math.ceil(m / bm) * math.ceil(n / bn) * max(batch, 1)


def wave_efficiency(tiles: int, sms: int = SMS) -> float:
    """Busy fraction of the SMs over the waves a tile count needs: tiles / (waves x SMs).
    4095 x 4097 in 128 x 256 tiles: 544 tiles, 5 waves of 132, 0.82; in 256 x 128: 528, 4
    waves, 1.0 (measured 382 against 437 TFLOP/s, paths_NVIDIA_H200.json)."""
    return tiles / (math.ceil(tiles / sms) * sms) if tiles else 1.0


SPLIT_BELOW = SMS // 4
"""Split K only when fewer tiles than this would run: at 64 tiles (128 x 8192 x 8192 swapped,
half a wave) one slice measured 363 TFLOP/s against 313-349 with two."""


MIN_SLICE_TILES = 16
"""K tiles a split-K slice needs at least: at 1024^3 (16 K tiles) two slices of 8 measured 106.5
against 127.6 TFLOP/s unsplit; at 256 x 256 x 65536, 16 slices of 64 measured 176.1 against
14.6 (paths_before_NVIDIA_H200.json)."""


def split_k_for(m: int, n: int, k: int, batch: int, bm: int, bn: int, bk: int,
                sms: int = SMS, max_split: int = 16) -> int:
    """Slices of K for a problem whose tiles fill less than a quarter of the SMs: the most
    slices that keep at most one wave and at least ``MIN_SLICE_TILES`` K tiles per slice (each
    slice must amortize its prologue, its partial store and the reduction); 1 otherwise."""
    tiles = tiles_of(m, n, bm, bn, batch)
    k_tiles = math.ceil(k / bk)
    if tiles >= SPLIT_BELOW:
        return 1
    best = 1
    for s in range(2, max_split + 1):
        if k_tiles / s < MIN_SLICE_TILES or tiles * s > sms:
            break
        best = s
    return best


def split_k_bytes(m: int, n: int, batch: int, split: int) -> int:
    """Workspace traffic of a split-K reduction: each slice's fp32 partials written once and
    read once."""
    return 2 * 4 * m * n * max(batch, 1) * split if split > 1 else 0


# ---- FP8 (the fp8 family) ----------------------------------------------------------------
FP8_RATE = {"fast": 1300e12, "promoted": 1100e12}
"""Sustained FP8 TFLOP/s of the fp8 family on large problems, measured on an H200 with the
prototype (fp8_harness.txt): fast accumulation 1210-1415 (128 x 256 tiles), blockwise promoted
with two partial sets 996-1110 (128 x 128)."""
HBM_BANDWIDTH = 4.25e12
"""Device-to-device copy bytes/s (read + write) measured on the H200 in the same run as the
FP8 prototype (1 GiB copy_, fp8_baseline.txt: 4248 GB/s)."""


def fp8_bytes(m: int, n: int, k: int, scaling: str, out_bytes: int = 2) -> int:
    """Bytes an FP8 GEMM must move at least: A and B (one byte each), D, and the scales (block:
    M x K/128 of A and N/128 x K/128 of B; row: M + N; tensor: 2), fp32."""
    kb = math.ceil(k / 128)
    scales = {"block": m * kb + math.ceil(n / 128) * kb, "row": m + n}.get(scaling, 2)
    return m * k + n * k + m * n * out_bytes + 4 * scales


def fp8_estimate(m: int, n: int, k: int, scaling: str, packs: dict, split: int = 1,
                 fast: bool = True, out_bytes: int = 2, split_share: float = 1.0) -> Estimate:
    """Predicted time of an FP8 GEMM: the larger of its compute (at ``FP8_RATE``) and its
    memory traffic (at ``HBM_BANDWIDTH``), one launch, the split-K partials (written and read
    once, fp32, of the ``split_share`` of D whose tiles are split) and, for each operand in
    ``packs`` (name -> (rows, cols)), its transposing pack (one read and one write of the
    operand, and a launch)."""
    compute = 2.0 * m * n * k / FP8_RATE["fast" if fast else "promoted"]
    memory = fp8_bytes(m, n, k, scaling, out_bytes) / HBM_BANDWIDTH
    terms = {"gemm": max(compute, memory) + LAUNCH_SECONDS}
    if split > 1:
        terms["split-K partials"] = 2 * 4 * m * n * split * split_share / HBM_BANDWIDTH
    for name, (rows, cols) in packs.items():
        terms[f"pack {name}"] = pack_bytes(rows, cols, 1, 1) / COPY_BANDWIDTH + LAUNCH_SECONDS
    return Estimate("repack" if packs else "direct", sum(terms.values()), terms)
