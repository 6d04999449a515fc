"""Is a tuned shape ever slower than gemm's default? gemmgen.gemm on 24 nn.Linear layers of
Llama-3-8B, Qwen2.5-7B, Phi-3-mini and Falcon-7B (bf16, x @ W^T: rcr, M x N x K = tokens x
out x in features, M in 1 ... 4096) with an empty tuning database and with the one
``gemmgen tune`` wrote for those shapes, timed side by side in one run, and F.linear.

    python3 benchmarks/investigations/tune_never_slower.py --out DIR [--max-configs 4]
        [--budget 12]

Timing: each implementation captured in a CUDA graph of one call per rotated input set (the
sets together span 3x L2); the before, after and F.linear graphs replayed in turn many times
(drift in clocks and power falls on all three), one CUDA event pair per replay, the median
per call. (Two separate runs of the same kernel differed by up to 18% on an H100.) Each output is checked against a float64 product (relative Frobenius error). Each
timing run is its own process (gemm reads the tuning database once per process). Writes
DIR/tune_never_slower_<GPU>.json (per shape: before, after, after/before, F.linear TFLOP/s;
summary: min after/before against the bar of 0.99) and prints a table. Exit status: 0 when
every shape verified and met the bar, 2 when a shape missed the bar, 1 on any error.
Needs one CUDA GPU with PyTorch, PyCUDA and nvcc; under 5 minutes on an H100.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMING = "tune_never_slower_timing.py"
"""The timing run, a child process per tuning database (gemm reads the database once)."""
BAR = 0.99
"""Tuned time may not exceed the untuned time by more than this (after/before TFLOP/s >= BAR)."""
TOLERANCE = 2e-2
"""Largest relative Frobenius error of a bf16 output against float64 (bf16 keeps 8 bits)."""
MODELS = {
    "llama3_8b": {"q_proj": (4096, 4096), "k_proj": (1024, 4096), "o_proj": (4096, 4096),
                  "gate_proj": (14336, 4096), "down_proj": (4096, 14336)},
    "qwen2_5_7b": {"q_proj": (3584, 3584), "k_proj": (512, 3584), "o_proj": (3584, 3584),
                   "gate_proj": (18944, 3584), "down_proj": (3584, 18944)},
    "phi3_mini": {"qkv_proj": (9216, 3072), "o_proj": (3072, 3072),
                  "gate_up_proj": (16384, 3072), "down_proj": (3072, 8192)},
    "falcon_7b": {"query_key_value": (4672, 4544), "dense": (4544, 4544),
                  "dense_h_to_4h": (18176, 4544), "dense_4h_to_h": (4544, 18176)},
}
"""(out_features N, in_features K) per layer, from each model's config.json on Hugging Face:
Meta-Llama-3-8B (hidden 4096, intermediate 14336, 8 KV heads of 128), Qwen2.5-7B (3584, 18944,
4 KV heads of 128), Phi-3-mini-4k-instruct (3072, 8192; fused qkv and gate_up), Falcon-7B
(4544, 4 x 4544; multi-query: q + one K and one V head of 64)."""
PLAN = {
    1: "llama3_8b.q_proj qwen2_5_7b.k_proj phi3_mini.qkv_proj falcon_7b.dense_4h_to_h",
    16: "llama3_8b.down_proj qwen2_5_7b.gate_proj phi3_mini.o_proj falcon_7b.query_key_value",
    64: "llama3_8b.k_proj qwen2_5_7b.o_proj phi3_mini.down_proj falcon_7b.query_key_value",
    256: "llama3_8b.gate_proj qwen2_5_7b.down_proj phi3_mini.gate_up_proj falcon_7b.dense",
    1024: "llama3_8b.o_proj qwen2_5_7b.q_proj phi3_mini.qkv_proj falcon_7b.dense_h_to_4h",
    4096: "llama3_8b.down_proj qwen2_5_7b.k_proj phi3_mini.gate_up_proj falcon_7b.dense",
}
"""M (tokens) -> the model.layer problems timed at that M."""


def shapes() -> list[dict]:
    """The 24 problems: model, layer, M, N, K (bf16, layout rcr)."""
    pairs = [(m, *item.split(".")) for m, items in PLAN.items() for item in items.split()]
    return [{"model": model, "layer": layer, "M": m, "N": MODELS[model][layer][0],
             "K": MODELS[model][layer][1]} for m, model, layer in pairs]


def shapes_file(rows: list[dict], path: Path) -> Path:
    """Write ``gemmgen tune --shapes``' file for ``rows`` (distinct problems, bf16, rcr)."""
    seen = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in rows))
    path.write_text(json.dumps([{"dtype": "bf16", "m": m, "n": n, "k": k, "layout": "rcr"}
                                for m, n, k in seen], indent=1))
    return path


