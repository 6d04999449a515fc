"""What the linear-layer investigations share (narrow_m.py, mid_m.py, linear_rules.py,
pdl_gain.py): their cubins compiled ahead on the CPU, the GPU set-up, a kernel launched on a
layer's rotating input sets, and the sweep of candidate kernels per layer and M beside
F.linear, each output poisoned first and checked against float64.

``SWEEP_ROWS=N`` (an environment variable) runs only the first N problems of a sweep: a
smoke test of a script on the GPU. ``SWEEP_ROUNDS=2`` times each row's kernels twice, the
second time in the reverse order, and keeps the mean of each one's two times (F.linear's
too, timed first and last): a GPU that slows steadily as it heats under a row's long kernels
then favours no place in the order (the faster of the two would favour the first places).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import small_m  # beside this script


def compile_to(folder: str, configs) -> None:
    """Compile ``configs`` (each once, by name) for sm_90a into ``folder``/NAME.cubin, skipping
    those already there."""
    from gemmgen.compile.cache import compile_many
    os.makedirs(folder, exist_ok=True)
    unique = {cfg.name: cfg for cfg in configs}
    todo = [c for c in unique.values() if not Path(folder, c.name + ".cubin").exists()]
    for cfg, done in zip(todo, compile_many(todo, arch="sm_90a")):
        Path(folder, cfg.name + ".cubin").write_bytes(done[0])
    print(len(unique), "kernels")


def compile_sources(folder: str, configs, sources) -> None:
    """FOLDER/NAME.VARIANT.cubin for each config of ``configs`` (each once, by name) and each
    {variant: source text} of ``sources(config)``, for sm_90a, in parallel, skipping those
    already there (kernel_ends.py, waiter.py: rendered sources patched)."""
    from concurrent.futures import ThreadPoolExecutor

    from gemmgen.compile.cache import compile_cached
    os.makedirs(folder, exist_ok=True)
    unique = {cfg.name: cfg for cfg in configs}

    def one(cfg):
        for v, text in sources(cfg).items():
            path = Path(folder, f"{cfg.name}.{v}.cubin")
            if not path.exists():
                path.write_bytes(compile_cached(text, "sm_90a", cfg.name)[0])
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(one, unique.values()))
    print(len(unique), "kernels")


def by_set_and_m(rows: list, ms):
    """("SET M=m", rows) for each set, each M of ``ms`` and all of them together ("M=all"),
    leaving out the empty ones: the selection every per-set-and-M summary makes."""
    for which in ("train", "test"):
        for m in list(ms) + ["all"]:
            sel = [r for r in rows if r["set"] == which and m in ("all", r["M"])]
            if sel:
                yield f"{which} M={m}", sel


def speedups(rows: list, base: str, variants) -> dict:
    """{variant: its rows, and the geomean ("over_BASE"), worst and best of BASE's time over
    its time}, from rows holding "V_us" lists of each one's rounds, for the variants timed."""
    out = {}
    for v in variants:
        gain = [min(r[f"{base}_us"]) / min(r[f"{v}_us"]) for r in rows if f"{v}_us" in r]
        if gain:
            out[v] = {"rows": len(gain), f"over_{base}": round(small_m._geomean(gain), 3),
                      "worst": round(min(gain), 3), "best": round(max(gain), 3)}
    return out


def problems(ms, sets=("train", "test")) -> list:
    """[(set, N, K, M)]: small_m.py's layers of ``sets`` at each M of ``ms``."""
    return [(which, n, k, m) for which in sets for (n, k) in small_m.layers()[which]
            for m in ms]


def rule_problems(ms) -> list:
    """[(set, N, K, M, config, swap)]: ``problems(ms)`` with this checkout's rules' kernel
    (small_m.py's "rules" candidate) of each."""
    return [(*p, *small_m.candidates(p[3], p[1], p[2])["rules"]) for p in problems(ms)]


def compile_candidates(folder: str, problems: list, candidates) -> None:
    """``compile_to`` every config of ``candidates(m, n, k)`` over ``problems``."""
    compile_to(folder, [c for _, n, k, m in problems for c, _ in candidates(m, n, k).values()])


def limited(problems: list) -> list:
    """``problems``, or their first SWEEP_ROWS."""
    rows = os.environ.get("SWEEP_ROWS")
    return problems[:int(rows)] if rows else problems


