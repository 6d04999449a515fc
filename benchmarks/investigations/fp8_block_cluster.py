"""The fp8 family's blockwise kernel (1 x 128 / 128 x 128 scales, promoted, two partial sets)
on DeepGEMM-like shapes, the dispatch's choice (choose_fp8) beside TMA multicast across a
cluster of two CTAs (cluster_n 2 shares A, cluster_m 2 shares B: half the L2 reads of that
operand) and beside the TMA store with 6 stages. Whether L2 traffic limits the 128 x 128
kernel. 2 rounds; gemmgen.tune.suite_fp8.measure (graph-captured, kernel only, every output
checked against float64), torch._scaled_mm with the same scales in the first row of each
shape. Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_block_cluster.py
$OUT/fp8_cluster.json when $OUT is set.
"""
import json, os, sys
from gemmgen.compile.cache import compile_many
from gemmgen.heuristics.fp8 import choose_fp8
from gemmgen.runtime.build import build
from gemmgen.runtime.device import device_arch, sm_count
from gemmgen.tune.bench import device_info
from gemmgen.tune.suite_cases import Case
from gemmgen.tune.suite_rows import RunEnv
from gemmgen.tune.suite_fp8 import measure

SHAPES = [(32768, 7168, 2048), (32768, 4096, 7168)]
VARIANTS = [dict(), dict(cluster_n=2), dict(cluster_m=2), dict(stages=6, store="tma"),
            dict(stages=6, store="tma", cluster_n=2), dict(stages=6, store="tma", cluster_m=2)]
compile_many([choose_fp8(m, n, k, "block", False, "e4m3", sms=sm_count()).config.replace(**v)
              for m, n, k in SHAPES for v in VARIANTS], device_arch())
env = RunEnv(info=device_info(), budget_s=0.3)
rows = []
for rnd in range(2):
    for m, n, k in SHAPES:
        base = choose_fp8(m, n, k, "block", False, "e4m3", sms=sm_count()).config
        case = Case("e4m3", m, n, k, "rcr", scaling="block", accum="promoted")
        for i, v in enumerate(VARIANTS):
            try:
                cfg = base.replace(**v)
                got = measure(case, build(cfg), env, baseline=(i == 0))
                r = dict(round=rnd, shape=[m, n, k], variant=v, config=cfg.name,
                         tflops=got["tflops"], base=got.get("cublas_tflops"),
                         err=got["rel_error"], passed=got["passed"])
            except Exception as e:
                r = dict(round=rnd, shape=[m, n, k], variant=v, error=str(e)[:300])
            print(json.dumps(r), flush=True)
            rows.append(r)
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "fp8_cluster.json"), "w"), indent=1)
