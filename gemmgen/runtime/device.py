"""The device: is there a GPU to run on (PyCUDA, the CUDA driver and a device, each checked in
turn, so the message says which one is missing), and what the current one is.

``gpu_problem``, ``require_gpu`` and ``device_count`` create no CUDA context;
``pycuda_modules`` and the queries after it make the primary context current.
"""
from __future__ import annotations

import importlib
import importlib.util

from ..model.space import DeviceLimits

INSTALL_HINT = "pip install 'gemmgen[cuda]' (PyCUDA builds against your CUDA toolkit)"


class GpuUnavailable(RuntimeError):
    """Kernels cannot run here: no CUDA driver, or no CUDA device. The message says which."""


class PyCudaMissing(GpuUnavailable, ImportError):
    """PyCUDA is not installed (also an ImportError, as callers of ``pycuda_modules`` expect)."""


def gpu_problem() -> GpuUnavailable | None:
    """Why kernels cannot run here, as an exception to raise; None when PyCUDA imports, the
    driver starts and there is at least one CUDA device."""
    try:
        installed = importlib.util.find_spec("pycuda") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return PyCudaMissing(f"running kernels needs PyCUDA, which is not installed: "
                             f"{INSTALL_HINT}")
    try:
        drv = importlib.import_module("pycuda.driver")
    except (ImportError, OSError) as exc:
        return GpuUnavailable(f"PyCUDA is installed but cannot load the CUDA driver ({exc}); "
                              f"this machine needs an NVIDIA driver and a GPU")
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as exc:  # noqa: BLE001 - pycuda._driver.Error and its kin
        return GpuUnavailable(f"PyCUDA is installed but the CUDA driver did not start: {exc}")
    if count == 0:
        return GpuUnavailable("PyCUDA and the CUDA driver are installed, but there is no CUDA "
                              "device on this machine")
    return None


def require_gpu() -> None:
    """Raise ``PyCudaMissing`` (an ImportError too) or ``GpuUnavailable`` unless kernels can
    run here."""
    problem = gpu_problem()
    if problem is not None:
        raise problem


def device_count() -> int:
    """CUDA devices visible to this process; raises like ``require_gpu``."""
    require_gpu()
    return importlib.import_module("pycuda.driver").Device.count()


def pycuda_modules():
    """``(pycuda.driver, None)`` with the primary context current (shared with CuPy and
    PyTorch). Raises ``ImportError`` saying how to install PyCUDA when it is missing, and
    ``RuntimeError`` naming what is missing when there is no driver or no device."""
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


_CURRENT: dict[str, object] = {}


def current_device() -> tuple[str, int]:
    """(name, compute capability) of the current GPU, read once per process."""
    if not _CURRENT:
        drv, _ = pycuda_modules()
        dev = drv.Context.get_device()
        major, minor = dev.compute_capability()
        _CURRENT.update(name=dev.name(), cc=10 * major + minor)
    return _CURRENT["name"], _CURRENT["cc"]


_SMS: dict[int, int] = {}


def sm_count() -> int:
    """Multiprocessors of the current device (cached per device)."""
    import pycuda.driver as drv
    dev = drv.Context.get_device()
    key = dev.pci_bus_id() if hasattr(dev, "pci_bus_id") else 0
    if key not in _SMS:
        _SMS[key] = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    return _SMS[key]


def device_limits() -> DeviceLimits:
    """Limits of the current CUDA device (SMs, shared memory, registers, threads, blocks)."""
    drv, _ = pycuda_modules()
    dev = drv.Context.get_device()
    at = drv.device_attribute
    major, minor = dev.compute_capability()
    return DeviceLimits(dev.name(), f"sm_{major}{minor}", dev.get_attribute(at.MULTIPROCESSOR_COUNT),
                        dev.get_attribute(at.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
                        dev.get_attribute(at.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                        dev.get_attribute(at.MAX_REGISTERS_PER_MULTIPROCESSOR),
                        dev.get_attribute(at.MAX_THREADS_PER_MULTIPROCESSOR),
                        dev.get_attribute(at.MAX_BLOCKS_PER_MULTIPROCESSOR))
