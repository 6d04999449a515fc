"""Command line for the GPU: verify, bench, report (registered on the main click group).

Every argument is checked before any GPU work starts: emitted files must carry their
``// gemmgen-config:`` line, results and tuning files must parse, output paths must be
writable. Then the GPU itself is checked (PyCUDA, driver, device), so a machine without one
gets one line saying which is missing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..codegen.render import config_from_source
from ..compile.nvcc import BuildError
from ..heuristics.select import choose
from ..heuristics.tunedb import TuneDB, TuneDBError
from ..model.config import EPILOGUES, LAYOUTS
from ..model.dtypes import FP8_DTYPES
from ..model.presets import GEMM_PRESETS, PRESETS
from ..runtime.build import build, build_many, load
from ..runtime.device import pycuda_modules, require_gpu
from ..tune import results
from ..tune.baseline import run_bench
from ..tune.bench import DEFAULT_SIZES
from ..tune.results import ResultsError
from ..tune.verify import CASES, sweep_kernel
from .fp8 import DTYPE_CHOICES, FP8_PRESETS, bench_fp8, verify_fp8, verify_presets
from .main import ARCH, SIZE, OutputPath, main, require_matplotlib, write_text
from .suite import bench_suite, check_options

SEED = click.IntRange(0, 2 ** 63 - 1)


def _read_configs(paths) -> list:
    """The config in each emitted file's header line; BadParameter naming the file if a file
    is not one gemmgen emitted, or its header line is corrupt."""
    out = []
    for p in paths:
        try:
            out.append(config_from_source(Path(p).read_text()))
        except UnicodeDecodeError:
            raise click.BadParameter(f"{p} is not a text file", param_hint="PATHS") from None
        except OSError as exc:
            raise click.BadParameter(f"cannot read {p}: {exc.strerror}",
                                     param_hint="PATHS") from None
        except ValueError as exc:  # ConfigError included: the header holds an invalid config
            first = str(exc).splitlines()[0]
            raise click.BadParameter(f"{p}: {first} (emit it with gemmgen emit)",
                                     param_hint="PATHS") from None
    return out


def _start_gpu() -> None:
    """Exit 1 with one line when kernels cannot run here (no PyCUDA, driver or device)."""
    require_gpu()  # GpuUnavailable: turned into one line by the group


def _targets(paths, presets, arch):
    """(label, Kernel) for each emitted file and preset named; every GEMM preset if none (fp8
    presets take scales: ``verify_presets``, ``bench_fp8``)."""
    chosen = list(presets) or ([] if paths else list(GEMM_PRESETS))
    out = [(Path(p).stem, load(p, arch)) for p in paths]
    out += [(name, build(PRESETS[name].config, arch)) for name in chosen]
    return out


def _parse_size(text: str) -> tuple[int, int, int]:
    """N or MxNxK -> (M, N, K); raises click.BadParameter (see ``cli.SizeType``)."""
    return SIZE.convert(text, None, None)


def _variant_kernels(presets, layouts, epilogues, arch):
    """(label, Kernel) for every valid layout x epilogue variant of the presets, compiled in
    parallel; variants a rule rejects are reported and skipped."""
    configs = []
    for name in presets:
        for lay in layouts:
            for epi in epilogues:
                cfg = PRESETS[name].config.replace(layout=lay, epilogue=epi, check=False)
                if cfg.violations():
                    ids = ", ".join(v.rule.id for v in cfg.violations())
                    click.echo(f"skip {name} {lay} {epi}: breaks {ids}", err=True)
                else:
                    configs.append((name, cfg))
    kernels = build_many([c for _, c in configs], arch)
    return [(name, k) for (name, _), k in zip(configs, kernels)]


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--preset", "presets", multiple=True, type=click.Choice([*GEMM_PRESETS, *FP8_PRESETS]))
@click.option("--variants", is_flag=True,
              help="every layout x epilogue variant of the presets (batched cases included)")
@click.option("--arch", type=ARCH, default=None,
              help="compile for this arch [default: the device's]")
@click.option("--seed", type=SEED, default=None, help="seed for the random inputs")
@click.option("--dtype", type=click.Choice(list(FP8_DTYPES)), default=None,
              help="FP8: verify the fp8 presets (or those given) with A of this dtype, on "
                   "wide-range data quantized per their scaling")
@click.option("--json", "json_path", type=OutputPath(), help="write results here")
def verify(paths, presets, variants, arch, seed, dtype, json_path) -> None:
    """Check kernels against a float64 NumPy reference over a sweep of shapes, alpha and beta,
    batches (one with a broadcast B), in each kernel's layout and epilogue; FP8 kernels
    (--dtype e4m3|e5m2, fp8 presets or files) over odd shapes with their scales.

    With no arguments, every preset. Exit status 1 if any case fails.
    """
    if variants and (paths or dtype):
        raise click.UsageError("--variants runs presets' variants; it takes no files or "
                               "--dtype (use --preset)")
    configs = _read_configs(paths)
    fp8_names = [n for n in presets if n in FP8_PRESETS]
    presets = [n for n in presets if n not in FP8_PRESETS]
    _start_gpu()
    fp8_results, fp8_failed = [], 0
    if dtype or fp8_names or not (paths or presets):
        fp8_results, fp8_failed = verify_presets(fp8_names, dtype, arch, seed)
        if dtype or (fp8_names and not presets and not paths):
            _write_verify(json_path, fp8_results)
            sys.exit(1 if fp8_failed else 0)
    outcomes = []
    if variants:
        targets = _variant_kernels(presets or list(GEMM_PRESETS), LAYOUTS, EPILOGUES, arch)
        # prime, alpha/beta, ragged K, K = 0, and ragged with 16-byte rows (TMA's fast path)
        cases = (CASES[1], CASES[2], CASES[6], CASES[8], CASES[13])
    else:
        names = presets or ([] if paths else GEMM_PRESETS)
        targets, cases = _targets(paths, names, arch), CASES
    fp8_files = [t for t, c in zip(targets, configs) if c.family == "fp8"]
    targets = [t for t in targets if t not in fp8_files]
    if fp8_files:
        more, bad = verify_fp8(fp8_files, seed)
        fp8_results, fp8_failed = fp8_results + more, fp8_failed + bad
    failed_builds = [t for t in targets if isinstance(t[1], BuildError)]
    for label, kernel in targets:
        if not isinstance(kernel, BuildError):
            outcomes += sweep_kernel(label, kernel, cases, seed)
    for label, err in failed_builds:
        click.echo(f"BUILD FAIL {label}: {err}", err=True)
    paths = any(r.path for r in outcomes)  # TMA kernels say which path each case took
    click.echo(f"{'kernel':<36} {'dtype':>5} {'M x N x K':>15} {'alpha':>6} {'beta':>6} "
               f"{'rel err':>9} {'bound':>8} {'worst':>12} result" + ("  path" if paths else ""))
    for r in outcomes:
        shape = f"{r.m}x{r.n}x{r.k}"
        path = f"  {r.path.split(':')[0]}" if paths else ""
        click.echo(f"{r.kernel:<36} {r.dtype:>5} {shape:>15} {r.alpha:>6g} {r.beta:>6g} "
                   f"{r.rel_error:>9.2e} "
                   f"{r.tol:>8.1e} {r.worst!s:>12} {'pass' if r.passed else 'FAIL'}{path}")
    failed = [r for r in outcomes if not r.passed]
    tma = sum(1 for r in outcomes if r.path == "tma")
    click.echo(f"{len(outcomes) - len(failed)} passed, {len(failed) + len(failed_builds)} failed"
               + (f" ({tma} on the TMA path, {len(outcomes) - tma} on the fallback)" if paths
                  else ""))
    _write_verify(json_path, outcomes + fp8_results)
    sys.exit(1 if failed or failed_builds or fp8_failed else 0)


def _write_verify(json_path, outcomes) -> None:
    if json_path:
        write_text(json_path, json.dumps([r.as_dict() for r in outcomes], indent=1), "--json")


def _load_results(path, option: str) -> dict:
    """A results document, or BadParameter naming ``option`` and the file's problem."""
    try:
        return results.load(path)
    except ResultsError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--preset", "presets", multiple=True, type=click.Choice([*GEMM_PRESETS, *FP8_PRESETS]))
