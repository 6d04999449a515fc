"""Rendering: Jinja templates -> CUDA source; emit() writes generated/<name>.cu atomically."""
from __future__ import annotations

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

import jinja2

from . import __version__
from .families import config_from_dict
from .model import ConfigBase

CONFIG_MARK = "// gemmgen-config: "


def template_dir() -> Path:
    """``gemmgen/templates`` when installed; the repository's ``templates/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "templates", here.parent / "templates"):
        if (candidate / "_common.cu.j2").is_file():
            return candidate
    raise FileNotFoundError(f"gemmgen templates not found beside {here}")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False)


def _header(cfg: ConfigBase, arch: str) -> dict:
    fields = [(k, v) for k, v in cfg.as_dict().items()]
    figures = []
    for key, value in cfg.figures(arch).items():
        if isinstance(value, dict):
            figures += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            figures.append((key, value))
    if cfg.dynamic_smem_bytes:
        smem = f"dynamic shared memory {cfg.dynamic_smem_bytes} bytes (passed at launch)"
    else:
        smem = f"static shared memory {cfg.static_smem_bytes} bytes"
    return {"version": __version__, "template": cfg.template,
            "dtype": f"A and B {cfg.dtype}, {cfg.acc} accumulation, C {cfg.out}",
            "fields": fields, "figures": figures, "arch": arch, "launch": cfg.launch_summary(),
            "smem": smem, "json": cfg.to_json()}


def render(cfg: ConfigBase, arch: str = "sm_90") -> str:
    """CUDA source of ``cfg``'s kernel: an ``extern "C"`` function named ``cfg.name``.

    Deterministic: the same config renders the same bytes. ``arch`` only affects the
    occupancy figure in the header comment. Works for unchecked (invalid) configs too:
    their static_asserts then fail at compile time.
    """
    template = _env().get_template(cfg.template)
    return template.render(
        cfg=cfg, name=cfg.name, ns=f"{cfg.name}_cfg", h=_header(cfg, arch),
        constants=list(cfg.template_constants().items()), types=cfg.ctypes(),
        asserts=[rule.static_assert() for rule in cfg.rules])


def emit(cfg: ConfigBase, path: str | os.PathLike | None = None, arch: str = "sm_90") -> Path:
    """Write ``render(cfg)`` to ``path`` (default ``generated/<name>.cu``) atomically: a
    temporary file in the same directory is renamed into place, so a reader never sees a
    partial file and a failure leaves nothing behind. Returns the path written."""
    target = Path(path) if path is not None else Path("generated") / f"{cfg.name}.cu"
    source = render(cfg, arch)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def config_from_source(source: str) -> ConfigBase:
    """Rebuild the config from an emitted file's ``// gemmgen-config: {...}`` header line.

    Raises ``ValueError`` when the line is missing or malformed, ``ConfigError`` when the
    values it holds are invalid.
    """
    for line in source.splitlines():
        if line.startswith(CONFIG_MARK):
            try:
                return config_from_dict(json.loads(line[len(CONFIG_MARK):]))
            except json.JSONDecodeError as exc:
                raise ValueError(f"malformed gemmgen-config line: {exc}") from exc
    raise ValueError("no '// gemmgen-config:' line: not a file emitted by gemmgen")
