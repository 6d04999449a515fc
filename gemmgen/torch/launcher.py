"""The compiled launcher of ``gemmgen::gemm``: build ``launcher.cpp`` once per machine, load it.

The C++ source is compiled by the host C++ compiler (``$CXX``, else ``c++``: the compiler nvcc
itself drives) against PyTorch's headers and libraries, into gemmgen's cache directory, keyed
by the source, PyTorch's version and C++ ABI, the compiler and nvcc's setup (path, version,
environment); a second process loads the shared library without compiling, once it matches
the sha256 and size recorded beside it when it was built. The library lives in ``launcher/``
inside the cache directory, a private folder (mode 0700) that gemmgen checks like the cache
itself. ``load()`` returns None, with the reason in ``why_not()``,
where it cannot be built (no compiler, no headers, ``GEMMGEN_LAUNCHER=0``): ``gemmgen.torch``
then launches from Python, which costs more host time per call.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from ..compile import store
from ..compile.cache import cache_dir
from ..compile.nvcc import run_group, toolchain_key

SOURCE = Path(__file__).with_name("launcher.cpp")
BUILD_TIMEOUT = 300
_STATE: dict = {}
_LOCK = threading.Lock()
RECIPE_LIMIT = 16384
"""Recipes the launcher's table holds (compiled in as GEMMGEN_RECIPE_LIMIT), and plans kept
alive for them (``keep_alive``): both are cleared whole when full."""
_LIVE: list = []  # plans whose kernels and workspaces the launcher's recipes use
_LIVE_LOCK = threading.Lock()


def keep_alive(plan) -> None:
    """Keep ``plan`` (its kernels and workspaces, which its recipe's launches use) alive while
    the launcher's table may hold its recipe. At ``RECIPE_LIMIT`` plans the table is cleared
    and the plans with it, so no recipe outlives its plan and neither list grows without
    bound (the table also clears itself at that size: it holds reference recipes too)."""
    with _LIVE_LOCK:
        if len(_LIVE) >= RECIPE_LIMIT:
            _clear_table()
            _LIVE.clear()
        _LIVE.append(plan)


def _clear_table() -> None:
    """Drop the compiled launcher's recipes (where it is loaded)."""
    if loaded():
        torch.ops.gemmgen_launcher.clear_recipes()


def compiler() -> str | None:
    """The C++ compiler: ``$CXX``, else ``c++``, ``g++`` or ``clang++`` on the PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def command(cxx: str, output: str) -> list[str]:
    """The compile-and-link command of the launcher for this PyTorch."""
    from torch.utils.cpp_extension import include_paths, library_paths
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    libs = library_paths()
    return ([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             f"-DGEMMGEN_RECIPE_LIMIT={RECIPE_LIMIT}"]
            + [f"-I{p}" for p in include_paths()] + [str(SOURCE), "-o", output]
            + [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs]
            + ["-lc10", "-ltorch_cpu", "-ldl"])


def library_path(cxx: str) -> Path:
    """Where the built launcher for this source, PyTorch, compiler and nvcc setup is kept:
    ``launcher/`` in gemmgen's cache directory."""
    key = hashlib.sha256("\n".join((SOURCE.read_text(), torch.__version__,
                                    str(torch._C._GLIBCXX_USE_CXX11_ABI), cxx,
                                    toolchain_key(), str(RECIPE_LIMIT))).encode())
    return cache_dir() / "launcher" / f"gemmgen_launcher-{key.hexdigest()[:16]}.so"


def build(cxx: str | None = None, fresh: bool = False) -> Path:
    """Compile the launcher (unless the cache holds it, matching the sha256 and size recorded
    beside it, and not ``fresh``) and return the library's path. Raises ``RuntimeError`` with
    the compiler's message when it fails, or when there is no compiler; ``UnsafeCacheError``
    (a ``PermissionError``) when the cache directory or its ``launcher/`` folder belongs to
    another user or is writable by group or others; ``OSError`` when it cannot be written."""
    cxx = cxx or compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (set $CXX, or install g++)")
    path = library_path(cxx)
    store.private_subdir(cache_dir(), "launcher")
    with store.building(cache_dir(), path.name, BUILD_TIMEOUT + 60):  # one build at a time
        if not fresh and store.read_entry(path) is not None:
            return path
        _compile(cxx, path)
    return path


def _compile(cxx: str, path: Path) -> None:
    """Compile the launcher with ``cxx`` to ``path`` and record its sidecar (``build``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        try:
            code, _, err = run_group(command(cxx, tmp), BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the C++ compiler took longer than {BUILD_TIMEOUT} s") from None
        if code != 0:
            lines = [ln for ln in err.splitlines() if "error" in ln] or err.splitlines()[-3:]
            raise RuntimeError("the C++ compiler failed: " + " | ".join(lines)[:800])
        data = store.read_file(Path(tmp))
        if not data:
            raise RuntimeError("the C++ compiler wrote no library")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # whole files only: another process may be loading it
        store.seal(path, data)
    finally:
        Path(tmp).unlink(missing_ok=True)


def load() -> Path | None:
    """Build (once) and load the launcher into this process, registering its CUDA kernel for
    ``gemmgen::gemm``; the library's path, or None with ``why_not()`` set. A cached library
    that fails to load is built again once. Idempotent and thread-safe."""
    with _LOCK:
        if "path" in _STATE or "error" in _STATE:
            return _STATE.get("path")
        if os.environ.get("GEMMGEN_LAUNCHER", "1") == "0":
            _STATE["error"] = "disabled by GEMMGEN_LAUNCHER=0"
            return None
        try:
            path = build()
            try:
                torch.ops.load_library(str(path))
            except OSError:  # a damaged library the checks let through: build it again
                path = build(fresh=True)
                torch.ops.load_library(str(path))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            _STATE["error"] = str(exc)
            return None
        _STATE["path"] = path
        return path


def why_not() -> str | None:
    """Why the launcher is not loaded (None when it is, or before ``load`` was tried)."""
    return _STATE.get("error")


def loaded() -> bool:
    return "path" in _STATE
