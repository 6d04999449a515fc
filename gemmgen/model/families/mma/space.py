"""The mma family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ...config import Preset
from ...dtypes import stored_as
from ..tiled import tensor_core_family
from .config import MmaConfig


def _step(**changes) -> MmaConfig:
    """A ladder step: the 128x128x32 block, 8 warps of 64x32 and FP16 C of every rung, with
    the switches given (the rest at the baseline: everything off)."""
    base = dict(vector=False, skew=0, cp_async=False, acc_smem=True, stages=1, frag_db=False,
                ldmatrix=False, swizzle=0, staged_c=False, group_m=1)
    return MmaConfig(128, 128, 32, 64, 32, out="fp16", **{**base, **changes})


_S2 = dict(vector=True)
_S3 = dict(_S2, skew=8)
_S4 = dict(_S3, cp_async=True)
_S5 = dict(_S4, acc_smem=False)
_S6 = dict(_S5, stages=2, frag_db=True)
_S7 = dict(_S6, ldmatrix=True)
_S8 = dict(_S7, skew=0, swizzle=128)
_S9 = dict(_S8, staged_c=True)

PRESETS: tuple[Preset, ...] = (
    Preset("mma_base", _step(), "raw mma.sync m16n8k16, element-wise global loads, "
           "accumulators in shared memory", "gty111 baseline"),
    Preset("mma_vec", _step(**_S2), "16-byte vectorized global loads", "gty111 step vector"),
    Preset("mma_bfco", _step(**_S3), "rows padded by 8 halves: conflict-free, coalesced "
           "shared memory", "gty111 step bfco"),
    Preset("mma_ldgsts", _step(**_S4), "cp.async (LDGSTS) global -> shared copies",
           "gty111 step ldgsts"),
    Preset("mma_reg", _step(**_S5), "accumulators in registers", "gty111 step reg"),
    Preset("mma_prefetch", _step(**_S6), "double-buffered shared stages and register "
           "fragments: the next tile loads while this one computes", "gty111 step prefetch"),
    Preset("mma_ldmatrix", _step(**_S7), "fragments loaded by ldmatrix.x4 (.trans for "
           "N-major B)", "gty111 GEMM_MMA ldmatrix step"),
    Preset("mma_swizzle", _step(**_S8), "128-byte XOR swizzle instead of padding",
           "gty111 GEMM_MMA swizzle step"),
    Preset("mma_epilogue", _step(**_S9), "C staged in shared memory, 16-byte coalesced "
           "stores", "gty111 GEMM_MMA epilogue step"),
    # Aimed at the H100/H200 bar: 135 KiB of shared memory (the staged FP32 C tile), so they
    # run on sm_80 (163 KiB) and sm_90 (227 KiB) but not sm_86/sm_89 (99 KiB).
    Preset("mma_tuned", MmaConfig(128, 256, 32, 64, 64, out="fp16", stages=4),
           "128x256x32 block, 8 warps of 64x64, 4-stage cp.async ring, ldmatrix, 128-byte "
           "swizzle, grouped rasterization", "CUTLASS sm80 tile shapes"),
    Preset("mma_tuned_bf16", MmaConfig(128, 256, 32, 64, 64, dtype="bf16", out="bf16", stages=4),
           "mma_tuned in BF16", "CUTLASS sm80 tile shapes"),
    Preset("mma_tuned_tf32", MmaConfig(128, 256, 16, 64, 64, dtype="tf32", stages=4),
           "TF32 m16n8k8: 128x256x16 block, 8 warps of 64x64, 4 stages, FP32 C",
           "CUTLASS sm80 tile shapes"),
    # The family's defaults: under 99 KiB of shared memory, so they run on every arch from
    # sm_80 on (RTX 30/40, L4/L40 included).
    Preset("mma_fp16", MmaConfig(128, 128, 32, 64, 64, out="fp16", stages=4),
           "128x128x32 block, 4 warps of 64x64, 4 stages: fits sm_86/sm_89's 99 KiB",
           "CUTLASS sm80 tile shapes"),
    Preset("mma_bf16", MmaConfig(128, 128, 32, 64, 64, dtype="bf16", out="bf16", stages=4),
           "mma_fp16 in BF16", "CUTLASS sm80 tile shapes"),
    Preset("mma_tf32", MmaConfig(128, 128, 16, 64, 32, dtype="tf32", stages=4),
           "TF32 m16n8k8: 128x128x16 block, 8 warps of 64x32, 4 stages, FP32 C; fits 99 KiB",
           "CUTLASS sm80 tile shapes"),
)

SPACE = {
    "bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (32, 64),
    "warp": ((32, 64), (64, 32), (64, 64)), "stages": (2, 3, 4, 5), "group_m": (8,),
}


def space(dtype: str = "fp16") -> list[MmaConfig]:
    """Every configuration of the mma search space for ``dtype`` (fp16, bf16, tf32) that
    passes the rules: the full ladder on, C in the input dtype (float32 for tf32)."""
    out_dtype = stored_as(dtype)
    out = []
    for bm, bn, bk, (wm, wn), st, g in itertools.product(
            SPACE["bm"], SPACE["bn"], SPACE["bk"], SPACE["warp"], SPACE["stages"],
            SPACE["group_m"]):
        cfg = MmaConfig.unchecked(bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, dtype=dtype,
                                  out=out_dtype, stages=st, group_m=g)
        if not cfg.violations():
            out.append(cfg)
    return out


def _adjust(values: dict, given: set) -> dict:
    """Follow --dtype: C takes the input dtype (float32 for tf32) unless --out is given, and
    tf32 takes BK = 16 unless --bk is given (a 32-deep TF32 tile with 64x64 warps spills)."""
    if "dtype" in given:
        d = values["dtype"]
        if "out" not in given:
            values = {**values, "out": stored_as(d)}
        if d == "tf32" and "bk" not in given:
            values = {**values, "bk": 16}
    return values


def fallback_of(cfg) -> MmaConfig:
    """The mma configuration (128x128x32, warps 64x64, 3 stages) computing what ``cfg`` (a
    config of another family) computes; it reads any alignment."""
    return MmaConfig(128, 128, 32, 64, 64, dtype=cfg.dtype, out=cfg.out, stages=3,
                     layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)


FAMILY = tensor_core_family(
    MmaConfig,
    summary="raw mma.sync PTX, ldmatrix, XOR swizzle, cp.async ring; sm_80 and newer",
    presets=PRESETS, defaults={"fp16": "mma_fp16", "bf16": "mma_bf16", "tf32": "mma_tf32"},
    field_help={
        "acc": "accumulator dtype (fp32)", "vector": "16-byte global loads",
        "cp_async": "cp.async global -> shared copies", "acc_smem": "accumulators in shared memory",
        "frag_db": "register double-buffered fragments",
        "ldmatrix": "fragments loaded by ldmatrix", "swizzle": "XOR swizzle width in bytes",
        "staged_c": "C staged in shared memory for 16-byte stores",
        "group_m": "block rows per rasterization group",
    },
    space=space, adjust=_adjust)
