"""Command line for tuning: gemmgen tune (registered on the main click group).

Every argument (shape, counts, devices, dtype against family, the database file) is checked
before any GPU worker starts.
"""
from __future__ import annotations

import math
import sys

import click

from ..heuristics import grouped_db, tunedb
from ..heuristics.grouped import DISTRIBUTIONS, row_counts
from ..heuristics.tunedb import parse_key
from ..model.config import INT32_MAX, LAYOUTS
from ..model.dtypes import FP8_DTYPES
from ..model.families import FAMILIES
from ..model.problem import ShapesError, load_problems
from ..model.quote import quote
from ..runtime.device import device_count
from ..tune import report
from ..tune.results import row_baseline
from ..tune.search import Request, WorkerPool, laid_out, tune as run_tune
from ..tune.suite_cases import SCALINGS
from .fp8 import DTYPE_CHOICES
from .main import OutputPath, main, require_matplotlib

EXTENT = click.IntRange(1, INT32_MAX)


class DevicesType(click.ParamType):
    """Comma-separated CUDA device ids, each a non-negative int, no repeats -> list[int]."""

    name = "ids"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not all(p.isdigit() for p in parts):
            self.fail(f"{quote(value)} is not a list of device ids like 0 or 0,1", param, ctx)
        ids = [int(p) for p in parts]
        if len(set(ids)) != len(ids):
            self.fail(f"{quote(value)} names a device twice", param, ctx)
        return ids


def _budget(ctx, param, value):
    if value is not None and (math.isnan(value) or value <= 0):
        raise click.BadParameter(f"{value} is not a number of seconds above 0", ctx, param)
    return value


def _group_options(groups_help: str):
    """--groups (help ``groups_help``), --grouping and --dist: the grouped problem of ``tune``
    and ``explain``."""
    options = (
        click.option("--groups", type=click.IntRange(1, 65535), default=None, help=groups_help),
        click.option("--grouping", type=click.Choice(["m", "k"]), default="m",
                     show_default=True,
                     help="with --groups: groups differ in M (forward, dgrad) or in K (wgrad)"),
        click.option("--dist", default="uniform", show_default=True,
                     help=f"with --groups: rows per group, one of {', '.join(DISTRIBUTIONS)} or "
                          f"skew<percent> (one group with that share)"))

    def apply(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return apply


def check_scoped(ctx: click.Context, dtype: str, groups) -> None:
    """BadParameter (exit 2) for an option given on the command line that the problem does not
    take: --scaling or --fast-accum without an FP8 dtype, --dist or --grouping without
    --groups; with --groups, a --scaling other than block, --fast-accum (grouped FP8 kernels
    promote with block scales), and tune's --show, --family, --devices, --jobs, --explain and
    --plot (grouped tuning runs the grouped family on one GPU; explain --groups shows what
    it stored)."""
    def given(name):
        return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    if dtype not in FP8_DTYPES:
        for name in ("scaling", "fast_accum"):
            if given(name):
                raise click.BadParameter(f"FP8 only (--dtype {' or '.join(FP8_DTYPES)}), not "
                                         f"{dtype}", param_hint="--" + name.replace("_", "-"))
    if groups is None:
        for name in ("dist", "grouping"):
            if given(name):
                raise click.BadParameter("describes a grouped problem: give --groups too",
                                         param_hint="--" + name)
        return
    if given("scaling") and ctx.params.get("scaling") != "block":
        raise click.BadParameter("grouped FP8 kernels take block scales (1 x 128 tokens, "
                                 "128 x 128 weights)", param_hint="--scaling")
    for name in ("fast_accum", "show", "family", "devices", "jobs", "explain", "plot_path"):
        if given(name):
            raise click.BadParameter("not taken with --groups", param_hint="--" + (
                "plot" if name == "plot_path" else name.replace("_", "-")))


@main.command()
@click.option("--m", "m", type=EXTENT, default=None, help="rows of A and C")
@click.option("--n", "n", type=EXTENT, default=None, help="columns of B and C")
@click.option("--k", "k", type=EXTENT, default=None, help="columns of A, rows of B")
@click.option("--shapes", "shapes_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="tune every problem of this shapes file (a JSON list, as "
                                 "gemmgen.torch.record writes), resuming what is tuned")
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="fp32",
              show_default=True, help="A and B dtype (e4m3, e5m2: the fp8 family, beside "
                                      "torch._scaled_mm; with --groups, FP8 experts with "
                                      "block scales)")
@click.option("--scaling", type=click.Choice(SCALINGS), default="tensor", show_default=True,
              help="FP8 only: tensor, row or block scales")
@click.option("--fast-accum", is_flag=True,
              help="FP8 only: fast accumulation (tensor and row scaling)")
@click.option("--family", type=click.Choice(list(FAMILIES)), default=None,
              help="[default: the fastest family for --dtype and --layout on this GPU]")
@click.option("--layout", type=click.Choice(list(LAYOUTS)), default="rrr", show_default=True,
              help="A, B, C each row- (r) or column-major (c)")
@click.option("--budget", type=float, default=600, show_default=True, callback=_budget,
              help="seconds of wall clock before no new candidate starts")
@click.option("--max-configs", type=click.IntRange(min=1), default=48, show_default=True,
              help="candidates measured, best by the cheap model (presets always included)")
@click.option("--db", "db_path", type=OutputPath(), default=None,
              help="tuning database [default: $GEMMGEN_TUNE_DB, else tune.json in the user cache "
                   "directory, ~/.cache/gemmgen on Linux]")
@click.option("--devices", type=DevicesType(), default=None,
              help="GPUs to time on, e.g. 0,1 (one process each)")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="parallel nvcc processes [default: CPUs]")
