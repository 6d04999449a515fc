"""The files gemmgen reads and writes: a JSON or TOML document read with every way it can fail
named (a directory, a file that cannot be read or decoded, a syntax error with its line), and
a directory entry made durable after a rename. Every stage may use it."""
from __future__ import annotations

import json
import os
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


def read_document(path, error: type[Exception], what: str = "", fix: str = "",
                  toml: bool = False):
    """The JSON (or, with ``toml``, TOML) document at ``path``. Raises ``error`` (an
    exception class taking one message) naming ``what`` (e.g. "tuning database") and the
    path: "<what> <path> is a directory; pass a file", "cannot read <what> <path>: <the
    system's reason>", "<what> <path> is not valid JSON (<message>, line <n>)" or "<what>
    <path>: not valid TOML: <message>", the last two followed by ": <fix>" where given."""
    path = Path(path)
    name = f"{what} {path}" if what else str(path)
    tail = f": {fix}" if fix else ""
    try:
        text = path.read_text()
    except IsADirectoryError:
        raise error(f"{name} is a directory; pass a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}") from None
    if toml:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise error(f"{name}: not valid TOML: {exc}{tail}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{name} is not valid JSON ({exc.msg}, line {exc.lineno}){tail}") from None


def sync_dir(path) -> None:
    """Make a rename in directory ``path`` durable (best effort: not every system can fsync a
    directory)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
