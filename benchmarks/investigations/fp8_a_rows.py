"""Whether FP8 decode pays for the rows of its 64-row A tile past M (per-tensor or row-wise
scales, fast accumulation, 64-row tiles), on fp8_decode_sweep.py's training and held-out
layers beside torch._scaled_mm. Graph-timed as fp8_decode_sweep.py times (20 calls per graph,
median of 10 replays, weights rotated past twice the L2); every output checked against
torch._scaled_mm's.

``probe`` (what led to ``a_rows``): the decode rules' kernel loading the whole tile, at M = 16
and 64, per tensor, as rendered (A's TMA box is 64 rows, 48 of them zeros past M = 16) and with
its source patched to expect a 16-row box, the launch's tensor map taking one (``a16``; rows 16
to 63 of each A stage are left as they were, so only M <= 16 is right):

    python3 benchmarks/investigations/fp8_a_rows.py compile-probe DIR  # CPU
    python3 benchmarks/investigations/fp8_a_rows.py probe DIR  # GPU: fp8_a_rows_probe_<GPU>.json

``ab``: the rules' kernel (``a_rows`` where M fits, rows past it zeroed once) against the same
config loading the whole tile (``whole``), per tensor and row-wise, M = 1, 8, 16 and 32, two
rounds in opposite orders (the faster of each kept):

    python3 benchmarks/investigations/fp8_a_rows.py compile DIR  # CPU
    python3 benchmarks/investigations/fp8_a_rows.py ab DIR       # GPU: $OUT/fp8_a_rows_<GPU>.json
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from fp8_decode_sweep import TEST, TRAIN  # beside this script

from gemmgen.heuristics.fp8 import choose_fp8

PROBE_MS, AB_MS, SCALINGS = (16, 64), (1, 8, 16, 32), ("tensor", "row")
EXPECT = "mbar_expect_tx(full_bar + 8 * s, STAGE_BYTES);"
A16 = "mbar_expect_tx(full_bar + 8 * s, STAGE_BYTES - A_STAGE_BYTES + 16 * BK);"


def problems(ms, scalings) -> list:
    return [(w, n, k, m, sc) for w, models in (("train", TRAIN), ("test", TEST))
            for layers in models.values() for n, k in layers for m in ms for sc in scalings]


def variants(m, n, k, scaling, probe: bool) -> dict:
    """{variant: (config, source patch or None)}."""
    rules = choose_fp8(m, n, k, scaling, True).config
    whole = rules.replace(a_rows=0)
    if probe:
        return {"rendered": (whole, None), **({"a16": (whole, A16)} if m <= 16 else {})}
    return {"whole": (whole, None), "rules": (rules, None)}


def compile(folder: str, probe: bool) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from gemmgen import render
    from gemmgen.compile.cache import compile_cached
    Path(folder).mkdir(parents=True, exist_ok=True)
    todo = {}
    ms, scalings = (PROBE_MS, ("tensor",)) if probe else (AB_MS, SCALINGS)
    for _, n, k, m, sc in problems(ms, scalings):
        for v, (cfg, patch) in variants(m, n, k, sc, probe).items():
            todo[f"{cfg.name}.{v}" if patch else cfg.name] = (cfg, patch)

    def one(item):
        key, (cfg, patch) = item
        src = render(cfg, "sm_90a")
        if patch:
            assert src.count(EXPECT) == 1, cfg.name
            src = src.replace(EXPECT, patch)
        Path(folder, key + ".cubin").write_bytes(compile_cached(src, "sm_90a", cfg.name)[0])
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(one, todo.items()))
    print(len(todo), "kernels")


def run(folder: str, probe: bool) -> None:
    import torch

    import gemmgen.torch as gt
    import graph_timing
    from gemmgen.runtime.build import adopt_pycuda, from_cubin
    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.plans import plan_scaled
    adopt_pycuda()
    gpu = torch.cuda.get_device_name()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows, kernels = [], {}
    ms, scalings = (PROBE_MS, ("tensor",)) if probe else (AB_MS, SCALINGS)
    for which, n, k, m, sc in problems(ms, scalings):
        block = None if sc == "tensor" else "row"
        sets = max(2, -(-2 * l2 // (n * k)))
        ws = [gt.quantize(torch.randn(n, k, device="cuda") * k ** -0.5, block)
              for _ in range(sets)]
        ws = [(q, s if sc == "tensor" else s.t()) for q, s in ws]  # row: scale_b (1, N)
        a, sa = gt.quantize(torch.randn(m, k, device="cuda"), block)

        def theirs(i):
            return torch._scaled_mm(a, ws[i % sets][0].t(), sa, ws[i % sets][1],
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
        want = theirs(0)
        launch = {}
        row = {"set": which, "M": m, "N": n, "K": k, "scaling": sc}
        for v, (cfg, patch) in variants(m, n, k, sc, probe).items():
            key = f"{cfg.name}.{v}" if patch else cfg.name
            if key not in kernels:
                kernels[key] = from_cubin(cfg, "sm_90a", Path(folder, key + ".cubin").read_bytes())
                if patch:
                    kernels[key].launcher._a_box = 16
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            plan = plan_scaled(kernels[key], check_fp8(a, ws[0][0].t(), sa, ws[0][1], d, None), 0)

            def go(i, plan=plan, d=d):
                w, s = ws[i % sets]
                plan.run(a, w.t(), d, None, sa, s, stream=torch.cuda.current_stream().cuda_stream)
            go(0)
            row[f"{v}_config"] = cfg.name
            row[f"{v}_error"] = float((d.float() - want.float()).norm() / want.float().norm())
            launch[v] = go
        launch = {"torch": theirs, **launch}
        for rnd in range(2):
            for v in (list(launch) if rnd == 0 else list(launch)[::-1]):
                row.setdefault(f"{v}_ms", []).append(graph_timing.graph_ms(launch[v], 20, 10))
        for v in launch:
            if v != "torch":
                row[f"x_torch_{v}"] = round(min(row["torch_ms"]) / min(row[f"{v}_ms"]), 4)
        print(json.dumps({x: y for x, y in row.items() if x in ("M", "N", "K", "scaling")
                          or x.startswith("x_")}), flush=True)
        rows.append(row)
    save(gpu, rows, ms, scalings, probe)


def save(gpu, rows, ms, scalings, probe) -> None:
    """Per set, scaling and M: each variant's geomean x torch._scaled_mm, and (ab) the rules'
    time over the whole tile's (geomean, lowest)."""
    def gm(xs):
        return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3)
    summary = {}
    for which in ("train", "test"):
        for sc in scalings:
            for m in ms:
                sel = [r for r in rows if (r["set"], r["scaling"], r["M"]) == (which, sc, m)]
                if not sel:
                    continue
                out = {v[8:]: gm([r[v] for r in sel]) for v in sel[0] if v.startswith("x_torch_")
                       and all(v in r for r in sel)}
                if not probe:
                    gain = [min(r["whole_ms"]) / min(r["rules_ms"]) for r in sel]
                    out.update(rules_over_whole=gm(gain), lowest=round(min(gain), 3))
                summary[f"{which} {sc} M={m}"] = out
    doc = {"investigation": "fp8_a_rows" + ("_probe" if probe else ""), "gpu": gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"), "timing": "graph-captured, kernel only",
           "method": __doc__, "summary": summary,
           "errors_ok": all(r[e] <= 2e-2 for r in rows for e in r if e.endswith("_error")),
           "rows": rows}
    name = f"{doc['investigation']}_{gpu.replace(' ', '_')}.json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    cmd, folder = sys.argv[1], sys.argv[2]
    if cmd.startswith("compile"):
        compile(folder, cmd == "compile-probe")
    else:
        run(folder, cmd == "probe")
