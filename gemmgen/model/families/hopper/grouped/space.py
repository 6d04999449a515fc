"""The grouped family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ....config import Preset
from ....dtypes import ELEM_BYTES, FP8_DTYPES
from .. import hopper_family
from .config import GroupedConfig

_BASE = {"bm": 128, "bn": 256, "bk": 64, "dtype": "bf16", "out": "bf16", "consumers": 2,
         "stages": 3, "group": 8, "regs_producer": 40, "regs_consumer": 232, "grouping": "m",
         "layout": "rcr"}
_SMALL = {**_BASE, "bm": 64, "consumers": 1, "stages": 4, "regs_producer": 0,
          "regs_consumer": 0}


def _c(**kw) -> GroupedConfig:
    return GroupedConfig(**{**_BASE, **kw})


PRESETS: tuple[Preset, ...] = (
    Preset("grouped_small", GroupedConfig(**_SMALL),
           "one persistent launch for every group: a device-side scheduler walks the group "
           "offsets (no host copy: CUDA-graph capturable), TMA reads each group's rows from one "
           "tensor map by offset arithmetic; 64-row tiles with one consumer waste little on "
           "small groups, and rows past a group's end are masked in the epilogue",
           "DeepGEMM m_grouped contiguous/masked scheduler; FlashInfer small per-expert M"),
    Preset("grouped_bf16", _c(),
           "128x256 tiles, two cooperative consumers (setmaxnreg 40/232), 3 stages: the "
           "wgmma_bf16 main loop; tiles inside their group are TMA-stored, the group's last "
           "tile is copied from the staging tile with row guards",
           "wgmma_bf16 preset; CUTLASS example 57 (grouped GEMM); DeepGEMM m_grouped_bf16"),
    Preset("grouped_bf16_ends", _c(order="ends"),
           "grouped_bf16 with the tiles taken from both ends of the group sequence (even tile "
           "indices from the front, odd ones from the back): under skewed routing about half "
           "the CTAs run the heavy expert's compute-bound tiles while the others stream the "
           "light experts' weights, instead of one phase after the other",
           "grouped_bf16; measured 292 vs 472 TFLOP/s (skew90 vs uniform, DeepSeek-V3 gate_up, "
           "H200) with the forward order"),
    Preset("grouped_dgrad", _c(layout="rrr"),
           "the data gradient dA = dC @ B^T: B is the experts' [G, N, K] weights as stored, "
           "read N-major (MN-major wgmma B operand)", "torch._grouped_mm backward"),
    Preset("grouped_wgrad", _c(grouping="k", layout="crr"),
           "K-grouped: dB[g] = A[:, rows of g] @ dC[rows of g] for the weight gradient, the "
           "reduction running over each group's rows; the tail of a group's last K tile is "
           "zeroed in shared memory before the wgmma reads it",
           "DeepGEMM k_grouped_wgrad; torch._grouped_mm 2D x 2D"),
    Preset("grouped_fp16", _c(dtype="fp16", out="fp16"),
           "the 128x256 grouped kernel on fp16 inputs and output", "grouped_bf16 in fp16"),
    Preset("grouped_fp8", _c(bn=128, bk=128, dtype="e4m3", stages=6, scaling="block"),
           "FP8 e4m3 experts with DeepSeek-V3 block scales (1 x 128 of A, 128 x 128 of B): the "
           "grouped scheduler, producer and epilogue around the fp8 family's promoted main "
           "loop (two partial sets, scales applied every 128 elements of K); 128x128 tiles so "
           "a tile's columns meet at most two B scale blocks, 6 stages of 32 KB",
           "fp8_block preset; DeepGEMM m_grouped_fp8_gemm_nt_contiguous/masked"),
    Preset("grouped_fp8_split_n", _c(bm=64, bn=256, bk=128, dtype="e4m3", stages=3,
                                     scaling="block", split="n"),
           "grouped_fp8 in 64-row tiles: the two consumers split the 256 columns (each a "
           "64x128 wgmma tile) instead of the rows, so groups of few rows waste half as much "
           "padding while two warpgroups still share each stage",
           "grouped_fp8; CUTLASS's cooperative kernels split a tile among warpgroups"),
)

SPACE = {"tile": ((64, 128, 1, "m"), (64, 256, 1, "m"), (128, 128, 2, "m"), (128, 256, 2, "m"),
                  (256, 128, 2, "m"), (64, 256, 2, "n")),
         "stages": (3, 4, 5, 6), "group": (8, 16)}


def space(dtype: str = "bf16", grouping: str = "m", layout: str | None = None,
          out: str | None = None) -> list[GroupedConfig]:
    """Every configuration of the grouped search space that passes the rules: tiles 64x128,
    64x256 (one consumer), 128x128, 128x256, 256x128 (two splitting the rows), 64x256 (two
    splitting the columns: FP8), 3 to 6 stages where they fit,
    raster groups of 8 or 16 tile rows; C in the input dtype unless ``out``; ``layout`` the
    grouping's default (rcr for "m", crr for "k"). M-grouped: each in the "forward" order,
    then each again in the "ends" order."""
    layout = layout or ("rcr" if grouping == "m" else "crr")
    fp8 = dtype in FP8_DTYPES
    out_dtype = out or ("bf16" if fp8 else dtype)
    found = []
    for (bm, bn, cons, split), st, group in itertools.product(SPACE["tile"], SPACE["stages"],
                                                              SPACE["group"]):
        regs = (40, 232) if cons == 2 else (0, 0)  # one consumer: 255 registers, no setmaxnreg
        cfg = GroupedConfig.unchecked(bm=bm, bn=bn, bk=128 // ELEM_BYTES[dtype], dtype=dtype,
                                      out=out_dtype, consumers=cons, stages=st, group=group,
                                      regs_producer=regs[0], regs_consumer=regs[1],
                                      grouping=grouping, layout=layout,
                                      scaling="block" if fp8 else "none", split=split)
        if not cfg.violations():
            found.append(cfg)
    if grouping == "m":
        found += [cfg.replace(order="ends") for cfg in found]
    return found


def _adjust(values: dict, given: set) -> dict:
    """Follow --grouping and --dtype: the grouping's layout, C in the input dtype (bf16 for
    FP8), FP8's block scales and BK = 128 bytes of the dtype, unless the command line says
    otherwise."""
    if "grouping" in given and "layout" not in given:
        values = {**values, "layout": "rcr" if values["grouping"] == "m" else "crr"}
    fp8 = values.get("dtype") in FP8_DTYPES
    if "dtype" in given and "out" not in given:
        values = {**values, "out": "bf16" if fp8 else values["dtype"]}
    if fp8 and "scaling" not in given:
        values = {**values, "scaling": "block"}
    if "dtype" in given and "bk" not in given:
        values = {**values, "bk": 128 // ELEM_BYTES[values["dtype"]]}
    return values


FAMILY = hopper_family(
    GroupedConfig,
    summary="Hopper grouped GEMM for mixture-of-experts: one persistent launch over every "
            "group, offsets read on the device; sm_90a only",
    dtypes=("fp16", "bf16", *FP8_DTYPES), presets=PRESETS,
    defaults={"fp16": "grouped_fp16", "bf16": "grouped_bf16", "e4m3": "grouped_fp8"},
    field_help={
        "grouping": "m (groups differ in M: forward, dgrad) or k (groups differ in K: wgrad)",
        "bm": "block tile rows (M): 64 per consumer warpgroup and more",
        "bk": "block tile depth (K): 128 bytes / element size",
        "consumers": "consumer warpgroups (1 or 2, cooperative)",
        "group": "M tile rows per raster group inside a group",
        "order": "M-grouped tile order: forward (group by group) or ends (even tiles from "
                 "the front, odd ones from the back)",
    },
    space=space, adjust=_adjust, tma=True,
    problem="grouped")
