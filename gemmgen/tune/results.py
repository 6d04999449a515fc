"""Reports: the results file (benchmarks/results/<gpu>.json), tables and the TFLOP/s plot."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from pathlib import Path

from ..codegen.render import write_atomic
from ..files import read_document


class ResultsError(ValueError):
    """A results file gemmgen cannot read; the message names the file and the problem."""


ROW_FIELDS = {"kernel": str, "M": int, "N": int, "K": int, "tflops": (int, float)}
"""Fields every row of a results file holds (reports read these)."""


def load(path: str | Path) -> dict:
    """The results document at ``path`` (``bench --json``), checked: an object with ``gpu``,
    ``cuda_version`` and a list of ``rows``, each with ``kernel``, ``M``, ``N``, ``K`` and
    ``tflops``. Raises ``ResultsError`` naming the file otherwise."""
    path = Path(path)
    doc = read_document(path, ResultsError, fix="give a file written by gemmgen bench --json")
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ResultsError(f"{path} is not a gemmgen results file (no \"rows\" list); give a "
                           f"file written by gemmgen bench --json")
    for key in ("gpu", "cuda_version"):
        if key not in doc:
            raise ResultsError(f"{path} lacks {key!r}: not a gemmgen results file")
    for i, row in enumerate(doc["rows"]):
        bad = [f for f, t in ROW_FIELDS.items() if not isinstance(row, dict)
               or not isinstance(row.get(f), t) or isinstance(row.get(f), bool)]
        if bad:
            raise ResultsError(f"{path}: row {i} lacks or has a wrong {', '.join(bad)}")
    return doc


def row_baseline(row: dict, field: str = "tflops"):
    """A row's (or tuning entry's) baseline figure: ``baseline_<field>`` (``pct_baseline`` for
    "pct") or, in files written before the baseline was named, ``cublas_<field>``
    (``pct_cublas``)."""
    new, old = (("pct_baseline", "pct_cublas") if field == "pct"
                else (f"baseline_{field}", f"cublas_{field}"))
    got = row.get(new)
    return got if got is not None else row.get(old)


COMMIT_VARIABLES = ("GEMMGEN_COMMIT", "GEMMGEN_GIT_COMMIT")
"""Environment variables that name the commit of a copy of the tree whose .git is missing or
stale (as on a lent GPU machine), first found first; tests/run_gpu.py and the investigation
scripts read GEMMGEN_COMMIT too."""


def git_commit() -> str | None:
    """The first of ``COMMIT_VARIABLES`` that is set, else the checkout's HEAD commit, else
    None."""
    for name in COMMIT_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def finish(doc: dict) -> dict:
    """Add the git commit and the UTC date to a results document from ``run_bench``."""
    return {"gpu": doc["gpu"], "cuda_version": doc["cuda_version"],
            "cuda_driver": doc["cuda_driver"], "git_commit": git_commit(),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **{k: v for k, v in doc.items() if k not in ("gpu", "cuda_version", "cuda_driver")}}


def merge(old: dict, new: dict) -> dict:
    """``new``'s header and rows, plus ``old``'s rows for other (kernel, dtype, shape)."""
    def ident(r):
        return (r["kernel"], r.get("dtype", "fp32"), r["M"], r["N"], r["K"])
    fresh = {ident(r) for r in new["rows"]}
    return {**new, "rows": [r for r in old["rows"] if ident(r) not in fresh] + new["rows"]}


def file_stem(gpu: str) -> str:
    """A GPU's name as a file name: runs of other characters than letters and digits become
    one underscore ("NVIDIA H100 80GB HBM3" -> "NVIDIA_H100_80GB_HBM3")."""
    return re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_")


def default_path(gpu: str) -> Path:
    """benchmarks/results/<gpu name as a file name>.json"""
    return Path("benchmarks/results") / (file_stem(gpu) + ".json")


def write(doc: dict, path: str | Path) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically (creating folders); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict], label: str = "kernel", width: int = 30) -> str:
    """A fixed-width text table of benchmark rows, each named by its field ``label`` (the
    kernel's label; a suite's rows also have "case"), with the baseline's TFLOP/s (base) and
    the percentage of it (%base)."""
    head = f"{label:<{width}} {'dtype':>5} {'M x N x K':>17} {'TFLOP/s':>8} {'base':>8} " \
           f"{'%base':>8} {'rel err':>9} {'ok':>3} {'regs':>5}"
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        lines.append(f"{r.get(label, r['kernel'])!s:<{width}} {r.get('dtype', 'fp32'):>5} "
                     f"{shape:>17} {r['tflops']:>8.2f} "
                     f"{_fmt(row_baseline(r), '8.2f'):>8} "
                     f"{_fmt(row_baseline(r, 'pct'), '7.1f'):>8} "
                     f"{_fmt(r.get('rel_error'), '9.2e'):>9} {'yes' if r['passed'] else 'NO':>3} "
                     f"{_fmt(r.get('registers'), '5d'):>5}")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """Per dtype, layout and mode: rows, failures, and the geometric mean, least and most of
    % of the baseline over the rows that have one."""
    import math
    head = f"{'dtype':>5} {'layout':>6} {'mode':>6} {'rows':>5} {'failed':>6} " \
           f"{'geomean %':>9} {'min %':>7} {'max %':>7}"
    lines = [head, "-" * len(head)]
    for key in dict.fromkeys((r.get("dtype"), r.get("layout"), r.get("mode")) for r in rows):
        group = [r for r in rows if (r.get("dtype"), r.get("layout"), r.get("mode")) == key]
        pct = [row_baseline(r, "pct") for r in group if row_baseline(r, "pct")]
        mean = math.exp(sum(math.log(p) for p in pct) / len(pct)) if pct else None
        lines.append(f"{key[0] or '-':>5} {key[1] or '-':>6} {key[2] or '-':>6} "
                     f"{len(group):>5} {sum(not r['passed'] for r in group):>6} "
                     f"{_fmt(mean, '9.1f'):>9} {_fmt(min(pct, default=None), '7.1f'):>7} "
                     f"{_fmt(max(pct, default=None), '7.1f'):>7}")
    return "\n".join(lines)


def ladder_markdown(doc: dict, size=(4096, 4096, 4096), techniques: dict | None = None) -> str:
    """README table: kernel, dtype, technique, TFLOP/s and % of the baseline at ``size``; after
    each dtype's kernels, the baseline (cuBLAS, F.linear or torch.matmul) for that dtype from
    the same run."""
    techniques = techniques or {}
    m, n, k = size
    lines = ["| kernel | dtype (A,B / C) | technique | TFLOP/s | % of cuBLAS |",
             "| --- | --- | --- | ---: | ---: |"]
    rows = [r for r in doc["rows"] if (r["M"], r["N"], r["K"]) == size]
    for pair in dict.fromkeys((r.get("dtype", "fp32"), r.get("out", "fp32")) for r in rows):
        group = [r for r in rows if (r.get("dtype", "fp32"), r.get("out", "fp32")) == pair]
        for r in group:
            lines.append(f"| {r['kernel']} | {pair[0]} / {pair[1]} | "
                         f"{techniques.get(r['kernel'], r.get('name', ''))} | "
                         f"{r['tflops']:.2f} | {_fmt(row_baseline(r, 'pct'), '.1f')}% |")
        base, name = row_baseline(group[0]), group[0].get("baseline")
        if base and name in (None, "cublasGemmEx (CuPy)"):
            lines.append(f"| **cuBLAS** | {pair[0]} / {pair[1]} | `cublasGemmEx`, same run | "
                         f"{base:.2f} | 100% |")
        elif base:
            lines.append(f"| **{name}** | {pair[0]} / {pair[1]} | PyTorch (cuBLASLt), same "
                         f"run | {base:.2f} | 100% |")
    return "\n".join(lines) + f"\n\n{doc['gpu']}, {m}x{n}x{k}, CUDA {doc['cuda_version']}.\n"


def plot(doc: dict, path: str | Path) -> Path:
    """TFLOP/s against problem size: one panel per dtype pair, each kernel a line, cuBLAS for
    that dtype (or the document's ``baseline_label``) the dashed black reference line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = doc["rows"]
    pairs = list(dict.fromkeys((r.get("dtype", "fp32"), r.get("out", "fp32")) for r in rows))
    fig, axes = plt.subplots(1, len(pairs), figsize=(7 * len(pairs), 5), squeeze=False)
    for ax, pair in zip(axes[0], pairs):
        group = [r for r in rows if (r.get("dtype", "fp32"), r.get("out", "fp32")) == pair]
        shapes = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in group))
        labels = [f"{m}" if m == n == k else f"{m}x{n}x{k}" for m, n, k in shapes]
        for name in dict.fromkeys(r["kernel"] for r in group):
            by = {(r["M"], r["N"], r["K"]): r["tflops"] for r in group if r["kernel"] == name}
            ax.plot(labels, [by.get(s) for s in shapes], marker="o", label=name)
        cub = {(r["M"], r["N"], r["K"]): row_baseline(r) for r in group}
        if any(cub.values()):
            ax.plot(labels, [cub.get(s) for s in shapes], "k--", marker="s",
                    label=doc.get("baseline_label", "cuBLAS"))
        ax.set_xlabel("M = N = K (or M x N x K)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"A,B {pair[0]} / C {pair[1]}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    fig.suptitle(f"gemmgen kernels vs {doc.get('baseline_label', 'cuBLAS')}, {doc['gpu']}")
    return save_figure(fig, path)


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write as PNG (creating folders) and close a matplotlib figure."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_bars(doc: dict, path: str | Path) -> Path:
    """TFLOP/s as bars, one panel per dtype pair, each row's baseline (the document's
    ``baseline_label``) a black tick on its bar; a failed row is a bar of 0 marked "fail"."""
    plt = _pyplot()
    rows = doc["rows"]
    pairs = list(dict.fromkeys((r.get("dtype", "fp32"), r.get("out", "fp32")) for r in rows))
    most = max(sum(1 for r in rows if (r.get("dtype", "fp32"), r.get("out", "fp32")) == p)
               for p in pairs)
    fig, axes = plt.subplots(len(pairs), 1, figsize=(max(8.0, 0.45 * most + 2), 4.5 * len(pairs)),
                             squeeze=False)
    for ax, pair in zip(axes[:, 0], pairs):
        group = [r for r in rows if (r.get("dtype", "fp32"), r.get("out", "fp32")) == pair]
        x = range(len(group))
        ax.bar(x, [r["tflops"] for r in group], color="tab:blue", label="gemmgen")
        base = [row_baseline(r) for r in group]
        ax.scatter([i for i, b in zip(x, base) if b], [b for b in base if b], marker="_",
                   s=500, color="k", label=doc.get("baseline_label", "cuBLAS"), zorder=3)
        for i, r in zip(x, group):
            if not r.get("passed", True):
                ax.annotate("fail", (i, r["tflops"]), ha="center", va="bottom", color="red")
        ax.set_xticks(list(x), _bar_labels(group), rotation=60, ha="right", fontsize=8)
        values = [v for v in [r["tflops"] for r in group] + base if v]
        if values and max(values) > 30 * min(values):  # decode next to 4096^3: log scale
            ax.set_yscale("log")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{doc.get('suite', 'gemmgen')}, {doc['gpu']}: A,B {pair[0]} / C {pair[1]}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def _bar_labels(group: list[dict]) -> list[str]:
    """The kernel labels when they name each bar, else the shapes (with the kernel label when
    there are several)."""
    kernels = [r["kernel"] for r in group]
    if len(set(kernels)) == len(kernels):
        return kernels
    many = len(set(kernels)) > 1
    return [f"{r['M']}x{r['N']}x{r['K']}" + (f" {r['kernel']}" if many else "") for r in group]


def plot_heatmap(doc: dict, path: str | Path) -> Path:
    """gemmgen's speed over the baseline's (pct_baseline / 100) by token count (columns) and
    model layer (rows), one panel per dtype and layout or mode; failed cells say "fail"."""
    import numpy as np
    plt = _pyplot()
    rows = [r for r in doc["rows"] if r.get("tokens") is not None]
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    views = list(dict.fromkeys((r.get("layout"), r.get("mode")) for r in rows))
    layers = list(dict.fromkeys(_layer(r) for r in rows))
    tokens = sorted({r["tokens"] for r in rows})
    fig, axes = plt.subplots(len(dtypes), len(views), squeeze=False, figsize=(
        len(views) * (1.5 + 0.55 * len(tokens)), len(dtypes) * (1.2 + 0.32 * len(layers))))
    image = None
    for (i, dtype), (j, view) in ((a, b) for a in enumerate(dtypes) for b in enumerate(views)):
        ax, grid = axes[i][j], np.full((len(layers), len(tokens)), np.nan)
        for r in rows:
            if r["dtype"] == dtype and (r.get("layout"), r.get("mode")) == view:
                y, x = layers.index(_layer(r)), tokens.index(r["tokens"])
                ratio = row_baseline(r, "pct") / 100 if row_baseline(r, "pct") else np.nan
                grid[y, x] = ratio
                ax.text(x, y, "fail" if not r.get("passed") else f"{ratio:.2f}", ha="center",
                        va="center", fontsize=6, color="red" if not r.get("passed") else "k")
        image = ax.imshow(grid, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens], fontsize=7)
        ax.set_yticks(range(len(layers)), layers if j == 0 else [], fontsize=7)
        ax.set_xlabel("tokens (M of the layer)")
        ax.set_title(" ".join(v for v in (dtype, *view) if v and v != "kernel"), fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.6,
                 label=f"gemmgen / {doc.get('baseline_label', 'cuBLAS')} (speed)")
    fig.suptitle(f"{doc.get('suite', 'gemmgen')}: speed over "
                 f"{doc.get('baseline_label', 'cuBLAS')}, {doc['gpu']}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # tight_layout does not take colorbars
    plt.close(fig)
    return path


def _layer(r: dict) -> str:
    extra = len(r.get("aliases") or ())
    return f"{r.get('model')}.{r.get('layer')}" + (f" (+{extra})" if extra else "")


def plot_suite(doc: dict, path: str | Path) -> Path | None:
    """The plot a suite's document asks for (``doc["plot"]``): bars, lines (``plot``) or a
    heatmap; None for "none" or no rows."""
    style = doc.get("plot", "lines")
    if style == "none" or not doc["rows"]:
        return None
    draw = {"bars": plot_bars, "lines": plot, "heatmap": plot_heatmap}[style]
    return draw(doc, path)
