"""``gemmgen bench --suite NAME|PATH``: run a benchmark suite (``benchmarks/suites/*.toml``) and
write its results file and plot, one of each per suite and GPU:
``benchmarks/results/<suite>_<GPU>.json`` and ``.png``.

Everything on the command line and in the suite file is checked before the GPU is touched:
``--suite`` with options it excludes, an unknown suite, a bad suite file or an ``--only``
that matches nothing exit 2 with the argument named. A partial run (``--only``, ``--quick``,
``--max-rows``) is merged into the suite's results file, replacing the rows it measured again.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from click.core import ParameterSource

from ..runtime.device import require_gpu
from ..tune import results, suites
from ..tune.baseline import resolve
from ..tune.bench import device_info
from ..tune.results import ResultsError
from ..tune.suite_run import RunEnv, document, merge
from ..tune.suite_runs import run_cases
from .main import require_matplotlib, write_text

SUITE_OPTIONS = ("only", "quick", "max_rows", "max_minutes", "results_dir")
"""bench options that only a suite run takes."""
WITH_SUITE = (*SUITE_OPTIONS, "suite", "seed", "arch", "json_path", "plot_path")
"""bench options a suite run takes."""
TABLE_ROWS = 60  # runs with more rows print a summary only


def _name(param) -> str:
    return param.opts[0] if getattr(param, "opts", None) and param.opts[0].startswith("-") \
        else param.human_readable_name


def check_options(ctx: click.Context) -> None:
    """UsageError (exit 2) for suite options without --suite, or --suite with options a suite
    run does not take (--preset, --size, files, ...), naming them."""
    given = [p for p in ctx.command.params
             if ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)]
    if ctx.params.get("suite") is None:
        lone = [p for p in given if p.name in SUITE_OPTIONS]
        if lone:
            raise click.UsageError(f"{_name(lone[0])} works only with --suite NAME")
        return
    bad = [p for p in given if p.name not in WITH_SUITE]
    if bad:
        raise click.BadParameter(f"a suite names its own problems and kernels; it takes no "
                                 f"{', '.join(_name(p) for p in bad)}", param_hint="--suite")


def _plan(suite_arg: str, only, quick: bool, max_rows) -> tuple:
    """(Suite, cases) or BadParameter naming --suite or --only."""
    try:
        suite = suites.load(suite_arg)
    except suites.SuiteError as exc:
        raise click.BadParameter(str(exc), param_hint="--suite") from None
    cases = suites.select(suites.expand(suite, quick), only, max_rows)
    if not cases:
        raise click.BadParameter(f"{only!r} matches no case of suite {suite.name}"
                                 + (" under --quick" if quick else ""), param_hint="--only")
    return suite, cases


def _torch_op(suite):
    """gemmgen.torch.linear for the torch kind (imported only then), else None; the fp8 kind
    needs PyTorch too (for torch._scaled_mm)."""
    if suite.kind == "fp8":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise click.ClickException(f"suite {suite.name} needs PyTorch ({exc}): pip install "
                                       f"'gemmgen[torch]'") from None
    if suite.kind != "torch":
        return None
    try:
        from ..torch import linear
    except ImportError as exc:
        raise click.ClickException(f"suite {suite.name} needs PyTorch ({exc}): pip install "
                                   f"'gemmgen[torch]'") from None
    return linear


def _old(path: Path, partial: bool):
    """The results file a partial run merges into (None for a full run or no file)."""
    if not partial or not path.exists():
        return None
    try:
        return results.load(path)
    except ResultsError as exc:
        raise click.ClickException(f"cannot merge into {path}: {exc} (move it away or run the "
                                   f"whole suite)") from None


def bench_suite(suite_arg: str, only, quick: bool, max_rows, max_minutes, results_dir, seed,
                arch, json_path, plot_path) -> None:
    """Run a suite (see the module docstring); exit 1 when a row of this run failed."""
    suite, cases = _plan(suite_arg, only, quick, max_rows)
    if plot_path:
        require_matplotlib("--plot")
    op = _torch_op(suite)
    require_gpu()
    info = device_info()
    json_out = Path(json_path or suites.results_path(suite, info["gpu"], "json", results_dir))
    plot_out = Path(plot_path or suites.results_path(suite, info["gpu"], "png", results_dir))
    selection = {"only": only, "quick": quick, "max_rows": max_rows, "cases": len(cases)}
    old = _old(json_out, bool(only or quick or max_rows))

    baseline = resolve(suite.kind, suite.baseline)  # F.linear / torch.matmul, else CuPy's

    def finished(rows, complete=True, not_run=0):
        doc = document(suite, info, rows, selection, complete, not_run, baseline)
        return merge(old, doc) if old is not None else doc

    def checkpoint(rows):
        _write(json_out, finished(rows, complete=False, not_run=len(cases) - len(rows)))
    env = RunEnv(info, seed, suite.budget_s, arch, op=op, checkpoint=checkpoint,
                 baseline=baseline,
                 deadline=time.monotonic() + 60 * max_minutes if max_minutes else None)
    click.echo(f"suite {suite.name} ({suite.suite_file}): {len(cases)} cases on {info['gpu']}",
               err=True)
    with click.progressbar(length=len(cases), label=f"suite {suite.name}",
                           file=sys.stderr) as bar:
        env.progress = bar.update
        rows = run_cases(suite, cases, env)
    doc = finished(rows, env.not_run == 0, env.not_run)
    _write(json_out, doc)
    _report(doc, rows, env.not_run)
    click.echo(f"wrote {json_out}")
    _plot(doc, plot_out, bool(plot_path))
    if not all(r["passed"] for r in rows):
        sys.exit(1)


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(doc, indent=1) + "\n", "--json")


def _report(doc: dict, rows: list, not_run: int) -> None:
    click.echo(f"{doc['gpu']}, CUDA {doc['cuda_version']}, baseline: {doc['baseline']}")
    if len(rows) <= TABLE_ROWS:
        click.echo(results.table(rows, "case", 44))
    click.echo(results.summary(rows))
    failed = [r for r in rows if not r["passed"]]
    for r in failed[:20]:
        what = r.get("error") or f"rel error {r['rel_error']:.2e} over the tolerance"
        click.echo(f"FAIL {r['case']}: {what}")
    if len(failed) > 20:
        click.echo(f"... {len(failed) - 20} more failed rows (passed: false in the file)")
    if not_run:
        click.echo(f"stopped by --max-minutes: {not_run} cases not run (the header says "
                   f"complete: false)")


def _plot(doc: dict, path: Path, asked: bool) -> None:
    """Draw the suite's plot; without matplotlib, say so unless --plot asked for it (checked
    before the run)."""
    if not asked:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            click.echo("no plot: matplotlib is not installed (pip install 'gemmgen[plot]')")
            return
    try:
        drawn = results.plot_suite(doc, path)
    except Exception as exc:  # noqa: BLE001 - the results are written; the plot is extra
        click.echo(f"no plot: {type(exc).__name__}: {exc}", err=True)
        return
    if drawn:
        click.echo(f"wrote {drawn}")
