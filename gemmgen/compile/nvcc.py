"""Compiling: nvcc to cubin/fatbin with ptxas -v, parsed into per-arch resource reports."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..codegen.render import file_stem


class BuildError(RuntimeError):
    """nvcc rejected a generated kernel. ``path`` is the .cu file, ``log`` nvcc's output."""

    def __init__(self, path: str | os.PathLike, log: str, command: list[str] | None = None):
        self.path, self.log, self.command = str(path), log, command or []
        super().__init__(f"nvcc failed on {self.path}:\n{log.strip()}")

    def __reduce__(self):  # crosses process boundaries (parallel compiles in tune)
        return (type(self), (self.path, self.log, self.command))

    def static_assert_ids(self) -> set[str]:
        """Rule ids (``R07``) of the static_asserts that fired."""
        return set(re.findall(r'static assertion failed with "([A-Z]\d+)', self.log))


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel on one arch: registers per thread, static shared
    memory, stack frame and spill traffic in bytes."""

    arch: str
    registers: int
    smem_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Per-arch resources from ``nvcc -Xptxas -v`` output (one kernel per file)."""
    out: dict[str, Resources] = {}
    arch = frame = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            arch, frame = m.group(2), None
        elif (m := _FRAME.search(line)) and arch:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _USED.search(line)) and arch:
            stack, st, ld = frame or (0, 0, 0)
            out[arch] = Resources(arch, int(m.group(1)), int(m.group(2) or 0), stack, st, ld)
    return out


def parse_ptxas_kernels(log: str) -> dict[tuple[str, str], Resources]:
    """Resources per (kernel name, arch) from ``-Xptxas -v`` output of a multi-kernel file."""
    out: dict[tuple[str, str], Resources] = {}
    entry = arch = frame = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry, arch, frame = m.group(1), m.group(2), None
        elif (m := _FRAME.search(line)) and entry:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _USED.search(line)) and entry:
            stack, st, ld = frame or (0, 0, 0)
            out[(entry, arch)] = Resources(arch, int(m.group(1)), int(m.group(2) or 0), stack,
                                           st, ld)
    return out


def compile_many(sources: list[str], arch: str = "sm_90", timeout: float = 600) -> dict:
    """Compile several kernels as one translation unit (each lives in its own namespace) and
    return ``parse_ptxas_kernels`` of the result. Raises ``BuildError``."""
    with tempfile.TemporaryDirectory(prefix="gemmgen-many-") as tmp:
        src = Path(tmp) / "kernels.cu"
        src.write_text("\n".join(sources))
        log = _run_nvcc(["-cubin", f"-arch={arch}", "-o", str(Path(tmp) / "k.cubin")], src,
                        timeout)
        return parse_ptxas_kernels(log)


def _run_nvcc(args: list[str], src: Path | str, timeout: float) -> str:
    """Run ``nvcc <args> -Xptxas -v <src>`` and return its output (ptxas's report included).
    Raises ``FileNotFoundError`` without nvcc, ``BuildError`` (the source's path, nvcc's
    message) when it fails or outlasts ``timeout`` seconds."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found on PATH or in $CUDA_HOME/bin")
    cmd = [nvcc, *args, "-Xptxas", "-v", str(src)]
    try:
        code, out, err = run_group(cmd, timeout)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(src, f"nvcc took longer than {timeout:g} s", cmd) from exc
    log = out + err
    if code != 0:
        raise BuildError(src, log, cmd)
    return log


def run_group(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """Run ``cmd`` in a process group of its own: (exit code, stdout, stderr). When it
    outlasts ``timeout`` seconds (or this process is interrupted) the whole group is killed,
    the compilers it started (nvcc's cicc and ptxas, c++'s cc1plus and ld) included. Raises
    ``subprocess.TimeoutExpired`` on a timeout, ``OSError`` when ``cmd`` cannot start."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_group(proc)
        raise
    return proc.returncode, out, err


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (its own session) and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()
    proc.communicate()


CUBIN_FLAGS = ("-std=c++17",)
"""nvcc flags of every cubin gemmgen builds (part of the compile cache key)."""

SLOW_PATH_WARNINGS = {
    "C7508": "setmaxnreg ignored (the kernel needs a register cap at entry and each "
             "warpgroup's role in one branch)",
    "C7510": "wgmma serialized: its pipeline crosses a function boundary",
    "C7511": "wgmma serialized: not enough registers",
}
"""ptxas warnings that leave a Hopper kernel correct but slow; gemmgen treats them as errors."""


def slow_path_warnings(log: str) -> list[str]:
    """The SLOW_PATH_WARNINGS codes in an nvcc/ptxas log, each with ptxas's line."""
    out = []
    for line in log.splitlines():
        if "warning" not in line.lower():
            continue
        codes = [c for c in SLOW_PATH_WARNINGS if c in line]
        if codes:
            out.append(f"{codes[0]} ({SLOW_PATH_WARNINGS[codes[0]]}): {line.strip()}")
        elif "wgmma" in line and "serialized" in line:  # any other serialization warning
            out.append(f"wgmma serialized: {line.strip()}")
    return out


NVCC_ENVIRONMENT = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN")
"""Environment variables nvcc reads that change what it compiles (part of the cache keys)."""