@click.option("--size", "sizes", multiple=True, type=SIZE,
              help="N or MxNxK; repeatable [default: 1024, 2048, 4096, 8192, 4095x4097x4093]")
@click.option("--arch", type=ARCH, default=None,
              help="compile for this arch [default: the device's]")
@click.option("--seed", type=SEED, default=None)
@click.option("--json", "json_path", type=OutputPath(), help="write results here")
@click.option("--append", is_flag=True,
              help="merge into the --json file, replacing rows of the same kernel and shape")
@click.option("--tuned", "tuned_db", type=click.Path(exists=True, dir_okay=False), default=None,
              help="bench the tuning database's choice for each size (as kernel 'tuned')")
@click.option("--dtype", default="fp32", type=click.Choice(DTYPE_CHOICES),
              help="dtype of the --tuned kernel; e4m3 or e5m2: the fp8 presets (or those "
                   "given) beside torch._scaled_mm")
@click.option("--layout", "layouts", multiple=True, type=click.Choice([*LAYOUTS, "all"]),
              help="bench the presets in these layouts (repeatable, or 'all')")
@click.option("--epilogue", "epilogues", multiple=True, type=click.Choice(EPILOGUES),
              help="bench the presets with these fused epilogues (repeatable)")
@click.option("--batch", type=click.IntRange(1, 65535), default=None,
              help="strided batch of this many products")
