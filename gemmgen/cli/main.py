"""Command line: the click group, its error handling and the parameter types its commands share.

Errors: a mistake on the command line (a bad value, a missing or unreadable input file, an
output path in a missing directory) exits 2 with one or two lines naming the argument; a
failure while working (no GPU, nvcc failing, ptxas spilling, a file that cannot be written)
exits 1 with one line. Neither shows a traceback, and neither leaves a partial file.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .._version import __version__
from ..codegen.render import write_atomic
from ..compile.nvcc import BuildError
from ..heuristics.tunedb import TuneDBError
from ..model.arch import cc_of, get_arch
from ..model.config import INT32_MAX, ConfigError
from ..model.quote import quote
from ..runtime.device import GpuUnavailable
from ..runtime.driver import DriverError
from ..runtime.operands import OperandError
from ..tune.results import ResultsError
from ..tune.search import WorkerError


def runtime_message(exc: BaseException) -> str | None:
    """One line for a failure while working (exit 1), or None for an exception that is a bug
    and should keep its traceback."""
    if isinstance(exc, BuildError):
        lines = [ln.strip() for ln in exc.log.splitlines() if ln.strip()]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
        return f"nvcc failed on {exc.path}: {first}"
    if isinstance(exc, (GpuUnavailable, DriverError, TuneDBError, ResultsError, ConfigError)):
        return str(exc).splitlines()[0]
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc)
        return f"{exc.filename}: {what}" if exc.filename else what
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in ("pycuda", "cupy",
                                                                            "matplotlib"):
        return str(exc).splitlines()[0]
    if isinstance(exc, (OperandError, WorkerError)):
        return str(exc)
    return None


class Group(click.Group):
    """The gemmgen group: usage errors in two lines (exit 2), runtime failures in one (exit 1),
    tracebacks only for bugs."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            if exc.ctx is not None:
                click.echo(f"(see '{exc.ctx.command_path} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        except Exception as exc:  # noqa: BLE001 - known failures become one line, bugs re-raise
            message = runtime_message(exc)
            if message is None:
                raise
            click.echo(f"error: {message}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class OutputPath(click.ParamType):
    """A file to write: an existing regular file or a new name, in an existing directory this
    process may write in. An existing path that is not a regular file (a directory, a device
    such as /dev/full, a FIFO, a socket) is refused, as is a dangling symlink; a symlink to a
    regular file is written through (its target is replaced atomically, the link stays).
    With ``stdout``, '-' means standard output and converts to '-'; elsewhere it is refused
    (no file named '-' is written). Otherwise converts to a Path (nothing is created here)."""

    name = "file"

    def __init__(self, stdout: bool = False):
        self.stdout = stdout

    def convert(self, value, param, ctx):
        if str(value) == "-":
            if self.stdout:
                return "-"
            self.fail("'-' (standard output) is not taken here; give a file name", param, ctx)
        path = Path(value)
        real = Path(os.path.realpath(path))
        if real.is_dir() or not path.name:
            self.fail(f"{quote(str(value))} is a directory; give a file name", param, ctx)
        if path.is_symlink() and not real.exists():
            self.fail(f"{quote(str(value))} is a dangling symlink (to "
                      f"{quote(os.readlink(path))}); remove it or give another name", param, ctx)
        if real.exists() and not real.is_file():
            self.fail(f"{quote(str(value))} is not a regular file (a device, FIFO or socket); "
                      f"only regular files are written", param, ctx)
        parent = real.parent
        if not parent.is_dir():
            self.fail(f"directory {str(path.parent)!r} does not exist; create it first",
                      param, ctx)
        if not os.access(parent, os.W_OK | os.X_OK):
            self.fail(f"cannot write in {str(path.parent)!r} (permission denied)", param, ctx)
        return path


class SizeType(click.ParamType):
    """N (square) or MxNxK, each extent from 1 to 2^31 - 1 -> (M, N, K)."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        parts = text.split("x")
        if not all(p.strip().isdigit() for p in parts) or len(parts) not in (1, 3):
            self.fail(f"{quote(value)} is not N or MxNxK (e.g. 4096 or 4095x4097x4093)", param, ctx)
        dims = tuple(int(p) for p in parts) * (3 if len(parts) == 1 else 1)
        if min(dims) < 1:
            self.fail(f"{quote(value)}: every extent must be at least 1", param, ctx)
        if max(dims) > INT32_MAX:
            self.fail(f"{quote(value)}: extents must be at most {INT32_MAX} (the kernels use "
                      f"32-bit indices)", param, ctx)
        return dims


class ArchType(click.ParamType):
    """sm_XY (or sm_90a) of the known architectures, or None for the device's."""

    name = "arch"

    def convert(self, value, param, ctx):
        try:
            get_arch(value)
            cc_of(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return value


SIZE = SizeType()
ARCH = ArchType()


def require_matplotlib(option: str) -> None:
    """Fail (exit 1) before any work when ``option`` needs matplotlib and it is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(f"{option} needs matplotlib: pip install 'gemmgen[plot]'"
                                   ) from None


def write_text(path: Path, text: str, option: str) -> None:
    """Write an output file atomically; an OS failure is one line naming ``option`` (exit 1)."""
    try:
        write_atomic(Path(path), text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {option} {path}: "
                                   f"{exc.strerror or exc}") from None


@click.group(cls=Group)
@click.version_option(__version__, prog_name="gemmgen")
def main() -> None:
    """Generate specialized CUDA GEMM kernels (C = alpha*A*B + beta*C) from tile configurations."""
