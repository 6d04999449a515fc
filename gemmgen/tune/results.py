"""Reports: the results file (benchmarks/results/<gpu>.json), tables and the TFLOP/s plot."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from pathlib import Path

from ..codegen.render import write_atomic


class ResultsError(ValueError):
    """A results file gemmgen cannot read; the message names the file and the problem."""


ROW_FIELDS = {"kernel": str, "M": int, "N": int, "K": int, "tflops": (int, float)}
"""Fields every row of a results file holds (reports read these)."""


def load(path: str | Path) -> dict:
    """The results document at ``path`` (``bench --json``), checked: an object with ``gpu``,
    ``cuda_version`` and a list of ``rows``, each with ``kernel``, ``M``, ``N``, ``K`` and
    ``tflops``. Raises ``ResultsError`` naming the file otherwise."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
                           ) from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno}); give a "
                           f"file written by gemmgen bench --json") from None
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


def git_commit() -> str | None:
    """$GEMMGEN_GIT_COMMIT if set (a copy of the tree without .git, as on a lent GPU machine),
    else the checkout's HEAD commit, else None."""
    if os.environ.get("GEMMGEN_GIT_COMMIT"):
        return os.environ["GEMMGEN_GIT_COMMIT"]
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


def default_path(gpu: str) -> Path:
    """benchmarks/results/<gpu name as a file name>.json"""
    return Path("benchmarks/results") / (re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_") + ".json")


def write(doc: dict, path: str | Path) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically (creating folders); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    """A fixed-width text table of benchmark rows."""
    head = f"{'kernel':<30} {'dtype':>5} {'M x N x K':>17} {'TFLOP/s':>8} {'cuBLAS':>8} " \
           f"{'%cuBLAS':>8} {'rel err':>9} {'ok':>3} {'regs':>5}"
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        lines.append(f"{r['kernel']:<30} {r.get('dtype', 'fp32'):>5} {shape:>17} {r['tflops']:>8.2f} "
                     f"{_fmt(r['cublas_tflops'], '8.2f'):>8} {_fmt(r['pct_cublas'], '7.1f'):>8} "
                     f"{r['rel_error']:>9.2e} {'yes' if r['passed'] else 'NO':>3} "
                     f"{r['registers']:>5}")
    return "\n".join(lines)


def ladder_markdown(doc: dict, size=(4096, 4096, 4096), techniques: dict | None = None) -> str:
    """README table: kernel, dtype, technique, TFLOP/s and % of cuBLAS at ``size``; after each
    dtype's kernels, cuBLAS for that dtype from the same run."""
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
                         f"{r['tflops']:.2f} | {_fmt(r.get('pct_cublas'), '.1f')}% |")
        if group[0].get("cublas_tflops"):
            lines.append(f"| **cuBLAS** | {pair[0]} / {pair[1]} | `cublasGemmEx`, same run | "
                         f"{group[0]['cublas_tflops']:.2f} | 100% |")
    return "\n".join(lines) + f"\n\n{doc['gpu']}, {m}x{n}x{k}, CUDA {doc['cuda_version']}.\n"


def plot(doc: dict, path: str | Path) -> Path:
    """TFLOP/s against problem size: one panel per dtype pair, each kernel a line, cuBLAS for
    that dtype the dashed black reference line."""
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
        cub = {(r["M"], r["N"], r["K"]): r["cublas_tflops"] for r in group}
        if any(cub.values()):
            ax.plot(labels, [cub.get(s) for s in shapes], "k--", marker="s", label="cuBLAS")
        ax.set_xlabel("M = N = K (or M x N x K)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"A,B {pair[0]} / C {pair[1]}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    fig.suptitle(f"gemmgen kernels vs cuBLAS, {doc['gpu']}")
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