class Device:
    """The GPU side of a sweep: PyCUDA adopted into PyTorch's context, the GPU's name, one
    capture stream (gemmgen keeps workspaces per stream), a seeded generator, the L2 size, and
    the kernels loaded from ``folder``'s cubins."""

    def __init__(self, folder: str):
        import torch

        from gemmgen.runtime.build import adopt_pycuda
        from gemmgen.runtime.device import device_identity
        adopt_pycuda()
        self.folder, self.kernels = folder, {}
        self.gpu, _ = device_identity(0)
        self.side = torch.cuda.Stream()
        self.gen = torch.Generator(device="cuda").manual_seed(0)
        self.l2 = torch.cuda.get_device_properties(0).L2_cache_size

    def kernel(self, cfg):
        from gemmgen.runtime.build import from_cubin
        if cfg.name not in self.kernels:
            self.kernels[cfg.name] = from_cubin(
                cfg, "sm_90a", Path(self.folder, cfg.name + ".cubin").read_bytes())
        return self.kernels[cfg.name]

    def graph_ms(self, launch, reps: int, replays: int) -> float:
        import graph_timing
        return graph_timing.graph_ms(launch, reps, replays, stream=self.side)


def launcher(kern, swap: bool, xs, ws, ys, sets: int):
    """launch(i): ``kern`` on input set i % sets (y = x W^T; swapped: y^T = W x^T) on the
    current stream."""
    import torch

    def launch(i):
        x, w, y = xs[i % sets], ws[i % sets], ys[i % sets]
        s = torch.cuda.current_stream().cuda_stream
        kern(w, x.t(), y.t(), stream=s) if swap else kern(x, w.t(), y, stream=s)
    return launch


def error(launch, ys, ref) -> float:
    """||C - ref|| / ||ref|| of ``launch(0)``'s output, poisoned (NaN) first."""
    import torch
    ys[0].fill_(float("nan"))
    launch(0)
    torch.cuda.synchronize()
    return ((ys[0].double() - ref).norm() / ref.norm()).item()


def sweep(folder: str, problems: list, candidates, replays: int, save) -> None:
    """Every (set, N, K, M) of ``problems``: F.linear and each of ``candidates(m, n, k)``
    ({label: (config, swap)}, "rules" among them) timed graph-captured with ``replays``
    replays on the same input sets; ``save(gpu, rows)`` after each row."""
    import torch.nn.functional as F
    dev = Device(folder)
    rows = []
    for which, n, k, m in limited(problems):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        row = {"set": which, "layers": small_m.layers()[which][(n, k)], "M": m, "N": n, "K": k,
               "candidates": {}}

        def theirs(i):
            F.linear(xs[i % sets], ws[i % sets])
        torch_ms = [dev.graph_ms(theirs, reps, replays)]
        launches = {label: (cfg, launcher(dev.kernel(cfg), swap, xs, ws, ys, sets))
                    for label, (cfg, swap) in candidates(m, n, k).items()}
        for label, (cfg, launch) in launches.items():
            row["candidates"][label] = {"config": cfg.name, "error": error(launch, ys, ref),
                                        "ms": dev.graph_ms(launch, reps, replays)}
        if os.environ.get("SWEEP_ROUNDS", "1") == "2":  # reversed, then F.linear
            for label, (_, launch) in reversed(launches.items()):
                c = row["candidates"][label]
                c["rounds_ms"] = [c["ms"], dev.graph_ms(launch, reps, replays)]
                c["ms"] = sum(c["rounds_ms"]) / 2
            torch_ms.append(dev.graph_ms(theirs, reps, replays))
            row["torch_rounds_ms"] = torch_ms
        row["torch_ms"] = sum(torch_ms) / len(torch_ms)
        c = row["candidates"]
        best = min(c, key=lambda x: c[x]["ms"])
        print(json.dumps({"set": which, "M": m, "N": n, "K": k,
                          "rules_x": round(row["torch_ms"] / c["rules"]["ms"], 3), "best": best,
                          "best_x": round(row["torch_ms"] / c[best]["ms"], 3)}), flush=True)
        rows.append(row)
        save(dev.gpu, rows)


_PRESETS: dict = {}


def rule_pick(rule, constants: dict, values: dict, m: int, n: int, k: int):
    """``rule(preset, m, n, k, 1, reasons)`` (a shape rule of ``gemmgen.heuristics.shapes``,
    such as ``_narrow``) with its constants table ``constants`` updated by ``values`` for the
    call and restored after; ``preset`` is the default bf16 rcr preset the shape rules start
    from for that problem."""
    from gemmgen.heuristics.select import choose
    from gemmgen.heuristics.tunedb import TuneDB
    if (m, n, k) not in _PRESETS:
        _PRESETS[m, n, k] = choose(TuneDB(None), "NVIDIA H200", "bf16", m, n, k, 90, "rcr",
                                   "none", False)[0]
    saved = dict(constants)
    constants.update(values)
    try:
        return rule(_PRESETS[m, n, k], m, n, k, 1, [])
    finally:
        constants.clear()
        constants.update(saved)