def tflops(m: int, n: int, k: int, ms: float | None) -> float | None:
    """2 M N K per call over the median milliseconds, in TFLOP/s (None without a time)."""
    return round(2 * m * n * k / (ms * 1e-3) / 1e12, 3) if ms else None


def combine(rows: list[dict], before: dict, after: dict) -> list[dict]:
    """One result row per shape. ``after`` (the run after tuning, {"MxNxK": measurement})
    holds gemmgen.gemm with the empty and with the tuned database and F.linear, timed
    interleaved in one process: before/after TFLOP/s and their ratio come from it. ``before``
    (gemmgen.torch.linear before tuning, its own process) is kept as the op's figure.
    ``ok`` when every output of both runs verified."""
    out = []
    for r in rows:
        key = f"{r['M']}x{r['N']}x{r['K']}"
        b, a = before.get(key, {}), after.get(key, {})
        rate = lambda ms: tflops(r["M"], r["N"], r["K"], ms)  # noqa: E731
        tb, ta = rate(a.get("before_ms")), rate(a.get("after_ms"))
        out.append({**r, "before_tflops": tb, "after_tflops": ta,
                    "after_over_before": round(a["before_ms"] / a["after_ms"], 4)
                    if ta and tb else None,
                    "flinear_tflops": rate(a.get("flinear_ms")),
                    "linear_op_tflops_before_tuning": rate(b.get("gemmgen_ms")),
                    "flinear_tflops_before_run": rate(b.get("flinear_ms")),
                    "before_rel_error": a.get("before_rel_error"),
                    "after_rel_error": a.get("after_rel_error"),
                    "linear_op_rel_error": b.get("gemmgen_rel_error"),
                    "before_kernel": a.get("before_kernel"), "after_kernel": a.get("after_kernel"),
                    "ok": bool(b.get("ok") and a.get("ok")),
                    "error": b.get("error") or a.get("error")})
    return out


def summarize(rows: list[dict], bar: float = BAR) -> dict:
    """min and geometric mean of after/before over the shapes, the bar, whether every shape
    verified and met it, and the shapes that did not."""
    ratios = [r["after_over_before"] for r in rows if r["after_over_before"]]
    missing = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows if not r["after_over_before"]]
    below = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows
             if r["after_over_before"] and r["after_over_before"] < bar]
    failed = [f"{r['M']}x{r['N']}x{r['K']}" for r in rows if not r["ok"]]
    return {"shapes": len(rows), "min_after_over_before": min(ratios) if ratios else None,
            "geomean_after_over_before": round(math.exp(sum(map(math.log, ratios))
                                                        / len(ratios)), 4) if ratios else None,
            "bar": bar, "below_bar": below, "unmeasured": missing, "failed_verification":
            failed, "meets_bar": bool(ratios) and not below and not missing and not failed}


