"""Bench candidate configs beside cuBLAS at a few sizes: the search behind the presets.

python3 benchmarks/investigations/explore.py [--family simt|wmma|wgmma] [--size 4096] [--only SUBSTR]
                              [--verify] [--json PATH]   (needs a GPU, PyCUDA and CuPy)
"""
import argparse
import json
import sys

from gemmgen import SimtConfig
from gemmgen.model.families.hopper.wgmma import WgmmaConfig
from gemmgen.model.families.wmma import WmmaConfig
from gemmgen.runtime.build import build_many
from gemmgen.tune.baseline import run_bench
from gemmgen.tune.results import finish, table

W = dict(vec=4, skew=4, stages=2)
CANDIDATES = {
    "db_128x128x16_w64x32_t4x4_mb1": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, **W),
    "db_128x128x16_w64x32_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, min_blocks=2, **W),
    "db_128x128x8_w64x32_t4x4_mb2": SimtConfig(128, 128, 8, 4, 4, wm=64, wn=32, min_blocks=2, **W),
    "db_128x128x16_w32x64_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, min_blocks=2, **W),
    "db_128x128x16_w64x32_t4x4_sk0_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=0,
                                                     stages=2, min_blocks=2),
    "db_128x256x8_w64x64_t8x4_mb1": SimtConfig(128, 256, 8, 8, 4, wm=64, wn=64, **W),
    "db_256x128x8_w64x64_t4x4_mb1": SimtConfig(256, 128, 8, 4, 4, wm=64, wn=64, **W),
    "db_128x64x16_w64x32_t4x4_mb3": SimtConfig(128, 64, 16, 4, 4, wm=64, wn=32, min_blocks=3, **W),
    "db_64x64x16_w32x32_t4x4_mb4": SimtConfig(64, 64, 16, 4, 4, wm=32, wn=32, min_blocks=4, **W),
    "db_128x128x16_t8x8_mb1": SimtConfig(128, 128, 16, 8, 8, **W),
    "db_128x128x16_t8x8_mb2": SimtConfig(128, 128, 16, 8, 8, min_blocks=2, **W),
    "db_128x128x8_t8x8_mb2": SimtConfig(128, 128, 8, 8, 8, min_blocks=2, **W),
    "db_128x128x16_w32x64_t4x4_sk0_mb2": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, vec=4, skew=0,
                                                     stages=2, min_blocks=2),
    "db_128x128x8_w32x64_t4x4_mb2": SimtConfig(128, 128, 8, 4, 4, wm=32, wn=64, min_blocks=2, **W),
    "db_128x64x16_w32x64_t4x4_mb4": SimtConfig(128, 64, 16, 4, 4, wm=32, wn=64, min_blocks=4, **W),
    "db_64x128x16_w32x64_t4x4_mb4": SimtConfig(64, 128, 16, 4, 4, wm=32, wn=64, min_blocks=4, **W),
    "db_128x128x16_w32x32_t4x4_mb1": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=32, **W),
    "sb_128x128x16_w64x32_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4,
                                                 stages=1, min_blocks=2),
}

# Issue 12 ("SIMT: the last 15%"): the new ladder steps, and alternatives to simt_best.
from gemmgen import PRESETS as _PRESETS  # noqa: E402

_BEST = _PRESETS["simt_best"].config
X12_STEPS = ("simt_cs", "simt_swizzle", "simt_fragdb", "simt_256x128", "simt_peel", "simt_best")
X12_ALTERNATIVES = {
    "x12_best_128x256": _BEST.replace(bm=128, bn=256),
    "x12_best_skew4": _BEST.replace(swizzle_a=False, skew=4),
    "x12_best_nofdb": _BEST.replace(frag_db=False),
    "x12_best_direct": _BEST.replace(store="direct"),
    "x12_best_bk16": _BEST.replace(bk=16),  # one barrier per 16 k; 248 registers
    "x12_128x128x8_mb2": _BEST.replace(bm=128, wm=32, min_blocks=2),
}
CANDIDATES.update({f"x12_{n}": _PRESETS[n].config for n in X12_STEPS})
CANDIDATES.update(X12_ALTERNATIVES)


