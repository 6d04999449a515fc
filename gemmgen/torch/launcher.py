"""The compiled launcher of ``gemmgen::gemm``: build ``launcher.cpp`` once per machine, load it.

The C++ source is compiled by the host C++ compiler (``$CXX``, else ``c++``: the compiler nvcc
itself drives) against PyTorch's headers and libraries, into gemmgen's cache directory, keyed
by the source, PyTorch's version and C++ ABI and the compiler; a second process loads the
shared library without compiling. ``load()`` returns None, with the reason in ``why_not()``,
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

from ..compile.cache import cache_dir

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
    """Where the built launcher for this source, PyTorch and compiler is kept."""
    key = hashlib.sha256("\n".join((SOURCE.read_text(), torch.__version__,
                                    str(torch._C._GLIBCXX_USE_CXX11_ABI), cxx,
                                    str(RECIPE_LIMIT))).encode())
    return cache_dir().parent / "launcher" / f"gemmgen_launcher-{key.hexdigest()[:16]}.so"


def build(cxx: str | None = None) -> Path:
    """Compile the launcher (if it is not in the cache already) and return the library's
    path. Raises ``RuntimeError`` with the compiler's message when it fails, or when there is
    no compiler."""
    cxx = cxx or compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler (set $CXX, or install g++)")
    path = library_path(cxx)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        done = subprocess.run(command(cxx, tmp), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or \
                done.stderr.splitlines()[-3:]
            raise RuntimeError("the C++ compiler failed: " + " | ".join(lines)[:800])
        os.replace(tmp, path)  # whole files only: another process may be loading it
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def load() -> Path | None:
    """Build (once) and load the launcher into this process, registering its CUDA kernel for
    ``gemmgen::gemm``; the library's path, or None with ``why_not()`` set. Idempotent and
    thread-safe."""
    with _LOCK:
        if "path" in _STATE or "error" in _STATE:
            return _STATE.get("path")
        if os.environ.get("GEMMGEN_LAUNCHER", "1") == "0":
            _STATE["error"] = "disabled by GEMMGEN_LAUNCHER=0"
            return None
        try:
            path = build()
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
