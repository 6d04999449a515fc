"""Docs tables (tune stage): Markdown tables from the committed results files, kept in sync in
the regions ``<!-- gemmgen-table file=PATH view=VIEW [key=value ...] -->`` ... ``<!--
/gemmgen-table -->`` of README.md and docs/**/*.md by ``python -m gemmgen.tune.tables [--check]``.
Row filters: ``dtype=a,b``, ``part=a,b``, ``family=`` (the row's config), ``kernel~=sub|sub``
and ``presets=1`` (rows named after a preset)."""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from functools import reduce
from math import exp, log
from pathlib import Path

from ..model.presets import PRESETS
from .results import row_baseline

REGION = re.compile(r"(<!-- gemmgen-table ([^\n]*?) -->\n)(.*?)(<!-- /gemmgen-table -->)", re.DOTALL)


def _num(v) -> str:
    if isinstance(v, float):
        return f"{v:.1e}" if 0 < abs(v) < 0.01 else f"{v:.2f}"
    return "-" if v is None else ("yes" if v else "no") if isinstance(v, bool) else str(v)


def _shape(r) -> str:
    m, n, k = r["M"], r["N"], r["K"]
    return f"{m}³" if m == n == k else f"{m}x{n}x{k}"


FILTERS = ("dtype", "part", "scaling", "accum", "routing", "model", "mode", "layout")
"""Row fields a region keeps rows by (``scaling=block,row``); ``shape=MxNxK,...`` too."""


def _keep(r, o) -> bool:
    kernel = str(r.get("kernel", ""))
    return (all(str(r.get(f)) in o[f].split(",") for f in FILTERS if f in o)
            and ("shape" not in o or f"{r['M']}x{r['N']}x{r['K']}" in o["shape"].split(","))
            and ("family" not in o or (r.get("config") or {}).get("family") == o["family"])
            and ("kernel~" not in o or any(s in kernel for s in o["kernel~"].split("|")))
            and ("presets" not in o or kernel in PRESETS))


def _table(head: list[str], body: list[list]) -> list[str]:
    """Markdown rows; a column whose cells are all numbers is right-aligned."""
    num = [i > 0 and body and all(re.fullmatch(r"-|-?[\d.,]+(e[+-]\d+)?[%x]?", str(row[i]))
                                  for row in body) for i in range(len(head))]
    return ["| " + " | ".join(head) + " |", "| " + " | ".join("---:" if n else "---" for n in num)
            + " |", *["| " + " | ".join(map(str, row)) + " |" for row in body]]


def _caption(path: str, doc, rows) -> str:
    """The source file, its suite, GPU, and the date(s) and commit(s) of the rows shown."""
    doc = doc if isinstance(doc, dict) else {}
    dates = sorted({str(r["date"])[:10] for r in rows if r.get("date")}) or \
        [str(doc["date"])[:10] if doc.get("date") else "date not recorded"]
    commit = doc.get("git_commit") or doc.get("gemmgen_commit")
    commits = list(dict.fromkeys(str(r["git_commit"])[:7] for r in rows if r.get("git_commit"))) \
        or [str(commit)[:7] if commit else "not recorded"]
    gpu = doc.get("gpu") or next((r["gpu"] for r in rows if r.get("gpu")), "GPU not recorded")
    extra = "".join(f"; {k}: {doc[k]}" for k in ("baseline", "method") if doc.get(k))
    return (f"*Source: `{path}` (suite {doc.get('suite') or Path(path).stem}), {gpu}, "
            f"{', '.join(dates)}, commit {', '.join(commits)}{extra}.*")


def ladder(doc, o) -> tuple[list[str], list]:
    """Per-kernel rows at one or more sizes (``size=4096,4095x4097x4093``): TFLOP/s, the
    baseline's TFLOP/s and the percentage of it."""
    sizes = [tuple(map(int, s.split("x"))) if "x" in s else (int(s),) * 3
             for s in o.get("size", "4096").split(",")]
    base = "baseline" if doc.get("baseline") else "cuBLAS"  # a suite names it in its header
    rows = [r for r in doc["rows"] if _keep(r, o) and (r["M"], r["N"], r["K"]) in sizes]
    cells = {(r["kernel"], r.get("dtype", "fp32"), (r["M"], r["N"], r["K"])): r for r in rows}
    head = ["kernel", "dtype"] + [h for m, n, k in sizes for h in (
        f"{_shape({'M': m, 'N': n, 'K': k})} TFLOP/s", f"{base} TFLOP/s", f"% of {base}")]
    body = []
    for kern, dt in dict.fromkeys((r["kernel"], r.get("dtype", "fp32")) for r in rows):
        body.append([kern, dt])
        for r in (cells.get((kern, dt, size), {}) for size in sizes):
            pct, cub = row_baseline(r, "pct"), row_baseline(r)
            pct = 100 * r["tflops"] / cub if pct is None and cub else pct
            body[-1] += [_num(r.get("tflops")), _num(cub), "-" if pct is None else f"{pct:.1f}%"]
    return _table(head, body), rows