def _wmma(bm, bn, bk, wm, wn, st, dtype="fp16", out=None, shape=None, mb=1, skew=8):
    shape = shape or ("m16n16k8" if dtype == "tf32" else "m16n16k16")
    out = out or ("fp32" if dtype == "tf32" else dtype)
    return WmmaConfig(bm, bn, bk, wm, wn, shape=shape, dtype=dtype, out=out, skew=skew,
                      stages=st, min_blocks=mb)


WMMA_CANDIDATES = {
    f"{d}_{bm}x{bn}x{bk}_w{wm}x{wn}_st{st}": _wmma(bm, bn, bk, wm, wn, st, d)
    for d in ("fp16",)
    for bm, bn, bk, wm, wn, st in [
        (128, 128, 32, 64, 64, 3), (128, 128, 32, 64, 32, 3), (128, 256, 32, 64, 64, 3),
        (256, 128, 32, 64, 64, 3), (128, 128, 64, 64, 64, 3), (128, 128, 32, 64, 64, 4),
        (128, 256, 32, 64, 64, 4), (128, 128, 32, 64, 64, 2), (128, 128, 32, 64, 64, 1),
        (128, 128, 32, 32, 64, 3), (256, 128, 32, 64, 64, 4)]
}
WMMA_CANDIDATES.update({
    "bf16_128x256x32_w64x64_st3": _wmma(128, 256, 32, 64, 64, 3, "bf16"),
    "bf16_128x128x32_w64x64_st3": _wmma(128, 128, 32, 64, 64, 3, "bf16"),
    "tf32_128x128x32_w64x32_st3": _wmma(128, 128, 32, 64, 32, 3, "tf32", skew=4),
    "tf32_128x128x16_w64x32_st4": _wmma(128, 128, 16, 64, 32, 4, "tf32", skew=4),
    "tf32_128x256x16_w64x64_st3": _wmma(128, 256, 16, 64, 64, 3, "tf32", skew=4),
    "tf32_128x128x32_w32x64_st3": _wmma(128, 128, 32, 32, 64, 3, "tf32", skew=4),
    "fp16_m32n8_128x128x32_w64x64_st3": _wmma(128, 128, 32, 64, 64, 3, "fp16", shape="m32n8k16"),
    "bf16_m8n32_128x128x32_w64x64_st3": _wmma(128, 128, 32, 64, 64, 3, "bf16", shape="m8n32k16"),
    "fp16_noskew_128x128x32_w64x64_st3": _wmma(128, 128, 32, 64, 64, 3, "fp16", skew=0),
})


_WS = dict(bk=64, consumers=2, producer=True, persistent=True, regs_producer=40,
           regs_consumer=232, store="tma", stages=3, group=8)


def _wg(dtype="fp16", **kw) -> WgmmaConfig:
    base = {**_WS, "bm": 128, "bn": 256, "dtype": dtype,
            "out": "fp32" if dtype == "tf32" else dtype}
    if dtype == "tf32":
        base.update(bk=32, layout="rcr")
    return WgmmaConfig(**{**base, **kw})


