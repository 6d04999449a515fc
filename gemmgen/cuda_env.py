"""Is there a GPU to run on? PyCUDA, the CUDA driver and a device, each checked in turn, so
the message says which one is missing (and only suggests ``pip install`` when it is PyCUDA).

Nothing here creates a CUDA context.
"""
from __future__ import annotations

import importlib
import importlib.util

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
