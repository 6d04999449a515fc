"""For every rule of every family: a config that breaks that rule and no other (a preset plus
overrides)."""
from gemmgen.model.families.mma import MmaConfig
from gemmgen.model.families.simt import SimtConfig
from gemmgen.model.families.wgmma import WgmmaConfig
from gemmgen.model.families.wmma import WmmaConfig
from gemmgen.model.presets import PRESETS

FAMILIES = {"simt": SimtConfig, "wmma": WmmaConfig, "wgmma": WgmmaConfig, "mma": MmaConfig}
ALL_RULES = [(family, rule) for family, cls in FAMILIES.items() for rule in cls.rules]

SIMT_BREAKERS = {
    "bm-positive": ("vectorized", {"bm": 0}),
    "bn-positive": ("vectorized", {"bn": 0}),
    "bk-positive": ("vectorized", {"bk": 0}),
    "tm-positive": ("vectorized", {"tm": 0}),
    "tn-positive": ("vectorized", {"tn": 0}),
    "wm-nonnegative": ("warptile_db", {"wm": -64}),
    "wn-nonnegative": ("warptile_db", {"wn": -32, "bn": 64, "wm": 128, "bm": 256, "tn": 8,
                                       "tm": 2, "bk": 4, "vec": 2}),
    "vec-width": ("warptile_db", {"bm": 16, "bn": 96, "bk": 6, "tm": 2, "tn": 6, "wm": 16,
                                  "wn": 96, "vec": 3, "skew": 3, "transpose_a": False}),
    "skew-nonnegative": ("tile2d", {"skew": -1}),
    "stages-range": ("tile2d", {"stages": 3}),
    "wm-needs-wn": ("vectorized", {"wm": 64}),
    "wn-needs-wm": ("vectorized", {"wn": 32}),
    "bm-tm": ("vectorized", {"bm": 8, "tm": 16}),
    "bn-tn": ("vectorized", {"bn": 8, "tn": 16}),
    "bm-wm": ("warptile_db", {"bm": 8}),
    "bn-wn": ("warptile_db", {"bn": 8}),
    "wm-lanes": ("warptile_db", {"tm": 16}),
    "wn-lanes": ("warptile_db", {"tn": 16}),
    "whole-warps": ("vectorized", {"bm": 8}),
    "max-threads": ("coalesced", {"bm": 48}),
    "a-contig-vec": ("warptile", {"bm": 192, "bn": 192, "bk": 3, "wm": 64, "wn": 64, "vec": 2,
                            "skew": 8}),
    "a-tile-loads": ("vectorized", {"bn": 48}),
    "b-tile-loads": ("vectorized", {"bm": 48}),
    "tn-vec": ("warptile_db", {"tn": 1}),
    "tm-vec": ("warptile_db", {"tm": 1}),
    "skew-vec": ("vectorized", {"skew": 1}),
    "acc-registers": ("vectorized", {"tm": 32}),
    "static-smem": ("vectorized", {"bk": 64}),
    "stages0-thread-tile": ("coalesced", {"tm": 2}),
    "stages0-bk": ("coalesced", {"bk": 2}),
    "stages0-vec": ("coalesced", {"vec": 2}),
    "stages0-skew": ("coalesced", {"skew": 1}),
    "stages0-warp-tile": ("coalesced", {"wm": 16, "wn": 16}),
    "stages0-transpose": ("coalesced", {"transpose_a": True}),
    "thread-order": ("vectorized", {"thread_order": "m"}),
    "min-blocks-positive": ("vectorized", {"min_blocks": 0}),
    "min-blocks-threads": ("vectorized", {"min_blocks": 9}),
    "b-contig-vec": ("warptile_db", {"bm": 64, "bn": 64, "bk": 2, "wm": 64, "wn": 64,
                                     "layout": "ccr"}),
    "smem-store-warp-tile": ("simt_cs", {"wm": None, "wn": None, "tm": 8, "tn": 8}),
    "smem-store-tn": ("simt_cs", {"tn": 2, "vec": 2}),
    "smem-store-row-major-c": ("simt_cs", {"layout": "rrc"}),
    "swizzle-transposed": ("simt_swizzle", {"transpose_a": False}),
    "swizzle-bm": ("simt_swizzle", {"bm": 48, "wm": 48, "tm": 2, "vec": 1}),
    "swizzle-bk": ("simt_swizzle", {"bk": 24}),
    "swizzle-skew": ("simt_swizzle", {"skew": 4}),
    "stages0-frag-db": ("coalesced", {"frag_db": True}),
    "stages0-peel": ("coalesced", {"peel": True}),
    "stages0-align": ("coalesced", {"align": "row"}),
}


