"""Building: render -> PyCUDA SourceModule -> Kernel (function, registers, shared memory).

PyCUDA is imported only when a kernel is built, so emitting works where it is not installed.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from .model import ConfigBase
from .nvcc import BuildError
from .render import config_from_source, render

_CACHE: dict[tuple[str, str, str], "Kernel"] = {}
SIGNATURE = "iiifPiPifPiqqqP"  # M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, strides, bias


def pycuda_modules():
    """``(pycuda.driver, SourceModule)`` with the primary context current (shared with CuPy and
    PyTorch). Raises ``ImportError`` saying how to install PyCUDA when it is missing."""
    try:
        import pycuda.autoprimaryctx  # noqa: F401 - makes the device's primary context current
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule
    except ImportError as exc:
        raise ImportError(
            "running kernels needs PyCUDA: pip install 'gemmgen[cuda]' (it builds against your "
            f"CUDA toolkit; nvcc must be on PATH). Import failed with: {exc}") from exc
    return drv, SourceModule


def device_arch() -> str:
    """``sm_XY`` of the current CUDA device."""
    drv, _ = pycuda_modules()
    major, minor = drv.Context.get_device().compute_capability()
    return f"sm_{major}{minor}"


@dataclass
class Kernel:
    """A compiled kernel: call it as ``kernel(A, B, C=None, *, alpha=1.0, beta=0.0)``.

    ``registers`` per thread, ``smem_bytes`` static shared memory and ``local_bytes`` of local
    memory per thread come from the loaded function (CUDA's cuFuncGetAttribute).
    """

    config: ConfigBase
    arch: str
    function: object = field(repr=False)
    module: object = field(repr=False)
    source_path: str | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def registers(self) -> int:
        return self.function.num_regs

    @property
    def smem_bytes(self) -> int:
        return self.function.shared_size_bytes

    @property
    def local_bytes(self) -> int:
        return self.function.local_size_bytes

    def launch_raw(self, m: int, n: int, k: int, alpha: float, a_ptr: int, lda: int, b_ptr: int,
                   ldb: int, beta: float, c_ptr: int, ldc: int, stride_a: int = 0,
                   stride_b: int = 0, stride_c: int = 0, bias_ptr: int = 0, batch: int = 1,
                   stream=None) -> None:
        """Enqueue one launch on device pointers (no checks; asynchronous). Strides are the
        elements between consecutive matrices of a batch (0 broadcasts one matrix)."""
        grid_x, grid_y, _ = self.config.grid(m, n)
        self.function.prepared_async_call(
            (grid_x, grid_y, batch), (self.config.threads, 1, 1), stream, m, n, k, alpha,
            a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc, stride_a, stride_b, stride_c, bias_ptr,
            shared_size=self.config.dynamic_smem_bytes)

    def __call__(self, A, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, bias=None,
                 stream=None):
        """C = act(alpha * A @ B + beta * C + bias); see ``gemmgen.launch.launch``."""
        from .launch import launch
        return launch(self, A, B, C, alpha=alpha, beta=beta, bias=bias, stream=stream)


def _source_file(name: str, source: str) -> Path:
    """Where a failed build's source is kept for the error message."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gemmgen" / "src"
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.cu"
    path.write_text(source)
    return path


def build(config: ConfigBase, arch: str | None = None, *, source: str | None = None,
          source_path: str | None = None) -> Kernel:
    """Render ``config`` (or take ``source``), compile it with PyCUDA's SourceModule for
    ``arch`` (default: the current device's) and return the ``Kernel``.

    Compiled modules are cached per process by (name, arch, source hash); PyCUDA's disk cache
    covers later processes. Raises ``BuildError`` with nvcc's message and the source file's
    path, ``ImportError`` when PyCUDA is missing.
    """
    drv, SourceModule = pycuda_modules()
    arch = arch or device_arch()
    source = source if source is not None else render(config, arch)
    key = (config.name, arch, hashlib.sha256(source.encode()).hexdigest())
    if key in _CACHE:  # same source compiled before: reuse the module, keep this call's path
        return dataclasses.replace(_CACHE[key], source_path=source_path)
    try:
        module = SourceModule(source, no_extern_c=True, arch=arch, options=["-std=c++17"])
    except drv.CompileError as exc:
        path = source_path or str(_source_file(config.name, source))
        raise BuildError(path, f"{exc.stdout or ''}{exc.stderr or ''}" or str(exc)) from exc
    kernel = _kernel_from_module(drv, config, arch, module, source_path)
    _CACHE[key] = kernel
    return kernel


def _kernel_from_module(drv, config: ConfigBase, arch: str, module, source_path) -> Kernel:
    """Fetch the kernel function, prepare its signature, opt in to its shared memory."""
    function = module.get_function(config.name)
    function.prepare(SIGNATURE)
    dynamic = config.dynamic_smem_bytes
    if dynamic > 48 * 1024:  # above the default limit a kernel must opt in
        limit = drv.Context.get_device().get_attribute(
            drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        if dynamic > limit:
            raise BuildError(source_path or config.name, f"{config.name} needs {dynamic} bytes "
                             f"of shared memory; this device allows {limit} per block")
        function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic)
    return Kernel(config, arch, function, module, source_path)


def from_cubin(config: ConfigBase, arch: str, cubin: bytes) -> Kernel:
    """Load a cubin compiled elsewhere (``gemmgen.nvcc.compile_cubin``, e.g. in a worker
    process) into the current context and return its Kernel."""
    drv, _ = pycuda_modules()
    return _kernel_from_module(drv, config, arch, drv.module_from_buffer(cubin), None)


def load(path: str | os.PathLike, arch: str | None = None) -> Kernel:
    """Compile an emitted ``.cu`` file as it is (hand edits included) and return its Kernel;
    the launch geometry comes from the file's ``// gemmgen-config:`` header line.

    Raises ``ValueError`` for a file without that line, ``BuildError`` if nvcc rejects it.
    """
    path = Path(path)
    source = path.read_text()
    return build(config_from_source(source), arch, source=source, source_path=str(path))


def build_many(configs, arch: str | None = None, jobs: int | None = None) -> list:
    """Compile ``configs`` in parallel nvcc processes and load them here: a list of Kernel or
    BuildError, in the order given."""
    from concurrent.futures import ProcessPoolExecutor

    from .nvcc import compile_cubin
    arch = arch or device_arch()
    import multiprocessing as mp  # spawn: never fork a process that holds a CUDA context
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(compile_cubin, render(c, arch), arch, c.name) for c in configs]
        out = []
        for cfg, fut in zip(configs, futures):
            try:
                out.append(from_cubin(cfg, arch, fut.result()[0]))
            except BuildError as err:
                out.append(err)
    return out