def toolchain_key() -> str:
    """What besides the source decides nvcc's output, for the cache keys: the resolved nvcc
    path, its version line and the NVCC_ENVIRONMENT variables (unset and empty differ)."""
    nvcc = nvcc_path()
    real = os.path.realpath(nvcc) if nvcc else ""
    env = [f"{k}={os.environ[k]!r}" if k in os.environ else f"{k} unset"
           for k in NVCC_ENVIRONMENT]
    return "\n".join([real, nvcc_version(), *env])


def nvcc_version() -> str:
    """nvcc's version line (part of the compile cache key), or "" without nvcc."""
    nvcc = nvcc_path()
    return _version_of(os.path.realpath(nvcc)) if nvcc else ""


@lru_cache(maxsize=8)
def _version_of(nvcc: str) -> str:
    """``nvcc --version``'s last line, once per nvcc binary."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [x for x in out.stdout.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def tool_path(name: str) -> str | None:
    """A CUDA binary utility (``cuobjdump``, ``nvdisasm``): on PATH, under $CUDA_HOME/bin, or
    from the ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` wheels (the ``dev`` extra),
    which put it in site-packages/nvidia/cu*/bin. None when it is nowhere."""
    found = shutil.which(name)
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [Path(home) / "bin" / name]
    try:
        import nvidia  # namespace package of NVIDIA's wheels
        for root in getattr(nvidia, "__path__", []):
            candidates += sorted(Path(root).glob(f"cu*/bin/{name}"))
    except ImportError:
        pass
    return next((str(c) for c in candidates if c.is_file()), None)


def sass(cubin: bytes) -> str:
    """The SASS of a cubin (``cuobjdump -sass``). Raises ``FileNotFoundError`` without
    cuobjdump (pip install nvidia-cuda-cuobjdump)."""
    tool = tool_path("cuobjdump")
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    with tempfile.TemporaryDirectory(prefix="gemmgen-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True,
                             timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {out.stderr.strip()}")
    return out.stdout


def nvcc_path() -> str | None:
    """The nvcc on PATH or under $CUDA_HOME/bin, or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidate = Path(home or "/usr/local/cuda") / "bin" / "nvcc"
    return str(candidate) if candidate.is_file() else None


def compile_file(path: str | os.PathLike, archs: tuple[str, ...] = ("sm_90",),
                 timeout: float = 300) -> dict[str, Resources]:
    """Compile ``path`` for each of ``archs`` (``sm_80``, ``sm_90``, ...) in one nvcc call and
    return ptxas's report per arch. Raises ``BuildError`` with nvcc's message and the path,
    or ``FileNotFoundError`` when nvcc is not installed."""
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
    with tempfile.TemporaryDirectory(prefix="gemmgen-nvcc-") as tmp:
        log = _run_nvcc(["-fatbin", *gencode, "-o", str(Path(tmp) / "k.fatbin")], path, timeout)
    report = parse_ptxas(log)
    missing = [a for a in archs if a not in report]
    if missing:
        raise BuildError(path, f"no ptxas report for {missing} in:\n{log}")
    return report


def compile_source(source: str, archs: tuple[str, ...] = ("sm_90",), name: str = "kernel",
                   keep_dir: str | os.PathLike | None = None) -> dict[str, Resources]:
    """Write ``source`` to ``<keep_dir or a temp dir>/<name>.cu`` and ``compile_file`` it."""
    if keep_dir is not None:
        path = Path(keep_dir) / f"{file_stem(name)}.cu"
        path.write_text(source)
        return compile_file(path, archs)
    with tempfile.TemporaryDirectory(prefix="gemmgen-src-") as tmp:
        path = Path(tmp) / f"{file_stem(name)}.cu"
        path.write_text(source)
        return compile_file(path, archs)


def compile_cubin(source: str, arch: str = "sm_90", name: str = "kernel",
                  timeout: float = 120) -> tuple[bytes, Resources]:
    """Compile ``source`` to a cubin for one arch: (cubin bytes, ptxas resources). Plain data
    in and out, so it runs in worker processes. ``name`` is the kernel's (its file is named
    ``file_stem(name)``). Raises ``BuildError`` (a timeout included)."""
    return cubin_of(source, arch, file_stem(name), timeout)


def cubin_of(source: str, arch: str, stem: str, timeout: float = 120) -> tuple[bytes, Resources]:
    """``compile_cubin`` with the source file's name given: ``<stem>.cu``."""
    with tempfile.TemporaryDirectory(prefix="gemmgen-cubin-") as tmp:
        src, out = Path(tmp) / f"{stem}.cu", Path(tmp) / f"{stem}.cubin"
        src.write_text(source)
        log = _run_nvcc(["-cubin", f"-arch={arch}", *CUBIN_FLAGS, "-o", str(out)], src, timeout)
        report = parse_ptxas(log)
        if arch not in report:
            raise BuildError(src, f"no ptxas report for {arch} in:\n{log}")
        slow = slow_path_warnings(log)
        if slow:
            raise BuildError(src, "ptxas compiled a slow path:\n" + "\n".join(slow))
        return out.read_bytes(), report[arch]
