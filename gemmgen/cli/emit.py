"""``gemmgen emit``, ``list`` and ``rules``: validate a configuration and write its kernel.

The configuration flags are built from the families' dataclass fields
(``gemmgen.model.families``): one flag per field name, its help and choices from the families
that have it.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import fields

import click

from ..codegen.render import emit as emit_file, render
from ..compile.nvcc import compile_source
from ..model.arch import ARCHS, cc_of, fit_problem
from ..model.config import EPILOGUES, ConfigError
from ..model.dtypes import FP8_DTYPES
from ..model.epilogue import Epilogue, EpilogueError
from ..model.epilogue_rules import EPILOGUE_RULES
from ..model.families import FAMILIES
from ..model.families.hopper.waiter import WAITER_RULES
from ..model.families.hopper.fp8.rules import FP8_A_ROWS_RULES, FP8_WAITER_RULES
from ..model.families.hopper.wgmma.rules import (SPLIT_CLUSTER_RULES, STREAM_K_RULES,
                                                 WGMMA_FEATURE_RULES)
from ..model.presets import PRESETS
from ..model.registers import register_cap, registers_needed
from ..model.suggest import changed_fields
from .main import OutputPath, main

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
    fp8 = ctx.params.get("dtype") in FP8_DTYPES and not base  # --dtype e4m3: the fp8 family
    family = family or base.get("family", "fp8" if fp8 else "simt")
    if not isinstance(family, str) or family not in FAMILIES:
        raise click.BadParameter(f"unknown family {family!r}; known: {', '.join(FAMILIES)}",
                                 param_hint="--config-json")
    if base.get("family", family) != family:
        raise click.UsageError(f"--family {family} contradicts the {base['family']} config of "
                               f"{'--preset' if preset else '--config-json'}")
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


class EpilogueParam(click.ParamType):
    """``--epilogue``: one of today's names or an epilogue expression, parsed (never
    evaluated) into its canonical spelling; a bad one is a usage error naming the token."""

    name = "EXPR"

    def convert(self, value, param, ctx):
        try:
            return Epilogue.parse(value).spelling
        except EpilogueError as exc:
            self.fail(str(exc), param, ctx)


EPILOGUE_HELP = (f"fused epilogue: {', '.join(EPILOGUES)}, or an expression such as "
                 "'silu(acc*row_scale*col_scale + bias) + R' (wgmma only)")


def _field_options(func):
    """One click option per config field of any family."""
    for field, spec in reversed(FIELD_SPECS.items()):
        if field == "epilogue":
            func = click.option("--epilogue", field, default=None, type=EpilogueParam(),
                                help=EPILOGUE_HELP)(func)
        elif spec["type"] is bool:
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
              help="target architecture: the kernel must fit it; --check compiles for it")
@click.option("-o", "--output", type=OutputPath(stdout=True),
              help="output file, in an existing directory, or - for standard output (the "
                   "summary then goes to standard error) [default: generated/<name>.cu]")
@click.option("--check", is_flag=True,
              help="compile with nvcc first and print ptxas resources; exit 1, writing nothing, "
                   "if ptxas spills or uses a stack frame")
@click.pass_context
def emit(ctx, family, preset, config_json, arch, output, check, **_fields) -> None:
    """Validate a configuration and write its kernel. Exit status 2 if it is invalid or cannot
    run on --arch; 1 if --check finds spills."""
    if preset and config_json:
        raise click.UsageError("give --preset or --config-json, not both")
    cls, values = _config_values(ctx, family, preset, config_json)
    try:
        cfg = cls(**values)
    except ConfigError as err:
        _report_invalid(err, values)
        sys.exit(2)
    fam = FAMILIES[cfg.family]
    try:
        target = fam.arch_for(cc_of(arch))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--arch") from None
    problem = fit_problem(cfg, target)
    if problem:
        click.echo(f"error: {cfg.name} cannot run on {target}: {problem}", err=True)
        click.echo("  choose a smaller tile or fewer stages, or another --arch", err=True)
        sys.exit(2)
    res = _check(cfg, target) if check else None
    to_stdout = output == "-"
    if to_stdout:
        click.echo(render(cfg, target), nl=False)
    else:
        try:
            path = emit_file(cfg, output, target)
        except OSError as exc:
            raise click.ClickException(f"cannot write {exc.filename or output}: "
                                       f"{exc.strerror or exc}") from None
        click.echo(f"wrote {path}")
    kind = "dynamic" if cfg.dynamic_smem_bytes else "static"
    click.echo(f"  {cfg.threads} threads, {cfg.smem_bytes} bytes {kind} shared memory, "
               f"{cfg.acc_regs} accumulator registers/thread, {cfg.blocks_per_sm(target)} "
               f"blocks/SM (threads and shared memory, {target})", err=to_stdout)
    if res is not None:
        click.echo(_resources_line(cfg, res), err=to_stdout)
    else:
        warning = _register_warning(cfg)
        if warning:
            click.echo(f"warning: {warning}", err=True)


def _resources_line(cfg, res) -> str:
    return (f"nvcc {res.arch}: {res.registers} registers/thread, {res.smem_bytes} bytes "
            f"static shared memory (model {cfg.static_smem_bytes}), {res.stack_bytes} bytes "
            f"stack, {res.spill_stores} bytes spill stores, {res.spill_loads} bytes spill loads")


def _register_warning(cfg) -> str | None:
    """A warning when the register estimate says ptxas will spill (emit without --check)."""
    need, cap = registers_needed(cfg), register_cap(cfg)
    if need <= cap:
        return None
    return (f"about {need} registers/thread needed, but {cfg.threads} threads x min_blocks "
            f"{cfg.min_blocks} allow {cap}: ptxas will likely spill (check with --check)")


def _check(cfg, arch: str):
    """Compile ``cfg`` for ``arch`` before anything is written; exit 1 on an nvcc failure or
    when ptxas spills or keeps a stack frame. Returns ptxas's Resources."""
    try:
        res = compile_source(render(cfg, arch), (arch,), name=cfg.name)[arch]
    except FileNotFoundError as err:
        raise click.ClickException(f"--check needs nvcc: {err}") from None
    if res.spills or res.stack_bytes:
        click.echo(_resources_line(cfg, res), err=True)
        raise click.ClickException(
            f"ptxas spills to local memory on {arch} ({res.spill_stores} bytes spill stores, "
            f"{res.spill_loads} loads, {res.stack_bytes} bytes stack; {res.registers} of "
            f"{register_cap(cfg)} registers/thread): nothing written. Use fewer threads per "
            f"block, a smaller thread tile or min_blocks 1, or drop --check to write it anyway")
    return res


