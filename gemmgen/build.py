"""Building: render -> nvcc (cubin, cached on disk) -> PyCUDA module -> Kernel.

PyCUDA is imported only when a kernel is loaded, so emitting and compiling work where it is not
installed. Cubins are cached under the user cache directory (platformdirs), keyed by the source,
the target arch and the nvcc version, so a second process starts without compiling.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .arch import cc_of
from .families import get_family
from .model import ConfigBase
from .nvcc import CUBIN_FLAGS, BuildError, Resources, compile_cubin, nvcc_version
from .render import config_from_source, render


def raw_stream(stream) -> int | None:
    """The raw ``CUstream`` handle a launch on ``stream`` goes to through the driver API
    (``gemmgen.cudrv``): an int as it is, a PyTorch or CuPy stream's handle; None for None or
    a PyCUDA ``Stream``, which PyCUDA launches on. Raises ``TypeError`` for anything else."""
    if stream is None or type(stream).__module__.startswith("pycuda"):
        return None
    if type(stream) is int:
        return stream
    from .cudrv import stream_handle
    return stream_handle(stream)


_CACHE: dict[tuple[str, str, str], "Kernel"] = {}
SIGNATURE = "iiifPiPifPiqqqP"  # M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides, bias
_PARAMS = struct.Struct("@" + SIGNATURE)  # the parameter block, natively aligned as PyCUDA packs it


def cache_dir() -> Path:
    """Where compiled cubins are kept: $GEMMGEN_CACHE_DIR, else the user cache directory
    (platformdirs) + ``/cubin``."""
    if os.environ.get("GEMMGEN_CACHE_DIR"):
        return Path(os.environ["GEMMGEN_CACHE_DIR"])
    import platformdirs
    return Path(platformdirs.user_cache_dir("gemmgen")) / "cubin"


def pycuda_modules():
    """``(pycuda.driver, None)`` with the primary context current (shared with CuPy and
    PyTorch). Raises ``ImportError`` saying how to install PyCUDA when it is missing, and
    ``RuntimeError`` naming what is missing when there is no driver or no device."""
    from .cuda_env import require_gpu
    require_gpu()
    import pycuda.autoprimaryctx  # noqa: F401 - makes the device's primary context current
    import pycuda.driver as drv
    return drv, None


def device_cc() -> int:
    """Compute capability of the current device as major*10+minor (90 for an H100)."""
    drv, _ = pycuda_modules()
    major, minor = drv.Context.get_device().compute_capability()
    return 10 * major + minor


def device_arch() -> str:
    """``sm_XY`` of the current CUDA device."""
    return f"sm_{device_cc()}"


def target_arch(config: ConfigBase, arch: str | None = None) -> str:
    """The nvcc target for ``config`` on ``arch`` (default: the current device): the family's
    own spelling, e.g. sm_90a for wgmma. Raises ``BuildError`` when the family cannot run
    there, naming the arch it needs."""
    cc = cc_of(arch) if arch else device_cc()
    try:
        return get_family(config.family).arch_for(cc)
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


@dataclass
class Kernel:
    """A compiled kernel: call it as ``kernel(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None)``.

    ``registers`` per thread, ``smem_bytes`` static shared memory and ``local_bytes`` of local
    memory per thread come from the loaded function (CUDA's cuFuncGetAttribute); ``resources``
    is ptxas's report (spills, stack) when gemmgen compiled it.
    """

    config: ConfigBase
    arch: str
    function: object = field(repr=False)
    module: object = field(repr=False)
    source_path: str | None = None
    resources: Resources | None = None
    cubin: bytes = field(default=b"", repr=False)

    @property
    def name(self) -> str:
        """The kernel's symbol: the config's name."""
        return self.config.name

    @property
    def registers(self) -> int:
        """Registers per thread the loaded function uses (at launch, for setmaxnreg kernels)."""
        return self.function.num_regs

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block, bytes."""
        return self.function.shared_size_bytes

    @property
    def local_bytes(self) -> int:
        """Local memory per thread, bytes (spills or stack; 0 for every preset)."""
        return self.function.local_size_bytes

    def launch_raw(self, m: int, n: int, k: int, alpha: float, a_ptr: int, lda: int, b_ptr: int,
                   ldb: int, beta: float, c_ptr: int, ldc: int, stride_a: int = 0,
                   stride_b: int = 0, stride_c: int = 0, bias_ptr: int = 0, batch: int = 1,
                   stream=None) -> None:
        """Enqueue one launch on device pointers (no checks; asynchronous). Strides are the
        elements between consecutive matrices of a batch (0 broadcasts one matrix).
        ``stream``: None (the legacy default stream), a PyCUDA ``Stream``, or a raw ``CUstream``
        handle (an int, or a PyTorch/CuPy stream), launched through ``gemmgen.cudrv``."""
        grid_x, grid_y, _ = self.config.grid(m, n)
        raw = raw_stream(stream)
        if raw is not None:
            self.raw_function().launch(
                (grid_x, grid_y, batch), (self.config.threads, 1, 1),
                _PARAMS.pack(m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a,
                             stride_b, stride_c, bias_ptr), raw)
            return
        self.function.prepared_async_call(
            (grid_x, grid_y, batch), (self.config.threads, 1, 1), stream, m, n, k, alpha,
            a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b, stride_c, bias_ptr,
            shared_size=self.config.dynamic_smem_bytes)

    def raw_function(self):
        """This kernel loaded through the driver API (``gemmgen.cudrv.RawFunction``) for launches
        on raw stream handles; loaded on first use. Raises ``RuntimeError`` when the Kernel was
        made without its cubin."""
        raw = self.__dict__.get("_raw")
        if raw is None:
            if not self.cubin:
                raise RuntimeError(f"{self.name}: no cubin kept, so it cannot launch on a raw "
                                   f"stream handle; pass a PyCUDA Stream or None")
            from .cudrv import RawFunction
            raw = self.__dict__["_raw"] = RawFunction(self.cubin, self.name,
                                                      self.config.dynamic_smem_bytes)
        return raw

    def __call__(self, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None):
        """C = act(alpha * A @ B + beta * C + bias); see ``gemmgen.launch.launch``."""
        from .launch import launch
        return launch(self, A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream)


def build(config: ConfigBase, arch: str | None = None, *, source: str | None = None,
          source_path: str | None = None) -> Kernel:
    """Render ``config`` (or take ``source``), compile it for ``arch`` (default: the current
    device's, in the family's spelling: sm_90a for wgmma) and load it.

    Compiled modules are cached per process by (name, arch, source hash) and cubins on disk
    (``cache_dir()``). Raises ``BuildError`` with nvcc's message and the source file's path
    (or naming the arch a family needs), ``ImportError`` when PyCUDA is missing.
    """
    arch = target_arch(config, arch)  # first: a family the arch cannot run fails here
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
        from .launch_tma import TmaKernel
        return TmaKernel(config, arch, function, module, source_path, resources, cubin=cubin)
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


def compile_many(configs, arch: str | None = None, jobs: int | None = None) -> list:
    """Compile ``configs`` with parallel nvcc processes driven from threads (no Python
    subprocesses, so a user script without a ``__main__`` guard is never re-run): a list of
    (cubin, Resources, arch) or BuildError, in the order given. ``arch`` as in ``build``."""
    targets = []
    for cfg in configs:  # here, not in the threads: the device query makes a CUDA context current
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


def build_many(configs, arch: str | None = None, jobs: int | None = None) -> list:
    """Compile ``configs`` in parallel (``compile_many``) and load them here: a list of Kernel
    or BuildError, in the order given."""
    arch = arch or device_arch()
    out = []
    for cfg, done in zip(configs, compile_many(configs, arch, jobs)):
        if isinstance(done, BuildError):
            out.append(done)
            continue
        cubin, res, target = done
        try:
            out.append(from_cubin(cfg, target, cubin, res))
        except BuildError as err:
            out.append(err)
    return out