WMMA_BREAKERS = {
    "bm-positive": ("wmma_v07", {"bm": 0}),
    "bn-positive": ("wmma_v07", {"bn": 0}),
    "bk-positive": ("wmma_v07", {"bk": 0}),
    "wm-positive": ("wmma_v07", {"wm": 0}),
    "wn-positive": ("wmma_v07", {"wn": 0}),
    "skew-nonnegative": ("wmma_v07", {"skew": -8}),
    "stages-range": ("wmma_v07", {"stages": 0}),
    "tf32-shape": ("wmma_tf32", {"shape": "m16n16k16"}),
    "half-shape": ("wmma_v07", {"shape": "m16n16k8"}),
    "fp16-accumulator": ("wmma_bf16", {"acc": "fp16"}),
    "fp16-output": ("wmma_noskew", {"dtype": "bf16"}),
    "bf16-output": ("wmma_v07", {"out": "bf16"}),
    "bm-wm": ("wmma_v07", {"bm": 32}),
    "bn-wn": ("wmma_v07", {"wn": 48}),
    "wm-fragment": ("wmma_m32n8", {"wm": 16}),
    "wn-fragment": ("wmma_bf16", {"wn": 16}),
    "bk-fragment": ("wmma_noskew", {"bk": 8}),
    "max-threads": ("wmma_regacc", {"bm": 512, "bn": 512}),
    "a-tile-loads": ("wmma_v07", {"bn": 96}),
    "b-tile-loads": ("wmma_v07", {"bm": 256}),
    "skew-align": ("wmma_v07", {"skew": 1}),
    "acc-registers": ("wmma_noskew", {"wm": 128}),
    "dynamic-smem": ("wmma_pipeline", {"bm": 512}),
    "min-blocks-positive": ("wmma_v07", {"min_blocks": 0}),
    "min-blocks-threads": ("wmma_v07", {"min_blocks": 9}),
    "col-a-fragment-align": ("wmma_v07", {"layout": "crr", "shape": "m8n32k16"}),
}
WGMMA_BREAKERS = {
    "bm-warpgroup-rows": ("wgmma_tma_store", {"bm": 0}),
    "bm-per-consumer": ("wgmma_persistent", {"bm": 192}),
    "wgmma-n-multiple": ("wgmma_persistent", {"bn": 252, "layout": "rcr"}),
    "wgmma-n-range": ("wgmma_persistent", {"bn": 320}),
    "wgmma-n-positive": ("wgmma_persistent", {"bn": 0}),
    "swizzle-mode": ("wgmma_tma", {"swizzle": 256, "bk": 128}),
    "bk-swizzle": ("wgmma_tma", {"bk": 32}),
    "stages-range": ("wgmma_tma", {"stages": 0}),
    "smem-limit": ("wgmma_tma_store", {"stages": 5}),
    "consumers-range": ("wgmma_tma_store", {"consumers": 3, "bm": 192, "bn": 128,
                                            "regs_producer": 0, "regs_consumer": 0}),
    "acc-registers": ("wgmma_ws", {"bm": 256, "stages": 3}),
    "setmaxnreg-producer": ("wgmma_tma", {"regs_producer": 40, "regs_consumer": 256}),
    "setmaxnreg-producer-count": ("wgmma_tma_store", {"regs_producer": 36}),
    "setmaxnreg-consumer-count": ("wgmma_tma_store", {"regs_consumer": 236}),
    "setmaxnreg-pool": ("wgmma_tma_store", {"regs_consumer": 240}),
    "setmaxnreg-dec": ("wgmma_ws", {"regs_producer": 256, "regs_consumer": 256}),
    "setmaxnreg-inc": ("wgmma_tma_store", {"regs_consumer": 160, "bn": 192}),
    "a-mn-major-16bit": ("wgmma_tf32", {"layout": "ccr"}),
    "b-mn-major-16bit": ("wgmma_tf32", {"layout": "rrr"}),
    "a-box": ("wgmma_ws", {"bm": 320, "bn": 64, "stages": 4}),
    "b-mn-blocks": ("wgmma_persistent", {"bn": 200}),
    "cluster-size": ("wgmma_cluster", {"cluster_n": 2}),
    "cluster-persistent": ("wgmma_cluster", {"persistent": False}),
    "b-multicast-split": ("wgmma_cluster", {"bn": 192}),
    "a-multicast-split": ("wgmma_cluster", {"cluster_m": 1, "cluster_n": 2, "layout": "crr",
                                            "bm": 192, "bn": 64, "pingpong": True}),
    "pingpong-consumers": ("wgmma_ws", {"pingpong": True, "persistent": True}),
    "pingpong-persistent": ("wgmma_2c", {"pingpong": True, "bn": 128}),
    "persistent-producer": ("wgmma_tma", {"persistent": True}),
    "no-producer-one-consumer": ("wgmma_tma", {"consumers": 2}),
    "group-positive": ("wgmma_tma", {"group": 0}),
    "c-store-chunks": ("wgmma_tma_store", {"bn": 200, "layout": "rcr"}),
    "fp16-output": ("wgmma_bf16", {"out": "fp16"}),
    "bf16-output": ("wgmma_tma_store", {"out": "bf16"}),
    "c-box": ("wgmma_tma_store", {"bm": 320, "bn": 64, "pingpong": True, "layout": "crr"}),
    "split-k-range": ("wgmma_3xtf32", {"split_k": 17}),
    "split-k-direct": ("wgmma_tma_store", {"split_k": 2}),
    "3xtf32-dtype": ("wgmma_bf16", {"math": "3xtf32", "store": "direct", "bn": 128}),
    "flush-range": ("wgmma_3xtf32", {"flush": 3}),
}
MMA_BREAKERS = {
    "bm-positive": ("mma_fp16", {"bm": 0}),
    "bn-positive": ("mma_fp16", {"bn": 0}),
    "bk-positive": ("mma_fp16", {"bk": 0}),
    "wm-positive": ("mma_fp16", {"wm": 0}),
    "wn-positive": ("mma_fp16", {"wn": 0}),
    "bm-wm": ("mma_reg", {"bm": 96}),
    "bn-wn": ("mma_reg", {"wn": 48}),
    "wm-mma": ("mma_base", {"wm": 24, "bm": 96}),
    "wn-mma-pairs": ("mma_base", {"wn": 8, "bn": 32}),
    "bk-mma": ("mma_base", {"bk": 24}),
    "max-threads": ("mma_base", {"acc_smem": False, "bm": 256, "wm": 32, "wn": 16}),
    "a-tile-loads": ("mma_fp16", {"bm": 16, "wm": 16, "bn": 32, "wn": 16, "bk": 16}),
    "b-tile-loads": ("mma_fp16", {"bn": 16, "wn": 16, "bm": 32, "wm": 16, "bk": 16}),
    "skew-nonnegative": ("mma_reg", {"skew": -8}),
    "skew-align": ("mma_reg", {"skew": 4}),
    "stages-range": ("mma_fp16", {"stages": 0}),
    "pipeline-cp-async": ("mma_vec", {"stages": 2}),
    "cp-async-vector": ("mma_ldgsts", {"vector": False}),
    "swizzle-width": ("mma_fp16", {"swizzle": 16}),
    "swizzle-no-skew": ("mma_fp16", {"skew": 8}),
    "a-swizzle-row": ("mma_fp16", {"bk": 48, "stages": 3}),
    "b-swizzle-row": ("mma_fp16", {"bk": 48, "stages": 3, "layout": "ccr"}),
    "acc-registers": ("mma_fp16", {"wm": 128, "bm": 256, "stages": 2}),
    "dynamic-smem": ("mma_tuned", {"bk": 64, "stages": 6}),
    "min-blocks-positive": ("mma_fp16", {"min_blocks": 0}),
    "min-blocks-threads": ("mma_fp16", {"min_blocks": 17}),
    "fp16-output": ("mma_bf16", {"out": "fp16"}),
    "bf16-output": ("mma_fp16", {"out": "bf16"}),
    "staged-c-registers": ("mma_reg", {"acc_smem": True, "staged_c": True}),
    "group-m-positive": ("mma_fp16", {"group_m": 0}),
}
BREAKERS = {"simt": SIMT_BREAKERS, "wmma": WMMA_BREAKERS, "wgmma": WGMMA_BREAKERS,
            "mma": MMA_BREAKERS}


def pairwise_variants(cfg) -> list:
    """Every layout once and every epilogue once (8 variants, layout i with epilogue i mod 6)
    that the family's rules accept: the layout and epilogue code paths of the templates are
    independent, so this covers each path without compiling all 48 pairs."""
    from gemmgen.model.config import EPILOGUES, LAYOUTS
    out = [cfg.replace(layout=lay, epilogue=EPILOGUES[i % len(EPILOGUES)], check=False)
           for i, lay in enumerate(LAYOUTS)]
    return [c for c in out if not c.violations()]


def breaker(family: str, rule_name: str):
    preset, overrides = BREAKERS[family][rule_name]
    return PRESETS[preset].config.replace(check=False, **overrides)
