"""The wmma family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ...config import Preset
from ...dtypes import stored_as
from ..tiled import tensor_core_family
from .config import WmmaConfig

PRESETS: tuple[Preset, ...] = (
    # Every kernel of this family copies global -> shared with 16-byte cp.async, keeps
    # accumulators in registers and stores C through a per-warp staging tile.
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
)

SPACE = {
    "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (16, 32, 64),
    "warp": ((32, 32), (32, 64), (64, 32), (64, 64)), "stages": (2, 3, 4), "min_blocks": (1, 2),
}
SPACE_SHAPES = {"fp16": ("m16n16k16", "m32n8k16", "m8n32k16"),
                "bf16": ("m16n16k16", "m32n8k16", "m8n32k16"), "tf32": ("m16n16k8",)}


def space(dtype: str = "fp16") -> list[WmmaConfig]:
    """Every configuration of the WMMA search space for ``dtype`` (fp16, bf16, tf32) that
    passes the rules; C has the input dtype (float32 for tf32)."""
    s = SPACE
    out_dtype = stored_as(dtype)
    skew = 4 if dtype == "tf32" else 8
    out = []
    for bm, bn, bk, (wm, wn), shape, st, mb in itertools.product(
            s["bm"], s["bn"], s["bk"], s["warp"], SPACE_SHAPES[dtype], s["stages"],
            s["min_blocks"]):
        cfg = WmmaConfig.unchecked(bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, shape=shape, dtype=dtype,
                                   out=out_dtype, skew=skew, stages=st, min_blocks=mb)
        if not cfg.violations():
            out.append(cfg)
    return out


def _adjust(values: dict, given: set) -> dict:
    """TF32 has one WMMA shape: take it unless the command line named another."""
    if values.get("dtype") == "tf32" and "shape" not in given:
        values = {**values, "shape": "m16n16k8"}
    return values


FAMILY = tensor_core_family(
    WmmaConfig,
    summary="tensor cores through the WMMA API (mma.sync); sm_80 and newer",
    presets=PRESETS,
    defaults={"fp16": "wmma_pipeline", "bf16": "wmma_bf16", "tf32": "wmma_tf32"},
    field_help={"shape": "WMMA fragment shape", "acc": "accumulator dtype"},
    space=space, adjust=_adjust)