@click.option("--show", is_flag=True, help="print the stored entry for this shape; no tuning")
@click.option("--explain", is_flag=True, help="say why the winner beat the runner-up")
@click.option("--plot", "plot_path", type=OutputPath(), help="draw the search")
@_group_options("tune a grouped problem (gemmgen.grouped_gemm) of this many groups: --m is "
                "the rows of all groups (K-grouped: M, and --k the rows of all groups)")
def tune(m, n, k, shapes_path, dtype, scaling, fast_accum, family, layout, budget, max_configs,
         db_path, devices, jobs, show, explain, plot_path, groups, grouping, dist) -> None:
    """Search the validated configuration space on the GPU for one shape (--m --n --k), or for
    every problem of a shapes file (--shapes), and keep the results.

    Every candidate is verified against a float64 reference before it is timed (eager launches,
    CUDA events, TFLOP/s = 2·M·N·K / s), and the baseline (F.linear or torch.matmul; cuBLAS
    through CuPy where PyTorch with CUDA is absent) is timed in the same layout; failures are stored with their reasons. Re-running resumes:
    measured candidates are not measured again, and with --shapes a problem whose winner
    stands on --max-configs measured candidates is skipped. With --groups, the grouped
    space on the --dist distribution (PyTorch needed; FP8 dtypes with block scales), stored
    in the grouped tuning file that grouped_gemm's dispatch reads: the dispatch's own choice is
    timed last, and the fastest candidate replaces it only where it is 3% faster there and
    again when the two are timed in turn; exit 1 only when no candidate verified.
    """
    check_scoped(click.get_current_context(), dtype, groups)
    given = [name for name, v in (("--m", m), ("--n", n), ("--k", k)) if v is not None]
    if shapes_path and given:
        raise click.UsageError(f"give --shapes or {', '.join(given)}, not both")
    if not shapes_path and len(given) < 3:
        lack = next(f for f in ("--m", "--n", "--k") if f not in given)
        raise click.UsageError(f"Missing option '{lack}' (give --m, --n and --k for one shape, "
                               f"or --shapes FILE)")
    if groups is not None:
        if shapes_path:
            raise click.UsageError("give --shapes or --groups, not both")
        _tune_grouped(m, n, k, dtype, layout, budget, max_configs, groups, grouping, dist,
                      db_path)
        return
    if dtype in FP8_DTYPES:
        if shapes_path or family not in (None, "fp8") or layout not in ("rcr", "rrr") or devices:
            raise click.UsageError("FP8 tuning takes one shape (--m --n --k), the fp8 family, "
                                   "layout rcr and one device")
        if fast_accum and scaling == "block":
            raise click.BadParameter("block scaling needs promoted accumulation",
                                     param_hint="--fast-accum")
        return _tune_fp8(m, n, k, dtype, scaling, fast_accum, budget, max_configs, db_path,
                         show)
    requests = ([Request(m, n, k, dtype, family, budget, max_configs, layout=layout)]
                if not shapes_path else _shape_requests(shapes_path, family, budget, max_configs))
    for req in requests:
        _check_tune_args(family, req.dtype, req.layout, show, devices, jobs)
    if plot_path:
        require_matplotlib("--plot")
    db = _open_db(db_path)
    if show:
        for req in requests:
            _print_entry(_stored(db, req), explain, plot_path)
        return
    count = device_count()  # exit 1, one line, without PyCUDA, a driver or a device
    missing = [d for d in devices or [] if d >= count]
    if missing:
        raise click.BadParameter(f"no device {missing[0]}: this machine has {count} "
                                 f"(ids 0 to {count - 1})", param_hint="--devices")
    entries = [_tune_one(req, db, devices, jobs, explain, plot_path, len(requests) > 1)
               for req in requests]
    click.echo(f"database: {db.path}")
    if not all(e.get("winner") or e.get("default_stands") for e in entries):
        sys.exit(1)