@main.command(name="list")
@click.option("--names", is_flag=True, help="print preset names only, one per line")
@click.option("--json", "as_json", is_flag=True, help="print presets as JSON")
def list_presets(names: bool, as_json: bool) -> None:
    """Show the ladder presets: technique, configuration and source article."""
    if names and as_json:
        raise click.UsageError("give --names or --json, not both")
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
    tables = [(f"{family}:", fam.config.rules) for family, fam in FAMILIES.items()]
    tables += [("epilogue trees (wgmma; other families: E00):", EPILOGUE_RULES),
               ("wgmma features (dual, overlap; with a tree or either feature):",
                WGMMA_FEATURE_RULES), ("wgmma stream-K (with stream_k):", STREAM_K_RULES),
               ("wgmma cluster split-K (with split_cluster):", SPLIT_CLUSTER_RULES),
               ("Hopper waiter warp (wgmma, fp8; with waiter):", WAITER_RULES),
               ("fp8 waiter warp (with waiter):", FP8_WAITER_RULES),
               ("fp8 A rows a tile (with a_rows):", FP8_A_ROWS_RULES)]
    for title, table in tables:
        click.echo(title)
        for rule in table:
            click.echo(f"  {rule.id}  {rule.name:<20} {rule.formula():<44} {rule.why}")
