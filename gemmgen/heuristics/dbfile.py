"""Writing the JSON files of tuning results safely: a lock file beside the file while a writer
reads, merges and writes it, and an atomic replace that keeps the file's mode and writes
through a symlink to its target."""
from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path

import filelock

from ..files import sync_dir

LOCK_TIMEOUT_S = 60.0
"""How long a writer waits for another process's lock before giving up."""


class LockTimeout(OSError):
    """Another process held the lock beside a tuning file for LOCK_TIMEOUT_S seconds."""


def target(path: Path) -> Path:
    """The file ``path`` names, its symlinks resolved (a link that points nowhere yet resolves
    to where its target would be)."""
    return Path(os.path.realpath(path))


def lock_path(path: Path) -> Path:
    """The lock file of ``path``: ``<file>.lock`` beside the symlink-resolved file, so every
    link to one file shares one lock."""
    real = target(path)
    return real.with_name(real.name + ".lock")


@contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT_S):
    """Hold the lock of ``path`` (``lock_path``) for the ``with`` block; other processes (and
    threads) that take it wait. Raises ``LockTimeout`` after ``timeout`` seconds, or
    ``OSError`` when the lock file cannot be created (a read-only directory)."""
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        with filelock.FileLock(str(lock), timeout=timeout):
            yield
    except filelock.Timeout:
        raise LockTimeout(f"{path} is locked by another process ({lock}); waited "
                          f"{timeout:.0f} s") from None


def write_json(path: Path, doc: dict) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically: a temporary file in the target's directory
    (symlinks resolved, so a link stays a link), flushed to disk, then ``os.replace``d over the
    target. An existing file keeps its permission bits; a new one gets 0666 less the umask.
    Returns the target written. Raises ``OSError`` when the directory cannot be written; the
    temporary file is removed then."""
    real = target(path)
    real.parent.mkdir(parents=True, exist_ok=True)
    tmp = real.with_name(f".{real.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "w") as f:
            try:
                os.fchmod(f.fileno(), os.stat(real).st_mode & 0o7777)
            except FileNotFoundError:
                pass
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_dir(real.parent)
    return real
