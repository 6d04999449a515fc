"""Command line: a thin click group over the library (emit, list, rules).

The configuration flags are built from the families' dataclass fields (``gemmgen.families``):
one flag per field name, its help and choices from the families that have it.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import fields
from pathlib import Path

import click

from . import __version__
from .arch import ARCHS
from .families import FAMILIES
from .model import ConfigError
from .presets import PRESETS
from .render import emit as emit_file
from .suggest import changed_fields

SPEC_HELP = {"m": "specialize for this M (a compile-time constant)",
             "n": "specialize for this N", "k": "specialize for this K"}


def _field_specs() -> dict[str, dict]:
    """field name -> {"type": int | bool | str, "choices": [...], "help": str, "families": [...]}
    over every family, in first-seen order."""
    specs: dict[str, dict] = {}
    for fam in FAMILIES.values():
        cls = fam.config
        for f in fields(cls):
            spec = specs.setdefault(f.name, {"type": cls.field_types.get(f.name, int),
                                             "choices": [], "help": [], "families": []})
            spec["families"].append(fam.name)
            for choice in cls.choices.get(f.name, ()):
                if choice not in spec["choices"]:
                    spec["choices"].append(choice)
            text = SPEC_HELP.get(f.name) or fam.field_help.get(f.name)
            if text and text not in [h for _, h in spec["help"]]:
                spec["help"].append((fam.name, text))
    return specs


FIELD_SPECS = _field_specs()


def _flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _flag(field: str, value) -> str:
    """The command-line spelling of ``field = value``."""
    if FIELD_SPECS[field]["type"] is bool:
        return _flag_name(field) if value else "--no-" + field.replace("_", "-")
    return f"{_flag_name(field)} {value}"


def _help(field: str) -> str:
    spec = FIELD_SPECS[field]
    if len(spec["help"]) == 1:
        text = spec["help"][0][1]
    else:
        text = "; ".join(f"{fam}: {h}" for fam, h in spec["help"])
    only = "" if len(spec["families"]) == len(FAMILIES) else f" [{', '.join(spec['families'])}]"
    return text + only


def _config_values(ctx: click.Context, family: str | None, preset: str | None,
                   config_json: str | None) -> tuple[type, dict]:
    """(config class, values): family defaults, then the preset or JSON config, then every
    flag given on the command line. Raises UsageError for a flag the family does not have."""
    base = {}
    if preset:
        base = PRESETS[preset].config.as_dict()
    if config_json:
        try:
            base = json.loads(config_json)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not valid JSON ({exc.msg} at character {exc.pos})",
                                     param_hint="--config-json") from None
        if not isinstance(base, dict):
            raise click.BadParameter("expected a JSON object of config fields",
                                     param_hint="--config-json")
    family = family or base.get("family", "simt")
    if family not in FAMILIES:
        raise click.BadParameter(f"unknown family {family!r}; known: {', '.join(FAMILIES)}",
                                 param_hint="--config-json")
    if base and base.get("family", "simt") != family:
        raise click.UsageError(f"--family {family} contradicts the {base.get('family')} config")
    fam = FAMILIES[family]
    cls = fam.config
    names = {f.name for f in fields(cls)}
    unknown = set(base) - names - {"family"}
    if unknown:
        raise click.BadParameter(f"unknown {family} fields: {', '.join(sorted(unknown))}",
                                 param_hint="--config-json")
    values = {f.name: f.default for f in fields(cls) if f.default is not dataclasses.MISSING}
    values.update(fam.flag_defaults)
    values.update({k: v for k, v in base.items() if k != "family"})
    given = set()
    for field in FIELD_SPECS:
        if ctx.get_parameter_source(field) is click.core.ParameterSource.COMMANDLINE:
            if field not in names:
                raise click.UsageError(f"{_flag_name(field)} does not apply to the {family} "
                                       f"family")
            values[field] = ctx.params[field]
            given.add(field)
    if not base:
        values = fam.adjust(values, given)
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
    """One click option per config field of any family."""
    for field, spec in reversed(FIELD_SPECS.items()):
        if spec["type"] is bool:
            flag = f"{_flag_name(field)}/--no-{field.replace('_', '-')}"
            func = click.option(flag, field, default=None, help=_help(field))(func)
        elif spec["type"] is str:
            func = click.option(_flag_name(field), field, default=None, help=_help(field),
                                type=click.Choice(spec["choices"]))(func)
        else:  # ints; a family's allowed values are checked by its config
            func = click.option(_flag_name(field), field, default=None, help=_help(field),
                                type=int)(func)
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
        click.echo(f"{i}. {p.name} ({c.family}, {c.dtype})  [{p.source}]")
        click.echo(f"   {p.technique}")
        click.echo(f"   {c.brief()}  threads {c.threads}  smem {c.smem_bytes} B")
        click.echo(f"   {c.name}")


@main.command()
def rules() -> None:
    """Show the validation rules (each is also a static_assert in the emitted kernel)."""
    for family, fam in FAMILIES.items():
        click.echo(f"{family}:")
        for rule in fam.config.rules:
            click.echo(f"  {rule.id}  {rule.name:<20} {rule.formula():<44} {rule.why}")


__all__ = ["main"]
