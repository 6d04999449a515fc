"""Command line for tuning: gemmgen tune (registered on the main click group)."""
from __future__ import annotations

import sys

import click

from .cli import main
from .families import FAMILIES


@main.command()
@click.option("--m", "m", type=int, required=True, help="rows of A and C")
@click.option("--n", "n", type=int, required=True, help="columns of B and C")
@click.option("--k", "k", type=int, required=True, help="columns of A, rows of B")
@click.option("--dtype", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default="fp32",
              show_default=True)
@click.option("--family", type=click.Choice(list(FAMILIES)), default=None,
              help="[default: the fastest family for --dtype on this GPU]")
@click.option("--budget", type=float, default=600, show_default=True,
              help="seconds of wall clock before no new candidate starts")
@click.option("--max-configs", type=int, default=48, show_default=True,
              help="candidates measured, best by the cheap model (presets always included)")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="tuning database [default: $GEMMGEN_TUNE_DB, else tune.json in the user cache directory, ~/.cache/gemmgen on Linux]")
@click.option("--devices", default=None, help="GPUs to time on, e.g. 0,1 (one process each)")
@click.option("--jobs", type=int, default=None, help="parallel nvcc processes [default: CPUs]")
@click.option("--show", is_flag=True, help="print the stored entry for this shape; no tuning")
@click.option("--explain", is_flag=True, help="say why the winner beat the runner-up")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="draw the search")
def tune(m, n, k, dtype, family, budget, max_configs, db_path, devices, jobs, show, explain,
         plot_path) -> None:
    """Search the validated configuration space on the GPU for one shape and keep the result.

    Every candidate is verified against a float64 reference before it is timed; failures are
    stored with their reasons. Re-running resumes: measured candidates are not measured again.
    """
    from . import tune_report, tunedb
    from .tune import Request, WorkerPool, tune as run_tune
    db = tunedb.TuneDB(db_path)
    req = Request(m, n, k, dtype, family, budget, max_configs)
    if show:
        entry = _stored(db, req)
        click.echo(tune_report.show(entry))
        if explain:
            click.echo(tune_report.explain(entry))
        if plot_path:
            click.echo(f"wrote {tune_report.plot(entry, plot_path)}")
        return
    ids = [int(d) for d in devices.split(",")] if devices else None
    pool = WorkerPool(req, ids)
    try:
        with click.progressbar(length=max_configs, label="tuning", file=sys.stderr) as bar:
            key, entry, stats = run_tune(req, db, pool, jobs=jobs, progress=bar.update)
    finally:
        pool.close()
    click.echo(f"space: {stats['valid']} valid configs, {stats['unfit']} do not fit "
               f"{entry['gpu']}, {stats['chosen']} chosen by the model; "
               f"{stats['already_measured']} measured before, {stats['measured_now']} now"
               + ("; stopped by --budget (run again to resume)" if stats["budget_hit"] else ""))
    click.echo(tune_report.show(entry, limit=10))
    if explain:
        click.echo(tune_report.explain(entry))
    if plot_path:
        click.echo(f"wrote {tune_report.plot(entry, plot_path)}")
    click.echo(f"database: {db.path}")
    if not entry.get("winner"):
        sys.exit(1)


def _stored(db, req) -> dict:
    for key_, entry in db.entries.items():
        gpu, dtype, layout, shape = key_.split("|")
        if (dtype, layout, shape) == (req.dtype, req.layout, f"{req.m}x{req.n}x{req.k}"):
            return entry
    raise click.ClickException(f"nothing tuned for {req.dtype} {req.m}x{req.n}x{req.k} in {db.path}")
