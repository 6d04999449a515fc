"""Command line: a thin click group over the library (emit, list)."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from . import __version__
from .arch import ARCHS
from dataclasses import fields

from .config import ConfigError, SimtConfig
from .config_wmma import WmmaConfig
from .model import EPILOGUES, LAYOUTS
from .presets import PRESETS
from .render import emit as emit_file
from .suggest import changed_fields

# CLI flag -> (config field, help). Each family's defaults are its dataclass defaults plus
# FAMILY_DEFAULTS; a flag that the chosen family lacks is refused.
FIELD_FLAGS = {
    "bm": ("--bm", "block tile rows (M)"),
    "bn": ("--bn", "block tile columns (N)"),
    "bk": ("--bk", "block tile depth (K)"),
    "wm": ("--wm", "warp tile rows (simt: omit for no warp tiling)"),
    "wn": ("--wn", "warp tile columns"),
    "tm": ("--tm", "thread tile rows (simt)"),
    "tn": ("--tn", "thread tile columns (simt)"),
    "vec": ("--vec", "floats per global/shared access: 1, 2 or 4 (simt)"),
    "skew": ("--skew", "padding elements per shared-memory row"),
    "stages": ("--stages", "simt: 0 none, 1 single, 2 double buffer; wmma: 1 to 6"),
    "min_blocks": ("--min-blocks", "resident blocks per SM asked of ptxas (__launch_bounds__)"),
    "m": ("--m", "specialize for this M (a compile-time constant)"),
    "n": ("--n", "specialize for this N"),
    "k": ("--k", "specialize for this K"),
}
CHOICE_FLAGS = {
    "shape": ("--shape", ["m16n16k16", "m32n8k16", "m8n32k16", "m16n16k8"], "WMMA tile (wmma)"),
    "dtype": ("--dtype", ["fp16", "bf16", "tf32"], "A and B dtype (wmma)"),
    "acc": ("--acc", ["fp32", "fp16"], "accumulator dtype (wmma)"),
    "out": ("--out", ["fp32", "fp16", "bf16"], "C dtype (wmma)"),
    "thread_order": ("--thread-order", ["n", "m"],
                     "n: consecutive threads take columns; m: rows, the naive order (simt)"),
    "layout": ("--layout", list(LAYOUTS), "A, B, C each row- (r) or column-major (c)"),
    "epilogue": ("--epilogue", list(EPILOGUES), "fused epilogue: bias per column, ReLU, GELU"),
}
FAMILIES = {"simt": SimtConfig, "wmma": WmmaConfig}
FAMILY_DEFAULTS = {
    "simt": {"bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "skew": 4},
    "wmma": {"bm": 128, "bn": 128, "bk": 32, "wm": 64, "wn": 64},
}


def _flag(field: str, value) -> str:
    if field == "transpose_a":
        return "--transpose-a" if value else "--no-transpose-a"
    flag = (FIELD_FLAGS.get(field) or CHOICE_FLAGS[field])[0]
    return f"{flag} {value}"


def _config_values(ctx: click.Context, family: str | None, preset: str | None,
                   config_json: str | None) -> tuple[type, dict]:
    """(config class, values): family defaults, then the preset or JSON config, then every
    flag given on the command line. Raises UsageError for a flag the family does not have."""
    base = {}
    if preset:
        base = PRESETS[preset].config.as_dict()
    if config_json:
        base = json.loads(config_json)
    family = family or base.get("family", "simt")
    if base and base.get("family", "simt") != family:
        raise click.UsageError(f"--family {family} contradicts the {base.get('family')} config")
    cls = FAMILIES[family]
    names = {f.name for f in fields(cls)}
    values = {f.name: f.default for f in fields(cls) if f.default is not dataclasses.MISSING}
    values.update(FAMILY_DEFAULTS[family])
    values.update({k: v for k, v in base.items() if k != "family"})
    for field in [*FIELD_FLAGS, *CHOICE_FLAGS, "transpose_a"]:
        if ctx.get_parameter_source(field) is click.core.ParameterSource.COMMANDLINE:
            if field not in names:
                raise click.UsageError(f"{_flag(field, ctx.params[field]).split()[0]} does not "
                                       f"apply to the {family} family")
            values[field] = ctx.params[field]
    if (family == "wmma" and values.get("dtype") == "tf32"
            and ctx.get_parameter_source("shape") is not click.core.ParameterSource.COMMANDLINE
            and not base):
        values["shape"] = "m16n16k8"  # the only TF32 shape
    return cls, values


def _report_invalid(err: ConfigError, values: dict) -> None:
    click.echo(f"error: {err.args[0].splitlines()[0]}", err=True)
    for v in err.violations:
        click.echo(f"  {v}", err=True)
    if err.suggestions:
        click.echo("nearest valid configurations:", err=True)
        base = type(err.suggestions[0]).unchecked(**values)
        for s in err.suggestions:
            flags = " ".join(_flag(k, v) for k, v in changed_fields(base, s).items())
            click.echo(f"  {flags:<28} -> {s.name}", err=True)


@click.group()
@click.version_option(__version__, prog_name="gemmgen")
def main() -> None:
    """Generate specialized CUDA GEMM kernels (C = alpha*A*B + beta*C) from tile configurations."""


def _field_options(func):
    for field, (flag, help_) in reversed(FIELD_FLAGS.items()):
        func = click.option(flag, field, type=int, default=None, help=help_)(func)
    for field, (flag, choices, help_) in reversed(CHOICE_FLAGS.items()):
        func = click.option(flag, field, type=click.Choice(choices), default=None,
                            help=help_)(func)
    func = click.option("--transpose-a/--no-transpose-a", "transpose_a", default=True,
                        help="store the A tile K-major in shared memory (simt; default on)")(func)
    return func


@main.command()
@_field_options
@click.option("--family", type=click.Choice(list(FAMILIES)), default=None,
              help="kernel family [default: the preset's, else simt]")
@click.option("--preset", type=click.Choice(list(PRESETS)), help="start from a ladder preset")
@click.option("--config-json", help="start from a JSON config (an emitted header's line)")
@click.option("--arch", default="sm_90", type=click.Choice(list(ARCHS)), show_default=True,
              help="target architecture for --check and the header's occupancy figure")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="output file [default: generated/<name>.cu]")
@click.option("--check", is_flag=True, help="compile with nvcc and print ptxas resources")
@click.pass_context
def emit(ctx, family, preset, config_json, arch, output, check, **_fields) -> None:
    """Validate a configuration and write its kernel. Exit status 2 if it is invalid."""
    cls, values = _config_values(ctx, family, preset, config_json)
    try:
        cfg = cls(**values)
    except ConfigError as err:
        _report_invalid(err, values)
        sys.exit(2)
    except TypeError as err:
        raise click.BadParameter(str(err)) from err
    path = emit_file(cfg, output, arch)
    click.echo(f"wrote {path}")
    kind = "dynamic" if cfg.dynamic_smem_bytes else "static"
    click.echo(f"  {cfg.threads} threads, {cfg.smem_bytes} bytes {kind} shared memory, "
               f"{cfg.acc_regs} accumulator registers/thread, {cfg.blocks_per_sm(arch)} "
               f"blocks/SM (threads and shared memory, {arch})")
    if check:
        from .nvcc import BuildError, compile_file
        try:
            res = compile_file(path, (arch,))[arch]
        except (BuildError, FileNotFoundError) as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(1)
        click.echo(f"nvcc {arch}: {res.registers} registers/thread, {res.smem_bytes} bytes "
                   f"static shared memory (model {cfg.static_smem_bytes}), "
                   f"{res.stack_bytes} bytes stack, "
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
        warp = f"{c.wm}x{c.wn}" if c.wm else "-"
        click.echo(f"{i}. {p.name} ({c.family}, {c.dtype})  [{p.source}]")
        click.echo(f"   {p.technique}")
        if c.family == "simt":
            detail = (f"thread {c.tm}x{c.tn}  vec {c.vec}  A "
                      f"{'transposed' if c.transpose_a else 'row-major'} in smem")
        else:
            detail = f"{c.shape}  acc {c.acc}  out {c.out}"
        click.echo(f"   block {c.bm}x{c.bn}x{c.bk}  warp {warp}  {detail}  skew {c.skew}  "
                   f"stages {c.stages}  threads {c.threads}  smem {c.smem_bytes} B")
        click.echo(f"   {c.name}")


@main.command()
def rules() -> None:
    """Show the validation rules (each is also a static_assert in the emitted kernel)."""
    for family, cls in FAMILIES.items():
        click.echo(f"{family}:")
        for rule in cls.rules:
            click.echo(f"  {rule.id}  {rule.name:<20} {rule.formula():<44} {rule.why}")


__all__ = ["main"]