def table(rows: list[dict], summary: dict) -> str:
    """The short text table printed at the end."""
    head = f"{'shape':>18} {'model':<11} {'layer':<16} {'before':>7} {'after':>7} " \
           f"{'a/b':>6} {'F.lin':>7}  ok"
    lines = [head, "-" * len(head)]
    for r in rows:
        f = [(f"{v:7.1f}" if v else "      -") for v in
             (r["before_tflops"], r["after_tflops"])]
        ratio = f"{r['after_over_before']:6.3f}" if r["after_over_before"] else "     -"
        fl = f"{r['flinear_tflops']:7.1f}" if r["flinear_tflops"] else "      -"
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        lines.append(f"{shape:>18} {r['model']:<11} {r['layer']:<16} "
                     f"{f[0]} {f[1]} {ratio} {fl}  {'yes' if r['ok'] else 'NO'}")
    lines.append(f"TFLOP/s; min after/before {summary['min_after_over_before']}, geomean "
                 f"{summary['geomean_after_over_before']}, bar {summary['bar']}: "
                 f"{'met' if summary['meets_bar'] else 'NOT MET'}")
    return "\n".join(lines)


def gpu_slug(name: str) -> str:
    """A GPU name as a file-name part: "NVIDIA H100 80GB HBM3" -> "NVIDIA_H100_80GB_HBM3"."""
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") or "GPU"


