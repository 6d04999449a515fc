"""The fp8 family's ladder presets, search space and descriptor."""
from __future__ import annotations

import itertools

from ....config import Preset
from .. import hopper_family
from .config import Fp8Config


def _c(**kw) -> Fp8Config:
    return Fp8Config(**kw)


# The prototype's measured kernels (H200, verified against float64; see docs/families/hopper/fp8.md),
# then one step each beyond them.
_FAST = {"bm": 128, "bn": 256, "consumers": 2, "stages": 4, "scaling": "tensor", "promote": 0}
_PROMOTED = {"bm": 128, "bn": 128, "consumers": 2, "stages": 7, "promote": 128}
_DECODE = {"bm": 64, "bn": 128, "consumers": 1, "stages": 9, "regs_consumer": 240, "promote": 128, "partials": 2}

PRESETS: tuple[Preset, ...] = (
    Preset("fp8_tensor_fast", _c(**_FAST),
           "FP8 wgmma m64n256k32 (e4m3) on 128 x 256 tiles read K-major by TMA, two consumer "
           "warpgroups, a producer warpgroup, persistent grouped tiles; the tensor core sums all "
           "of K (fast accumulation) and one fp32 scale per operand is applied in the epilogue",
           "CUTLASS sm90 FP8 GEMM (cooperative, FP8FastAccum); cuBLASLt's default"),
    Preset("fp8_tensor_tma_store", _c(**{**_FAST, "stages": 3, "store": "tma"}),
           "epilogue through a 128-byte-swizzled staging tile and TMA stores that drain while "
           "the next tile's main loop runs (3 stages: the 64 KiB staging tile takes the fourth)",
           "CUTLASS sm90 TMA-store epilogue; DeepGEMM"),
    Preset("fp8_tensor_cluster", _c(**{**_FAST, "stages": 3, "store": "tma", "cluster_m": 2}),
           "2-CTA clusters along M: each CTA loads half of the B tile and TMA multicasts it to "
           "both, halving B's L2 traffic",
           "CUTLASS multicast TMA (ClusterShape 2x1); DeepGEMM kNumTMAMulticast"),
    Preset("fp8_row_fast", _c(**{**_FAST, "scaling": "row"}),
           "row-wise scales: one per row of A (token) and column of B (channel), applied in the "
           "epilogue", "PyTorch ScalingType.RowWise (torch._scaled_mm); FBGEMM f8f8bf16_rowwise"),
    Preset("fp8_grad_e5m2", _c(**{**_PROMOTED, "promote": 0, "dtype": "e5m2", "out": "fp32",
                                  "scaling": "row"}),
           "e5m2 x e4m3 (a gradient times a weight) into fp32, row-wise, fast accumulation on "
           "128 x 128 tiles with 7 stages", "Micikevicius et al. 2022, FP8 formats for deep "
           "learning (e5m2 gradients)"),
    Preset("fp8_tensor_promoted", _c(**{**_PROMOTED, "partials": 2}),
           "promotion: every 128 K elements the tensor core's partial sums are added to fp32 "
           "registers (two partial sets, the next block's wgmmas issued first): the accuracy of "
           "use_fast_accum=False", "DeepSeek-V3 report 3.3.2; CUTLASS mma_promotion_interval"),
    Preset("fp8_block", _c(**{**_PROMOTED, "scaling": "block"}),
           "DeepSeek-V3 blockwise scales (1 x 128 of A, 128 x 128 of B) applied at each "
           "promotion, waiting for each block's wgmmas (the other consumer fills the tensor "
           "core meanwhile)", "DeepSeek-V3 report 3.3.2; DeepGEMM"),
    Preset("fp8_block_prom2", _c(**{**_PROMOTED, "scaling": "block", "partials": 2}),
           "two partial accumulator sets: block k+1's wgmmas are issued before block k is "
           "promoted, halving the tensor core's idle time at promotions",
           "CUTLASS sm90 FP8 blockwise-scaled GEMM (promotion overlapped with MMA)"),
    Preset("fp8_block_cluster", _c(**{**_PROMOTED, "scaling": "block", "partials": 2,
                                      "cluster_m": 2}),
           "blockwise with 2-CTA clusters along M sharing B by TMA multicast (128 x 128 tiles "
           "need 32 KiB per K block each: half of B's share is saved)",
           "DeepGEMM (TMA multicast); CUTLASS ClusterShape 2x1"),
    Preset("fp8_block_overlap", _c(**{**_PROMOTED, "scaling": "block", "partials": 2,
                                      "store": "tma", "stages": 6, "overlap": True}),
           "the overlapped main loop: each tile's epilogue (a TMA store, 6 stages beside its "
           "staging) runs while the next tile's first wgmmas are on the tensor cores, the "
           "scales of four K blocks load a window ahead, and the two consumers run a K block "
           "apart so that one's promotion drain and epilogue fall under the other's wgmmas",
           "DeepGEMM sm90 FP8 GEMM (math warpgroups overlapping promotion and epilogue); "
           "CUTLASS sm90 TMA-store epilogue"),
    Preset("fp8_block_decode", _c(**{**_DECODE, "scaling": "block", "split_k": 7}),
           "decode (M <= 64): 64 x 128 tiles, one consumer warpgroup, 9 stages, K split 7 ways "
           "so the 17 tiles of 64 x 2112 x 7168 become 119 CTAs; the last slice to finish adds "
           "the others' fp32 partials in order (no second kernel)",
           "CUTLASS split-K (serial reduction); DeepGEMM decode shapes"),
    Preset("fp8_row_decode", _c(bm=64, bn=256, consumers=1, stages=5, regs_consumer=240,
                                scaling="row", split_k=2),
           "decode with row-wise scales and fast accumulation: 64 x 256 tiles, split-K 2 (128 x "
           "7168 x 16384: 112 CTAs streaming B)", "CUTLASS split-K; cuBLASLt's small-M kernels"),
)

