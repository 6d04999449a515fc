"""The cubin cache: nvcc output kept on disk, keyed by source, target arch and nvcc version.

A second process that needs a kernel it compiled before reads the cubin and ptxas's report
from ``cache_dir()`` instead of running nvcc.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import platformdirs

from .._version import __version__
from ..codegen.render import render
from ..model.arch import cc_of
from ..model.config import ConfigBase
from ..model.families import get_family
from .nvcc import CUBIN_FLAGS, BuildError, Resources, compile_cubin, nvcc_version


def cache_dir() -> Path:
    """Where compiled cubins are kept: $GEMMGEN_CACHE_DIR, else the user cache directory
    (platformdirs) + ``/cubin``."""
    if os.environ.get("GEMMGEN_CACHE_DIR"):
        return Path(os.environ["GEMMGEN_CACHE_DIR"])
    return Path(platformdirs.user_cache_dir("gemmgen")) / "cubin"


def target_arch(config: ConfigBase, arch: str) -> str:
    """The nvcc target for ``config`` on ``arch`` (``sm_XY``): the family's own spelling, e.g.
    sm_90a for wgmma. Raises ``BuildError`` when the family cannot run there, naming the arch
    it needs."""
    try:
        return get_family(config.family).arch_for(cc_of(arch))
    except ValueError as exc:
        raise BuildError(config.name, str(exc)) from None


def compile_cached(source: str, arch: str, name: str, timeout: float = 300) -> tuple[bytes, Resources]:
    """(cubin, ptxas resources) of ``source`` for ``arch``, from the disk cache or nvcc.

    Raises ``BuildError`` with nvcc's message (and the kept source's path) when it fails."""
    key = hashlib.sha256(f"{__version__}\n{' '.join(CUBIN_FLAGS)}\n{arch}\n{nvcc_version()}\n"
                         f"{source}".encode()).hexdigest()[:32]
    root = cache_dir()
    cubin_path, meta_path = root / f"{name}-{key}.cubin", root / f"{name}-{key}.json"
    try:
        return cubin_path.read_bytes(), Resources(**json.loads(meta_path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    try:
        cubin, res = compile_cubin(source, arch, name, timeout)
    except BuildError as err:
        kept = _keep_source(name, source)
        raise BuildError(kept, err.log, err.command) from None
    try:
        root.mkdir(parents=True, exist_ok=True)
        _write_atomic(meta_path, json.dumps(dataclasses.asdict(res)).encode())
        _write_atomic(cubin_path, cubin)  # last: a cubin on disk has its report beside it
    except OSError:
        pass  # an unwritable cache costs a compile next time, nothing more
    return cubin, res


def _write_atomic(path: Path, data: bytes) -> None:
    """Write through a unique temporary file and rename it into place (threads and processes
    compiling the same kernel each write whole files)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _keep_source(name: str, source: str) -> str:
    """Where a failed build's source is kept for the error message: ``failed/`` in the cache
    directory."""
    path = cache_dir() / "failed" / f"{name}.cu"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    except OSError:
        return f"{name}.cu (not kept: the cache directory is not writable)"
    return str(path)


def compile_many(configs, arch: str, jobs: int | None = None) -> list:
    """Compile ``configs`` for ``arch`` (``sm_XY``; each family's own target is derived from
    it) with parallel nvcc processes driven from threads (no Python subprocesses, so a user
    script without a ``__main__`` guard is never re-run): a list of (cubin, Resources, target)
    or BuildError, in the order given."""
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
