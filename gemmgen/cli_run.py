"""Command line for the GPU: verify, bench, report (registered on the main click group)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .cli import main
from .presets import PRESETS


def _targets(paths, presets, arch):
    """(label, Kernel) for each emitted file and preset named; every preset if none."""
    from .build import build, load
    chosen = list(presets) or ([] if paths else list(PRESETS))
    out = [(Path(p).stem, load(p, arch)) for p in paths]
    out += [(name, build(PRESETS[name].config, arch)) for name in chosen]
    return out


def _parse_size(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 0:
        raise click.BadParameter(f"{text!r}: give N (square) or MxNxK")
    return tuple(parts)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--preset", "presets", multiple=True, type=click.Choice(list(PRESETS)))
@click.option("--arch", default=None, help="compile for this arch [default: the device's]")
@click.option("--seed", type=int, default=None, help="seed for the random inputs")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
def verify(paths, presets, arch, seed, json_path) -> None:
    """Check kernels against a float64 NumPy reference over a sweep of shapes, alpha and beta.

    With no arguments, every preset. Exit status 1 if any case fails.
    """
    from .verify import CASES, sweep_kernel
    results = []
    for label, kernel in _targets(paths, presets, arch):
        results += sweep_kernel(label, kernel, CASES, seed)
    click.echo(f"{'kernel':<20} {'dtype':>5} {'M x N x K':>15} {'alpha':>6} {'beta':>6} "
               f"{'rel err':>9} {'bound':>8} {'worst':>12} result")
    for r in results:
        shape = f"{r.m}x{r.n}x{r.k}"
        click.echo(f"{r.kernel:<20} {r.dtype:>5} {shape:>15} {r.alpha:>6g} {r.beta:>6g} "
                   f"{r.rel_error:>9.2e} "
                   f"{r.tol:>8.1e} {str(r.worst):>12} {'pass' if r.passed else 'FAIL'}")
    failed = [r for r in results if not r.passed]
    click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if json_path:
        Path(json_path).write_text(json.dumps([r.as_dict() for r in results], indent=1))
    sys.exit(1 if failed else 0)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--preset", "presets", multiple=True, type=click.Choice(list(PRESETS)))
@click.option("--size", "sizes", multiple=True, callback=lambda c, p, v: [_parse_size(s) for s in v],
              help="N or MxNxK; repeatable [default: 1024, 2048, 4096, 8192, 4095x4097x4093]")
@click.option("--arch", default=None, help="compile for this arch [default: the device's]")
@click.option("--seed", type=int, default=None)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
@click.option("--append", is_flag=True,
              help="merge into the --json file, replacing rows of the same kernel and shape")
@click.option("--tuned", "tuned_db", type=click.Path(dir_okay=False), default=None,
              help="bench the tuning database's choice for each size (as kernel 'tuned')")
@click.option("--dtype", default="fp32", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]),
              help="dtype of the --tuned kernel")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="draw TFLOP/s vs size")
def bench(paths, presets, sizes, arch, seed, json_path, append, tuned_db, dtype,
          plot_path) -> None:
    """Time kernels beside cuBLAS for their dtypes and print TFLOP/s and % of cuBLAS."""
    from . import results
    from .bench import DEFAULT_SIZES, run_bench
    sizes = sizes or list(DEFAULT_SIZES)
    if tuned_db:
        doc = _bench_tuned(tuned_db, dtype, sizes, arch, seed)
    else:
        targets = _targets(paths, presets, arch)
        pairs = len({(k.config.dtype, k.config.out) for _, k in targets})
        with click.progressbar(length=len(sizes) * (len(targets) + pairs),
                               label="benchmarking", file=sys.stderr) as bar:
            doc = results.finish(run_bench(targets, sizes, seed, bar.update))
    if append and json_path and Path(json_path).exists():
        doc = results.merge(json.loads(Path(json_path).read_text()), doc)
    click.echo(f"{doc['gpu']}, CUDA {doc['cuda_version']}, cuBLAS: {doc['cublas']}")
    click.echo(results.table(doc["rows"]))
    if json_path:
        click.echo(f"wrote {results.write(doc, json_path)}")
    if plot_path:
        click.echo(f"wrote {results.plot(doc, plot_path)}")
    if not all(r["passed"] for r in doc["rows"]):
        sys.exit(1)


def _bench_tuned(db_path: str, dtype: str, sizes, arch, seed) -> dict:
    """One run_bench per size with the tuned (or nearest, or default) kernel for it."""
    from . import results
    from .bench import run_bench
    from .build import build, pycuda_modules
    from .dispatch import choose
    from .tunedb import TuneDB
    db = TuneDB(db_path)
    drv, _ = pycuda_modules()
    gpu = drv.Context.get_device().name()
    doc = None
    for size in sizes:
        cfg, how = choose(db, gpu, dtype, *size)
        part = run_bench([("tuned", build(cfg, arch))], [size], seed)
        for row in part["rows"]:
            row["tuned"] = how
        doc = part if doc is None else {**doc, "rows": doc["rows"] + part["rows"]}
    return results.finish(doc)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--size", default="4096", help="N or MxNxK for the ladder table")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="draw TFLOP/s vs size")
def report(path, size, plot_path) -> None:
    """Print a results file's ladder table as Markdown (and optionally redraw its plot)."""
    from . import results
    doc = json.loads(Path(path).read_text())
    techniques = {name: p.technique.split(";")[0] for name, p in PRESETS.items()}
    click.echo(results.ladder_markdown(doc, _parse_size(size), techniques))
    if plot_path:
        click.echo(f"wrote {results.plot(doc, plot_path)}")
