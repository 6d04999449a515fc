"""The shape rules of this checkout against those of an older one (its tree), on the forward
layers of small_m.py's two sets where their wgmma kernels differ: both sides' kernels beside
F.linear, graph-captured as layer_sweep.py times (two rounds in opposite orders, the faster
kept), every output poisoned first and checked against float64. waiter.py and split_cost.py
run it under their own names.

    compile(DIR, OLD, ms)            # CPU: both sides' cubins and DIR/ab.json (OLD: a tree;
                                     # the sides may differ in kernel or in operand swap)
    run(DIR, investigation, doc, ms) # GPU: $OUT/<investigation>_<GPU>.json

``compile_sources`` instead keeps this checkout's picks on both sides and renders the ones
``select`` takes with the older tree's templates too (a template change, same configs); ``run``
then times NAME.before.cubin against NAME.rules.cubin.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import layer_sweep  # beside this script
import small_m

PICKS = """import json, sys
import layer_sweep
print(json.dumps([[w, n, k, m, c.as_dict(), sw] for w, n, k, m, c, sw
                  in layer_sweep.rule_problems(tuple(map(int, sys.argv[1].split(","))))]))"""


def _config(d: dict):
    from gemmgen.model.families.hopper.wgmma.config import WgmmaConfig
    return WgmmaConfig(**{k: v for k, v in d.items() if k != "family"})


def compile(folder: str, old: str, ms) -> None:
    """The rules' kernels of this checkout and of the checkout in ``old`` (its picks made by
    its own code, in a subprocess), where they differ, into ``folder``, with the pairs in
    ``folder``/ab.json."""
    env = {**os.environ, "PYTHONPATH": f"{old}:{old}/benchmarks/investigations"}
    was = json.loads(subprocess.run([sys.executable, "-c", PICKS, ",".join(map(str, ms))],
                                    env=env, check=True, capture_output=True, text=True).stdout)
    pairs = []
    for (which, n, k, m, cfg, swap), (*_, d, old_swap) in zip(layer_sweep.rule_problems(ms), was):
        before = _config(d)
        if before.name != cfg.name or swap != old_swap:  # the last field: the older side's swap
            pairs.append([which, n, k, m, before.as_dict(), cfg.as_dict(), swap, old_swap])
    layer_sweep.compile_to(folder, [_config(d) for p in pairs for d in p[4:6]])
    Path(folder, "ab.json").write_text(json.dumps({"rows": len(was), "pairs": pairs}))
    print(len(pairs), "of", len(was), "problems change kernel")


RENDER = """import json, sys
from gemmgen import render
from gemmgen.model.families.hopper.wgmma.config import WgmmaConfig
print(json.dumps({d["name"]: render(WgmmaConfig(**{k: v for k, v in d.items()
                                                   if k not in ("family", "name")}), "sm_90a")
                  for d in json.load(sys.stdin)}))"""


def compile_sources(folder: str, old: str, ms, select) -> None:
    """This checkout's rules' kernels that ``select(config)`` takes, rendered by the tree in
    ``old`` (NAME.before.cubin) and by this checkout (NAME.rules.cubin), into ``folder``, with
    the rows in ``folder``/ab.json."""
    from gemmgen import render
    picks = [p for p in layer_sweep.rule_problems(ms) if select(p[4])]
    unique = {p[4].name: p[4] for p in picks}
    env = {**os.environ, "PYTHONPATH": old}
    was = json.loads(subprocess.run(
        [sys.executable, "-c", RENDER], env=env, check=True, capture_output=True, text=True,
        input=json.dumps([{**c.as_dict(), "name": n} for n, c in unique.items()])).stdout)
    layer_sweep.compile_sources(folder, unique.values(), lambda c: {
        "before": was[c.name], "rules": render(c, "sm_90a")})
    pairs = [[w, n, k, m, c.as_dict(), c.as_dict(), swap] for w, n, k, m, c, swap in picks]
    Path(folder, "ab.json").write_text(json.dumps({"rows": len(picks), "pairs": pairs,
                                                   "sources": True}))
    print(len(picks), "problems,", len(unique), "kernels,",
          sum(was[n] != render(c, "sm_90a") for n, c in unique.items()), "sources differ")


def run(folder: str, investigation: str, doc: str, ms, tag: str = "") -> None:
    """Both sides' kernels on each changed problem (``time_variants``), saved per row (into
    $OUT/<investigation>_<GPU><tag>.json)."""
    pairs = json.loads(Path(folder, "ab.json").read_text())
    dev = layer_sweep.Device(folder)
    rows = []
    for which, n, k, m, before, after, swap, *was in layer_sweep.limited(pairs["pairs"]):
        cfgs = {"before": _config(before), "rules": _config(after)}
        swaps = {"before": was[0] if was else swap, "rules": swap}
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        kern = (lambda v, c: _variant(dev, c, v)) if pairs.get("sources") else (
            lambda v, c: dev.kernel(c))
        launch = {v: layer_sweep.launcher(kern(v, c), swaps[v], xs, ws, ys, sets)
                  for v, c in cfgs.items()}
        row = {"set": which, "M": m, "N": n, "K": k, "swap": swap, "swap_before": swaps["before"],
               **{f"{v}_config": c.name for v, c in cfgs.items()},
               **layer_sweep.time_variants(dev, launch, sets, reps, xs, ws, ys, ref)}
        print(json.dumps({k_: v_ for k_, v_ in row.items() if k_ in ("M", "N", "K")
                          or k_.startswith("x_torch")}), flush=True)
        rows.append(row)
        layer_sweep.save_rows(investigation, doc, dev.gpu, rows,
                              summary(rows, pairs["rows"], ms), tag, quiet=True)


def _variant(dev, cfg, variant: str):
    """``cfg``'s kernel from FOLDER/NAME.VARIANT.cubin (``compile_sources``), loaded once."""
    from gemmgen.runtime.build import from_cubin
    key = f"{cfg.name}.{variant}"
    if key not in dev.kernels:
        dev.kernels[key] = from_cubin(cfg, "sm_90a", Path(dev.folder, key + ".cubin").read_bytes())
    return dev.kernels[key]


def summary(rows: list, problems: int, ms) -> dict:
    """Per set and M (and over all M): the changed rows, the geomean, lowest and highest of
    the time before over the time after, and F.linear's time over each side's (geomean)."""
    out = {"problems": problems, "changed": len(rows)}
    for key, sel in layer_sweep.by_set_and_m(rows, ms):
        gain = [min(r["before_us"]) / min(r["rules_us"]) for r in sel]
        out[key] = {
            "rows": len(sel), "after_over_before": round(small_m._geomean(gain), 3),
            "lowest": round(min(gain), 3), "highest": round(max(gain), 3),
            "before_x_torch": round(small_m._geomean([r["x_torch_before"] for r in sel]), 3),
            "after_x_torch": round(small_m._geomean([r["x_torch_rules"] for r in sel]), 3),
            "errors_ok": all(r[f"{v}_error"] < 2e-2 for r in sel for v in ("before", "rules"))}
    return out
