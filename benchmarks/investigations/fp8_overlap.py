"""The fp8 family's promoted kernels with and without ``overlap`` (each unit's epilogue deferred
under the next unit's first wgmmas, scales loaded a window of four K blocks ahead, two
consumers a K block apart: the grouped kernel's FP8 main loop), beside torch._scaled_mm, on
DeepSeek-V3's blockwise shapes ("seen": where the grouped kernel run as one group was first
seen ahead of the dense one; "bar": the ten shapes DeepGEMM tabulates, M = 64 to 4096, of
which "seen" are six) and on the fp8 suite's promoted rows with M > 64 ("held_out":
blockwise, per-tensor and row-wise; the decode kernels below M = 65 have one consumer and are
timed apart, "decode"). choose_fp8's pick is "plain" and the same config with overlap is
"overlap". 2 rounds, the kernels' order reversed in the second; gemmgen.tune.suite_fp8.measure
(graph-captured, kernel only, every output checked against float64). Usage on the GPU
machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_overlap.py [PART ...]
(PART: seen, bar, held_out, decode; default seen held_out decode); $OUT/fp8_overlap.json when
$OUT is set.
"""
import json
import math
import os
import sys

from gemmgen.compile.cache import compile_many
from gemmgen.heuristics.fp8 import choose_fp8
from gemmgen.runtime.build import build
from gemmgen.runtime.device import device_arch, sm_count
from gemmgen.tune.bench import device_info
from gemmgen.tune.suite_cases import Case, expand
from gemmgen.tune.suites import load
from gemmgen.tune.suite_rows import RunEnv
from gemmgen.tune.suite_fp8 import measure

seen = [Case("e4m3", m, n, k, "rcr", scaling="block", accum="promoted") for m, n, k in
        [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512),
         (4096, 7168, 2048), (2048, 4096, 4096)]]
suite = [c for c in expand(load("fp8")) if c.accum == "promoted" and not c.preset
         and c.n >= 16 and (c.m, c.n, c.k) not in {(s.m, s.n, s.k) for s in seen}]
held = [c for c in suite if c.m > 64]
decode = [c for c in suite if c.m <= 64][:6]
bar = [Case("e4m3", m, n, k, "rcr", scaling="block", accum="promoted") for m, n, k in
       [(64, 2112, 7168), (128, 7168, 16384), (128, 4096, 7168), (64, 24576, 1536),
        (4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512),
        (4096, 7168, 2048), (2048, 4096, 4096)]]
PARTS = {"seen": seen, "bar": bar, "held_out": held, "decode": decode}
chosen = sys.argv[1:] or ["seen", "held_out", "decode"]
env = RunEnv(info=device_info(), budget_s=0.25)


def cfgs(c):
    base = choose_fp8(c.m, c.n, c.k, c.scaling, False, "e4m3", sms=sm_count()).config
    return {"plain": base.replace(overlap=False), "overlap": base.replace(overlap=True)}


def geomean(xs):
    xs = [x for x in xs if x]
    return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3) if xs else None


compile_many([v for p in chosen for c in PARTS[p] for v in cfgs(c).values()], device_arch())
rows = []
for rnd in range(2):
    for part, cases in ((p, PARTS[p]) for p in chosen):
        for c in cases:
            r = {"part": part, "round": rnd, "case": c.label}
            order = ("plain", "overlap") if rnd == 0 else ("overlap", "plain")
            for i, name in enumerate(order):
                try:
                    cfg = cfgs(c)[name]
                    got = measure(c, build(cfg), env, baseline=(i == 0))
                    r[name] = got["tflops"]
                    r[name + "_ok"] = got["passed"]
                    r[name + "_err"] = got.get("rel_error")
                    if i == 0:
                        r["torch"] = got.get("cublas_tflops")
                        r["torch_err"] = got.get("cublas_rel_error")
                except Exception as e:  # noqa: BLE001 - recorded in the row
                    r[name] = None
                    r[name + "_error"] = str(e)[:200]
            r["config"] = cfgs(c)["overlap"].name
            print(json.dumps(r), flush=True)
            rows.append(r)
def ratios(rs, num, den):
    return [r[num] / r[den] for r in rs if r.get(num) and r.get(den)]


summary = {}
for part in chosen:
    for scaling in ("block", "tensor", "row"):
        rs = [r for r in rows if r["part"] == part and f" {scaling} " in r["case"]
              and r.get("torch")]
        if not rs:
            continue
        over_plain, over_torch = ratios(rs, "overlap", "plain"), ratios(rs, "overlap", "torch")
        summary[f"{part}.{scaling}"] = {
            "rows_x_rounds": len(rs),
            "overlap_vs_plain": geomean(over_plain),
            "overlap_vs_plain_min": round(min(over_plain), 3) if over_plain else None,
            "plain_vs_torch": geomean(ratios(rs, "plain", "torch")),
            "overlap_vs_torch": geomean(over_torch),
            "overlap_vs_torch_min": round(min(over_torch), 3) if over_torch else None,
            "all_ok": all(r.get("plain_ok") and r.get("overlap_ok") for r in rs)}
print(json.dumps(summary, indent=1))
if os.environ.get("OUT"):
    json.dump({"gpu": env.info.get("name") if isinstance(env.info, dict) else str(env.info),
               "summary": summary, "rows": rows},
              open(os.path.join(os.environ["OUT"], "fp8_overlap.json"), "w"), indent=1)