def saver(investigation: str, method: str, tag: str = ""):
    """save(gpu, rows): a sweep's rows and summary into
    $OUT/<investigation>_<GPU><tag>.json (the working directory without $OUT)."""
    def save(gpu, rows) -> None:
        out = {"investigation": investigation, "gpu": gpu,
               "git_commit": os.environ.get("GEMMGEN_COMMIT"),
               "timing": "graph-captured, kernel only", "dtype": "bf16", "layout": "rcr",
               "method": method, "summary": small_m.summary(rows), "rows": rows}
        name = f"{investigation}_{gpu.replace(' ', '_')}{tag}.json"
        Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    return save


def summarize(path: str) -> None:
    """This checkout's rules scored on a sweep's timings (``summary_this_checkout``; a choice
    not timed there is named in ``summary_this_checkout_unmeasured``; each row whose kernel
    differs from the run's "rules" in ``changes_this_checkout``: F.linear's time over each)."""
    doc = json.loads(Path(path).read_text())
    missing, changes, picks = [], [], {}

    def pick(r):  # once per row: the rules' kernel decided, an unmeasured one recorded
        if id(r) not in picks:
            cfg = small_m.candidates(r["M"], r["N"], r["K"])["rules"][0]
            found = [c for c, v in r["candidates"].items() if v["config"] == cfg.name]
            if not found:
                missing.append([r["M"], r["N"], r["K"], cfg.name])
            picks[id(r)] = found[0] if found else "rules"
        return picks[id(r)]
    doc["summary_this_checkout"] = small_m.summary(doc["rows"], pick)
    doc["summary_this_checkout_unmeasured"] = missing
    for r in doc["rows"]:
        c, now = r["candidates"], pick(r)
        if c[now]["config"] != c["rules"]["config"]:
            changes.append({"set": r["set"], "M": r["M"], "N": r["N"], "K": r["K"], "now": now,
                            "x_torch_before": round(r["torch_ms"] / c["rules"]["ms"], 3),
                            "x_torch_now": round(r["torch_ms"] / c[now]["ms"], 3)})
    doc["changes_this_checkout"] = changes
    Path(path).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc["summary_this_checkout"], indent=1), missing[:5])


def main(argv: list, ms, candidates, replays: int, save, fit, reports=None) -> None:
    """A sweep script's command line: ``compile DIR``, ``run DIR``, ``summarize FILE``,
    ``fit FILE ...`` over small_m.py's layers at each M of ``ms``, or one of ``reports``
    ({command: function of one FILE})."""
    command, args = argv[1], argv[2:]
    if command == "fit":
        fit(args)
    elif command == "compile":
        compile_candidates(args[0], problems(ms), candidates)
    elif command == "run":
        sweep(args[0], problems(ms), candidates, replays, save)
    else:
        {"summarize": summarize, **(reports or {})}[command](args[0])


def save_rows(investigation: str, method: str, gpu: str, rows: list, summary: dict,
              tag: str = "", quiet: bool = False, **extra) -> None:
    """A run's rows and ``summary`` into $OUT/<investigation>_<GPU><tag>.json (the working
    directory without $OUT), with ``extra`` fields; the summary printed unless ``quiet``."""
    out = {"investigation": investigation, "gpu": gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"), **extra,
           "timing": "graph-captured, kernel only", "dtype": "bf16", "layout": "rcr",
           "method": method, "summary": summary, "rows": rows}
    name = f"{investigation}_{gpu.replace(' ', '_')}{tag}.json"
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(out, indent=1))
    if not quiet:
        print(json.dumps(summary, indent=1))


def sweep_variants(dev, problems: list, kernels, save) -> None:
    """Every (set, N, K, M, config, swap) of ``problems``: the kernels ``kernels(cfg)``
    ({variant: Kernel}) on the layer's input sets, timed by ``time_variants``; ``save(gpu,
    rows, quiet)`` after each row (what is done survives a time limit) and at the end."""
    rows = []
    for which, n, k, m, cfg, swap in limited(problems):
        sets, reps, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
        launch = {v: launcher(kern, swap, xs, ws, ys, sets) for v, kern in kernels(cfg).items()}
        row = {"set": which, "M": m, "N": n, "K": k, "config": cfg.name, "swap": swap,
               **time_variants(dev, launch, sets, reps, xs, ws, ys, ref)}
        print(json.dumps({k_: v_ for k_, v_ in row.items() if k_ in ("M", "N", "K")
                          or k_.startswith("x_torch")}), flush=True)
        rows.append(row)
        save(dev.gpu, rows, quiet=True)
    save(dev.gpu, rows)


