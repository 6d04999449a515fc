"""Caches nobody else can plant or corrupt: the cubin cache, the launcher's library and the
kept sources of failed builds live in private directories of this user, each entry is checked
against its recorded sha256 and size before it is served, writes never follow a symlink, the
toolchain's environment is part of the key, a timed-out nvcc takes its children with it, and
long kernel names still make file names. CPU only: the compile steps are stand-ins unless a
test is about nvcc itself."""
import dataclasses
import hashlib
import os
import stat
import sys
import time
from pathlib import Path

import pytest

import conftest
from gemmgen.compile import cache

try:
    from gemmgen.compile import store
except ImportError:  # before the private store existed: its tests fail one by one
    store = None
from gemmgen.compile.nvcc import BuildError, Resources, compile_cubin

LONG = "gemm_wgmma_fp16_128x128x64_direct_outfp16_e" + "_relu_gelu" * 34  # 383 characters


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh cache root for the test (not yet created)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("GEMMGEN_CACHE_DIR", str(path))
    return path


@pytest.fixture
def compiles(monkeypatch):
    """nvcc (``cubin_of``) replaced by a stand-in; the list of file stems it compiled."""
    done = []

    def fake(source, arch, stem, timeout):
        done.append(stem)
        return b"CUBIN:" + source.encode(), Resources(arch, 32, 0, 0, 0, 0)
    monkeypatch.setattr(cache, "cubin_of", fake)
    return done


def _failing(monkeypatch):
    def fake(source, arch, stem, timeout):
        raise BuildError(f"/tmp/{stem}.cu", "error: nope")
    monkeypatch.setattr(cache, "cubin_of", fake)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _cubin(root: Path) -> Path:
    (found,) = root.glob("*.cubin")
    return found


# ---- private directories -------------------------------------------------------------------

def test_cache_directories_are_created_private(root, compiles, monkeypatch):
    cache.compile_cached("src", "sm_80", "k")
    assert _mode(root) == 0o700
    _failing(monkeypatch)
    with pytest.raises(BuildError):
        cache.compile_cached("bad", "sm_80", "k")
    assert _mode(root / "failed") == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_cache_root_writable_by_others_is_refused(root, compiles, mode):
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(store.UnsafeCacheError, match="chmod 700") as err:
        cache.compile_cached("src", "sm_80", "k")
    assert str(root) in str(err.value) and "writable by group or others" in str(err.value)
    assert isinstance(err.value, PermissionError) and err.value.filename == str(root)
    assert compiles == [], "nothing compiled into (or served from) an unsafe cache"


def test_a_cache_root_owned_by_another_user_is_refused(root, compiles, monkeypatch):
    root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.raises(store.UnsafeCacheError, match="owned by uid") as err:
        cache.compile_cached("src", "sm_80", "k")
    assert str(root) in str(err.value)


def test_an_unsafe_failed_directory_is_refused(root, monkeypatch):
    (root / "failed").mkdir(parents=True)
    os.chmod(root, 0o700)
    os.chmod(root / "failed", 0o777)
    _failing(monkeypatch)
    with pytest.raises(store.UnsafeCacheError, match="failed"):
        cache.compile_cached("bad", "sm_80", "k")


def test_a_symlinked_failed_directory_is_refused(root, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    root.mkdir(mode=0o700)
    (root / "failed").symlink_to(elsewhere)
    _failing(monkeypatch)
    with pytest.raises(store.UnsafeCacheError, match="symbolic link"):
        cache.compile_cached("bad", "sm_80", "k")
    assert not list(elsewhere.iterdir())


def test_the_unsafe_cache_message_is_one_cli_line(root):
    from gemmgen.cli.main import runtime_message
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(store.UnsafeCacheError) as err:
        store.private_root(root)
    line = runtime_message(err.value)
    assert line and "\n" not in line and str(root) in line and "chmod 700" in line


# ---- verified entries ----------------------------------------------------------------------

def test_a_hit_is_served_without_compiling(root, compiles):
    first = cache.compile_cached("src", "sm_80", "k")
    assert cache.compile_cached("src", "sm_80", "k") == first
    assert compiles == ["k"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "no-sidecar", "bad-sidecar"])
def test_a_damaged_cubin_is_rebuilt_not_served(root, compiles, damage):
    good, _ = cache.compile_cached("src", "sm_80", "k")
    path = _cubin(root)
    sidecar = path.with_name(path.name + ".json")
    if damage == "flip":
        path.write_bytes(bytes([good[0] ^ 1]) + good[1:])
    elif damage == "truncate":
        path.write_bytes(good[:-3])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "no-sidecar":
        sidecar.unlink()
    else:
        sidecar.write_text("{not json")
    cubin, _ = cache.compile_cached("src", "sm_80", "k")
    assert cubin == good and compiles == ["k", "k"]
    assert path.read_bytes() == good  # and the entry is whole again
    assert cache.compile_cached("src", "sm_80", "k")[0] == good and len(compiles) == 2


