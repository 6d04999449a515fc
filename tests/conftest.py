"""Shared fixtures: the gpu marker skips where there is no CUDA device or no PyCUDA; nvcc
tests skip where nvcc is missing."""
import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest


def private_test_dir(path: Path) -> Path:
    """``path``, created mode 0700 unless another worker made it first; refused (RuntimeError)
    unless it is a real directory of this user that nobody else can write to: its name is
    predictable, so another user could have made it first to plant cubins."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not stat.S_ISDIR(st.st_mode) or not mine or stat.S_IMODE(st.st_mode) & 0o077:
        raise RuntimeError(f"the shared test cache {path} is not a private directory of this "
                           "user (made by someone else?); remove it, or run without xdist")
    return path


# make test-gpu (tests/run_gpu.py) spreads pytest-xdist's workers over the GPUs: each worker
# sees one of GEMMGEN_TEST_GPUS (set before anything touches CUDA in this process).
_GPUS, _WORKER = os.environ.get("GEMMGEN_TEST_GPUS"), os.environ.get("PYTEST_XDIST_WORKER")
if _GPUS and _WORKER and _WORKER[2:].isdigit():
    _LIST = _GPUS.split(",")
    os.environ["CUDA_VISIBLE_DEVICES"] = _LIST[int(_WORKER[2:]) % len(_LIST)]

# Compiled cubins go to a fresh directory per test session, so no test depends on (or fills)
# the user's cache; within the session, kernels compiled once are shared between tests.
# pytest-xdist's workers share one directory (its test run id names it), so a kernel one worker
# compiled is a cache hit for the other.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:
    _SHARED = private_test_dir(Path(tempfile.gettempdir()) / f"gemmgen-test-cache-{_RUN}")
    os.environ.setdefault("GEMMGEN_CACHE_DIR", str(_SHARED))
os.environ.setdefault("GEMMGEN_CACHE_DIR", tempfile.mkdtemp(prefix="gemmgen-test-cache-"))

# The files whose fixtures compile the most, first: pytest-xdist (--dist loadfile) hands files
# out in collection order, and a heavy file started last leaves one core idle at the end.
HEAVY_FIRST = ("test_nvcc.py", "test_wgmma.py", "test_mma.py", "test_fp8.py",
               "test_nvcc_variants.py", "test_epilogue_render.py", "test_tune.py",
               "test_grouped.py", "test_spill_sample.py", "test_simt_ladder.py")

sys.path.insert(0, str(Path(__file__).parent))  # tests/breakers.py


def _gpu_missing() -> str | None:
    try:
        import pycuda.driver as drv
    except ImportError:
        return "PyCUDA is not installed (pip install 'gemmgen[cuda]')"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device"
    except Exception as exc:  # noqa: BLE001 - any driver failure means no usable GPU
        return f"no usable CUDA device: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda i: rank.get(i.path.name, len(rank)))  # stable: order kept within
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    reason = _gpu_missing()
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


@pytest.fixture(scope="session")
def nvcc():
    from gemmgen.compile.nvcc import nvcc_path
    path = nvcc_path()
    if path is None:
        pytest.skip("nvcc is not installed")
    return path
