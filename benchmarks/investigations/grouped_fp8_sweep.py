"""Tile, stage and partial-set variants of the grouped family's FP8 kernel on the problems of
``grouped_fp8.py`` (same inputs, checks and timing; the per-expert torch._scaled_mm loop
timed once per problem in the same run). Prints one JSON row per (problem, config) and writes
$OUT/grouped_fp8_sweep_<GPU>.json when $OUT is set. ``--variants JSON`` replaces the list of
field changes. Usage on the GPU machine:
    PYTHONPATH=$PWD python3 benchmarks/investigations/grouped_fp8_sweep.py [--variants JSON] [PROBLEM ...]
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from grouped_fp8 import PROBLEMS, run  # noqa: E402

from gemmgen import PRESETS  # noqa: E402

VARIANTS = [dict(), dict(partials=1), dict(partials=1, stages=5),
            dict(partials=1, bn=192, stages=4), dict(partials=1, bn=192, stages=3),
            dict(partials=2, stages=5), dict(group=16), dict(partials=1, group=16)]


def main() -> int:
    base = PRESETS["grouped_fp8"].config
    args = sys.argv[1:]
    variants = VARIANTS
    if args and args[0] == "--variants":   # a JSON list of field changes
        variants, args = json.loads(args[1]), args[2:]
    configs = [base.replace(**v) for v in variants]
    wanted = args or [p[0] for p in PROBLEMS]
    started, rows = time.time(), []
    for p in PROBLEMS:
        if p[0] not in wanted:
            continue
        for row in run(*p, configs=configs):
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("case", "config", "tflops", "ratio",
                                                          "baseline_tflops", "passed")}),
                  flush=True)
    gpu = torch.cuda.get_device_name()
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"grouped_fp8_sweep_{gpu.replace(' ', '_')}.json"), "w") as f:
            json.dump({"investigation": "grouped_fp8_sweep", "gpu": gpu,
                       "torch": torch.__version__,
                       "git_commit": os.environ.get("GEMMGEN_COMMIT", ""),
                       "date": time.strftime("%Y-%m-%d"),
                       "seconds": round(time.time() - started, 1), "rows": rows}, f, indent=1)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
