"""GPU diagnosis of the staged-C epilogue failure (mma_epilogue: C columns 0..7 wrong, at
random, on ragged shapes; mma_swizzle, identical but for staged_c, right). Needs a GPU.

python3 benchmarks/investigations/mma_epilogue_diag.py [--reps 10] [--json OUT.json]
    runs each variant in its own process under a time limit (a hung kernel costs its limit),
    then prints one line per (variant, shape): bad elements in each repetition, and for the
    first bad ones: (row, col), tile, row/column in the tile, got, want.
python3 benchmarks/investigations/mma_epilogue_diag.py --one VARIANT --reps N   (what each process runs)

Variants (sources patched from the rendered preset; each tests one hypothesis):
  swizzle      mma_swizzle, the control (direct stores)
  epilogue     mma_epilogue as it is
  separate     the staged tile placed after the cp.async stages instead of over them
               (shared memory PIPELINE_BYTES + C tile): if the failures vanish, something
               writes the stages late, or reads them, after the barrier
  clobber      every inline asm (cp.async, wait_group, commit, ldmatrix, mma) with a "memory"
               clobber: if they vanish, the compiler moved shared accesses across them
  tile_id      each write-out store writes its CTA's linear id (exact in fp16) instead of
               the value: an element holding another id was written by another CTA
  it_id        each store writes 64 * it + tid % 64: which iteration/thread wrote it
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

SHAPES = ((520, 776, 328), (520, 776, 320), (136, 136, 64), (512, 776, 328),
          (520, 768, 328), (512, 768, 328), (1032, 2056, 1040))
VARIANTS = ("swizzle", "epilogue", "separate", "clobber", "tile_id", "it_id")


def source(variant: str) -> tuple[object, str, int]:
    """(config, patched source, dynamic shared memory bytes) of a variant."""
    from gemmgen import PRESETS, render
    cfg = PRESETS["mma_swizzle" if variant == "swizzle" else "mma_epilogue"].config
    src = render(cfg)
    smem = cfg.dynamic_smem_bytes

    def sub(old, new, count=1):
        nonlocal src
        assert src.count(old) >= count, (variant, old)
        src = src.replace(old, new)
    if variant == "separate":
        sub("float* cst = reinterpret_cast<float*>(smem);",
            "float* cst = reinterpret_cast<float*>(smem + PIPELINE_BYTES);")
        smem = cfg.pipeline_bytes + cfg.c_stage_bytes
    elif variant == "clobber":
        sub('"r"(src_bytes));', '"r"(src_bytes) : "memory");')
        sub('asm volatile("cp.async.commit_group;\\n" ::);',
            'asm volatile("cp.async.commit_group;\\n" ::: "memory");')
        sub('::"n"(N));', '::"n"(N) : "memory");')
        sub(': "r"(s));', ': "r"(s) : "memory");', 2)
        sub('"r"(b[0]), "r"(b[1]));', '"r"(b[0]), "r"(b[1]) : "memory");')
    elif variant == "tile_id":
        sub("const float v = src[e];",
            "const float v = (float)(blockIdx.y * gridDim.x + blockIdx.x);", 2)
    elif variant == "it_id":
        sub("const float v = src[e];", "const float v = (float)(64 * it + tid % 64);", 2)
    return cfg, src, smem


def one(variant: str, reps: int) -> dict:
    import numpy as np
    import pycuda.driver as drv
    from pycuda import gpuarray

    from gemmgen.runtime.build import build
    cfg, src, smem = source(variant)
    kernel = build(cfg, source=src)
    fn = kernel.function
    if smem > 48 * 1024:
        fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    rng = np.random.default_rng(0)
    out = {}
    for m, n, k in SHAPES:
        counts, samples = [], []
        gx, gy = -(-n // cfg.bn), -(-m // cfg.bm)
        for rep in range(reps):
            A = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
            B = rng.standard_normal((k, n), dtype=np.float32).astype(np.float16)
            a, b = gpuarray.to_gpu(A), gpuarray.to_gpu(B)
            c = gpuarray.to_gpu(np.full((m, n), np.nan, np.float16))
            fn.prepared_call((gx, gy, 1), (cfg.threads, 1, 1), m, n, k, 1.0, a.gpudata, k,
                             b.gpudata, n, 0.0, c.gpudata, n, 0, 0, 0, 0, shared_size=smem)
            drv.Context.synchronize()
            got = c.get().astype(np.float64)
            rows, cols = np.indices((m, n))
            tile = (rows // cfg.bm) * gx + cols // cfg.bn
            if variant == "tile_id":
                want = tile.astype(np.float64)
            elif variant == "it_id":
                # row rr, column cc of the tile: idx = (tid + it * THREADS) * EPI_VEC
                k_ = cfg.template_constants()
                lin = ((rows % cfg.bm) * cfg.bn + cols % cfg.bn) // k_["EPI_VEC"]
                want = (64 * (lin // cfg.threads) + (lin % cfg.threads) % 64).astype(np.float64)
            else:
                ref = A.astype(np.float64) @ B.astype(np.float64)
                want = ref
            if variant in ("tile_id", "it_id"):
                bad = ~(got == want)
            else:
                bad = ~(np.abs(got - want) <= 0.02 * np.sqrt(k) + 0.01 * np.abs(want))
            counts.append(int(bad.sum()))
            for r, cc in zip(*np.nonzero(bad)):
                if len(samples) >= 40:
                    break
                samples.append({"rep": rep, "row": int(r), "col": int(cc),
                                "tile": [int(r // cfg.bm), int(cc // cfg.bn)],
                                "in_tile": [int(r % cfg.bm), int(cc % cfg.bn)],
                                "got": float(got[r, cc]), "want": float(want[r, cc])})
        out[f"{m}x{n}x{k}"] = {"bad_per_rep": counts, "first_bad": samples}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--limit", type=float, default=90)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.reps)))
        return 0
    results = {}
    for v in VARIANTS:
        try:
            p = subprocess.run([sys.executable, __file__, "--one", v, "--reps", str(args.reps)],
                               capture_output=True, text=True, timeout=args.limit)
            res = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else \
                {"error": (p.stdout + p.stderr)[-2000:]}
        except subprocess.TimeoutExpired:
            res = {"error": f"timeout {args.limit} s"}
        results[v] = res
        if "error" in res:
            print(f"{v:9s} ERROR {res['error'][-600:]}", flush=True)
            continue
        for shape, r in res.items():
            first = [(s["row"], s["col"], tuple(s["in_tile"]), round(s["got"], 3),
                      round(s["want"], 3)) for s in r["first_bad"][:4]]
            print(f"{v:9s} {shape:15s} bad/rep {r['bad_per_rep']} {first}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
