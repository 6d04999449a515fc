"""FP8 blockwise (promoted) problems with M > 128: the 128 x 128 kernel with stores straight
from the registers and 7 stages (choose_fp8's pick before) against the same with a TMA store
and 6 stages, beside torch._scaled_mm, on DeepSeek-V3 shapes where the difference was seen
("seen") and on the fp8 suite's blockwise rows with M > 128 ("held_out"). 2 rounds, the
kernels' order reversed in the second; gemmgen.tune.suite_fp8.measure (graph-captured, kernel
only, every output checked against float64). Usage on the GPU machine, from the repository
root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_block_store.py
$OUT/block_store.json when $OUT is set.
"""
import json
import os

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
        [(4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512), (4096, 7168, 2048),
         (2048, 4096, 4096)]]
held = [c for c in expand(load("fp8")) if c.scaling == "block" and c.m > 128 and not c.preset]
env = RunEnv(info=device_info(), budget_s=0.25)


def cfgs(c):
    base = choose_fp8(c.m, c.n, c.k, "block", False, "e4m3", sms=sm_count()).config
    return {"direct_st7": base.replace(store="direct", stages=7),
            "tma_st6": base.replace(store="tma", stages=6)}


compile_many([v for c in seen + held for v in cfgs(c).values()], device_arch())
rows = []
for rnd in range(2):
    for part, cases in (("seen", seen), ("held_out", held)):
        for c in cases:
            r = {"part": part, "round": rnd, "case": c.label}
            order = ("direct_st7", "tma_st6") if rnd == 0 else ("tma_st6", "direct_st7")
            for i, name in enumerate(order):
                try:
                    got = measure(c, build(cfgs(c)[name]), env, baseline=(i == 0))
                    r[name] = got["tflops"]
                    r[name + "_ok"] = got["passed"]
                    if i == 0:
                        r["torch"] = got.get("cublas_tflops")
                except Exception as e:
                    r[name] = None
                    r[name + "_error"] = str(e)[:200]
            print(json.dumps(r), flush=True)
            rows.append(r)
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "block_store.json"), "w"), indent=1)
