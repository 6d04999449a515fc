"""The timing runs of ``tune_never_slower.py`` (child processes of it): gemmgen.torch.linear and
F.linear on each of its shapes before tuning; after tuning, gemmgen.gemm with the empty and
with the tuned database and F.linear, interleaved in one process. Graph-captured, CUDA events,
median per call, inputs rotated over 3x L2, each output checked against float64.

    GEMMGEN_TUNE_DB=DB python3 tune_never_slower_timing.py --db DB --out FILE.json
        [--before-db EMPTY]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tune_never_slower import TOLERANCE, shapes, write_json  # noqa: E402


def _time_graph(fn, xs, ws, min_reps: int = 20, target_s: float = 0.1) -> tuple:
    """(median milliseconds per call of ``fn(x, w)``, the graph's output for the first set):
    ``_time_interleaved`` of the one function."""
    return _time_interleaved({"fn": fn}, xs, ws, min_reps, target_s, max_reps=1000)["fn"]


def _time_interleaved(fns: dict, xs, ws, min_reps: int = 30, target_s: float = 0.3,
                      max_reps: int = 600) -> dict:
    """{name: (median ms per call, the graph's output for the first set)} of several
    ``fn(x, w)``, each captured in its own CUDA graph (a call per input set), the graphs replayed
    in turn (A, B, C, A, B, C, ...), a CUDA event pair around each replay: clock and power drift
    between the runs falls on all of them alike."""
    import torch
    graphs, outs = {}, {}
    for name, fn in fns.items():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (plans, builds) off the capture
            for x, w in zip(xs, ws):
                fn(x, w)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graphs[name] = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graphs[name]):
            outs[name] = [fn(x, w) for x, w in zip(xs, ws)]
        graphs[name].replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for g in graphs.values():
        g.replay()
    end.record()
    end.synchronize()
    per = max(start.elapsed_time(end) / 1e3, 1e-6)  # seconds per round
    reps = max(min_reps, min(max_reps, int(target_s / per)))
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(reps)] for name in graphs}
    for i in range(reps):
        for name, g in graphs.items():
            s_, e_ = events[name][i]
            s_.record()
            g.replay()
            e_.record()
    torch.cuda.synchronize()
    out = {}
    for name in graphs:
        times = sorted(s_.elapsed_time(e_) for s_, e_ in events[name])
        out[name] = (times[len(times) // 2] / len(xs), outs[name][0].clone())
    del graphs, outs
    return out


def _time_before_and_after(r: dict, l2: int, before_db: str, after_db: str) -> dict:
    """gemmgen.gemm with the empty and with the tuned database, and F.linear, on one shape in
    one process, interleaved (``_time_interleaved``): median ms, errors, the kernels run."""
    import torch
    import torch.nn.functional as F

    import gemmgen
    from gemmgen.runtime.api import chosen_choice
    sets, xs, ws = _operands(r, l2)

    def gemm(db):
        return lambda x, w: gemmgen.gemm(x, w.t(), db=db,
                                         stream=torch.cuda.current_stream().cuda_stream)
    got = _time_interleaved({"before": gemm(before_db), "after": gemm(after_db),
                             "flinear": F.linear}, xs, ws)
    res = {"sets": sets}
    for name, db in (("before", before_db), ("after", after_db)):
        found = chosen_choice(xs[0], ws[0].t(), db=db)
        res[f"{name}_kernel"] = None if found is None else {
            "name": found[1].config.name, "how": found[1].how, "swap": found[1].swap}
    for name in ("before", "after", "flinear"):
        res[f"{name}_ms"] = got[name][0]
        res[f"{name}_rel_error"] = _rel_error(got[name][1], xs[0], ws[0])
    worst = max(res["before_rel_error"], res["after_rel_error"])
    res["ok"] = worst <= TOLERANCE  # NaN fails too
    if not res["ok"]:
        res["error"] = f"gemmgen rel error {worst:.2e} > {TOLERANCE}"
    del xs, ws
    torch.cuda.empty_cache()
    return res


def _operands(r: dict, l2: int) -> tuple:
    """(sets, xs, ws): random normal bf16 x (M x K) and W (N x K), as many sets as span 3x
    the L2 of ``l2`` bytes (at most 16), seeded by the shape."""
    import torch
    m, n, k = r["M"], r["N"], r["K"]
    sets = max(1, min(16, -(-3 * l2 // (2 * (m * k + n * k + m * n)))))
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
          for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
          for _ in range(sets)]
    return sets, xs, ws


def _rel_error(out, x, w) -> float:
    """||out - x w^T|| / ||x w^T|| (Frobenius), the reference in float64 on the GPU."""
    ref = x.double() @ w.double().t()
    return float((out.double() - ref).norm() / ref.norm().clamp_min(1e-300))


def _prewarm(rows: list[dict], db: str) -> None:
    """Compile, in parallel, the kernels gemm will choose (the timing run would compile them one
    by one on first use): only a speed-up, so a failure here is reported and passed over."""
    try:
        from gemmgen.compile.cache import compile_many
        from gemmgen.heuristics.select import decide
        from gemmgen.heuristics.tunedb import TuneDB
        from gemmgen.runtime.device import device_arch, device_identity
        gpu, cc = device_identity(0)
        tdb = TuneDB(db)
        cfgs = {c.name: c for c in (decide(tdb, gpu, "bf16", r["M"], r["N"], r["K"], cc,
                                           "rcr").config for r in rows)}
        compile_many(list(cfgs.values()), device_arch())
    except Exception as exc:  # noqa: BLE001 - the timing below compiles what is missing
        print(f"warning: prewarm compile failed ({type(exc).__name__}: {exc})", flush=True)


def _time_one(r: dict, l2: int) -> dict:
    """gemmgen.torch.linear and F.linear on one shape: median ms, errors, the kernel run."""
    import torch
    import torch.nn.functional as F

    import gemmgen.torch as gt
    from gemmgen.runtime.api import chosen_choice
    sets, xs, ws = _operands(r, l2)
    res = {"sets": sets}
    res["gemmgen_rel_error"] = _rel_error(gt.linear(xs[0], ws[0]), xs[0], ws[0])
    res["flinear_rel_error"] = _rel_error(F.linear(xs[0], ws[0]), xs[0], ws[0])
    try:
        found = chosen_choice(xs[0], ws[0].t())
        res["kernel"] = None if found is None else {
            "name": found[1].config.name, "how": found[1].how, "swap": found[1].swap}
    except Exception as exc:  # noqa: BLE001 - reporting only
        res["kernel"] = {"error": str(exc)}
    res["gemmgen_ms"], out = _time_graph(gt.linear, xs, ws)
    res["gemmgen_graph_rel_error"] = _rel_error(out, xs[0], ws[0])  # the replayed output too
    res["flinear_ms"], _ = _time_graph(F.linear, xs, ws)
    worst = max(res["gemmgen_rel_error"], res["gemmgen_graph_rel_error"])
    res["ok"] = worst <= TOLERANCE  # NaN fails too
    if not res["ok"]:
        res["error"] = f"gemmgen rel error {worst:.2e} > {TOLERANCE}"
    del xs, ws
    torch.cuda.empty_cache()
    return res


def time_phase(db: str, out: str, before_db: str | None = None) -> int:
    """The timing run (a child process, $GEMMGEN_TUNE_DB = ``db``): every shape, into ``out``;
    with ``before_db``, gemmgen.gemm with it and with ``db`` side by side
    (``_time_before_and_after``) instead of gemmgen.torch.linear."""
    import torch
    if os.environ.get("GEMMGEN_TUNE_DB") != db:
        raise SystemExit("time phase: GEMMGEN_TUNE_DB must name the database")
    rows = shapes()
    _prewarm(rows, db)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 0) or 50 * 2 ** 20
    from gemmgen.torch import launcher
    results, t0 = {}, time.monotonic()
    for r in rows:
        key = f"{r['M']}x{r['N']}x{r['K']}"
        if key in results:
            continue
        try:
            results[key] = (_time_before_and_after(r, l2, before_db, db) if before_db
                            else _time_one(r, l2))
        except Exception as exc:  # noqa: BLE001 - recorded; the parent fails loudly
            results[key] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        got = results[key]
        print(f"  {key}: {got.get('gemmgen_ms') or (got.get('before_ms'), got.get('after_ms'))}"
              f" ms ({got.get('kernel') or got.get('after_kernel')})", flush=True)
    write_json(Path(out), {"gpu": torch.cuda.get_device_name(0), "shapes": results,
                           "launcher": launcher.loaded(), "launcher_why_not": launcher.why_not(),
                           "seconds": round(time.monotonic() - t0, 1)})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="the tuning database ($GEMMGEN_TUNE_DB too)")
    ap.add_argument("--out", required=True, help="the measurements' JSON file")
    ap.add_argument("--before-db", help="time gemm with this database and with --db, "
                                        "interleaved in this one run")
    args = ap.parse_args(argv)
    return time_phase(args.db, args.out, args.before_db)


if __name__ == "__main__":
    sys.exit(main())
