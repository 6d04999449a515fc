"""The wgmma family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ....config import Preset
from ....dtypes import ELEM_BYTES, stored_as
from .. import hopper_family
from ...simt import PRESETS as SIMT_PRESETS
from ...wmma import WmmaConfig
from .config import WgmmaConfig


# ---- the ladder ---------------------------------------------------------------------------
def _c(**kw) -> WgmmaConfig:
    return WgmmaConfig(**kw)


_BASE = dict(bm=128, bn=128, bk=64, consumers=1, producer=False, persistent=False,
             regs_producer=0, regs_consumer=0, store="direct", stages=1)
# The ladder's later steps, each adding one technique to the step before it.
_2C = {**_BASE, "bn": 256, "stages": 4, "producer": True, "consumers": 2, "regs_producer": 40,
       "regs_consumer": 232}
_PERSISTENT = {**_2C, "persistent": True, "group": 8}
_TMA_STORE = {**_PERSISTENT, "stages": 3, "store": "tma"}

PRESETS: tuple[Preset, ...] = (
    Preset("wgmma_tma", _c(**_BASE),
           "one warpgroup: TMA loads a 128x64 A and 64x128 B tile into 128-byte-swizzled shared "
           "memory, wgmma m64n128k16 reads them through matrix descriptors; one stage",
           "fast.cu kernels 2-3"),
    Preset("wgmma_ring", _c(**{**_BASE, "stages": 3}),
           "a 3-stage ring of mbarrier-tracked TMA loads: two K tiles in flight while one is "
           "computed (97 KiB: two CTAs still fit an SM)",
           "fast.cu kernel 3 with a queue; CUTLASS PipelineTmaAsync"),
    Preset("wgmma_ws", _c(**{**_BASE, "stages": 5, "producer": True}),
           "warp specialization: a producer warpgroup issues TMA into a full/empty barrier ring, "
           "the consumer keeps one wgmma batch in flight (wait_group 1)",
           "fast.cu kernel 4; CUTLASS warp-specialized mainloop"),
    Preset("wgmma_2c", _c(**_2C),
           "128x256 tiles: two consumer warpgroups of 64x256 (128 fp32 accumulators each), "
           "setmaxnreg 40/232 moves registers from the producer to them",
           "fast.cu kernel 5; ThunderKittens 40/232"),
    Preset("wgmma_persistent", _c(**_PERSISTENT),
           "persistent grid, one CTA per SM, tiles in groups of 8 M-rows: the producer loads "
           "the next tile while consumers store this one",
           "fast.cu kernel 6; Triton grouped ordering"),
    Preset("wgmma_tma_store", _c(**_TMA_STORE),
           "epilogue through stmatrix into 128-byte-swizzled shared memory and an asynchronous "
           "TMA store that overlaps the next tile's main loop",
           "fast.cu kernels 10 and 12; DeepGEMM epilogue"),
    Preset("wgmma_cluster", _c(**{**_TMA_STORE, "cluster_m": 2}),
           "2-CTA clusters along M: each CTA loads half of the shared B tile and TMA multicasts "
           "it to both", "fast.cu kernels 8-9; CUTLASS multicast TMA"),
    Preset("wgmma_overlap", _c(**{**_TMA_STORE, "epilogue": "bias_gelu", "overlap": True}),
           "bias+GELU with the epilogue hidden behind the main loop: each consumer stages the "
           "pre-activation (alpha*acc + beta*C + bias, in C's dtype) and starts its next tile at "
           "once; GELU runs on the staged tile between that tile's wgmma batches, then the TMA "
           "store drains under the rest of its main loop",
           "FlashAttention-3's intra-warpgroup pipelining (softmax of one block beside the "
           "next block's wgmmas); CUTLASS sm90 TMA-store epilogue"),
    Preset("wgmma_bf16", _c(**{**_TMA_STORE, "dtype": "bf16", "out": "bf16"}),
           "the TMA-store kernel on bf16 inputs and output", "fast.cu kernel 12 (bf16)"),
    Preset("wgmma_tf32", _c(**{**_PERSISTENT, "bk": 32, "dtype": "tf32", "out": "fp32",
                               "layout": "rcr"}),
           "tf32 wgmma (m64n256k8) on float32 data, 4 stages, direct stores (an fp32 C tile "
           "would take the fourth stage's shared memory); K-major B (layout rcr): tf32 wgmma "
           "reads no MN-major operand", "CUTLASS sm90 tf32 GEMM; benchmarks/explore.py"),
    Preset("wgmma_3xtf32", _c(**{**_PERSISTENT, "bk": 32, "bn": 128, "stages": 6,
                                 "dtype": "tf32", "out": "fp32", "math": "3xtf32"}),
           "FP32-accurate GEMM on tf32 tensor cores: float32 A and B split into tf32 big + "
           "small parts, three products per chunk of K, each chunk added to the accumulators "
           "in FP32 outside the tensor core; any layout",
           "CUTLASS examples 27/28 (3xTF32); Ootomo & Yokota 2022"),
)

SPACE = {
    "bm": (128, 256), "bn": (128, 192, 256), "stages": (3, 4, 5), "cluster": ((1, 1), (2, 1)),
    "group": (8, 16), "store": ("tma", "direct"), "kind": ("cooperative", "pingpong"),
    "split_k": (1, 2, 4),
}


def space(dtype: str = "fp16") -> list[WgmmaConfig]:
    """Every configuration of the wgmma search space for ``dtype`` that passes the rules:
    warp-specialized, persistent, setmaxnreg 40/232, 128-byte swizzle, TMA or direct stores,
    split-K 1, 2 or 4 (direct stores);
    C in the input dtype (float32 for tf32), K-major B for tf32 (layout rcr; ``tune`` lays the
    space out in the layout it tunes)."""
    s = SPACE
    out_dtype = stored_as(dtype)
    bk = 128 // ELEM_BYTES[dtype]
    layout = "rcr" if dtype == "tf32" else "rrr"
    out = []
    for bm, bn, st, (cm, cn), group, store, kind, split in itertools.product(
            s["bm"], s["bn"], s["stages"], s["cluster"], s["group"], s["store"], s["kind"],
            s["split_k"]):
        cfg = WgmmaConfig.unchecked(
            bm=bm, bn=bn, bk=bk, dtype=dtype, out=out_dtype, consumers=2,
            pingpong=kind == "pingpong", producer=True, stages=st, swizzle=128, cluster_m=cm,
            cluster_n=cn, persistent=True, raster="grouped", group=group, regs_producer=40,
            regs_consumer=232, store=store, split_k=split, layout=layout)
        if not cfg.violations():
            out.append(cfg)
    return out


def fallback(cfg: WgmmaConfig):
    """The WMMA configuration (128x128x32, warps 64x64, 3 stages) that computes what ``cfg``
    computes, for operands TMA cannot describe: a row or batch stride that is not a multiple
    of 16 bytes, or a base address off 16-byte alignment. With 3xTF32, whose pack takes any
    operand, only a C that a TMA store cannot take falls back: to the SIMT preset
    warptile_tuned, which keeps float32 accuracy (WMMA's tf32 would not). A config with an
    epilogue tree, the dual GEMM or the overlap (which no other family renders) falls back to
    itself with direct stores and no overlap: its runtime repacks A and B instead."""
    if cfg.extended:
        return cfg.replace(store="direct", overlap=False, c_stages=0)
    if cfg.math == "3xtf32":
        simt = next(p.config for p in SIMT_PRESETS if p.name == "warptile_tuned")
        return simt.replace(layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)
    tf32 = cfg.dtype == "tf32"
    return WmmaConfig(128, 128, 32, 64, 64, shape="m16n16k8" if tf32 else "m16n16k16",
                      dtype=cfg.dtype, out=cfg.out, skew=4 if tf32 else 8, stages=3,
                      layout=cfg.layout, epilogue=cfg.epilogue, m=cfg.m, n=cfg.n, k=cfg.k)


def _adjust(values: dict, given: set) -> dict:
    """Follow --dtype: tf32 takes BK = 32, an fp32 C, a K-major B and direct stores with 4
    stages (an fp32 C staging tile would not leave room for them) unless the command line
    says otherwise; 16-bit inputs default C to their own dtype."""
    if "dtype" in given:
        d = values["dtype"]
        if "out" not in given:
            values = {**values, "out": stored_as(d)}
        if "bk" not in given:
            values = {**values, "bk": values.get("swizzle", 128) // ELEM_BYTES[d]}
        if d == "tf32" and "layout" not in given:
            values = {**values, "layout": "rcr"}
        if d == "tf32" and "store" not in given and "stages" not in given:
            values = {**values, "store": "direct", "stages": 4}  # as the tf32 preset
    return values


FAMILY = hopper_family(
    WgmmaConfig,
    summary="Hopper wgmma fed by TMA: warp specialization, persistent clusters; sm_90a only",
    dtypes=("fp16", "bf16", "tf32"), presets=PRESETS,
    defaults={"fp16": "wgmma_tma_store", "bf16": "wgmma_bf16", "tf32": "wgmma_tf32"},
    field_help={
        "bm": "block tile rows (M), a multiple of 64 per consumer warpgroup",
        "bk": "block tile depth (K): swizzle bytes / element size",
        "dtype": "A and B dtype", "out": "C dtype",
        "pingpong": "two consumers take alternate tiles instead of sharing one",
        "producer": "a producer warpgroup issues the TMA loads (warp specialization)",
        "swizzle": "shared-memory swizzle width in bytes: 128, 64 or 32",
        "persistent": "one CTA per SM looping over tiles",
        "raster": "tile order: grouped or snake",
        "store": "epilogue: tma (stmatrix + TMA store) or direct",
        "split_k": "slices of K, reduced by a second kernel (1: none)",
        "split_inline": "split-K summed in the kernel by the last slice of each tile",
        "split_cluster": "split-K with a tile's slices one cluster, summed through "
                         "distributed shared memory (one tile per CTA)",
        "math": "native, or 3xtf32 (FP32-accurate tf32 products; dtype tf32)",
        "flush": "3xTF32: K chunks summed in the tensor core per FP32 add",
    },
    space=space, adjust=_adjust, tma=True, fallback=fallback)
