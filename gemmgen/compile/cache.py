"""The cubin cache: nvcc output kept on disk, keyed by source, target arch and nvcc (its
path, version and environment).

A second process that needs a kernel it compiled before reads the cubin and ptxas's report
from ``cache_dir()`` instead of running nvcc, once the cubin matches the sha256 and size
recorded beside it (``gemmgen.compile.store``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import platformdirs

from .._version import __version__
from ..codegen.render import Rendered, family_target, file_stem, render
from ..model.config import ConfigBase
from . import store
from .nvcc import CUBIN_FLAGS, BuildError, Resources, cubin_of, toolchain_key


def cache_dir() -> Path:
    """Where compiled cubins are kept: $GEMMGEN_CACHE_DIR, else the user cache directory
    (platformdirs) + ``/cubin``. gemmgen's other cached builds (the PyTorch launcher) and
    the sources of failed builds (``failed/``) live in folders inside it. It is created mode
    0700; one that another user owns or that group or others may write to is refused
    (``gemmgen.compile.store``)."""
    if os.environ.get("GEMMGEN_CACHE_DIR"):
        return Path(os.environ["GEMMGEN_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("gemmgen")) / "cubin"


def target_arch(config: ConfigBase, arch: str) -> str:
    """The nvcc target for ``config`` on ``arch`` (``sm_XY``): the family's own spelling, e.g.
    sm_90a for wgmma. Raises ``BuildError`` when the family cannot run there, naming the arch
    it needs."""
    try:
        return family_target(config, arch)
    except ValueError as exc:
        raise BuildError(config.name, str(exc)) from None


def compile_cached(source: str, arch: str, name: str, timeout: float = 300) -> tuple[bytes, Resources]:
    """(cubin, ptxas resources) of ``source`` (the kernel ``name``) for ``arch``, from the disk
    cache or nvcc: ``compile_rendered`` of it, its files named ``file_stem(name)``."""
    return compile_rendered(Rendered(source, name, file_stem(name), arch), timeout)


def compile_rendered(kernel: Rendered, timeout: float = 300) -> tuple[bytes, Resources]:
    """(cubin, ptxas resources) of a rendered kernel for its target, from the disk cache or
    nvcc; its source, cubin and kept failed source are named by its stem.

    The key holds the source, the arch, gemmgen's version and nvcc's flags, path, version and
    environment (``toolchain_key``). A cached cubin is served only when it matches the sha256
    and size recorded beside it; otherwise it is compiled again and replaced. Processes (and
    threads) that miss the same key at once compile it once: the others wait on its build
    lock (``store.building``) and read what the first wrote.

    Raises ``BuildError`` with nvcc's message (and the kept source's path) when it fails,
    ``UnsafeCacheError`` (a ``PermissionError``) when the cache directory (or ``failed/`` in
    it) belongs to another user or is writable by group or others."""
    source, arch, stem = kernel.source, kernel.target, kernel.stem
    key = hashlib.sha256(f"{__version__}\n{' '.join(CUBIN_FLAGS)}\n{arch}\n{toolchain_key()}\n"
                         f"{source}".encode()).hexdigest()[:32]
    root = _root()
    cubin_path = (root or cache_dir()) / f"{stem}-{key}.cubin"
    hit = _hit(cubin_path) if root else None
    if hit is not None:
        return hit
    if root is None:
        return _build(source, arch, stem, timeout, None)
    with store.building(root, cubin_path.name, timeout + 60):
        # another process may have built it while this one waited for the lock
        return _hit(cubin_path) or _build(source, arch, stem, timeout, cubin_path)


def _hit(cubin_path: Path) -> tuple[bytes, Resources] | None:
    found = store.read_entry(cubin_path)
    if found is not None:
        try:
            return found[0], Resources(**found[1]["resources"])
        except (KeyError, TypeError):
            pass  # a sidecar of another shape: compile again
    return None


def _build(source: str, arch: str, stem: str, timeout: float,
           cubin_path: Path | None) -> tuple[bytes, Resources]:
    try:
        cubin, res = cubin_of(source, arch, stem, timeout)
    except BuildError as err:
        kept = _keep_source(stem, source)
        raise BuildError(kept, err.log, err.command) from None
    if cubin_path is not None:
        try:
            store.write_entry(cubin_path, cubin, {"resources": dataclasses.asdict(res)})
        except OSError:
            pass  # an unwritable cache costs a compile next time, nothing more
    return cubin, res


def _root() -> Path | None:
    """The checked cache root, created if missing; None where it cannot be created (then
    nothing is cached). Raises ``UnsafeCacheError``."""
    try:
        return store.private_root(cache_dir())
    except store.UnsafeCacheError:
        raise
    except OSError:
        return None


def _keep_source(stem: str, source: str) -> str:
    """Where a failed build's source is kept for the error message: ``failed/<stem>.cu`` in
    the cache directory. Raises ``UnsafeCacheError`` when that folder or the root is unsafe."""
    try:
        path = store.private_subdir(cache_dir(), "failed") / f"{stem}.cu"
        store.write_file(path, source.encode())
    except store.UnsafeCacheError:
        raise
    except OSError:
        return f"{stem}.cu (not kept: the cache directory is not writable)"
    return str(path)


def compile_many(configs, arch: str, jobs: int | None = None) -> list:
    """Compile ``configs`` for ``arch`` (``sm_XY``; each family's own target is derived from
    it) with parallel nvcc processes driven from threads (no Python subprocesses, so a user
    script without a ``__main__`` guard is never re-run): a list of (cubin, Resources, target)
    or BuildError, in the order given. Raises ``UnsafeCacheError`` when the cache directory is
    unsafe (``compile_cached``)."""
    targets = []
    for cfg in configs:
        try:
            targets.append(target_arch(cfg, arch))
        except BuildError as err:
            targets.append(err)

    def one(cfg, target):
        if isinstance(target, BuildError):
            return target
        try:
            return (*compile_cached(render(cfg, target), target, cfg.name), target)
        except BuildError as err:
            return err
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        return list(pool.map(one, configs, targets))