def compare(doc, o) -> tuple[list[str], list]:
    """A row per shape and kernel that has a baseline: TFLOP/s, the baseline's and the ratio;
    ``extra=`` adds fields (``tile``, ``swap``, ``path``, ``rel_error``, ...)."""
    base, extra = "baseline" if doc.get("baseline") else "cuBLAS", o.get("extra", "").split(",")
    extra = [e for e in extra if e]
    rows = [r for r in doc["rows"] if _keep(r, o) and row_baseline(r) and r.get("tflops")]
    body = []
    for r in rows:
        drop, cub = {r.get("dtype"), f"{r['M']}x{r['N']}x{r['K']}"}, row_baseline(r)
        label = " ".join(w for w in str(r["kernel"]).split() if w not in drop) or "gemmgen"
        tile = "{bm}x{bn}".format(**r["config"]) if r.get("config") else None
        body.append([_shape(r), r.get("dtype", "fp32"), label, _num(r["tflops"]), _num(cub),
                     f"{r['tflops'] / cub:.2f}x"] + [_num(tile if e == "tile" else r.get(e))
                                                     for e in extra])
    head = ["shape", "dtype", "kernel", "TFLOP/s", f"{base} TFLOP/s", f"x {base}"]
    return _table(head + [f"`{e}`" for e in extra], body), rows


def accuracy(doc, o) -> tuple[list[str], list]:
    """Per data set, each method's (``methods=``) normwise error and median / p99 ulps."""
    rows = [r for r in doc["rows"] if _keep(r, o) and "data" in r]
    methods = o["methods"].split(",")
    body = [[r["data"], _shape(r)] + [
        f"{r[m]['rel_error']:.2e}; {r[m]['ulps_p50_p99_max'][0]:.1f} / "
        f"{r[m]['ulps_p50_p99_max'][1]:.0f} ulp" for m in methods] for r in rows]
    return _table(["data", "shape", *methods], body), rows


def tune(doc, o) -> tuple[list[str], list]:
    """Per tuning-database entry: candidates measured, the winner and its speed beside the
    entry's baseline (cuBLAS in entries made before baselines were named)."""
    body = []
    for e in doc["entries"].values():
        c, cub = e["candidates"], row_baseline(e)
        win = c.get(e.get("winner"), {}).get("tflops")
        body.append([_shape(e), e["dtype"], e.get("family", "-"),
                     f"{sum(x.get('status') == 'ok' for x in c.values())} of {len(c)}",
                     f"`{e.get('winner')}`", _num(win), _num(cub),
                     f"{100 * win / cub:.1f}%" if cub and win else "-"])
    base = "baseline" if any(e.get("baseline") for e in doc["entries"].values()) else "cuBLAS"
    head = ["shape", "dtype", "family", "ok", "winner", "TFLOP/s", f"{base} TFLOP/s",
            f"% of {base}"]
    return _table(head, body), list(doc["entries"].values())


def fields(doc, o) -> tuple[list[str], list]:
    """Fields of a JSON document: a row per ``keys=`` entry (a dotted path to an object), a
    column per ``cols=`` field of it (default: every field of the first), ``digits=`` digits."""
    objs = {k: reduce(lambda d, part: d[part], k.split("."), doc) for k in o["keys"].split(",")}
    cols = o["cols"].split(",") if o.get("cols") else list(next(iter(objs.values())))
    body = [[f"`{k}`"] + [format(v[c], f".{o.get('digits', 4)}g") if isinstance(v.get(c), float)
                          else _num(v.get(c)) for c in cols] for k, v in objs.items()]
    return _table(["field", *[f"`{c}`" for c in cols]], body), []


