"""The device: is there a GPU to run on (PyCUDA, the CUDA driver and a device, each checked in
turn, so the message says which one is missing), and what the current one is.

``gpu_problem``, ``require_gpu`` and ``device_count`` ask PyCUDA and create no CUDA context;
``pycuda_modules`` makes device 0's primary context current for PyCUDA (NumPy and GPUArray
operands, CUDA events). The device queries go through the driver API
(``gemmgen.runtime.driver``) and need no PyCUDA.
"""
from __future__ import annotations

import importlib
import importlib.util
from contextlib import contextmanager

from ..model.space import DeviceLimits
from . import driver
from .operands import check_one_device

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


_RETAINED: list = []


@contextmanager
def pycuda_context():
    """A PyCUDA context current on this thread for the block: the one already current, else
    device 0's primary context (retained once, the context PyTorch and CuPy use), pushed for
    the block and popped after, so that no thread ends with a context on PyCUDA's stack (PyCUDA
    aborts then). Raises as ``require_gpu``."""
    require_gpu()
    import pycuda.driver as drv
    drv.init()
    if drv.Context.get_current() is not None:
        yield
        return
    if not _RETAINED:
        _RETAINED.append(drv.Device(0).retain_primary_context())
    _RETAINED[0].push()
    try:
        yield
    finally:
        drv.Context.pop()


def device_cc(device: int | None = None) -> int:
    """Compute capability of ``device`` (default: the current context's) as major*10+minor
    (90 for an H100). Raises ``DriverError`` without a CUDA driver or device."""
    dev = driver.current_device() if device is None else device
    return 10 * driver.device_attribute(dev, "cc_major") + driver.device_attribute(dev, "cc_minor")


def device_arch(device: int | None = None) -> str:
    """``sm_XY`` of ``device`` (default: the current context's)."""
    return f"sm_{device_cc(device)}"


def device_identity(device: int | None = None) -> tuple[str, int]:
    """(name, compute capability) of ``device`` (default: the current context's), read once
    per device and process."""
    dev = driver.current_device() if device is None else device
    found = _IDENTITY.get(dev)
    if found is None:
        found = _IDENTITY[dev] = (driver.device_name(dev), device_cc(dev))
    return found


_IDENTITY: dict[int, tuple[str, int]] = {}


def operands_device(named: dict) -> int:
    """The one device of the arrays ``named`` ({name: array or None}): a PyTorch tensor's or
    CuPy array's own, else the device owning its pointer (asked of the driver); 0 when none
    names one. Raises ``OperandError`` naming two on different devices."""
    found = check_one_device(named, driver.device_of)
    return 0 if found is None else found


def sm_count(device: int | None = None) -> int:
    """Multiprocessors of ``device`` (default: the current context's)."""
    dev = driver.current_device() if device is None else device
    return driver.device_attribute(dev, "sms")


def device_limits(device: int | None = None) -> DeviceLimits:
    """Limits of ``device`` (default: the current context's): SMs, shared memory, registers,
    threads and blocks per SM."""
    dev = driver.current_device() if device is None else device
    name, cc = device_identity(dev)
    a = lambda key: driver.device_attribute(dev, key)  # noqa: E731
    return DeviceLimits(name, f"sm_{cc}", a("sms"), a("smem_per_sm"), a("max_smem_optin"),
                        a("regs_per_sm"), a("threads_per_sm"), a("blocks_per_sm"))