def test_a_symlinked_cubin_is_neither_served_nor_written_through(root, compiles, tmp_path):
    cache.compile_cached("src", "sm_80", "k")
    path = _cubin(root)
    planted = tmp_path / "planted.cubin"
    planted.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(planted)
    cache.compile_cached("src", "sm_80", "k")
    assert compiles == ["k", "k"], "an entry behind a symlink is not served"
    assert not path.is_symlink() and planted.read_bytes() == path.read_bytes()
    assert _mode(path) == 0o600


def test_a_failed_source_is_not_written_through_a_symlink(root, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (root / "failed").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    (root / "failed" / "k.cu").symlink_to(victim)
    _failing(monkeypatch)
    with pytest.raises(BuildError) as err:
        cache.compile_cached("bad source", "sm_80", "k")
    assert victim.read_text() == "keep me"
    kept = Path(err.value.path)
    assert kept == root / "failed" / "k.cu" and not kept.is_symlink()
    assert kept.read_text() == "bad source"


def test_no_temporary_file_is_left_behind(root, compiles):
    cache.compile_cached("src", "sm_80", "k")
    assert sorted(p.name for p in root.iterdir() if p.is_file())[0].startswith("k-")
    assert not [p for p in root.iterdir() if p.name.startswith(".")]



def test_processes_missing_one_key_at_once_compile_it_once(root, monkeypatch):
    """Workers that need the same kernel at once (pytest-xdist, ranks of one job) wait on its
    build lock and read the first one's cubin instead of each running nvcc."""
    import threading
    done, started = [], threading.Event()

    def slow(source, arch, stem, timeout):
        started.set()
        time.sleep(0.3)
        done.append(stem)
        return b"CUBIN:" + source.encode(), Resources(arch, 32, 0, 0, 0, 0)
    monkeypatch.setattr(cache, "cubin_of", slow)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.compile_cached("src", "sm_80", "k")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done == ["k"] and len(got) == 4 and len(set(got)) == 1
    assert _mode(root / "locks") == 0o700

# ---- the toolchain's environment is in the key ---------------------------------------------

@pytest.mark.parametrize("var", ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"])
def test_nvcc_environment_is_part_of_the_cubin_key(root, compiles, monkeypatch, var):
    monkeypatch.delenv(var, raising=False)
    cache.compile_cached("src", "sm_80", "k")
    monkeypatch.setenv(var, "-lineinfo")
    cache.compile_cached("src", "sm_80", "k")
    assert compiles == ["k", "k"]


def test_the_nvcc_path_is_part_of_the_cubin_key(root, compiles, monkeypatch):
    from gemmgen.compile import nvcc
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: "/opt/a/bin/nvcc")
    cache.compile_cached("src", "sm_80", "k")
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: "/opt/b/bin/nvcc")
    cache.compile_cached("src", "sm_80", "k")
    assert compiles == ["k", "k"]


# ---- the launcher's library ----------------------------------------------------------------

@pytest.fixture
def launcher(root, monkeypatch):
    """gemmgen.torch.launcher with a stand-in compiler that writes a fake library."""
    pytest.importorskip("torch")
    from gemmgen.torch import launcher as mod
    builds = []

    def command(cxx, output):
        builds.append(output)
        return [sys.executable, "-c", f"open({output!r}, 'wb').write(b'ELF' * 100)"]
    monkeypatch.setattr(mod, "command", command)
    mod.builds = builds
    return mod


def test_the_launcher_library_lives_inside_the_cache_root(launcher, root):
    path = launcher.library_path("/usr/bin/c++")
    assert path.parent == root / "launcher"
    built = launcher.build("/usr/bin/c++")
    assert built == path and built.is_file()
    assert _mode(root) == 0o700 and _mode(root / "launcher") == 0o700


def test_a_damaged_launcher_library_is_rebuilt(launcher):
    path = launcher.build("/usr/bin/c++")
    assert launcher.build("/usr/bin/c++") == path and len(launcher.builds) == 1
    path.write_bytes(b"ELF" * 99)  # truncated
    launcher.build("/usr/bin/c++")
    assert len(launcher.builds) == 2 and path.read_bytes() == b"ELF" * 100
    path.write_bytes(b"EL\0" * 100)  # same size, other bytes
    launcher.build("/usr/bin/c++")
    assert len(launcher.builds) == 3
    path.with_name(path.name + ".json").unlink()
    launcher.build("/usr/bin/c++")
    assert len(launcher.builds) == 4