def _shape_requests(path, family, budget, max_configs) -> list:
    """One tuning Request per problem of the shapes file (batched problems are left out)."""
    try:
        problems = load_problems(path)
    except ShapesError as exc:
        raise click.BadParameter(str(exc), param_hint="--shapes") from None
    return [Request(p.m, p.n, p.k, p.dtype, family, budget, max_configs, layout=p.layout)
            for p in problems if p.batch == 1]


def _tune_one(req, db, devices, jobs, explain, plot_path, quiet: bool) -> dict:
    """Tune one shape (or skip it when a file run finds it tuned) and print its summary."""
    label = f"{req.m}x{req.n}x{req.k} {req.dtype} {req.layout}"
    done = [e for k_, e in db.entries.items() if _same_problem(k_, req)]
    settled = done and (done[0].get("winner") or done[0].get("default_stands"))
    if quiet and settled and len(done[0]["candidates"]) >= req.max_configs:
        click.echo(f"{label}: tuned before, skipped")
        return done[0]
    pool = WorkerPool(req, devices)
    try:
        with click.progressbar(length=req.max_configs, label=f"tuning {label}",
                               file=sys.stderr) as bar:
            key, entry, stats = run_tune(req, db, pool, jobs=jobs, progress=bar.update)
    finally:
        pool.close()
    click.echo(f"space: {stats['valid']} valid configs, {stats['unfit']} do not fit "
               f"{entry['gpu']}, {stats.get('spill_risk', 0)} would spill by the register "
               f"estimate, {stats['chosen']} chosen by the model; "
               f"{stats['already_measured']} measured before, {stats['measured_now']} now"
               + ("; stopped by --budget (run again to resume)" if stats["budget_hit"] else ""))
    if quiet:
        best = entry["candidates"].get(entry.get("winner") or "", {}).get("tflops")
        stands = entry.get("default_stands") and entry.get("default_tflops")
        cub, name = row_baseline(entry), entry.get("baseline") or "cuBLAS"
        ratio = f" = {(best or stands) / cub:.2f}x {name} ({cub} in {req.layout})" \
            if (best or stands) and cub else ""
        click.echo(f"{label}: {best or 'no winner'} TFLOP/s{ratio}" if not stands else
                   f"{label}: the default stands ({stands} TFLOP/s{ratio})")
    else:
        _print_entry(entry, explain, plot_path, limit=10)
    return entry


def _same_problem(key: str, req) -> bool:
    _, dtype, layout, shape, fam = parse_key(key)
    return ((dtype, layout, shape) == (req.dtype, req.layout, (req.m, req.n, req.k))
            and (req.family is None or fam in (None, req.family)))


def _tune_fp8(m, n, k, dtype, scaling, fast, budget, max_configs, db_path, show) -> None:
    """``tune --dtype e4m3``: the fp8 space measured beside torch._scaled_mm (one device)."""
    from ..heuristics.fp8 import tune_dtype
    from ..runtime.device import require_gpu
    from ..tune.bench import device_info
    from ..tune.fp8_tune import tune_fp8
    from ..tune.suite_run import RunEnv
    db = _open_db(db_path)
    if show:
        key_ = tunedb.key("", tune_dtype(dtype, "e4m3", scaling, fast), m, n, k, "rcr", "fp8")
        found = [e for kk, e in db.entries.items() if kk.split("|", 1)[1] == key_.split("|", 1)[1]]
        if not found:
            raise click.ClickException(f"nothing tuned for {key_.split('|', 1)[1]} in {db.path}")
        _print_entry(found[0], False, None)
        return
    require_gpu()
    env = RunEnv(device_info(), budget_s=0.1)
    with click.progressbar(length=max_configs, label="tuning fp8", file=sys.stderr) as bar:
        key_, entry = tune_fp8(m, n, k, dtype, scaling, fast, db, env, max_configs, budget,
                               bar.update)
    _print_entry(entry, False, None, limit=10)
    click.echo(f"database: {db.path} ({key_})")
    if not entry.get("winner"):
        sys.exit(1)


