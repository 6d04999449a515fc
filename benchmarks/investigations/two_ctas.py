"""Two CTAs per SM for the narrow tiles of M = 64 to 512 (bf16 rcr forward layers): the shape
rules' kernel beside the same tile (and the unswapped 64 x 32 tile) split 1, 2 or 4 ways, each
as a persistent grid of one CTA per SM (``o1``: the rules' kind, a ring of up to 8 stages) and
as a grid of one CTA per tile with two CTAs resident per SM (``o2``: ``__launch_bounds__``
asking for two blocks, at most 128 registers a thread; the deepest ring of at most 8 stages
that lets two CTAs share the SM's 228 KB; the shared-memory carveout at its maximum).

Why: a narrow tile's K step is bound twice over. Its consumer alone, with no loads, takes about
290 cycles a stage at 64 x 32 and 64 x 64 on an H200 (k_step_timeline_..._sparse_boxes.json:
``no_tma``): its wait for the next full stage reads shared memory behind the in-flight wgmmas'
operand reads (smem_poll: 102 cycles a stage at N = 32 without the poll, 276 with it). Its loads
alone, with eight stages in flight, take 250 (``no_mma``): about a microsecond of latency over
eight stages. Either alone, made faster, leaves the other; a second CTA on the SM overlaps one
CTA's poll with the other's wgmmas, and doubles the bytes in flight.

Graph-captured (kernel only) as small_m.py times (input sets past twice the L2, median of 9
replays), F.linear on the same data; every output poisoned first and checked against float64.
Each candidate records the blocks per SM the driver reports (cuOccupancyMaxActiveBlocksPerMultiprocessor)
and ptxas's registers and spills; a variant that spills or cannot hold two CTAs is left out.

    python3 benchmarks/investigations/two_ctas.py compile DIR   # CPU: DIR/o1, DIR/o2 cubins
    python3 benchmarks/investigations/two_ctas.py run DIR       # GPU: $OUT/two_ctas_<GPU>.json
    python3 benchmarks/investigations/two_ctas.py report FILE   # CPU: ``two_ctas`` in FILE

``report`` writes per set and M: the rules' geomean x F.linear, the fastest candidate's, the
fastest without the o2 variants, and o1's time over o2's for the same tile and split (geomean,
lowest, highest).

``TWO_CTAS_MS`` (comma-separated) sets the Ms; ``SWEEP_ROWS=N`` runs the first N problems.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
from pathlib import Path

import layer_sweep  # beside this script
import small_m

SMEM_PER_SM = 228 * 1024   # an H100 / H200 SM's shared memory, 1 KB of it reserved per CTA
SPLITS = (1, 2, 4)
MS = tuple(int(m) for m in os.environ.get("TWO_CTAS_MS", "64,128,256,512").split(","))
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9


def _two_fit(cfg) -> bool:
    return 2 * (cfg.dynamic_smem_bytes + 1024) <= SMEM_PER_SM


def _deepest(cfg, occupancy: int):
    """``cfg`` with the deepest ring (<= 8 stages, >= 3) that breaks no rule and, for two
    CTAs an SM, lets both fit; None when none does."""
    for st in range(8, 2, -1):
        trial = cfg.replace(check=False, stages=st)
        if not trial.violations() and (occupancy == 1 or _two_fit(trial)):
            return trial
    return None


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap, occupancy)}: "rules", then for the rules' tile and the unswapped
    64 x 32 tile each split (slices of at least 8 K tiles) as o1 and, for one consumer
    warpgroup (two would need setmaxnreg's registers twice over), o2."""
    from gemmgen.heuristics.shapes import narrow_tile
    rules, swap = small_m.candidates(m, n, k)["rules"]
    out = {"rules": (rules, swap, 1)}
    k_tiles = math.ceil(k / 64)
    tiles = [("rules tile", rules, swap)]
    if rules.bn != 32 or rules.bm != 64 or swap:
        tiles.append(("64x32", rules.replace(check=False, layout="rcr", **narrow_tile(32)), False))
    for name, base, sw in tiles:
        for split in SPLITS:
            if split > 1 and k_tiles / split < small_m.MIN_SLICE:
                continue
            common = dict(split_k=split, split_inline=split > 1, stream_k=False,
                          store="direct" if split > 1 else base.store)
            o1 = _deepest(base.replace(check=False, persistent=True, **common), 1)
            o2 = _deepest(base.replace(check=False, persistent=False, cluster_m=1, cluster_n=1,
                                       **common), 2) if base.consumers == 1 else None
            for occ, cfg in ((1, o1), (2, o2)):
                if cfg is not None:
                    out[f"{name} sk{split} o{occ}"] = (cfg, sw, occ)
    return out


def _source(cfg, occupancy: int) -> str:
    from gemmgen.codegen.render import render
    src = render(cfg, "sm_90a")
    if occupancy == 2:
        bound = "::THREADS, 1)"
        assert src.count(bound) == 1, cfg.name
        src = src.replace(bound, "::THREADS, 2)")
    return src


