"""choose_fp8's kernels as built by two checkouts, side by side: the same config from each
checkout's cubins, timed as fp8_prefill_sweep.time_row times (graph-captured, kernel only, two
rounds in opposite orders, the mean) beside torch._scaled_mm, every output poisoned first and
checked against float64. Per-tensor and row-wise scales, fast accumulation, bf16 D, on the fp8
suite's squares and four layer shapes.

    python3 benchmarks/investigations/fp8_staged_ab.py compile DIR      # CPU, in each checkout
    python3 benchmarks/investigations/fp8_staged_ab.py run OLD_DIR NEW_DIR  # GPU
writes $OUT/fp8_staged_ab.json when $OUT is set (fp8_staged_ab_NVIDIA_H200.json)."""
import json
import os
import sys
from pathlib import Path

from gemmgen.heuristics.fp8 import choose_fp8

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 28672, 4096), (4096, 7168, 2048),
          (512, 8192, 28672)]


def configs():
    """(M, N, K, scaling, config) of each shape and scaling."""
    return [(m, n, k, sc, choose_fp8(m, n, k, sc, True).config)
            for m, n, k in SHAPES for sc in ("tensor", "row")]


def compile_to(folder):
    from gemmgen.compile.cache import compile_many
    todo = {c.name: c for *_, c in configs()}
    os.makedirs(folder, exist_ok=True)
    for cfg, done in zip(todo.values(), compile_many(list(todo.values()), arch="sm_90a")):
        Path(folder, cfg.name + ".cubin").write_bytes(done[0])
    print(f"{len(todo)} cubins in {folder}")


def run(old_dir, new_dir):
    import fp8_prefill_sweep as fps  # beside this script
    from layer_sweep import Device
    old, new = Device(old_dir), Device(new_dir)
    rows = []
    for m, n, k, sc, cfg in configs():
        kernels = iter([new.kernel(cfg), old.kernel(cfg)])  # time_row loads "new", then "old"
        dev = Device.__new__(Device)
        dev.__dict__.update(new.__dict__)
        dev.kernel = lambda c: next(kernels)
        r = fps.time_row(dev, m, n, k, {"new": cfg, "old": cfg}, block=False, fast=True)
        c = r["candidates"]
        row = {"M": m, "N": n, "K": k, "scaling": sc, "config": cfg.name,
               "new_ms": c["new"]["ms"], "old_ms": c["old"]["ms"],
               "new_x_old": c["old"]["ms"] / c["new"]["ms"],
               "new_x_torch": r["torch_ms"] / c["new"]["ms"],
               "ok": c["new"]["ok"] and c["old"]["ok"]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "fp8_staged_ab.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_to(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3])
