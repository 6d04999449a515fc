"""Building: render -> nvcc (cubin, cached on disk) -> Kernel, loaded through the driver API.

Cubins come from ``gemmgen.compile.cache``, so a second process starts without compiling;
Kernels are cached per process and load their module on each device that runs them. PyCUDA is
not needed to build or launch (only for NumPy and GPUArray operands).
"""
from __future__ import annotations

import copy
import hashlib
import os
import threading
from pathlib import Path

from ..codegen.render import config_from_source, rendered
from ..compile.cache import compile_many, compile_rendered
from ..compile.nvcc import BuildError, Resources
from ..model.config import ConfigBase
from . import driver
from .device import device_arch, gpu_problem, pycuda_modules
from .kernel import Kernel

_CACHE: dict[tuple[str, str, str], Kernel] = {}
CALLS: dict = {}
"""The family -> how its kernels take ``kernel(A, B, C, ...)`` (``Kernel.call``), where that
is not ``launch``: the FP8 and grouped families' calls, which ``gemmgen.runtime.calls`` adds
(it builds its kernels here, so it lies above this module)."""
_LOCK = threading.Lock()


def build(config: ConfigBase, arch: str | None = None, *, source: str | None = None,
          source_path: str | None = None) -> Kernel:
    """Render ``config`` (or take ``source``), compile it for ``arch`` (default: the current
    device's, in the family's spelling: sm_90a for wgmma) and load it on the current device
    (other devices load it when they first run it).

    Compiled kernels are cached per process by (name, arch, source hash) and cubins on disk
    (``gemmgen.compile.cache.cache_dir()``). Raises ``BuildError`` with nvcc's message and the
    source file's path (or naming the arch a family needs, or the shared memory the device
    lacks), ``DriverError`` without a CUDA driver or device, ``UnsafeCacheError`` (a
    ``PermissionError``) when the cache directory belongs to another user or is writable by
    group or others.
    """
    try:  # first: a family the arch cannot run fails here
        kernel = rendered(config, arch or device_arch(), source)
    except ValueError as exc:
        raise BuildError(config.name, str(exc)) from None
    adopt_pycuda()
    key = (kernel.name, kernel.target, hashlib.sha256(kernel.source.encode()).hexdigest())
    with _LOCK:
        found = _CACHE.get(key)
    if found is not None:  # same source loaded before: share its modules, keep this call's path
        if found.source_path == source_path:
            return found
        twin = copy.copy(found)
        twin.source_path = source_path
        return twin
    try:
        cubin, res = compile_rendered(kernel)
    except BuildError as err:
        if source_path:
            raise BuildError(source_path, err.log, err.command) from None
        raise
    loaded = from_cubin(config, kernel.target, cubin, res, source_path)
    with _LOCK:
        return _CACHE.setdefault(key, loaded)


def adopt_pycuda() -> None:
    """On the main thread, where PyCUDA is installed, make its context (device 0's primary
    context, through ``pycuda.autoprimaryctx``) current, as building always has: scripts that
    build a kernel and then make GPUArrays rely on it. Elsewhere, nothing."""
    if threading.current_thread() is threading.main_thread() and gpu_problem() is None:
        pycuda_modules()


def from_cubin(config: ConfigBase, arch: str, cubin: bytes, resources: Resources | None = None,
               source_path: str | None = None) -> Kernel:
    """The Kernel of a cubin (compiled here or in a worker process), loaded on the current
    device. Raises ``BuildError`` when the
    kernel needs more shared memory than the device allows a block."""
    dev = driver.current_device()
    dynamic = config.dynamic_smem_bytes
    limit = driver.device_attribute(dev, "max_smem_optin")
    if dynamic > limit:
        raise BuildError(source_path or config.name, f"{config.name} needs {dynamic} bytes "
                         f"of shared memory; this device allows {limit} per block")
    kernel = Kernel(config, arch, cubin, resources, source_path, builder=build,
                    call=CALLS.get(config.family))
    kernel.function(dev)  # load it here: a failure shows at build, not at the first launch
    return kernel


def load(path: str | os.PathLike, arch: str | None = None) -> Kernel:
    """Compile an emitted ``.cu`` file as it is (hand edits included) and return its Kernel;
    the launch geometry comes from the file's ``// gemmgen-config:`` header line.

    Raises ``ValueError`` for a file without that line, ``BuildError`` if nvcc rejects it,
    ``UnsafeCacheError`` as ``build`` does.
    """
    path = Path(path)
    source = path.read_text()
    return build(config_from_source(source), arch, source=source, source_path=str(path))


def build_many(configs, arch: str | None = None, jobs: int | None = None) -> list:
    """Compile ``configs`` in parallel (``gemmgen.compile.cache.compile_many``) and load them here: a list of Kernel
    or BuildError, in the order given. Raises ``UnsafeCacheError`` as ``build`` does."""
    out = []
    for cfg, done in zip(configs, compile_many(configs, arch or device_arch(), jobs)):
        if isinstance(done, BuildError):
            out.append(done)
            continue
        cubin, res, target = done
        try:
            out.append(from_cubin(cfg, target, cubin, res))
        except BuildError as err:
            out.append(err)
    return out
