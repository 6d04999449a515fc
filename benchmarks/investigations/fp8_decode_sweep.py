"""FP8 decode (M <= 128, per-tensor scales, fast accumulation): every tile and split-K of a
small grid beside the heuristic's choice and torch._scaled_mm (cuBLASLt), on the forward layers
of a training set of models (Llama-3-8B, Mistral-7B's MLP, DeepSeek-V3's decode rows as
DeepGEMM tabulates them) and a held-out set (Qwen2.5-7B, Gemma-2-9B, Phi-3-mini,
Llama-3.1-70B), M in {16, 64, 128}.

Candidates: 64-row tiles with one consumer warpgroup or 128-row tiles with two, BN in {64,
128, 256}, split-K in {1, 2, 4, 8} (slices of at least 4 K blocks), the deepest ring that fits.
Each is graph-timed (20 calls per graph, median of 10 replays; kernel only) on the same e4m3
operands, the weights rotating over sets past twice the L2; every output is checked against
torch._scaled_mm's (relative Frobenius error <= 2e-2; a NaN fails).

With the argument `block`: blockwise scales (1 x 128 activations, 128 x 128 weights, quantized
by gemmgen.torch.quantize), promoted accumulation with two partial sets and the overlapped main
loop, BN in {64, 128} (a promoted 256-column tile does not fit the registers), against
torch._scaled_mm's blockwise call on the same tensors.

With the argument `narrow`: per-tensor fast accumulation at M = 16 and 64 only, 64-row tiles
BN in {16, 32, 64, 128} and split-K in {1, 2, 4}, each as the decode rules build their kernel
(the waiter warp and the deepest ring up to 16 stages): whether tiles narrower than 64 columns,
which run more CTAs over N, stream the weights faster (fp8_decode_sweep_narrow_<GPU>.json).

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_decode_sweep.py [block]
writes $OUT/fp8_decode_sweep_<GPU>.json (fp8_decode_sweep_block_<GPU>.json) when $OUT is set;
SWEEP_SETS=train (or test) runs one of the two sets. Without a GPU,
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_decode_sweep.py summarize FILE ...
scores this checkout's choose_fp8 on each file's timings: per set, the geomean and lowest of
torch._scaled_mm's time over the time of the candidate the rule picks, beside the choice the
run made ("chosen") and the grid's best."""
import json
import math
import os
import sys

from gemmgen.heuristics.fp8 import _deepest, choose_fp8
from gemmgen.heuristics.ring import waited

TRAIN = {"llama3_8b": [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)],
         "mistral_7b_mlp": [(28672, 4096)],
         "deepseek_v3": [(2112, 7168), (7168, 16384), (4096, 7168), (24576, 1536)]}
TEST = {"qwen2_5_7b": [(3584, 3584), (512, 3584), (18944, 3584), (3584, 18944)],
        "gemma2_9b": [(4096, 3584), (2048, 3584), (14336, 3584), (3584, 14336)],
        "phi3_mini": [(9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192)],
        "llama3_1_70b": [(8192, 8192), (1024, 8192), (28672, 8192), (8192, 28672)]}
MS = (16, 64, 128)
TILES = ((64, 1), (128, 2))
BNS = (64, 128, 256)
SPLITS = (1, 2, 4, 8)
BLOCK = "block" in sys.argv[1:2]
NARROW = "narrow" in sys.argv[1:2]
if NARROW:
    MS, TILES, BNS, SPLITS = (16, 64), ((64, 1),), (16, 32, 64, 128), (1, 2, 4)
SCALING = "block" if BLOCK else "tensor"
A_BLOCK, W_BLOCK = ((1, 128), (128, 128)) if BLOCK else (None, None)


def candidates(base):
    """The grid's valid configs (per-tensor and fast, or blockwise and overlapped; direct
    stores), by (bm, bn, split)."""
    out = {}
    for bm, cons in TILES:
        for bn in (b for b in BNS if not (BLOCK and b > 128)):
            for split in SPLITS:
                cfg = base.replace(check=False, bm=bm, consumers=cons, bn=bn, split_k=split,
                                   regs_consumer=240 if cons == 1 else 232, store="direct",
                                   cluster_m=1, cluster_n=1, overlap=BLOCK)
                c = cfg.replace(check=False, stages=_deepest(cfg))
                if NARROW:  # as the decode rules finish theirs: the waiter and a deep ring
                    c = waited(cfg.replace(check=False, waiter=False, stages=2), [])
                if not c.violations():
                    out[(bm, bn, split)] = c
    return out