@click.option("--specialize", is_flag=True,
              help="also bench each kernel specialized to each size (compile-time M, N, K)")
@click.option("--plot", "plot_path", type=OutputPath(), help="draw TFLOP/s vs size")
@click.option("--suite", metavar="NAME|PATH", default=None,
              help="run a benchmark suite: benchmarks/suites/NAME.toml or a .toml file; "
                   "writes benchmarks/results/<suite>_<GPU>.json and .png")
@click.option("--only", metavar="SUBSTR", default=None,
              help="with --suite: only the cases whose label contains SUBSTR")
@click.option("--quick", is_flag=True, help="with --suite: only the values its [quick] keeps")
@click.option("--max-rows", type=click.IntRange(1), default=None,
              help="with --suite: at most this many cases (the first, in suite order)")
@click.option("--max-minutes", type=click.FloatRange(0, min_open=True), default=None,
              help="with --suite: start no new problem after this many minutes")
@click.option("--results-dir", type=click.Path(file_okay=False), default=None,
              help="with --suite: the folder of <suite>_<GPU>.json and .png "
                   "[default: benchmarks/results beside the suites folder]")
@click.pass_context
def bench(ctx, paths, presets, sizes, arch, seed, json_path, append, tuned_db, dtype, layouts,
          epilogues, batch, specialize, plot_path, suite, only, quick, max_rows, max_minutes,
          results_dir) -> None:
    """Time kernels (eager launches, CUDA events; TFLOP/s = 2·M·N·K / s) beside the baseline on
    the same buffers (F.linear for rcr, torch.matmul for other layouts; cublasGemmEx through
    CuPy where PyTorch with CUDA is absent) and print TFLOP/s and % of the baseline; with
    --suite, run a benchmark suite (benchmarks/suites/README.md)."""
    check_options(ctx)
    if suite is not None:
        return bench_suite(suite, only, quick, max_rows, max_minutes, results_dir, seed, arch,
                           json_path, plot_path)
    fp8_names = [n for n in presets if n in FP8_PRESETS]
    if dtype in FP8_DTYPES or fp8_names:
        if len(fp8_names) != len(presets) or paths or tuned_db or layouts or epilogues or batch:
            raise click.UsageError("FP8 benches take fp8 presets and --size only (no files, "
                                   "other presets, --tuned, --layout, --epilogue or --batch)")
        _start_gpu()
        fp8_dtype = dtype if dtype in FP8_DTYPES else None
        ok = bench_fp8(fp8_names, fp8_dtype, list(sizes) or [(4096, 4096, 4096)], arch, seed,
                       json_path)
        sys.exit(0 if ok else 1)
    if append and not json_path:
        raise click.UsageError("--append merges into the --json file: give --json FILE")
    variants = bool(layouts or epilogues or batch or specialize)
    if paths and (tuned_db or variants):
        raise click.UsageError("files are benched as they are: --tuned, --layout, --epilogue, "
                               "--batch and --specialize take presets only")
    if tuned_db and (presets or variants):
        raise click.UsageError("--tuned benches the database's choice; it takes no --preset, "
                               "--layout, --epilogue, --batch or --specialize")
    _read_configs(paths)
    old = _load_results(json_path, "--json") if append and json_path.exists() else None
    db = _open_tuned(tuned_db) if tuned_db else None
    if plot_path:
        require_matplotlib("--plot")
    _start_gpu()
    sizes = list(sizes) or list(DEFAULT_SIZES)
    if db is not None:
        doc = _bench_tuned(db, dtype, sizes, arch, seed)
    elif variants:
        doc = _bench_variants(presets or list(GEMM_PRESETS), layouts, epilogues, batch,
                              specialize, sizes, arch, seed)
    else:
        targets = _targets(paths, presets or ([] if paths else GEMM_PRESETS), arch)
        pairs = len({(k.config.dtype, k.config.out) for _, k in targets})
        with click.progressbar(length=len(sizes) * (len(targets) + pairs),
                               label="benchmarking", file=sys.stderr) as bar:
            doc = results.finish(run_bench(targets, sizes, seed, bar.update))
    if old is not None:
        doc = results.merge(old, doc)
    click.echo(f"{doc['gpu']}, CUDA {doc['cuda_version']}, baseline: "
               f"{doc.get('baseline_label', '-')}")
    click.echo(results.table(doc["rows"]))
    if json_path:
        write_text(json_path, json.dumps(doc, indent=1) + "\n", "--json")
        click.echo(f"wrote {json_path}")
    if plot_path:
        click.echo(f"wrote {results.plot(doc, plot_path)}")
    if not all(r["passed"] for r in doc["rows"]):
        sys.exit(1)


