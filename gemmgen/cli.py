"""Command line: a thin click group over the library (emit, list)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .arch import ARCHS
from .config import ConfigError, SimtConfig
from .presets import PRESETS
from .render import emit as emit_file
from .suggest import changed_fields

# CLI flag -> config field, with the default used when neither a flag nor a preset gives one.
FIELD_FLAGS = {
    "bm": ("--bm", 128, "block tile rows (M)"),
    "bn": ("--bn", 128, "block tile columns (N)"),
    "bk": ("--bk", 16, "block tile depth (K)"),
    "wm": ("--wm", None, "warp tile rows; omit for no warp tiling"),
    "wn": ("--wn", None, "warp tile columns; omit for no warp tiling"),
    "tm": ("--tm", 8, "thread tile rows"),
    "tn": ("--tn", 8, "thread tile columns"),
    "vec": ("--vec", 4, "floats per global/shared access: 1, 2 or 4"),
    "skew": ("--skew", 4, "padding floats per shared-memory row"),
    "stages": ("--stages", 2, "0 no shared memory, 1 single buffer, 2 double buffer"),
    "min_blocks": ("--min-blocks", 1, "resident blocks per SM asked of ptxas (__launch_bounds__)"),
}


def _flag(field: str, value) -> str:
    if field == "transpose_a":
        return "--transpose-a" if value else "--no-transpose-a"
    if field == "thread_order":
        return f"--thread-order {value}"
    return f"{FIELD_FLAGS[field][0]} {value}"


def _config_values(ctx: click.Context, preset: str | None, config_json: str | None) -> dict:
    """Defaults, then the preset or JSON config, then every flag given on the command line."""
    values = {f: d for f, (_, d, _) in FIELD_FLAGS.items()}
    values.update(transpose_a=True, thread_order="n")
    if preset:
        values.update(PRESETS[preset].config.as_dict())
    if config_json:
        values.update(json.loads(config_json))
    for field in [*FIELD_FLAGS, "transpose_a", "thread_order"]:
        source = ctx.get_parameter_source(field)
        if source is click.core.ParameterSource.COMMANDLINE:
            values[field] = ctx.params[field]
    values.pop("family", None)
    return values


def _report_invalid(err: ConfigError, values: dict) -> None:
    click.echo(f"error: {err.args[0].splitlines()[0]}", err=True)
    for v in err.violations:
        click.echo(f"  {v}", err=True)
    if err.suggestions:
        click.echo("nearest valid configurations:", err=True)
        base = SimtConfig.unchecked(**values)
        for s in err.suggestions:
            flags = " ".join(_flag(k, v) for k, v in changed_fields(base, s).items())
            click.echo(f"  {flags:<28} -> {s.name}", err=True)


@click.group()
@click.version_option(__version__, prog_name="gemmgen")
def main() -> None:
    """Generate specialized CUDA GEMM kernels (C = alpha*A*B + beta*C) from tile configurations."""


def _field_options(func):
    for field, (flag, _, help_) in reversed(FIELD_FLAGS.items()):
        func = click.option(flag, field, type=int, default=None, help=help_)(func)
    func = click.option("--transpose-a/--no-transpose-a", "transpose_a", default=True,
                        help="store the A tile K-major in shared memory (default on)")(func)
    func = click.option("--thread-order", type=click.Choice(["n", "m"]), default="n",
                        help="n: consecutive threads take columns; m: rows (naive)")(func)
    return func


@main.command()
@_field_options
@click.option("--preset", type=click.Choice(list(PRESETS)), help="start from a ladder preset")
@click.option("--config-json", help="start from a JSON config (an emitted header's line)")
@click.option("--arch", default="sm_90", type=click.Choice(list(ARCHS)), show_default=True,
              help="target architecture for --check and the header's occupancy figure")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="output file [default: generated/<name>.cu]")
@click.option("--check", is_flag=True, help="compile with nvcc and print ptxas resources")
@click.pass_context
def emit(ctx, preset, config_json, arch, output, check, **_fields) -> None:
    """Validate a configuration and write its kernel. Exit status 2 if it is invalid."""
    values = _config_values(ctx, preset, config_json)
    try:
        cfg = SimtConfig(**values)
    except ConfigError as err:
        _report_invalid(err, values)
        sys.exit(2)
    except TypeError as err:
        raise click.BadParameter(str(err)) from err
    path = emit_file(cfg, output, arch)
    click.echo(f"wrote {path}")
    click.echo(f"  {cfg.threads} threads, {cfg.smem_bytes} bytes static shared memory, "
               f"{cfg.acc_regs} accumulators/thread, {cfg.blocks_per_sm(arch)} blocks/SM "
               f"(threads and shared memory, {arch})")
    if check:
        from .nvcc import BuildError, compile_file
        try:
            res = compile_file(path, (arch,))[arch]
        except (BuildError, FileNotFoundError) as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(1)
        click.echo(f"nvcc {arch}: {res.registers} registers/thread, {res.smem_bytes} bytes "
                   f"shared memory (model {cfg.smem_bytes}), {res.stack_bytes} bytes stack, "
                   f"{res.spill_stores} bytes spill stores, {res.spill_loads} bytes spill loads")


@main.command(name="list")
@click.option("--names", is_flag=True, help="print preset names only, one per line")
@click.option("--json", "as_json", is_flag=True, help="print presets as JSON")
def list_presets(names: bool, as_json: bool) -> None:
    """Show the ladder presets: technique, configuration and source article."""
    if names:
        click.echo("\n".join(PRESETS))
        return
    if as_json:
        click.echo(json.dumps([{"name": p.name, "technique": p.technique, "source": p.source,
                                "config": p.config.as_dict(), "kernel": p.config.name}
                               for p in PRESETS.values()], indent=2))
        return
    for i, p in enumerate(PRESETS.values(), 1):
        c = p.config
        warp = f"{c.wm}x{c.wn}" if c.warp_tiled else "-"
        click.echo(f"{i}. {p.name}  [{p.source}]")
        click.echo(f"   {p.technique}")
        click.echo(f"   block {c.bm}x{c.bn}x{c.bk}  warp {warp}  thread {c.tm}x{c.tn}  "
                   f"vec {c.vec}  skew {c.skew}  stages {c.stages}  "
                   f"A {'transposed' if c.transpose_a else 'row-major'} in smem  "
                   f"threads {c.threads}  smem {c.smem_bytes} B")
        click.echo(f"   {c.name}")


@main.command()
def rules() -> None:
    """Show the validation rules (each is also a static_assert in the emitted kernel)."""
    from .config import SIMT_RULES
    for rule in SIMT_RULES:
        click.echo(f"{rule.id}  {rule.name:<20} {rule.formula():<44} {rule.why}")


__all__ = ["main"]