def summarize(paths):
    """Each file's rule score per set (see the module docstring), printed as JSON."""
    def gm(xs):
        return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3)
    out = {}
    for path in paths:
        d = json.load(open(path))
        block = d.get("scaling") == "block"
        for part in ("train", "test"):
            rows = [r for r in d["rows"] if r["set"] == part]
            rule = []
            for r in rows:
                cfg = choose_fp8(r["M"], r["N"], r["K"], d.get("scaling", "tensor"), not block,
                                 sms=d["sms"]).config
                rule.append(r["torch_ms"] / r["candidates_ms"][f"{cfg.bm}x{cfg.bn}x{cfg.split_k}"])
            out[f"{d['gpu']} {part}"] = {
                "rows": len(rows), "rule": gm(rule), "rule_min": round(min(rule), 3),
                "chosen": gm([r["torch_ms"] / r["chosen_ms"] for r in rows]),
                "best": gm([r["torch_ms"] / r["best_ms"] for r in rows])}
    print(json.dumps(out, indent=1))
    return out


def main():
    import torch

    import gemmgen.torch as gt
    from gemmgen.runtime.build import build_many
    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.plans import plan_scaled
    from gemmgen.runtime.device import sm_count

    import graph_timing  # beside this script (its folder is sys.path[0] when it runs)
    name = torch.cuda.get_device_name()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    sms = sm_count()
    base = choose_fp8(16 if NARROW else 4096, 4096, 4096, SCALING, not BLOCK).config
    grid = candidates(base)
    kernels = dict(zip(grid, build_many(list(grid.values()))))
    rows = []
    sets_run = os.environ.get("SWEEP_SETS", "train,test").split(",")  # e.g. one set per GPU
    for split_name, models in (("train", TRAIN), ("test", TEST)):
        if split_name not in sets_run:
            continue
        for model, layers in models.items():
            for n, k in layers:
                sets = max(2, -(-2 * l2 // (n * k)))
                ws = [gt.quantize(torch.randn(n, k, device="cuda") * k ** -0.5, W_BLOCK)
                      for _ in range(sets)]
                ws = [(q, sw.t() if BLOCK else sw) for q, sw in ws]   # blockwise: (K/128, N/128)
                for m in MS:
                    a, sa = gt.quantize(torch.randn(m, k, device="cuda"), A_BLOCK)
                    want = torch._scaled_mm(a, ws[0][0].t(), sa, ws[0][1],
                                            out_dtype=torch.bfloat16, use_fast_accum=not BLOCK)
                    row = {"set": split_name, "model": model, "M": m, "N": n, "K": k,
                           "chosen": choose_fp8(m, n, k, SCALING, not BLOCK, sms=sms).config.name}
                    row["torch_ms"] = graph_timing.graph_ms(lambda i: torch._scaled_mm(
                        a, ws[i % sets][0].t(), sa, ws[i % sets][1], out_dtype=torch.bfloat16,
                        use_fast_accum=not BLOCK), 20, 10)
                    row["chosen_ms"] = graph_timing.graph_ms(lambda i: gt.scaled_mm(
                        a, ws[i % sets][0].t(), sa, ws[i % sets][1], use_fast_accum=not BLOCK),
                        20, 10)
                    times = {}
                    for key, kern in kernels.items():
                        if isinstance(kern, Exception):
                            continue
                        d = torch.full((m, n), float("nan"), device="cuda",
                                       dtype=torch.bfloat16)
                        plan = plan_scaled(kern, check_fp8(a, ws[0][0].t(), sa, ws[0][1], d,
                                                           None), 0)

                        def run(i, plan=plan, d=d):
                            w, s = ws[i % sets]
                            plan.run(a, w.t(), d, None, sa, s,
                                     stream=torch.cuda.current_stream().cuda_stream)
                        run(0)
                        err = float((d.float() - want.float()).norm() / want.float().norm())
                        if not err <= 2e-2:
                            times["x".join(map(str, key))] = f"wrong: {err}"
                            continue
                        times["x".join(map(str, key))] = graph_timing.graph_ms(run, 20, 10)
                    row["candidates_ms"] = times
                    best = min((v, c) for c, v in times.items() if isinstance(v, float))
                    row["best"], row["best_ms"] = best[1], best[0]
                    row["weight_gbps_best"] = n * k / best[0] / 1e6
                    print(json.dumps({x: (round(y, 4) if isinstance(y, float) else y)
                                      for x, y in row.items() if x != "candidates_ms"}),
                          flush=True)
                    rows.append(row)
    out = os.environ.get("OUT")
    if out:
        tag = "block_" if BLOCK else "narrow_" if NARROW else ""
        with open(os.path.join(out, f"fp8_decode_sweep_{tag}{name.replace(' ', '_')}.json"),
                  "w") as f:
            json.dump({"gpu": name, "torch": torch.__version__, "sms": sms, "scaling": SCALING,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["summarize"]:
        summarize(sys.argv[2:])
    else:
        main()