def compile_all(folder: str) -> None:
    """Every candidate's cubin into ``folder``/o<occupancy>/NAME.cubin, with ptxas's report in
    resources.json; a variant that spills is recorded as such (and skipped by ``run``)."""
    from concurrent.futures import ThreadPoolExecutor

    from gemmgen.compile.cache import compile_cached
    todo = {}
    for _, n, k, m in layer_sweep.problems(MS):
        for cfg, _, occ in candidates(m, n, k).values():
            todo[(cfg.name, occ)] = cfg
    report_path = Path(folder, "resources.json")
    report = json.loads(report_path.read_text()) if report_path.exists() else {}

    def one(item):
        (name, occ), cfg = item
        path = Path(folder, f"o{occ}", name + ".cubin")
        if path.exists():
            return None
        cubin, res = compile_cached(_source(cfg, occ), "sm_90a", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(cubin)
        return f"o{occ}/{name}", {"registers": res.registers, "spill_stores": res.spill_stores,
                                  "spill_loads": res.spill_loads, "stack": res.stack_bytes}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for got in pool.map(one, todo.items()):
            if got:
                report[got[0]] = got[1]
    report_path.write_text(json.dumps(report, indent=1))
    print(len(todo), "kernels;", sum(1 for r in report.values() if r["spill_stores"]), "spill")


def _blocks_per_sm(kern, cfg) -> int:
    """The blocks of ``kern`` the driver lets reside on an SM at once, after preferring the
    largest shared-memory carveout for it (as every launch of it then runs)."""
    from gemmgen.runtime import driver
    fn = kern.function()
    lib = driver._lib()
    lib.cuFuncSetAttribute(ctypes.c_void_p(fn.handle),
                           CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
    out = ctypes.c_int()
    driver.check(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(out), ctypes.c_void_p(fn.handle), cfg.threads,
        ctypes.c_size_t(cfg.dynamic_smem_bytes)), "occupancy")
    return out.value


def run(folder: str) -> None:
    import torch.nn.functional as F
    from gemmgen.runtime.build import from_cubin
    report = json.loads(Path(folder, "resources.json").read_text())
    dev = layer_sweep.Device(folder)
    save = layer_sweep.saver("two_ctas", __doc__)
    kernels, rows, t0 = {}, [], time.time()

    def kernel(cfg, occ):
        key = (cfg.name, occ)
        if key not in kernels:
            kern = from_cubin(cfg, "sm_90a",
                              Path(folder, f"o{occ}", cfg.name + ".cubin").read_bytes())
            kernels[key] = (kern, _blocks_per_sm(kern, cfg))
        return kernels[key]
    for which, n, k, m in layer_sweep.limited(layer_sweep.problems(MS)):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        row = {"set": which, "layers": small_m.layers()[which][(n, k)], "M": m, "N": n, "K": k,
               "candidates": {}}

        def theirs(i):
            F.linear(xs[i % sets], ws[i % sets])
        torch_ms = dev.graph_ms(theirs, reps, small_m.REPLAYS)
        for label, (cfg, swap, occ) in candidates(m, n, k).items():
            res = report.get(f"o{occ}/{cfg.name}")
            if res is None or res["spill_stores"]:
                continue
            kern, blocks = kernel(cfg, occ)
            if occ == 2 and blocks < 2:
                continue
            launch = layer_sweep.launcher(kern, swap, xs, ws, ys, sets)
            row["candidates"][label] = {
                "config": cfg.name, "occupancy": occ, "blocks_per_sm": blocks,
                "registers": res["registers"], "error": layer_sweep.error(launch, ys, ref),
                "ms": dev.graph_ms(launch, reps, small_m.REPLAYS)}
        row["torch_ms"] = (torch_ms + dev.graph_ms(theirs, reps, small_m.REPLAYS)) / 2
        c = row["candidates"]
        best = min(c, key=lambda x: c[x]["ms"])
        print(json.dumps({"M": m, "N": n, "K": k, "s": round(time.time() - t0),
                          "rules_x": round(row["torch_ms"] / c["rules"]["ms"], 3), "best": best,
                          "best_x": round(row["torch_ms"] / c[best]["ms"], 3)}), flush=True)
        rows.append(row)
        save(dev.gpu, rows)


def report(path: str) -> dict:
    """``two_ctas`` in a run's file (see the module doc)."""
    doc = json.loads(Path(path).read_text())
    out = {}
    for which in ("train", "test"):
        for m in sorted({r["M"] for r in doc["rows"]}):
            rows = [r for r in doc["rows"] if r["set"] == which and r["M"] == m]
            x = lambda r, keep: r["torch_ms"] / min(  # noqa: E731
                v["ms"] for lab, v in r["candidates"].items() if keep(lab))
            pairs = [r["candidates"][lab[:-1] + "1"]["ms"] / v["ms"] for r in rows
                     for lab, v in r["candidates"].items()
                     if lab.endswith("o2") and lab[:-1] + "1" in r["candidates"]]
            out[f"{which} M={m}"] = {
                "rows": len(rows),
                "rules": round(small_m._geomean([x(r, lambda lab: lab == "rules")
                                                 for r in rows]), 3),
                "best": round(small_m._geomean([x(r, lambda lab: True) for r in rows]), 3),
                "best_without_o2": round(small_m._geomean(
                    [x(r, lambda lab: not lab.endswith("o2")) for r in rows]), 3),
                "o1_over_o2": {"pairs": len(pairs),
                               "geomean": round(small_m._geomean(pairs), 3),
                               "lowest": round(min(pairs), 3), "highest": round(max(pairs), 3)}}
    return layer_sweep.write_summary(path, "two_ctas", out)


if __name__ == "__main__":
    command, arg = sys.argv[1], sys.argv[2]
    {"compile": compile_all, "run": run, "report": report}[command](arg)