WGMMA_CANDIDATES = {
    # the ladder's ring step: stages against occupancy (one warpgroup, no producer)
    "ring_st2": WgmmaConfig(128, 128, 64, consumers=1, producer=False, persistent=False,
                            regs_producer=0, regs_consumer=0, store="direct", stages=2),
    "ring_st3": WgmmaConfig(128, 128, 64, consumers=1, producer=False, persistent=False,
                            regs_producer=0, regs_consumer=0, store="direct", stages=3),
    "tma_store_128x256_st3": _wg(),
    "tma_store_128x256_st3_g16": _wg(group=16),
    "tma_store_128x256_st3_snake": _wg(raster="snake"),
    "tma_store_128x256_st3_r24x240": _wg(regs_producer=24, regs_consumer=240),
    "cluster2x1_128x256_st3": _wg(cluster_m=2),
    "cluster1x2_128x256_st3": _wg(cluster_n=2),
    "cluster2x1_128x256_st3_g16": _wg(cluster_m=2, group=16),
    "direct_128x256_st4": _wg(store="direct", stages=4),
    "cluster2x1_direct_128x256_st4": _wg(store="direct", stages=4, cluster_m=2),
    "tma_store_128x192_st4": _wg(bn=192, stages=4),
    "tma_store_256x128_st3": _wg(bm=256, bn=128),
    "pingpong_128x128_st5": _wg(bn=128, pingpong=True, stages=5),
    "pingpong_64x256_st4": _wg(bm=64, pingpong=True, stages=4),
    "pingpong_128x128_st4_direct": _wg(bn=128, pingpong=True, stages=4, store="direct"),
    "gelu_tma_store_128x256_st3": _wg(epilogue="bias_gelu"),
    "gelu_pingpong_128x128_st5": _wg(bn=128, pingpong=True, stages=5, epilogue="bias_gelu"),
    "gelu_pingpong_64x256_st4": _wg(bm=64, pingpong=True, stages=4, epilogue="bias_gelu"),
    "bf16_tma_store_128x256_st3": _wg("bf16"),
    "bf16_cluster2x1_128x256_st3": _wg("bf16", cluster_m=2),
    "bf16_cluster1x2_128x256_st3": _wg("bf16", cluster_n=2),
    "bf16_pingpong_128x128_st5": _wg("bf16", bn=128, pingpong=True, stages=5),
    "tf32_128x128_st4": _wg("tf32", bn=128, stages=4),
    "tf32_128x128_st5": _wg("tf32", bn=128, stages=5),
    "tf32_128x256_direct_st4": _wg("tf32", store="direct", stages=4),
    "tf32_256x128_direct_st4": _wg("tf32", bm=256, bn=128, store="direct", stages=4),
    "tf32_128x192_st3": _wg("tf32", bn=192, stages=3),
    "tf32_cluster2x1_128x128_st4": _wg("tf32", bn=128, stages=4, cluster_m=2),
    "tf32_pingpong_128x128_st4": _wg("tf32", bn=128, pingpong=True, stages=4, store="direct"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", action="append", default=None)
    ap.add_argument("--json")
    ap.add_argument("--family", default="simt", choices=["simt", "wmma", "wgmma"])
    ap.add_argument("--only", action="append", default=None,
                    help="keep candidates whose label contains this (repeatable)")
    ap.add_argument("--exact", nargs="*", default=None, help="keep exactly these labels")
    ap.add_argument("--verify", action="store_true", help="run the verify sweep on each first")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in (s.split("x") * 3)[:3]) if "x" not in s else
             tuple(int(x) for x in s.split("x")) for s in (args.size or ["4096"])]
    from gemmgen.tune.verify import CASES, sweep_kernel
    targets = []
    pool = {"simt": CANDIDATES, "wmma": WMMA_CANDIDATES, "wgmma": WGMMA_CANDIDATES}[args.family]
    chosen = {lbl: c for lbl, c in pool.items()
              if (not args.only or any(o in lbl for o in args.only))
              and (args.exact is None or lbl in args.exact)}
    for (label, cfg), k in zip(chosen.items(), build_many(list(chosen.values()))):
        if isinstance(k, Exception):
            print(f"{label:<40} BUILD FAILED: {str(k)[:300]}", flush=True)
            continue
        line = f"{label:<40} regs {k.registers:>3}  local {k.local_bytes}"
        if args.verify:
            res = sweep_kernel(label, k, CASES)
            bad = [r for r in res if not r.passed]
            worst = max(r.rel_error for r in res)
            line += f"  verify {len(res) - len(bad)}/{len(res)} worst {worst:.2e}"
            line += "".join(f"\n   FAIL {r}" for r in bad[:3])
        print(line, flush=True)
        targets.append((label, k))
    rows, doc = [], None
    for target in targets:  # one at a time, each beside cuBLAS, so progress shows as it goes
        doc = run_bench([target], sizes)
        for r in doc["rows"]:
            print(f"  {r['kernel']:<36} {r['M']}x{r['N']}x{r['K']} {r['tflops']:8.2f} TFLOP/s "
                  f"cuBLAS {r['cublas_tflops'] or 0:8.2f} ({r['pct_cublas']}%) err "
                  f"{r['rel_error']:.1e}", flush=True)
        rows += doc["rows"]
    doc = finish({**doc, "rows": rows})
    print(doc["gpu"])
    print(table(sorted(doc["rows"], key=lambda r: -r["tflops"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