def write_json(path: Path, doc: dict) -> Path:
    """Write ``doc`` to ``path`` (folders made) through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    return path


def _env(db: str) -> dict:
    """The children's environment: this checkout importable, the tuning database ``db``."""
    env = dict(os.environ, GEMMGEN_TUNE_DB=db, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(cmd: list[str], db: str, timeout: float, label: str) -> tuple[int, float, str]:
    """(exit status, seconds, last lines of output) of a child, its output streamed through;
    killed (exit 124) after ``timeout`` seconds."""
    t0 = time.monotonic()
    print(f"== {label}: {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, env=_env(db), cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    killed = threading.Timer(timeout, proc.kill)
    killed.start()
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines = (lines + [line])[-60:]
    rc = proc.wait()
    timed_out = not killed.is_alive()
    killed.cancel()
    tail = "".join(lines)
    if timed_out and rc != 0:
        return 124, time.monotonic() - t0, f"killed after {timeout:.0f} s\n{tail}"
    return rc, time.monotonic() - t0, tail


def _timing(db: str, work: Path, name: str, timeout: float,
            before_db: str | None = None) -> tuple[dict, dict]:
    """One timing run in a child process: ({"MxNxK": measurement}, run facts); with
    ``before_db``, gemm with it and with ``db`` interleaved."""
    out = work / f"{name}.json"
    extra = ["--before-db", before_db] if before_db else []
    rc, secs, tail = _run([sys.executable, str(Path(__file__).with_name(TIMING)), "--db", db,
                           "--out", str(out), *extra], db, timeout, f"timing {name}")
    facts = {"exit": rc, "seconds": round(secs, 1)}
    if rc != 0 or not out.is_file():
        facts["error"] = f"timing run {name} failed (exit {rc}): {tail[-1500:]}"
        return {}, facts
    doc = json.loads(out.read_text())
    facts.update(gpu=doc.get("gpu"), launcher=doc.get("launcher"),
                 launcher_why_not=doc.get("launcher_why_not"))
    return doc["shapes"], facts


def _tune(db: str, work: Path, args) -> dict:
    """``gemmgen tune`` over the shapes into ``db``; its exit status, seconds and entries."""
    path = shapes_file(shapes(), work / "shapes.json")
    rc, secs, tail = _run([sys.executable, "-m", "gemmgen", "tune", "--shapes", str(path),
                           "--max-configs", str(args.max_configs), "--budget", str(args.budget),
                           "--db", db], db, args.tune_timeout, "tuning")
    facts = {"exit": rc, "seconds": round(secs, 1), "max_configs": args.max_configs,
             "budget_s_per_shape": args.budget}
    if rc != 0:
        facts["error"] = f"gemmgen tune failed (exit {rc}): {tail[-1500:]}"
    try:
        entries = json.loads(Path(db).read_text()).get("entries", {})
    except (OSError, ValueError) as exc:
        entries, facts["error"] = {}, facts.get("error") or f"no tuning database: {exc}"
    facts["entries"] = {k: {f: e.get(f) for f in ("winner", "default", "default_stands",
                                                  "default_tflops", "margin")}
                        | {"measured": len(e.get("candidates", {})),
                           "winner_tflops": e.get("candidates", {}).get(
                               e.get("winner") or "", {}).get("tflops")}
                        for k, e in entries.items()}
    return facts


def _preflight() -> str:
    """The GPU's name; exits 1, saying what is missing, without a GPU, PyCUDA or nvcc."""
    problems = []
    try:
        import torch
        if not torch.cuda.is_available():
            problems.append("PyTorch sees no CUDA GPU")
    except ImportError as exc:
        problems.append(f"no PyTorch ({exc})")
    try:
        import pycuda  # noqa: F401 - gemmgen tune's workers need it
    except ImportError as exc:
        problems.append(f"no PyCUDA ({exc}): gemmgen tune needs it")
    sys.path.insert(0, str(ROOT))
    from gemmgen.compile.nvcc import nvcc_path
    if nvcc_path() is None:
        problems.append("no nvcc on the PATH")
    if problems:
        sys.exit("error: " + "; ".join(problems))
    return torch.cuda.get_device_name(0)


def run(args) -> int:
    """Before, tune, after; the results file and the table. The exit status of ``main``."""
    gpu = _preflight()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tune_never_slower.") as tmp:
        work = Path(tmp)
        empty, tuned = str(work / "empty_db.json"), str(work / "tuned_db.json")
        before, before_facts = _timing(empty, work, "before", args.time_timeout)
        tune_facts = _tune(tuned, work, args)
        after, after_facts = _timing(tuned, work, "after", args.time_timeout, empty)
        tuned_copy = json.loads(Path(tuned).read_text()) if Path(tuned).is_file() else None
    rows = combine(shapes(), before, after)
    summary = summarize(rows)
    errors = [f["error"] for f in (before_facts, tune_facts, after_facts) if f.get("error")]
    errors += [f"{r['M']}x{r['N']}x{r['K']}: {r['error']}" for r in rows if r.get("error")]
    doc = {"gpu": gpu, "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "method": "gemmgen.gemm(x, W.t()) (bf16, rcr) with an empty tuning database "
                     "(before) and with the database gemmgen tune wrote for these shapes "
                     "(after), and F.linear, each graph-captured, the three graphs replayed in "
                     "turn in one process (CUDA events, median per call, inputs rotated over 3x "
                     "L2, random normal data); gemmgen.torch.linear before tuning in its own "
                     "run; outputs checked against float64 (relative Frobenius error)",
           "bar": f"after/before >= {BAR} on every shape", "summary": summary, "rows": rows,
           "runs": {"before": before_facts, "tune": tune_facts, "after": after_facts},
           "errors": errors, "tuning_database": tuned_copy,
           "seconds": round(time.monotonic() - t0, 1)}
    path = write_json(Path(args.out) / f"tune_never_slower_{gpu_slug(gpu)}.json", doc)
    print(table(rows, summary))
    print(f"wrote {path} ({doc['seconds']} s)")
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    if errors or summary["unmeasured"] or summary["failed_verification"]:
        print("FAILED: see the errors above", file=sys.stderr)
        return 1
    if not summary["meets_bar"]:
        print(f"BAR MISSED: after/before below {BAR} at {', '.join(summary['below_bar'])}",
              file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="folder of the results file (default: benchmarks/results)")
    ap.add_argument("--max-configs", type=int, default=4,
                    help="sampled candidates per shape, beside the default and its neighbours")
    ap.add_argument("--budget", type=float, default=12.0,
                    help="gemmgen tune --budget: seconds per shape before no new compile starts")
    ap.add_argument("--tune-timeout", type=float, default=420.0)
    ap.add_argument("--time-timeout", type=float, default=240.0)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
