"""SM clock and board power while the grouped FP8 kernel and its baseline run, sustained.

For each problem of ``grouped_fp8.py`` selected by GROUPED_FP8_ONLY: the same inputs as that
script, then gemmgen.grouped_gemm and the per-expert torch._scaled_mm loop each replayed from
a CUDA graph, back to back, for SECONDS seconds (alternated, ROUNDS times), while
``nvidia-smi`` samples the SM clock, the board power, the enforced power limit and the active
clock-event reasons every 50 ms. A row per replay: TFLOP/s over the whole replay (2 x rows x
N x K x calls / seconds, CUDA events), and the median clock and power of the samples taken in
it. This tells whether a kernel runs at the power limit (the clock falls below the boost
clock with the power-cap reason set), where energy per tile, not cycles per tile, sets the
time. Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD GROUPED_FP8_ONLY=deepgemm \
        python3 benchmarks/investigations/grouped_fp8_clocks.py
$OUT/grouped_fp8_clocks_<GPU>.json when $OUT is set.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grouped_fp8 as gf  # noqa: E402

from gemmgen.tune.suite_torch import captured  # noqa: E402

SECONDS = float(os.environ.get("SECONDS_PER_REPLAY", "4"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
QUERY = "clocks.sm,power.draw,enforced.power.limit,clocks_event_reasons.active"


class Sampler(threading.Thread):
    """nvidia-smi samples of QUERY every 50 ms, as (time, [fields]) tuples."""

    def __init__(self, index: str):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", index, f"--query-gpu={QUERY}",
             "--format=csv,noheader,nounits", "-lms", "50"],
            stdout=subprocess.PIPE, text=True)
        self.samples = []

    def run(self):
        for line in self.proc.stdout:
            self.samples.append((time.time(), [x.strip() for x in line.split(",")]))

    def between(self, t0: float, t1: float) -> dict:
        got = [f for t, f in self.samples if t0 <= t <= t1]
        if not got:
            return {"samples": 0}
        num = [[float(x) for x in f[:3]] for f in got]
        return {"samples": len(got),
                "sm_clock_mhz": statistics.median(x[0] for x in num),
                "power_w": round(statistics.median(x[1] for x in num), 1),
                "power_limit_w": num[0][2],
                "clock_event_reasons": sorted({f[3] for f in got})}


def _smi_index() -> str:
    """nvidia-smi's name for torch's current device: its entry of CUDA_VISIBLE_DEVICES (an
    index or a UUID, which ``nvidia-smi -i`` takes as they are), else its own index."""
    i = torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return visible.split(",")[i].strip() if visible else str(i)


def _sustained(g, calls: int, flops: float, sampler: Sampler) -> dict:
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0, replays = time.time(), 0
    start.record()
    while time.time() - t0 < SECONDS:
        g.replay()
        replays += 1
        if replays % 4 == 0:
            torch.cuda.synchronize()
    end.record()
    end.synchronize()
    t1 = time.time()
    seconds = start.elapsed_time(end) / 1e3
    row = {"tflops": round(flops * calls * replays / seconds / 1e12, 1),
           "seconds": round(seconds, 2)}
    row.update(sampler.between(t0 + 0.5, t1))
    return row


def main() -> int:
    only = os.environ.get("GROUPED_FP8_ONLY", "deepgemm")
    sampler = Sampler(_smi_index())
    sampler.start()
    rows = []
    for name, g, per, n, k, routed in gf.PROBLEMS:
        if only not in name:
            continue
        counts, w, sw, sets = gf.inputs(g, per, n, k, routed)
        flops, calls = 2.0 * sum(counts) * n * k, 50
        graphs = {"gemmgen": captured(gf.gemmgen_call(sets, w, sw), len(sets), calls, torch),
                  "torch._scaled_mm loop": captured(gf.loop_call(sets), len(sets), calls, torch)}
        for r in range(ROUNDS):
            for who, gr in graphs.items():
                row = {"case": name, "round": r, "kernel": who}
                row.update(_sustained(gr, calls, flops, sampler))
                rows.append(row)
                print(json.dumps(row), flush=True)
        del graphs
    sampler.proc.terminate()
    gpu = torch.cuda.get_device_name()
    doc = {"investigation": "grouped_fp8_clocks", "gpu": gpu, "torch": torch.__version__,
           "git_commit": os.environ.get("GEMMGEN_COMMIT", ""), "date": time.strftime("%Y-%m-%d"),
           "timing": "graph-captured (kernel only), sustained replays", "rows": rows}
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"grouped_fp8_clocks_{gpu.replace(' ', '_')}.json"), "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