def ncu(text: str, o) -> tuple[list[str], list]:
    """Nsight Compute metrics (``metrics=sub,sub``) of each profiled kernel in a .txt report."""
    kernels, metrics = [], {}
    for line in text.splitlines():
        if re.match(r"  \S.*\(\d+, \d+, \d+\)x\(", line):
            kernels.append(line.split()[0])
        elif kernels and re.match(r" {4}[a-z0-9_]+__\S+\s", line):
            name, *rest = line.split()
            unit = {"%": "%", "us": " us", "ms": " ms"}.get(rest[0] if len(rest) > 1 else "", "")
            metrics.setdefault(name, {})[kernels[-1]] = rest[-1] + unit
    body = [[f"`{m}`"] + [v.get(k, "-") for k in kernels] for m, v in metrics.items()
            if any(w in m for w in o["metrics"].split(","))]
    return _table(["metric", *[f"`{k}`" for k in kernels]], body), []


def summary(doc, o) -> tuple[list[str], list]:
    """Per dtype, layout and mode (``by=`` fields, default those three): rows, the geometric
    mean, least and greatest of TFLOP/s over the baseline's, as a ratio."""
    keys = o.get("by", "dtype,layout,mode").split(",")
    groups: dict[tuple, list] = {}
    kept = [r for r in doc["rows"] if _keep(r, o) and row_baseline(r) and r["tflops"]]
    for r in kept:
        groups.setdefault(tuple(r.get(k, "-") for k in keys), []).append(
            r["tflops"] / row_baseline(r))
    body = [[*key, len(v), f"{exp(sum(map(log, v)) / len(v)):.3f}", f"{min(v):.2f}",
             f"{max(v):.2f}"] for key, v in groups.items()]
    head = [*keys, "rows", "geomean (x baseline)", "min", "max"]
    return _table(head, body), kept


VIEWS = {f.__name__: f for f in (ladder, compare, accuracy, tune, fields, ncu, summary)}


def _presets_file(config) -> str:
    """Where a family's presets are written: the ``space.py`` beside its config class
    (``gemmgen/model/families/hopper/wgmma/space.py``)."""
    module = type(config).__module__.rsplit(".", 1)[0]
    return module.replace(".", "/") + "/space.py"


def render(spec: str, root: Path = Path(".")) -> str:
    """The Markdown (table, blank line, caption) of one region's ``key=value`` spec."""
    o = dict(re.fullmatch(r"([^=~]+~?)=(.*)", t).groups() for t in shlex.split(spec))
    if o.get("view") not in (*VIEWS, "presets"):
        raise ValueError(f"unknown view {o.get('view')!r} in {spec!r}; known: {', '.join(VIEWS)}"
                         ", presets")
    if o["view"] == "presets":  # a family's ladder, from the code rather than a results file
        ps = [p for p in PRESETS.values() if p.config.family == o["family"]]
        lines = _table(["step", "preset", "technique", "source"],
                       [[i, f"`{p.name}`", p.technique, p.source] for i, p in enumerate(ps, 1)])
        return "\n".join(lines) + f"\n\n*Source: the {o['family']} presets in " \
            f"`{_presets_file(ps[0].config)}` (`gemmgen list --json`).*"
    text = (root / o["file"]).read_text()
    doc = text if o["file"].endswith(".txt") else json.loads(text)
    lines, rows = VIEWS[o["view"]](doc, o)
    return "\n".join(lines) + "\n\n" + _caption(o["file"], doc, rows)


def sync(paths, root: Path = Path("."), check: bool = False) -> list[str]:
    """Regenerate every region of the files ``paths`` (relative to ``root``); with ``check``
    only compare. Returns the stale regions, each as ``file: region N (spec)``."""
    stale = []
    for path in paths:
        text = (root / path).read_text()
        new = REGION.sub(lambda m: m[1] + "\n" + render(m[2], root) + "\n\n" + m[4], text)
        stale += [f"{path}: region {i} ({m[2]})" for i, (m, n) in
                  enumerate(zip(REGION.finditer(text), REGION.finditer(new)), 1) if m[3] != n[3]]
        if new != text and not check:
            (root / path).write_text(new)
    return stale


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gemmgen.tune.tables", description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1, naming them, if regions are stale")
    ap.add_argument("files", nargs="*", help="default: README.md and docs/**/*.md")
    args = ap.parse_args(argv)
    files = args.files or ["README.md", *map(str, sorted(Path("docs").rglob("*.md")))]
    try:
        stale = sync(files, check=args.check)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"error: a table region cannot be rendered: {exc!r}")
    for s in stale:
        print(("stale: " if args.check else "updated: ") + s, file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
