"""FP8 with D staged through chunk buffers (``c_stages``), so that 128 x 256 tiles stored through
TMA keep a fourth stage: choose_fp8's kernel (per-tensor scales, fast accumulation, bf16 D;
"rules") beside the one it chooses when it weighs the buffers as the wgmma family's rules do
("buffers": ``fp8.C_STAGES`` = (2, 1), the most buffers that give the deepest ring) and, where
that takes two buffers, the same kernel with one ("one buffer"), beside torch._scaled_mm on the
same FP8 tensors and scales: the fp8 suite's squares and DeepGEMM's prefill shapes, and the
forward layers of fp8_decode_sweep.py's training and held-out models at M = 512 to 8192. Timed
as fp8_prefill_sweep.py's ``time_row`` times (graph-captured, kernel only; operand sets past
twice the L2; two rounds in opposite orders, the mean kept; torch before, between and after);
every output poisoned with NaN first and checked against float64 of the dequantized operands.

    python3 benchmarks/investigations/fp8_c_stages.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/fp8_c_stages.py run DIR       # GPU: $OUT/fp8_c_stages_<GPU>.json
    python3 benchmarks/investigations/fp8_c_stages.py report FILE   # CPU: the summary, into FILE
"""
from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from fp8_decode_sweep import TEST, TRAIN  # beside this script
from gemmgen.heuristics import fp8
from gemmgen.heuristics.fp8 import choose_fp8

MS = tuple(int(m) for m in os.environ.get("FP8_MS", "512,2048,4096,8192").split(","))
SUITE = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384), (4096, 4096, 7168)]
"""The fp8 suite's squares and DeepGEMM's prefill shapes (M x N x K)."""


@contextmanager
def _buffers():
    """choose_fp8 weighing D staging buffers for the duration (``fp8.C_STAGES`` = (2, 1))."""
    shipped, fp8.C_STAGES = fp8.C_STAGES, (2, 1)
    try:
        yield
    finally:
        fp8.C_STAGES = shipped


def candidates(m: int, n: int, k: int) -> dict:
    """{label: config}: "rules" (this checkout's choose_fp8), "buffers" where weighing the
    buffers gives another kernel, "one buffer" where that takes two."""
    rules = choose_fp8(m, n, k, "tensor", True).config
    with _buffers():
        buffered = choose_fp8(m, n, k, "tensor", True).config
    out = {"rules": rules}
    if buffered.name != rules.name:
        out["buffers"] = buffered
    if buffered.c_stages == 2:
        out["one buffer"] = buffered.replace(c_stages=1)
    return out


def problems() -> list:
    """(set, model, M, N, K): the suite's shapes, then each layer of each set at each M."""
    return ([("suite", "suite", m, n, k) for m, n, k in SUITE]
            + [(which, model, m, n, k) for which, models in (("train", TRAIN), ("test", TEST))
               for model, layers in models.items() for n, k in layers for m in MS])


def compile_all(folder: str) -> None:
    from layer_sweep import compile_to
    compile_to(folder, [c for *_, m, n, k in problems() for c in candidates(m, n, k).values()])


def run(folder: str) -> None:
    from fp8_prefill_sweep import time_row
    from layer_sweep import Device
    dev = Device(folder)
    rows = []
    for which, model, m, n, k in problems():
        row = {"set": which, "model": model, "M": m, "N": n, "K": k,
               **time_row(dev, m, n, k, candidates(m, n, k), block=False, fast=True)}
        c = row["candidates"]
        print(json.dumps({"set": which, "M": m, "N": n, "K": k, **{
            f"{label} x torch": round(row["torch_ms"] / v["ms"], 3) for label, v in c.items()},
            "all_ok": all(v["ok"] for v in c.values())}), flush=True)
        rows.append(row)
        doc = {"investigation": "fp8_c_stages", "gpu": dev.gpu, "scaling": "tensor",
               "fast_accum": True, "git_commit": os.environ.get("GEMMGEN_COMMIT"),
               "timing": "graph-captured, kernel only", "out": "bf16", "method": __doc__,
               "rows": rows}
        Path(os.environ.get("OUT", "."),
             f"fp8_c_stages_{dev.gpu.replace(' ', '_')}.json").write_text(json.dumps(doc, indent=1))


def _geo(xs: list) -> float | None:
    return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3) if xs else None


def report(path: str) -> dict:
    """Per set: "buffers"' speed-up over the rules' whole-tile kernel where they differ
    (geomean, lowest, highest) and over "one buffer"; torch's time over the rules' and over
    "buffers"' (geomean, lowest) on every row, and whether every output was correct. Written
    into the file as ``summary``."""
    doc = json.loads(Path(path).read_text())
    out = {}
    for which in dict.fromkeys(r["set"] for r in doc["rows"]):
        rows = [r for r in doc["rows"] if r["set"] == which]
        ms = lambda r, label: r["candidates"].get(label, r["candidates"]["rules"])["ms"]
        gain = [ms(r, "rules") / ms(r, "buffers") for r in rows if "buffers" in r["candidates"]]
        one = [ms(r, "one buffer") / ms(r, "buffers") for r in rows
               if "one buffer" in r["candidates"]]
        rules = [r["torch_ms"] / ms(r, "rules") for r in rows]
        buffered = [r["torch_ms"] / ms(r, "buffers") for r in rows]
        out[which] = {"rows": len(rows), "changed": len(gain),
                      "buffers_x_rules": {"geomean": _geo(gain), "lowest": round(min(gain), 3),
                                          "highest": round(max(gain), 3)} if gain else None,
                      "buffers_x_one_buffer": _geo(one),
                      "rules_x_torch": {"geomean": _geo(rules), "lowest": round(min(rules), 3)},
                      "buffers_x_torch": {"geomean": _geo(buffered),
                                          "lowest": round(min(buffered), 3)},
                      "all_ok": all(v["ok"] for r in rows for v in r["candidates"].values())}
    doc["summary"] = out
    Path(path).write_text(json.dumps(doc, indent=1))
    return out


if __name__ == "__main__":
    verb, arg = sys.argv[1], sys.argv[2]
    if verb == "compile":
        compile_all(arg)
    elif verb == "run":
        run(arg)
    else:
        print(json.dumps(report(arg), indent=1))
