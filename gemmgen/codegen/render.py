"""Rendering: Jinja templates -> CUDA source; emit() writes generated/<name>.cu atomically."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from .._version import __version__
from ..model.arch import cc_of
from ..model.config import ConfigBase
from ..model.families import FAMILIES, config_from_dict

CONFIG_MARK = "// gemmgen-config: "
STEM_LIMIT = 120
"""Kernel names up to this many characters are file names as they are; longer ones (deep
epilogue trees) are shortened by ``file_stem``."""


def file_stem(name: str) -> str:
    """The file name (without suffix) for a kernel named ``name``: the name itself up to
    ``STEM_LIMIT`` characters, else its first 100 characters, ``-`` and 16 hex digits of its
    sha256 (file systems refuse names over 255 bytes)."""
    if len(name) <= STEM_LIMIT:
        return name
    return f"{name[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def template_dir() -> Path:
    """``gemmgen/templates`` when installed; the repository's ``templates/`` in a checkout."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "templates", package.parent / "templates"):
        if (candidate / "_common.cu.j2").is_file():
            return candidate
    raise FileNotFoundError(f"gemmgen templates not found beside {package}")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, autoescape=False)


def _header(cfg: ConfigBase, arch: str) -> dict:
    fields = [(k, v) for k, v in cfg.header_dict().items()]
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
    launch = cfg.launch_summary()
    if cfg.pdl:
        launch += ("; programmatic dependent launch (the set-up overlaps the previous kernel, "
                   "griddepcontrol.wait before any global memory access)")
    return {"version": __version__, "template": cfg.template,
            "dtype": f"A and B {cfg.dtype}, {cfg.acc} accumulation, C {cfg.out}",
            "fields": fields, "figures": figures, "arch": arch, "launch": launch,
            "smem": smem, "json": cfg.to_json()}


def render(cfg: ConfigBase, arch: str = "sm_90") -> str:
    """CUDA source of ``cfg``'s kernel: an ``extern "C"`` function named ``cfg.name``.

    Deterministic: the same config renders the same bytes. ``arch`` only affects the
    occupancy figure in the header comment, spelled as the family targets it (sm_90 is
    sm_90a for wgmma). Works for unchecked (invalid) configs too: their static_asserts then
    fail at compile time.
    """
    arch = _family_arch(cfg, arch)
    template = _env().get_template(cfg.template)
    return template.render(
        cfg=cfg, name=cfg.name, ns=f"{cfg.name}_cfg", h=_header(cfg, arch),
        constants=list(cfg.template_constants().items()), types=cfg.ctypes(),
        asserts=[rule.static_assert() for rule in cfg.rendered_rules()])


@dataclass(frozen=True)
class Rendered:
    """A config's kernel as the compile stage takes it: ``source`` (CUDA text), ``name`` (its
    ``extern "C"`` function), ``stem`` (the file name without suffix: ``file_stem(name)``) and
    ``target`` (the nvcc arch in the family's spelling, e.g. sm_90a)."""

    source: str
    name: str
    stem: str
    target: str


def rendered(cfg: ConfigBase, arch: str, source: str | None = None) -> Rendered:
    """``cfg``'s kernel for a device of ``arch`` (``sm_XY``): ``render(cfg, target)``, or
    ``source`` as it is (an emitted file, hand edits included), with its name, file stem and
    nvcc target. Raises ``ValueError`` naming the arch the family needs when it cannot run on
    ``arch``, or for an arch that is not ``sm_XY``."""
    stem, target = file_stem(cfg.name), family_target(cfg, arch)
    text = source if source is not None else render(cfg, arch)
    return Rendered(text, cfg.name, stem, target)


def render_template(template: str, **context) -> str:
    """CUDA source of a helper template (e.g. ``fp8_quant.cu.j2``) with ``context``, in the
    same Jinja environment as ``render`` (StrictUndefined); ``version`` is gemmgen's."""
    return _env().get_template(template).render(version=__version__, **context)


def family_target(cfg: ConfigBase, arch: str) -> str:
    """The nvcc target of ``cfg`` on a device of ``arch`` (``sm_XY``): ``arch`` in the
    spelling ``cfg``'s family compiles for (sm_90 -> sm_90a for wgmma). Raises ``ValueError``
    naming the arch the family needs when it cannot run there, or for an unknown arch or
    family."""
    fam = FAMILIES.get(cfg.family)
    if fam is None:
        raise ValueError(f"unknown kernel family {cfg.family!r}; known: {', '.join(FAMILIES)}")
    return fam.arch_for(cc_of(arch))


def _family_arch(cfg: ConfigBase, arch: str) -> str:
    """``family_target``, or ``arch`` unchanged where that raises (the header's figure only)."""
    try:
        return family_target(cfg, arch)
    except ValueError:
        return arch


def emit(cfg: ConfigBase, path: str | os.PathLike | None = None, arch: str = "sm_90") -> Path:
    """Write ``render(cfg, arch)`` to ``path`` (default ``generated/<name>.cu``, creating
    ``generated/``; a name too long for a file is shortened by ``file_stem``) and return the
    path given.

    Atomic: a temporary file in the target's directory is renamed into place, so a reader
    never sees a partial file and a failure leaves nothing behind. The file gets the mode a
    plain write would give: an existing file's mode, else 0666 less the umask. A symlink is
    written through (its target is replaced, the link stays). Raises ``OSError`` when the
    directory of an explicit ``path`` is missing, the path is a directory or another file that
    is not a regular one (a device, a FIFO), or the place is not writable.
    """
    target = Path(path) if path is not None else Path("generated") / f"{file_stem(cfg.name)}.cu"
    source = render(cfg, arch)
    if path is None:
        target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, source)
    return target


def write_atomic(target: Path, text: str) -> None:
    """Replace ``target`` (through a symlink) with ``text`` atomically, with a plain write's
    mode. Raises ``OSError`` (IsADirectoryError, FileNotFoundError for a missing directory,
    PermissionError, EINVAL for a target that exists but is not a regular file) and leaves
    nothing behind on failure."""
    real = Path(os.path.realpath(target))
    if real.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(target))
    if real.exists() and not real.is_file():  # never replace a device node, FIFO or socket
        raise OSError(errno.EINVAL, "not a regular file", str(target))
    try:
        mode = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:  # name the file asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