SPACE = {
    "tile": ((128, 256, 2), (128, 128, 2), (64, 128, 1), (64, 256, 1), (128, 112, 2),
             (128, 96, 2), (256, 128, 2), (64, 64, 1)),
    "stages": (3, 4, 5, 6, 7, 8, 9), "cluster": ((1, 1), (2, 1), (1, 2)), "partials": (1, 2),
    "store": ("direct", "tma"), "split_k": (1, 2, 4, 7), "group": (8, 16),
}


def space(dtype: str = "e4m3", scaling: str = "tensor", promote: int = 0, out: str = "bf16",
          b_dtype: str = "e4m3") -> list[Fp8Config]:
    """Every valid configuration of the fp8 search space for A of ``dtype``, B of
    ``b_dtype``, ``scaling``, ``promote`` (0: fast) and D of ``out``: tiles of 64 to 256 rows
    and 64 to 256 columns, 3 to 9 stages, clusters of 1 or 2, one or two partial sets,
    direct or TMA stores, split-K 1, 2, 4 or 7, setmaxnreg 40/232 (2 consumers) or 40/240;
    blockwise with two partial sets overlapped (``overlap``: faster in geomean on every
    measured set of shapes)."""
    s = SPACE
    out_ = []
    for (bm, bn, cons), st, (cm, cn), parts, store, split, group in itertools.product(
            s["tile"], s["stages"], s["cluster"], s["partials"], s["store"], s["split_k"],
            s["group"]):
        if parts == 2 and not promote:
            continue
        cfg = Fp8Config.unchecked(
            bm=bm, bn=bn, bk=128, dtype=dtype, b_dtype=b_dtype, out=out, scaling=scaling,
            promote=promote, partials=parts, consumers=cons, stages=st, cluster_m=cm,
            cluster_n=cn, group=group, regs_producer=40, regs_consumer=232 if cons == 2 else 240,
            store=store, split_k=split, layout="rcr", epilogue="none", m=None, n=None, k=None,
            overlap=parts == 2 and scaling == "block")
        if not cfg.violations():
            out_.append(cfg)
    return out_


def fallback(cfg: Fp8Config) -> Fp8Config:
    """The same kernel with direct stores, for a D that a TMA store cannot take (an address or
    row stride off 16 bytes); A and B that TMA cannot read are repacked instead (FP8 wgmma has
    no other way to read them)."""
    return cfg.replace(store="direct", c_stages=0)


def _adjust(values: dict, given: set) -> dict:
    """Follow --scaling: block scaling takes promotion every 128 unless --promote says
    otherwise."""
    if values.get("scaling") == "block" and "promote" not in given and not values.get("promote"):
        values = {**values, "promote": 128}
    return values


FAMILY = hopper_family(
    Fp8Config,
    summary="Hopper FP8 (e4m3/e5m2) wgmma with tensor, row or blockwise scales; sm_90a only",
    dtypes=("e4m3", "e5m2"), presets=PRESETS,
    defaults={"e4m3": "fp8_tensor_fast", "e5m2": "fp8_grad_e5m2"},
    field_help={
        "regs_producer": "setmaxnreg count of the producer (always: the family's consumers "
                         "need the registers)",
        "regs_consumer": "setmaxnreg count of the consumers",
        "bm": "block tile rows (M): 64 per consumer warpgroup slice",
        "bk": "block tile depth (K): 128 (one 128-byte swizzle row)",
        "dtype": "A dtype", "b_dtype": "B's FP8 dtype", "out": "D dtype",
        "scaling": "tensor, row (per token x per channel) or block (1x128 A, 128x128 B)",
        "promote": "K elements between fp32 promotions (0: fast accumulation)",
        "partials": "partial accumulator sets (2: promotion overlaps the next wgmmas)",
        "store": "epilogue: direct, or tma (staged, TMA store overlapping the next tile)",
        "split_k": "slices of K, reduced in the kernel by the last slice (1: none)",
        "overlap": "epilogue under the next tile's first wgmmas, scales a window ahead, "
                   "consumers a K block apart (two partial sets)",
    },
    space=space, adjust=_adjust, tma=False, fallback=fallback)
