"""Building: render -> nvcc (cubin, cached on disk) -> loaded module -> Kernel.

PyCUDA is imported only when a kernel is loaded, so emitting and compiling work where it is not
installed. Cubins come from ``gemmgen.compile.cache``, so a second process starts without
compiling; loaded modules are cached per process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from ..codegen.render import config_from_source, render
from ..compile.cache import compile_cached, compile_many, target_arch
from ..compile.nvcc import BuildError, Resources
from ..model.config import ConfigBase
from ..model.families import fallback_config, get_family
from .device import device_arch, pycuda_modules
from .kernel import SIGNATURE, Kernel
from .tma_kernel import TmaKernel

_CACHE: dict[tuple[str, str, str], Kernel] = {}


def build(config: ConfigBase, arch: str | None = None, *, source: str | None = None,
          source_path: str | None = None) -> Kernel:
    """Render ``config`` (or take ``source``), compile it for ``arch`` (default: the current
    device's, in the family's spelling: sm_90a for wgmma) and load it.

    Compiled modules are cached per process by (name, arch, source hash) and cubins on disk
    (``cache_dir()``). Raises ``BuildError`` with nvcc's message and the source file's path
    (or naming the arch a family needs), ``ImportError`` when PyCUDA is missing.
    """
    # first: a family the arch cannot run fails here
    arch = target_arch(config, arch or device_arch())
    pycuda_modules()
    source = source if source is not None else render(config, arch)
    key = (config.name, arch, hashlib.sha256(source.encode()).hexdigest())
    if key in _CACHE:  # same source loaded before: reuse the module, keep this call's path
        return dataclasses.replace(_CACHE[key], source_path=source_path)
    try:
        cubin, res = compile_cached(source, arch, config.name)
    except BuildError as err:
        if source_path:
            raise BuildError(source_path, err.log, err.command) from None
        raise
    kernel = from_cubin(config, arch, cubin, res, source_path)
    _CACHE[key] = kernel
    return kernel


def from_cubin(config: ConfigBase, arch: str, cubin: bytes, resources: Resources | None = None,
               source_path: str | None = None) -> Kernel:
    """Load a cubin (compiled here or in a worker process) into the current context and return
    its Kernel: a ``TmaKernel`` for families that take tensor maps."""
    drv, _ = pycuda_modules()
    module = drv.module_from_buffer(cubin)
    function = module.get_function(config.name)
    dynamic = config.dynamic_smem_bytes
    if dynamic > 48 * 1024:  # above the default limit a kernel must opt in
        limit = drv.Context.get_device().get_attribute(
            drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        if dynamic > limit:
            raise BuildError(source_path or config.name, f"{config.name} needs {dynamic} bytes "
                             f"of shared memory; this device allows {limit} per block")
        function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic)
    if get_family(config.family).tma:  # tensor maps in the parameter block: its own launch
        return TmaKernel(config, arch, function, module, source_path, resources, cubin=cubin,
                         build_fallback=lambda: build(fallback_config(config)))
    function.prepare(SIGNATURE)
    return Kernel(config, arch, function, module, source_path, resources, cubin=cubin)


def load(path: str | os.PathLike, arch: str | None = None) -> Kernel:
    """Compile an emitted ``.cu`` file as it is (hand edits included) and return its Kernel;
    the launch geometry comes from the file's ``// gemmgen-config:`` header line.

    Raises ``ValueError`` for a file without that line, ``BuildError`` if nvcc rejects it.
    """
    path = Path(path)
    source = path.read_text()
    return build(config_from_source(source), arch, source=source, source_path=str(path))


def build_many(configs, arch: str | None = None, jobs: int | None = None) -> list:
    """Compile ``configs`` in parallel (``gemmgen.compile.cache.compile_many``) and load them here: a list of Kernel
    or BuildError, in the order given."""
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