def _open_tuned(path):
    try:
        return TuneDB(path)
    except TuneDBError as exc:
        raise click.BadParameter(str(exc), param_hint="--tuned") from None


def _bench_per_size(sizes, targets_for, seed, batch=None) -> dict:
    """One run_bench per size on ``targets_for(size)`` -> (targets, extra row fields); the
    rows of all sizes in one results document."""
    rows, doc = [], None
    for size in sizes:
        targets, extra = targets_for(size)
        doc = run_bench(targets, [size], seed, batch=batch)
        rows += [{**row, **extra} for row in doc["rows"]]
    return results.finish({**doc, "rows": rows})


def _bench_variants(presets, layouts, epilogues, batch, specialize, sizes, arch, seed) -> dict:
    """Per size: each preset in each layout and epilogue (and specialized to the size), labelled
    preset[layout,epilogue(,spec)], timed beside the baseline in that layout (batched if asked)."""
    layouts = list(LAYOUTS) if "all" in layouts else list(layouts or ["rrr"])

    def targets_for(size):
        labels, configs = [], []
        for name in presets:
            for lay in layouts:
                for epi in epilogues or ["none"]:
                    base = PRESETS[name].config.replace(layout=lay, epilogue=epi, check=False)
                    variants = [(base, "")]
                    if specialize:
                        variants.append((base.replace(m=size[0], n=size[1], k=size[2],
                                                      check=False), ",spec"))
                    for cfg, tag in variants:
                        if not cfg.violations():
                            labels.append(f"{name}[{lay},{epi}{tag}]")
                            configs.append(cfg)
        kernels = build_many(configs, arch)
        return [(lbl, k) for lbl, k in zip(labels, kernels) if not isinstance(k, Exception)], {}
    return _bench_per_size(sizes, targets_for, seed, batch)


def _bench_tuned(db, dtype: str, sizes, arch, seed) -> dict:
    """Per size, the tuned (or nearest, or default) kernel for it, as kernel 'tuned'."""
    drv, _ = pycuda_modules()
    gpu = drv.Context.get_device().name()

    def targets_for(size):
        cfg, how = choose(db, gpu, dtype, *size)
        return [("tuned", build(cfg, arch))], {"tuned": how}
    return _bench_per_size(sizes, targets_for, seed)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--size", default="4096", type=SIZE, help="N or MxNxK for the ladder table")
@click.option("--plot", "plot_path", type=OutputPath(), help="draw TFLOP/s vs size")
def report(path, size, plot_path) -> None:
    """Print a results file's ladder table as Markdown (and optionally redraw its plot)."""
    doc = _load_results(path, "PATH")
    present = list(dict.fromkeys((r["M"], r["N"], r["K"]) for r in doc["rows"]))
    if size not in present:
        have = ", ".join("x".join(map(str, s)) for s in present) or "none"
        raise click.BadParameter(f"{path} has no rows at {'x'.join(map(str, size))}; sizes "
                                 f"there: {have}", param_hint="--size")
    if plot_path:
        require_matplotlib("--plot")
    techniques = {name: p.technique.split(";")[0] for name, p in PRESETS.items()}
    click.echo(results.ladder_markdown(doc, size, techniques))
    if plot_path:
        click.echo(f"wrote {results.plot(doc, plot_path)}")
