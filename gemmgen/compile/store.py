"""Cache files nobody else can plant or corrupt: private directories, entries checked against
their recorded sha256 and size, and writes that never follow a symlink.

Every directory gemmgen keeps files in (the cache root and the folders it creates below it)
is created mode 0700 and refused (``UnsafeCacheError``) when another user owns it or group
or others may write to it. An entry is a file and its sidecar ``<file>.json`` holding the
file's sha256 and size (and whatever else the caller records); a reader gets the file only
when it is a regular file (no symlink) that matches both. Files are written to a temporary
file in the same directory (created exclusively, never through a symlink), fsynced and
renamed into place, so a reader sees a whole file or none.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import filelock

from ..files import sync_dir

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX
SIDECAR = ".json"
"""The sidecar of ``<file>`` is ``<file>.json``: {"sha256", "size", ...}."""


class UnsafeCacheError(PermissionError):
    """gemmgen will not use this cache directory: another user owns it, group or others may
    write to it, or (below the cache root) it is a symlink or not a directory. ``filename``
    is the directory, ``strerror`` what is wrong and how to fix it."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(errno.EACCES, problem, str(path))

    def __reduce__(self):
        return (type(self), (self.filename, self.strerror))

    def __str__(self) -> str:
        return f"unsafe gemmgen cache directory {self.filename}: {self.strerror}"


def digest(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)  # POSIX only
    return getuid() if getuid else None


def check_dir(path: Path, follow: bool = False) -> None:
    """Refuse ``path`` unless it is a directory of this user that group and others cannot
    write to (``follow``: a symlink to one is fine, as for the cache root). Raises
    ``UnsafeCacheError`` naming the directory, what is wrong and the fix; ``OSError`` when it
    cannot be examined."""
    st = os.stat(path) if follow else os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeCacheError(path, "it is a symbolic link (gemmgen makes its own folders "
                                     f"in its cache; remove it: rm {path})")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheError(path, f"it is not a directory (remove it: rm {path})")
    uid = _uid()
    if uid is not None and st.st_uid != uid:
        raise UnsafeCacheError(path, f"it is owned by uid {st.st_uid}, not by you (uid {uid}); "
                                     "remove it, or set GEMMGEN_CACHE_DIR to a directory of "
                                     "your own")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafeCacheError(path, f"it is writable by group or others (mode "
                                     f"{stat.S_IMODE(st.st_mode):04o}); run chmod 700 {path}")


def private_root(path: Path) -> Path:
    """Create the cache root ``path`` (mode 0700; missing parents get the default mode) if it
    is missing and check it (a symlink to a safe directory is fine). Returns ``path``.
    Raises ``UnsafeCacheError`` (see ``check_dir``), ``OSError`` when it cannot be made."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    check_dir(path, follow=True)
    return path


def private_subdir(root: Path, name: str) -> Path:
    """``root / name``, created mode 0700 if missing; the root and it checked (it may not
    be a symlink). Raises ``UnsafeCacheError``, ``OSError`` when it cannot be made."""
    private_root(root)
    path = root / name
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_dir(path)
    return path


def write_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file in its directory (O_EXCL,
    O_NOFOLLOW, mode 0600), fsynced, renamed over ``path`` (a symlink there is replaced,
    never written through). Raises ``OSError``; leaves no temporary file behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_dir(path.parent)


def read_file(path: Path) -> bytes | None:
    """The bytes of the regular file ``path``, or None where it is missing, a symlink or not
    a regular file, or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        try:
            return f.read()
        except OSError:
            return None


def sidecar(path: Path) -> Path:
    """Where ``path``'s sha256 and size are recorded."""
    return path.with_name(path.name + SIDECAR)


def write_entry(path: Path, data: bytes, info: dict | None = None) -> None:
    """Store ``data`` at ``path`` and its sidecar (sha256, size and ``info``), each with
    ``write_file``. Raises ``OSError``."""
    write_file(path, data)
    seal(path, data, info)


def seal(path: Path, data: bytes, info: dict | None = None) -> None:
    """Record ``data``'s sha256 and size (and ``info``) as ``path``'s sidecar. Raises
    ``OSError``."""
    meta = {**(info or {}), "sha256": digest(data), "size": len(data)}
    write_file(sidecar(path), json.dumps(meta, sort_keys=True).encode())


def read_entry(path: Path) -> tuple[bytes, dict] | None:
    """(data, sidecar) of the entry at ``path``, or None where either file is missing, a
    symlink or unreadable, the sidecar is malformed, or the data's size or sha256 differ
    from the recorded ones (an empty or truncated file included): the caller rebuilds it."""
    data, raw = read_file(path), read_file(sidecar(path))
    if data is None or raw is None:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get("size") != len(data) or not data:
        return None
    if meta.get("sha256") != digest(data):
        return None
    return data, meta


def discard(path: Path) -> None:
    """Remove the entry at ``path`` and its sidecar, where they are."""
    for p in (path, sidecar(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


@contextmanager
def building(root: Path, name: str, timeout: float):
    """Hold the build lock of entry ``name`` under ``root`` (``root/locks/<name>.lock``) for
    the ``with`` block, so that processes needing the same entry at once build it once: the
    others wait, then find it built. Best effort: where the lock cannot be created or is not
    taken within ``timeout`` seconds, the block runs unlocked (a second build of the same
    entry is wasted work, never a wrong entry: writes are atomic). Raises
    ``UnsafeCacheError`` when ``locks/`` is unsafe (``private_subdir``)."""
    try:
        lock = filelock.FileLock(str(private_subdir(root, "locks") / f"{name}.lock"),
                                 timeout=timeout)
        lock.acquire()
    except UnsafeCacheError:
        raise
    except (OSError, filelock.Timeout):
        yield
        return
    try:
        yield
    finally:
        lock.release()