def variant_summary(path: str, key: str, variants, changed_only: bool = False) -> dict:
    """Per set, M and variant of a sweep's file ``path``: the rows that timed the variant (with
    ``changed_only``, those where it is another kernel than the rules'), the geomean, worst and
    best of the rules' time over the variant's, and F.linear's time over the rules' and over
    the variant's (geomeans); written into the file under ``key``."""
    doc = json.loads(Path(path).read_text())
    out: dict = {}

    def timed(r, variant):
        c = r["candidates"]
        return variant in c and not (changed_only and c[variant]["config"] == c["rules"]["config"])
    for which in ("train", "test"):
        for m in sorted({r["M"] for r in doc["rows"]}):
            rows = [r for r in doc["rows"] if r["set"] == which and r["M"] == m]
            for variant in variants:
                both = [r for r in rows if timed(r, variant)]
                if not both:
                    continue
                ms = {v: [r["candidates"][v]["ms"] for r in both] for v in ("rules", variant)}
                gain = [a / b for a, b in zip(ms["rules"], ms[variant])]
                torch = {v: small_m._geomean([r["torch_ms"] / t for r, t in zip(both, ms[v])])
                         for v in ms}
                out.setdefault(f"{which} M={m}", {})[variant] = {
                    "rows": len(gain), "geomean": round(small_m._geomean(gain), 3),
                    "worst": round(min(gain), 3), "best": round(max(gain), 3),
                    "x_torch_rules": round(torch["rules"], 3),
                    "x_torch": round(torch[variant], 3)}
    return write_summary(path, key, out)


def write_summary(path: str, key: str, out: dict) -> dict:
    """``out`` written into the run's file ``path`` under ``key``, and printed."""
    doc = json.loads(Path(path).read_text())
    doc[key] = out
    Path(path).write_text(json.dumps(doc, indent=1))
    print(json.dumps(out, indent=1))
    return out


def time_variants(dev, launch: dict, sets: int, reps: int, xs, ws, ys, ref,
                  replays: int = 9) -> dict:
    """A row's fields for kernels ``launch`` ({variant: launch(i)}) on one layer's input sets:
    each one's error ("V_error", poisoned output against ``ref``), F.linear's and each one's
    graph-captured times in microseconds in two rounds, the second in reverse order
    ("torch_us", "V_us"), and F.linear's best time over each one's best ("x_torch_V")."""
    import torch.nn.functional as F
    row = {f"{v}_error": error(run, ys, ref) for v, run in launch.items()}
    row.update({"torch_us": [], **{f"{v}_us": [] for v in launch}})
    for rnd in range(2):
        row["torch_us"].append(1e3 * dev.graph_ms(
            lambda i: F.linear(xs[i % sets], ws[i % sets]), reps, replays))
        for v in (list(launch) if rnd == 0 else list(launch)[::-1]):
            row[f"{v}_us"].append(1e3 * dev.graph_ms(launch[v], reps, replays))
    for v in launch:
        row[f"x_torch_{v}"] = round(min(row["torch_us"]) / min(row[f"{v}_us"]), 4)
    return row


def ab_summary(path: str, before: str, key: str = "ab") -> dict:
    """Writes ``key`` into a run's file that timed the rules' kernel ("rules") beside the one
    they chose before a change (candidate ``before``): over the problems whose kernel changed,
    their count and the geomean, lowest and highest of the time before over the time after;
    the same geomean over the unchanged ones (the run's noise); and per set and M the geomean
    x F.linear before and after."""
    doc = json.loads(Path(path).read_text())
    changed, same, per = [], [], {}
    for r in doc["rows"]:
        now, was = r["candidates"]["rules"], r["candidates"][before]
        (same if now["config"] == was["config"] else changed).append(was["ms"] / now["ms"])
        key_ = f"{r['set']} M={r['M']}"
        per.setdefault(key_, ([], []))
        per[key_][0].append(r["torch_ms"] / was["ms"])
        per[key_][1].append(r["torch_ms"] / now["ms"])
    out = {"changed": len(changed), "changed_speedup": round(small_m._geomean(changed), 3),
           "changed_lowest": round(min(changed), 3), "changed_highest": round(max(changed), 3),
           "unchanged": len(same), "unchanged_speedup": round(small_m._geomean(same), 3),
           "x_torch_before_after": {k: [round(small_m._geomean(v), 3) for v in vs]
                                    for k, vs in per.items()}}
    return write_summary(path, key, out)