def _check_tune_args(family, dtype, layout, show, devices, jobs) -> None:
    """Usage errors of ``tune`` that need no database or GPU (exit 2, naming the option)."""
    if family and dtype not in FAMILIES[family].dtypes:
        raise click.BadParameter(f"the {family} family takes {', '.join(FAMILIES[family].dtypes)}"
                                 f", not {dtype}", param_hint="--dtype")
    if family:
        if not laid_out(FAMILIES[family].space(dtype), layout):
            raise click.BadParameter(f"the {family} family has no {dtype} configuration in "
                                     f"layout {layout}", param_hint="--layout")
    if show and (devices or jobs):
        raise click.UsageError("--show prints what is stored; it runs nothing (drop --devices "
                               "and --jobs)")


def _open_db(db_path) -> tunedb.TuneDB:
    """The tuning database at ``db_path`` (default: the user's); a file gemmgen cannot read is
    a usage error naming --db, or one line naming the default database."""
    try:
        return tunedb.TuneDB(db_path)
    except tunedb.TuneDBError as exc:
        if db_path is not None:
            raise click.BadParameter(str(exc), param_hint="--db") from None
        raise click.ClickException(f"{exc} (the default database; set $GEMMGEN_TUNE_DB or "
                                   f"--db to use another)") from None


def _print_entry(entry: dict, explain: bool, plot_path, limit: int = 20) -> None:
    """A tuning entry's table, and with ``explain`` and ``plot_path`` its explanation and plot."""
    click.echo(report.show(entry, limit=limit))
    if explain:
        click.echo(report.explain(entry))
    if plot_path:
        click.echo(f"wrote {report.plot(entry, plot_path)}")


def _stored(db, req) -> dict:
    """The stored entry for the request's dtype, layout and shape: of ``--family`` if given,
    else the one with the fastest winner."""
    found = []
    for key_, entry in db.entries.items():
        _, dtype, layout, shape, fam = parse_key(key_)
        fam = fam or entry.get("family")
        if ((dtype, layout, shape) == (req.dtype, req.layout, (req.m, req.n, req.k))
                and (req.family is None or fam == req.family)):
            winner = entry["candidates"].get(entry.get("winner") or "", {})
            found.append((winner.get("tflops") or 0.0, entry))
    if found:
        return max(found, key=lambda item: item[0])[1]
    raise click.ClickException(f"nothing tuned for {req.dtype} {req.m}x{req.n}x{req.k} in {db.path}")


def check_grouped(dtype: str, dist: str) -> None:
    """The arguments every grouped command checks: an fp16, bf16, e4m3 or e5m2 dtype (FP8 with
    block scales) and a distribution it can draw; BadParameter naming the option otherwise."""
    if dtype not in ("fp16", "bf16", "e4m3", "e5m2"):
        raise click.BadParameter("grouped kernels take fp16 or bf16, or e4m3/e5m2 with block "
                                 "scales", param_hint="--dtype")
    try:
        row_counts(dist, 8, 2)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dist") from None


def refuse_grouped_db(db) -> None:
    """``--db`` names the GEMM tuning database; a grouped problem is tuned into, and read from,
    the grouped tuning file (``$GEMMGEN_GROUPED_DB``, else beside the database): a usage error
    that says so, rather than a ``--db`` that is silently not used."""
    if db is not None:
        raise click.BadParameter(
            f"--db names the GEMM tuning database; grouped problems use the grouped tuning "
            f"file {grouped_db.default_path()} (set $GEMMGEN_GROUPED_DB to choose another)",
            param_hint="--db")


def _tune_grouped(m, n, k, dtype, layout, budget, max_configs, groups, grouping, dist,
                  db_path=None) -> None:
    """``tune --groups``: every grouped configuration on one distribution, on this GPU."""
    check_grouped(dtype, dist)
    refuse_grouped_db(db_path)
    source = click.get_current_context().get_parameter_source("layout")
    if source is not click.core.ParameterSource.COMMANDLINE:
        layout = None  # the grouping's own: rcr (forward) or crr (wgrad)
    if dtype in FP8_DTYPES and grouping != "m":
        raise click.BadParameter("FP8 grouped kernels are M-grouped", param_hint="--grouping")
    if dtype in FP8_DTYPES and layout not in (None, "rcr"):
        raise click.BadParameter("FP8 grouped kernels take layout rcr (A [T, K], the experts' "
                                 "weights [G, N, K])", param_hint="--layout")
    device_count()  # exit 1, one line, without a driver or a device
    from ..tune.grouped_tune import show, tune_grouped
    with click.progressbar(length=max_configs + 1, label="tuning", file=sys.stderr) as bar:
        key, entry = tune_grouped(dtype, groups, m, n, k, dist, grouping, layout, None, budget,
                                  max_configs, None, bar.update)
    click.echo(show(entry))
    click.echo(f"stored as {key}")
    if not entry.get("winner") and not entry.get("default_stands"):
        sys.exit(1)  # no candidate verified
