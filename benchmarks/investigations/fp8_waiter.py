"""The waiter warp (waiter.py) in the fp8 family's one-consumer kernels: the rules' kernel
(``choose_fp8``, per-tensor and row-wise scales, fast accumulation) for the decode layers of
fp8_decode_sweep.py's training and held-out models at M = 16, 64 and 128, as rendered, with the
waiter patched into the rendered source (``waiter``), with the deepest ring of up to 16 stages
(``deep``) and with both (``deep_waiter``), beside torch._scaled_mm (cuBLASLt) on the same
e4m3 operands, the weights rotating over sets past twice the L2. Graph-captured (20 calls a
graph, median of 10 replays, kernel only), the variants timed in two rounds, the second in
reverse order (the faster of each kept); every output checked against torch._scaled_mm's
(relative Frobenius error <= 2e-2; a NaN fails).

The patch: the producer warpgroup's second warp walks the consumer's units and K blocks,
waits on each stage's full mbarrier and meets the consumer at named barrier 15, where the
consumer's fast-accumulation loop waits instead of polling the mbarrier itself.

    python3 benchmarks/investigations/fp8_waiter.py compile DIR   # CPU: the cubins, into DIR
    python3 benchmarks/investigations/fp8_waiter.py run DIR       # GPU: $OUT/fp8_waiter_<GPU>.json
    python3 benchmarks/investigations/fp8_waiter.py rules FILE    # CPU: ``rules`` in FILE

It times the rules' kernels of a checkout from before the waiter (f02a0c6's): the rules of
later ones give these kernels the waiter themselves, and it then finds none to patch.
``rules`` writes into the run's file, per set, the kernel those later rules pick (the waiter,
and the deeper ring where one fits: ``deep_waiter``, else ``waiter``) against the one as
rendered: the geomean and lowest of the time before over the time after, and
torch._scaled_mm's time over each (geomeans).
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gemmgen.heuristics.fp8 import _deepest, choose_fp8
from gemmgen.heuristics.ring import MAX_STAGES_WAITER

import fp8_decode_sweep as sweep  # beside this script: the layers
import layer_sweep
import small_m

MS = (16, 64, 128)
SCALINGS = ("tensor", "row")
MEET = "named_sync(15, WARPGROUP + 32);"
CONSUMER_WAIT = ("                mbar_wait(full_bar + 8 * s, phase);\n"
                 "                wgmma_fence();\n                issue(F, s, kb > 0);")
PRODUCER_END = "        }\n    } else {\n        // ---- consumer warpgroups ----"
WAITER = """        }
        if (wtid / 32 == 1) {  // the waiter warp: each full stage, in the consumer's order
            int s = 0;
            uint32_t phase = 0;
            for (int u = first_unit; u < num_units; u += unit_step) {
                const Unit w = unit_at(u);
                for (int kb = 0; kb < w.nk; ++kb) {
                    mbar_wait(full_bar + 8 * s, phase);
                    MEET
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
""".replace("MEET", MEET)
VARIANTS = ("rendered", "waiter", "deep", "deep_waiter")


def problems() -> list:
    """[(set, N, K, M, scaling, config)]: the rules' one-consumer fast kernels."""
    out = []
    for which, models in (("train", sweep.TRAIN), ("test", sweep.TEST)):
        for layers in models.values():
            for n, k in layers:
                for m in MS:
                    for sc in SCALINGS:
                        cfg = choose_fp8(m, n, k, sc, True).config
                        if cfg.consumers == 1 and not cfg.promote and not cfg.waiter:
                            out.append((which, n, k, m, sc, cfg))
    return out


def variants(cfg) -> dict:
    """{variant: (config, patched)}."""
    deep = cfg.replace(check=False, stages=_deepest(cfg, MAX_STAGES_WAITER))
    out = {"rendered": (cfg, False), "waiter": (cfg, True)}
    if deep.stages > cfg.stages:
        out.update(deep=(deep, False), deep_waiter=(deep, True))
    return out


def source(cfg, patched: bool) -> str:
    from gemmgen import render
    src = render(cfg, "sm_90a")
    if patched:
        assert src.count(CONSUMER_WAIT) == 1 and src.count(PRODUCER_END) == 1, cfg.name
        src = src.replace(CONSUMER_WAIT, CONSUMER_WAIT.replace(
            "mbar_wait(full_bar + 8 * s, phase);", MEET)).replace(
            PRODUCER_END, WAITER + PRODUCER_END)
    return src


def path(folder, cfg, patched) -> Path:
    return Path(folder, f"{cfg.name}.{'waiter' if patched else 'rendered'}.cubin")


def compile_to(folder: str) -> None:
    from gemmgen.compile.cache import compile_cached
    os.makedirs(folder, exist_ok=True)
    todo = {(c.name, p): (c, p) for *_, cfg in problems() for c, p in variants(cfg).values()}

    def one(item):
        c, p = item
        if not path(folder, c, p).exists():
            path(folder, c, p).write_bytes(compile_cached(source(c, p), "sm_90a", c.name)[0])
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(one, todo.values()))
    print(len(todo), "kernels")


def run(folder: str) -> None:
    import torch

    import gemmgen.torch as gt
    import graph_timing  # beside this script
    from gemmgen.runtime.build import adopt_pycuda, from_cubin
    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.plans import plan_scaled
    adopt_pycuda()
    gpu = torch.cuda.get_device_name()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    kernels, rows, weights = {}, [], {}

    def kernel(c, p):
        if (c.name, p) not in kernels:
            kernels[(c.name, p)] = from_cubin(c, "sm_90a", path(folder, c, p).read_bytes())
        return kernels[(c.name, p)]
    for which, n, k, m, sc, cfg in problems():
        if (n, k, sc) not in weights:
            sets = max(2, -(-2 * l2 // (n * k)))
            ws = [gt.quantize(torch.randn(n, k, device="cuda") * k ** -0.5,
                              "row" if sc == "row" else None) for _ in range(sets)]
            weights = {key: v for key, v in weights.items() if key[:2] == (n, k)}
            weights[(n, k, sc)] = ws  # this layer's, per scaling
        ws = weights[(n, k, sc)]
        sets = len(ws)
        a, sa = gt.quantize(torch.randn(m, k, device="cuda"), "row" if sc == "row" else None)
        swt = (lambda s: s.t()) if sc == "row" else (lambda s: s)
        want = torch._scaled_mm(a, ws[0][0].t(), sa, swt(ws[0][1]), out_dtype=torch.bfloat16,
                                use_fast_accum=True)
        row = {"set": which, "M": m, "N": n, "K": k, "scaling": sc, "config": cfg.name}
        runs = {}
        for v, (c, p) in variants(cfg).items():
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            plan = plan_scaled(kernel(c, p), check_fp8(a, ws[0][0].t(), sa, swt(ws[0][1]), d,
                                                       None), 0)

            def go(i, plan=plan, d=d):
                w, s = ws[i % sets]
                plan.run(a, w.t(), d, None, sa, swt(s),
                         stream=torch.cuda.current_stream().cuda_stream)
            go(0)
            torch.cuda.synchronize()
            row[f"{v}_error"] = float((d.float() - want.float()).norm() / want.float().norm())
            runs[v] = go

        def theirs(i):
            torch._scaled_mm(a, ws[i % sets][0].t(), sa, swt(ws[i % sets][1]),
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        row["torch_us"], order = [], list(runs)
        for rnd in range(2):
            row["torch_us"].append(1e3 * graph_timing.graph_ms(theirs, 20, 10))
            for v in (order if rnd == 0 else order[::-1]):
                row.setdefault(f"{v}_us", []).append(1e3 * graph_timing.graph_ms(runs[v], 20, 10))
        for v in runs:
            row[f"x_torch_{v}"] = round(min(row["torch_us"]) / min(row[f"{v}_us"]), 4)
        print(json.dumps({x: y for x, y in row.items() if x in ("M", "N", "K", "scaling")
                          or x.startswith("x_torch")}), flush=True)
        rows.append(row)
        doc = {"investigation": "fp8_waiter", "gpu": gpu,
               "git_commit": os.environ.get("GEMMGEN_COMMIT"), "torch": torch.__version__,
               "timing": "graph-captured, kernel only", "method": __doc__,
               "summary": summary(rows), "rows": rows}
        Path(os.environ.get("OUT", "."), f"fp8_waiter_{gpu.replace(' ', '_')}.json").write_text(
            json.dumps(doc, indent=1))
    print(json.dumps(summary(rows), indent=1))


def summary(rows) -> dict:
    """Per set and M: geomean x torch._scaled_mm as rendered, and each variant's speed-up over
    the rendered kernel (geomean, worst, best); whether every output was right."""
    out = {}
    for key, sel in layer_sweep.by_set_and_m(rows, MS):
        s = out[key] = {"rows": len(sel), "rendered_x_torch": round(
            small_m._geomean([r["x_torch_rendered"] for r in sel]), 3)}
        s.update(layer_sweep.speedups(sel, "rendered", VARIANTS[1:]))
        s["errors_ok"] = all(r[f"{v}_error"] <= 2e-2 for r in sel for v in VARIANTS
                             if f"{v}_error" in r)
    return out


def rules(path: str) -> dict:
    """``rules`` in a run's file (see the module doc), written into it and printed."""
    doc = json.loads(Path(path).read_text())
    gm = lambda xs: round(small_m._geomean(xs), 3)  # noqa: E731
    out = {}
    for which in ("train", "test"):
        sel = [r for r in doc["rows"] if r["set"] == which]
        now = ["deep_waiter" if "deep_waiter_us" in r else "waiter" for r in sel]
        gain = [min(r["rendered_us"]) / min(r[f"{v}_us"]) for r, v in zip(sel, now)]
        out[which] = {"rows": len(sel), "after_over_before": gm(gain),
                      "lowest": round(min(gain), 3), "highest": round(max(gain), 3),
                      "before_x_torch": gm([r["x_torch_rendered"] for r in sel]),
                      "after_x_torch": gm([r[f"x_torch_{v}"] for r, v in zip(sel, now)])}
    doc["rules"] = out
    Path(path).write_text(json.dumps(doc, indent=1))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    {"compile": compile_to, "run": run, "rules": rules}[sys.argv[1]](sys.argv[2])