def test_a_planted_launcher_library_is_not_loaded(launcher, tmp_path):
    path = launcher.library_path("/usr/bin/c++")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"planted")  # no sidecar: not gemmgen's build
    launcher.build("/usr/bin/c++")
    assert len(launcher.builds) == 1 and path.read_bytes() == b"ELF" * 100


def test_a_launcher_that_fails_to_load_is_rebuilt(launcher, monkeypatch):
    import torch
    loads = []

    def load_library(p):
        loads.append(p)
        if len(loads) == 1:
            raise OSError("invalid ELF header")
    monkeypatch.setattr(torch.ops, "load_library", load_library)
    monkeypatch.setattr(launcher, "_STATE", {})
    monkeypatch.setenv("GEMMGEN_LAUNCHER", "1")
    assert launcher.load() is not None, launcher.why_not()
    assert len(loads) == 2 and len(launcher.builds) == 2


@pytest.mark.parametrize("var", ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"])
def test_nvcc_environment_is_part_of_the_launcher_key(launcher, monkeypatch, var):
    monkeypatch.delenv(var, raising=False)
    before = launcher.library_path("/usr/bin/c++")
    monkeypatch.setenv(var, "-O0")
    assert launcher.library_path("/usr/bin/c++") != before


# ---- a timed-out nvcc ----------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_a_timed_out_nvcc_takes_its_children_with_it(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {pidfile}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    start = time.monotonic()
    with pytest.raises(BuildError, match="longer than"):
        compile_cubin("src", "sm_80", "k", timeout=1)
    assert time.monotonic() - start < 10
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert not alive, "nvcc's child (cicc) outlived the timeout"


# ---- long kernel names ---------------------------------------------------------------------

def test_long_names_make_short_file_names():
    from gemmgen.codegen.render import file_stem
    assert file_stem("gemm_simt_f32_128x128") == "gemm_simt_f32_128x128"
    stem = file_stem(LONG)
    assert len(stem) <= 120 and stem.startswith(LONG[:100])
    assert stem == file_stem(LONG) and stem != file_stem(LONG + "_relu")


def test_a_long_kernel_name_is_cached(root, compiles):
    cubin, _ = cache.compile_cached("src", "sm_80", LONG)
    from gemmgen.codegen.render import file_stem
    assert cache.compile_cached("src", "sm_80", LONG)[0] == cubin
    assert compiles == [file_stem(LONG)]  # compiled once, under the short file name
    assert all(len(p.name) < 200 for p in root.iterdir())


def test_a_long_kernel_names_failed_source_is_kept(root, monkeypatch):
    _failing(monkeypatch)
    with pytest.raises(BuildError) as err:
        cache.compile_cached("bad source", "sm_80", LONG)
    kept = Path(err.value.path)
    assert kept.parent == root / "failed" and kept.read_text() == "bad source"


def test_a_long_kernel_name_reaches_nvcc(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'error: stand-in' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BuildError, match="stand-in"):
        compile_cubin("src", "sm_80", LONG)


def test_emit_hashes_a_long_name_and_keeps_short_ones(tmp_path, monkeypatch):
    from gemmgen import PRESETS
    from gemmgen.codegen.render import emit
    monkeypatch.chdir(tmp_path)
    wgmma = next(p.config for p in PRESETS.values() if p.config.family == "wgmma")
    epilogue = "acc"
    for i in range(60):
        epilogue = f"relu({epilogue})" if i % 2 else f"gelu({epilogue})"
    deep = dataclasses.replace(wgmma, epilogue=epilogue)
    assert len(deep.name) > 255
    path = emit(deep)
    assert path.parent == Path("generated") and len(path.name) <= 123
    assert path.read_text().count(deep.name) > 0
    assert emit(wgmma) == Path("generated") / f"{wgmma.name}.cu"


# ---- the test suite's own cache ------------------------------------------------------------

def test_the_test_cache_is_private():
    root = Path(os.environ["GEMMGEN_CACHE_DIR"])
    st = os.lstat(root)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) & 0o077 == 0


def test_the_shared_test_cache_refuses_a_planted_directory(tmp_path):
    made = conftest.private_test_dir(tmp_path / "mine")
    assert _mode(made) == 0o700
    assert conftest.private_test_dir(made) == made  # the other workers find it
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(RuntimeError, match="planted"):
        conftest.private_test_dir(planted)
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(RuntimeError, match="link"):
        conftest.private_test_dir(link)


def test_hashes_are_sha256():
    assert store.digest(b"x") == hashlib.sha256(b"x").hexdigest()
