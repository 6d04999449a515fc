"""A catalogue of bad command lines, run through click's CliRunner: each gets a clean message
(no traceback, one or two lines naming the argument), exit status 2 for a usage error and 1
for a runtime failure, and leaves no file behind. GPU commands run with PyCUDA hidden, so
they fail the same way on every machine: one line saying how to install it."""
import json
import os
import sys
import types

import pytest
from click.testing import CliRunner

from gemmgen import PRESETS, render
from gemmgen.__main__ import main  # registers verify, bench, report and tune

GOOD_RESULTS = {"gpu": "G", "cuda_version": "13.0", "rows": [
    {"kernel": "naive", "name": "gemm_x", "M": 4096, "N": 4096, "K": 4096, "tflops": 1.0,
     "cublas_tflops": 50.0, "pct_cublas": 2.0}]}
INVALID_CFG = {**PRESETS["smem"].config.as_dict(), "bm": 0}
FILES = {
    "plain.cu": "__global__ void k() {}\n",
    "corrupt.cu": "// gemmgen-config: {oops\n",
    "badcfg.cu": "// gemmgen-config: " + json.dumps(INVALID_CFG) + "\n",
    "unknownfield.cu": "// gemmgen-config: " + json.dumps({**INVALID_CFG, "bm": 32, "zz": 1}),
    "binary.cu": b"\xff\xfe\x00\x81",
    "good.cu": render(PRESETS["smem"].config),
    "corrupt.json": "{oops",
    "notresults.json": '{"a": 1}',
    "badrow.json": '{"gpu": "G", "cuda_version": "13", "rows": [{"kernel": "k"}]}',
    "results.json": json.dumps(GOOD_RESULTS),
    "binary.json": b"\xff\xfe\x00\x81",
    "corruptdb.json": "{oops",
    "notdb.json": "[1, 2]",
    "emptydb.json": '{"version": 1, "entries": {}}',
    "afile": "x",
    "badsuite.toml": 'kind = "dispatch"\n[[problems]]\ndtype = "fp64"\nsize = 64\n',
}

NO_PROC = not os.path.isdir("/proc/self")
PROC_CODE = 1 if os.geteuid() == 0 else 2  # root passes the permission check, then fails

U, R = 2, 1  # usage error, runtime failure
CASES = [
    # emit: --config-json
    ("emit --config-json {bad", U, "not valid JSON"),
    ("emit --config-json []", U, "expected a JSON object"),
    ("emit --config-json '\"x\"'", U, "expected a JSON object"),
    ("emit --config-json 1e999", U, "expected a JSON object"),
    ("emit --config-json '{\"family\":\"nope\"}'", U, "unknown family"),
    ("emit --config-json '{\"family\":[]}'", U, "unknown family"),
    ("emit --config-json '{\"bogus\":1}'", U, "unknown simt fields: bogus"),
    ("emit --config-json '{\"bm\":\"x\"}'", U, "bm must be int"),
    ("emit --config-json '{\"bm\":1.5}'", U, "bm must be int"),
    ("emit --config-json '{\"layout\":\"xyz\"}'", U, "layout must be one of"),
    ("emit --config-json '{\"family\":\"wmma\"}' --family simt", U, "contradicts the wmma config"),
    ("emit --preset smem --config-json '{\"bm\":64}'", U, "not both"),
    ("emit --preset smem --family wmma", U, "contradicts the simt config of --preset"),
    # emit: fields
    ("emit --preset nope", U, "'nope' is not one of"),
    ("emit --family nope", U, "'nope' is not one of"),
    ("emit --arch sm_70", U, "'sm_70' is not one of"),
    ("emit --family wmma --arch sm_86 --bm 256 --bn 128 --bk 64 --stages 3", U,
     "cannot run on sm_86: needs 194560 bytes of shared memory"),
    ("emit --bm 0", U, "R01 bm-positive"),
    ("emit --bm -128", U, "R01 bm-positive"),
    ("emit --bm abc", U, "'abc' is not a valid integer"),
    ("emit --bm 1e3", U, "is not a valid integer"),
    ("emit --tm 7", U, "R13 bm-tm"),
    ("emit --vec 3", U, "R08 vec-width"),
    ("emit --stages 5", U, "R10 stages-range"),
    ("emit --skew -1", U, "R09 skew-nonnegative"),
    ("emit --min-blocks 0", U, "R36 min-blocks-positive"),
    ("emit --bm 16 --bn 16 --tm 1 --tn 1 --bk 1 --stages 0 --thread-order m --vec 4", U, "R31"),
    ("emit --m 2147483648", U, "32-bit ints"),
    ("emit --m 0", U, "must be an int from 1"),
    ("emit --n -5", U, "must be an int from 1"),
    ("emit --k 99999999999999", U, "must be an int from 1"),
    ("emit --family wmma --tm 4", U, "--tm does not apply to the wmma family"),
    ("emit --family simt --shape m16n16k16", U, "--shape does not apply to the simt family"),
    ("emit --family wmma --dtype tf32 --shape m16n16k16", U, "W08 tf32-shape"),
    ("emit --family wmma --dtype bf16 --acc fp16", U, "W10 fp16-accumulator"),
    ("emit --family wmma --wm 48", U, "W13 bm-wm"),
    ("emit --layout xyz", U, "'xyz' is not one of"),
    ("emit --epilogue nope", U, "unknown name 'nope' at column 1"),
    ("emit --epilogue 'acc - R'", U, "operator '-' is not supported"),
    ("emit --family simt --epilogue 'relu(acc) + R'", U, "E00 tree-needs-wgmma"),
    ("emit --thread-order x", U, "'x' is not one of"),
    ("emit --bogus", U, "No such option"),
    ("emit --bm", U, "'--bm' requires an argument"),
    # emit: -o
    ("emit -o missing/k.cu", U, "directory 'missing' does not exist"),
    ("emit -o .", U, "is a directory"),
    ("emit -o sub/", U, "is a directory"),
    ("emit -o afile/k.cu", U, "directory 'afile' does not exist"),
    ("emit -o /proc/k.cu", PROC_CODE, "/proc"),
    # list, rules, the group
    ("list --names --json", U, "--names or --json, not both"),
    ("list extra", U, "unexpected extra argument"),
    ("list --bogus", U, "No such option"),
    ("rules extra", U, "unexpected extra argument"),
    ("rules --bogus", U, "No such option"),
    ("nosuchcommand", U, "No such command"),
    ("--bogus", U, "No such option"),
    # verify: files and options (checked before the GPU)
    ("verify plain.cu", U, "plain.cu: no '// gemmgen-config:' line"),
    ("verify corrupt.cu", U, "corrupt.cu: malformed gemmgen-config line"),
    ("verify badcfg.cu", U, "badcfg.cu: invalid configuration"),
    ("verify unknownfield.cu", U, "unknown simt config fields: zz"),
    ("verify binary.cu", U, "binary.cu is not a text file"),
    ("verify good.cu plain.cu", U, "plain.cu"),
    ("verify missing.cu", U, "does not exist"),
    ("verify .", U, "is a directory"),
    ("verify --preset nope", U, "'nope' is not one of"),
    ("verify --arch sm_70", U, "unknown arch 'sm_70'"),
    ("verify --arch banana", U, "unknown arch 'banana'"),
    ("verify --seed -1", U, "not in the range"),
    ("verify --seed abc", U, "is not a valid integer"),
    ("verify --json missing/x.json", U, "directory 'missing' does not exist"),
    ("verify --json .", U, "is a directory"),
    ("verify --variants good.cu", U, "--variants runs presets' variants"),
    # verify: no GPU stack
    ("verify", R, "needs PyCUDA, which is not installed: pip install"),
    ("verify --preset naive", R, "needs PyCUDA"),
    ("verify good.cu", R, "needs PyCUDA"),
    ("verify --variants --preset smem", R, "needs PyCUDA"),
    ("verify --json out.json", R, "needs PyCUDA"),
    # bench
    ("bench --size abc", U, "'abc' is not N or MxNxK"),
    ("bench --size 0x0x0", U, "every extent must be at least 1"),
    ("bench --size 0", U, "every extent must be at least 1"),
    ("bench --size -5", U, "is not N or MxNxK"),
    ("bench --size 1x2", U, "is not N or MxNxK"),
    ("bench --size 1x2x3x4", U, "is not N or MxNxK"),
    ("bench --size 4096x", U, "is not N or MxNxK"),
    ("bench --size 2147483648", U, "at most 2147483647"),
    ("bench --size 1.5", U, "is not N or MxNxK"),
    ("bench --size x", U, "is not N or MxNxK"),
    ("bench --layout xyz", U, "'xyz' is not one of"),
    ("bench --epilogue nope", U, "'nope' is not one of"),
    ("bench --batch 0", U, "not in the range 1<=x<=65535"),
    ("bench --batch -1", U, "not in the range"),
    ("bench --batch 70000", U, "not in the range"),
    ("bench --dtype fp64", U, "'fp64' is not one of"),
    ("bench --append", U, "--append merges into the --json file"),
    ("bench --json corrupt.json --append", U, "corrupt.json is not valid JSON"),
    ("bench --json notresults.json --append", U, "not a gemmgen results file"),
    ("bench --tuned missing.json", U, "does not exist"),
    ("bench --tuned corruptdb.json", U, "tuning database corruptdb.json is not valid JSON"),
    ("bench --tuned notdb.json", U, "not a gemmgen tuning database"),
    ("bench --tuned emptydb.json --preset naive", U, "--tuned benches the database's choice"),
    ("bench plain.cu", U, "no '// gemmgen-config:' line"),
    ("bench good.cu --layout ccc", U, "files are benched as they are"),
    ("bench --plot missing/p.png", U, "directory 'missing' does not exist"),
    ("bench --json .", U, "is a directory"),
    ("bench --seed -3", U, "not in the range"),
    ("bench --arch sm_1", U, "unknown arch 'sm_1'"),
    ("bench", R, "needs PyCUDA"),
    ("bench --size 1024 --json out.json", R, "needs PyCUDA"),
    ("bench --preset naive --layout ccc --size 512", R, "needs PyCUDA"),
    ("bench --tuned emptydb.json", R, "needs PyCUDA"),
    ("bench --json results.json --append --size 64", R, "needs PyCUDA"),
    # bench --suite: the suite file and its options, before the GPU
    ("bench --suite ladder --preset naive", U, "--suite: a suite names its own problems and "
     "kernels; it takes no --preset"),
    ("bench --suite ladder good.cu", U, "it takes no PATHS"),
    ("bench --suite ladder --size 64 --layout ccc", U, "it takes no --size, --layout"),
    ("bench --suite nope", U, "unknown suite 'nope': no benchmarks/suites/nope.toml; known: "),
    ("bench --suite missing/x.toml", U, "no suite file missing/x.toml"),
    ("bench --suite badsuite.toml", U, "badsuite.toml: problems[0].dtype: 'fp64' is not one of"),
    ("bench --suite afile", U, "unknown suite 'afile'"),
    ("bench --suite ladder --only nosuchcase", U, "'nosuchcase' matches no case of suite ladder"),
    ("bench --only gpt2", U, "--only works only with --suite NAME"),
    ("bench --quick", U, "--quick works only with --suite NAME"),
    ("bench --suite llm --max-rows 0", U, "not in the range x>=1"),
    ("bench --suite llm --max-minutes 0", U, "not in the range x>0"),
    ("bench --suite llm --results-dir afile", U, "is a file"),
    ("bench --suite ladder --plot missing/p.png", U, "directory 'missing' does not exist"),
    ("bench --suite ladder", R, "needs PyCUDA"),
    ("bench --suite llm --quick --only gpt2 --max-rows 3", R, "needs PyCUDA"),
    # report
    ("report", U, "Missing argument 'PATH'"),
    ("report missing.json", U, "does not exist"),
    ("report .", U, "is a directory"),
    ("report corrupt.json", U, "corrupt.json is not valid JSON"),
    ("report notresults.json", U, "not a gemmgen results file"),
    ("report badrow.json", U, "row 0 lacks or has a wrong M, N, K, tflops"),
    ("report binary.json", U, "cannot read binary.json"),
    ("report results.json --size abc", U, "'abc' is not N or MxNxK"),
    ("report results.json --size 1234", U,
     "no rows at 1234x1234x1234; sizes there: 4096x4096x4096"),
    ("report results.json --size 0", U, "every extent must be at least 1"),
    ("report results.json --plot missing/p.png", U, "directory 'missing' does not exist"),
    # tune: every argument before any worker starts
    ("tune", U, "Missing option '--m'"),
    ("tune --m 0 --n 1 --k 1", U, "0 is not in the range 1<=x<=2147483647"),
    ("tune --m -1 --n 1 --k 1", U, "not in the range"),
    ("tune --m 1 --n 2147483648 --k 1", U, "not in the range"),
    ("tune --m 1 --n 1 --k abc", U, "is not a valid integer"),
    ("tune --m 1 --n 1 --k 1 --max-configs 0", U, "0 is not in the range x>=1"),
    ("tune --m 1 --n 1 --k 1 --max-configs -3", U, "not in the range x>=1"),
    ("tune --m 1 --n 1 --k 1 --devices x", U, "'x' is not a list of device ids"),
    ("tune --m 1 --n 1 --k 1 --devices 0,0", U, "names a device twice"),
    ("tune --m 1 --n 1 --k 1 --devices -1", U, "is not a list of device ids"),
    ("tune --m 1 --n 1 --k 1 --devices 0,,1", U, "is not a list of device ids"),
    ("tune --m 1 --n 1 --k 1 --jobs 0", U, "not in the range x>=1"),
    ("tune --m 1 --n 1 --k 1 --budget 0", U, "not a number of seconds above 0"),
    ("tune --m 1 --n 1 --k 1 --budget nan", U, "not a number of seconds above 0"),
    ("tune --m 1 --n 1 --k 1 --budget -5", U, "not a number of seconds above 0"),
    ("tune --m 1 --n 1 --k 1 --family simt --dtype fp16", U, "the simt family takes fp32, not fp16"),
    ("tune --m 1 --n 1 --k 1 --family wmma", U, "the wmma family takes fp16, bf16, tf32, not fp32"),
    ("tune --m 1 --n 1 --k 1 --dtype fp64", U, "'fp64' is not one of"),
    ("tune --m 1 --n 1 --k 1 --db corruptdb.json", U, "corruptdb.json is not valid JSON"),
    ("tune --m 1 --n 1 --k 1 --db notdb.json", U, "not a gemmgen tuning database"),
    ("tune --m 1 --n 1 --k 1 --db .", U, "is a directory"),
    ("tune --m 1 --n 1 --k 1 --db missing/db.json", U, "directory 'missing' does not exist"),
    ("explain 64 64 64 --db corruptdb.json", U, "corruptdb.json is not valid JSON"),
    ("explain 64 64 64 --db notdb.json", U, "notdb.json is not a gemmgen tuning database"),
    ("explain 64 64 64 --db binary.json", U, "cannot read tuning database binary.json"),
    ("explain 64 64 64 --db nothere.json", U, "'nothere.json' does not exist"),
    ("explain 64 64 64 --db .", U, "is a directory"),
    ("tune --m 1 --n 1 --k 1 --plot missing/p.png", U, "directory 'missing' does not exist"),
    ("tune --m 1 --n 1 --k 1 --show --devices 0", U, "--show prints what is stored"),
    ("tune --m 1 --n 1 --k 1 --show --db emptydb.json", R, "nothing tuned for fp32 1x1x1"),
    ("tune --m 1 --n 1 --k 1 --db fresh.json", R, "needs PyCUDA"),
    ("tune --m 4096 --n 4096 --k 4096 --dtype fp16 --db emptydb.json", R, "needs PyCUDA"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory with the catalogue's input files, as the current directory; PyCUDA hidden
    and the default tuning database inside it."""
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "pycuda", None)  # import pycuda -> ImportError
    monkeypatch.setenv("GEMMGEN_TUNE_DB", str(tmp_path / "default-db.json"))
    return tmp_path


def snapshot(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def invoke(args, env=None):
    return CliRunner().invoke(main, args, env=env)


def assert_clean(result, code: int, match: str) -> list[str]:
    """The command failed with ``code``, printed ``match``, and no traceback; returns the
    non-empty output lines."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"unhandled {type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in result.output
    assert match in result.output, result.output
    return [ln for ln in result.output.splitlines() if ln.strip()]


@pytest.mark.parametrize("line, code, match", CASES, ids=[c[0] for c in CASES])
def test_bad_command_line(workdir, line, code, match):
    import shlex
    if "/proc" in line and NO_PROC:
        pytest.skip("no /proc here")
    before = snapshot(workdir)
    lines = assert_clean(invoke(shlex.split(line)), code, match)
    if not lines[0].startswith("error: invalid configuration"):  # the rule report is longer
        assert len(lines) <= 2, lines
        assert lines[0].startswith("error: "), lines
    assert snapshot(workdir) == before, "a file was left behind or changed"


def test_catalogue_size():
    assert len(CASES) >= 100
    assert {c[1] for c in CASES} == {1, 2}


def test_the_default_tuning_database_corrupt_names_the_file_and_the_variable(workdir):
    (workdir / "default-db.json").write_text("{oops")
    lines = assert_clean(invoke(["tune", "--m", "1", "--n", "1", "--k", "1"]), 1,
                         "default-db.json is not valid JSON")
    assert "GEMMGEN_TUNE_DB" in lines[0] and len(lines) == 1


def fake_pycuda(monkeypatch, driver):
    """Install a stand-in ``pycuda`` package whose ``pycuda.driver`` is ``driver`` (None: the
    import fails, as when libcuda is missing)."""
    pkg = types.ModuleType("pycuda")
    pkg.__path__ = []
    pkg.__spec__ = types.SimpleNamespace(name="pycuda", submodule_search_locations=[])
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)


class FakeDriver(types.ModuleType):
    def __init__(self, count=1, init_error=None):
        super().__init__("pycuda.driver")
        self._init_error = init_error
        self.Device = types.SimpleNamespace(count=lambda: count)

    def init(self):
        if self._init_error:
            raise self._init_error


@pytest.mark.parametrize("driver, match", [
    (None, "PyCUDA is installed but cannot load the CUDA driver"),
    (FakeDriver(init_error=RuntimeError("cuInit failed: no CUDA-capable device is detected")),
     "the CUDA driver did not start: cuInit failed: no CUDA-capable device is detected"),
    (FakeDriver(count=0), "there is no CUDA device on this machine"),
])
@pytest.mark.parametrize("line", ["verify", "bench --size 64", "tune --m 8 --n 8 --k 8"])
def test_pycuda_without_a_driver_or_device_says_so(workdir, monkeypatch, driver, match, line):
    fake_pycuda(monkeypatch, driver)
    lines = assert_clean(invoke(line.split()), 1, match)
    assert len(lines) == 1 and "pip install" not in lines[0]


def test_tune_names_a_device_that_is_not_there(workdir, monkeypatch):
    fake_pycuda(monkeypatch, FakeDriver(count=2))
    assert_clean(invoke("tune --m 8 --n 8 --k 8 --devices 0,3".split()), 2,
                 "no device 3: this machine has 2 (ids 0 to 1)")


def test_missing_pycuda_is_one_line_with_the_install_hint(workdir):
    lines = assert_clean(invoke(["verify"]), 1, "pip install 'gemmgen[cuda]'")
    assert lines == ["error: running kernels needs PyCUDA, which is not installed: pip install "
                     "'gemmgen[cuda]' (PyCUDA builds against your CUDA toolkit)"]


def test_check_without_nvcc_writes_nothing(workdir, monkeypatch):
    monkeypatch.setattr("gemmgen.compile.nvcc.nvcc_path", lambda: None)
    before = snapshot(workdir)
    lines = assert_clean(invoke(["emit", "--preset", "smem", "--check"]), 1,
                         "--check needs nvcc: nvcc not found")
    assert len(lines) == 1 and snapshot(workdir) == before


def test_runtime_failures_become_one_line():
    from gemmgen.cli.main import runtime_message
    from gemmgen.compile.nvcc import BuildError
    from gemmgen.tune.search import WorkerError
    err = BuildError("/tmp/k.cu", "k.cu(3): error: identifier \"x\" is undefined\n1 error\n")
    assert runtime_message(err) == 'nvcc failed on /tmp/k.cu: k.cu(3): error: identifier "x" is undefined'
    assert runtime_message(PermissionError(13, "Permission denied", "/x")) == "/x: Permission denied"
    assert runtime_message(WorkerError("GPU worker 0 failed to start: boom", "Traceback ...")) == (
        "GPU worker 0 failed to start: boom")
    assert runtime_message(KeyError("a bug")) is None  # bugs keep their traceback


def test_emit_refuses_an_output_that_is_not_a_regular_file(workdir):
    os.mkfifo(workdir / "fifo")
    os.symlink("fifo", workdir / "to-fifo")
    before = snapshot(workdir)
    for target in ("fifo", "to-fifo"):
        lines = assert_clean(invoke(["emit", "--preset", "smem", "-o", target]), 2,
                             "not a regular file")
        assert "-o" in lines[0] and len(lines) <= 2
    assert snapshot(workdir) == before and (workdir / "fifo").is_fifo()


def test_emit_dash_writes_the_kernel_to_stdout(workdir):
    before = snapshot(workdir)
    result = CliRunner().invoke(main, ["emit", "--preset", "smem", "-o", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout == render(PRESETS["smem"].config)
    assert snapshot(workdir) == before and not (workdir / "-").exists()


def test_other_outputs_refuse_dash_rather_than_write_a_file_named_dash(workdir):
    assert_clean(invoke(["verify", "--json", "-"]), 2, "'-' ")
    assert not (workdir / "-").exists()


def test_emit_writes_through_a_symlink_to_a_regular_file_but_not_a_dangling_one(workdir):
    (workdir / "sub" / "k.cu").write_text("old")
    os.symlink("sub/k.cu", workdir / "link.cu")
    os.symlink("sub/nothing.cu", workdir / "dangling.cu")
    result = invoke(["emit", "--preset", "smem", "-o", "link.cu"])
    assert result.exit_code == 0, result.output
    assert (workdir / "link.cu").is_symlink()
    assert (workdir / "sub" / "k.cu").read_text() == render(PRESETS["smem"].config)
    before = snapshot(workdir)
    assert_clean(invoke(["emit", "--preset", "smem", "-o", "dangling.cu"]), 2, "dangling")
    assert snapshot(workdir) == before and not (workdir / "sub" / "nothing.cu").exists()


def test_the_python_emit_never_replaces_a_device_or_fifo(tmp_path):
    from gemmgen import emit
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        emit(PRESETS["smem"].config, tmp_path / "fifo")
    assert (tmp_path / "fifo").is_fifo() and len(list(tmp_path.iterdir())) == 1


def test_make_generate_refreshes_the_presets_and_keeps_other_kernels(tmp_path):
    """``make generate`` (run with a stand-in python whose preset list is two names) rewrites
    the presets' files and leaves a kernel the user emitted into generated/ alone."""
    import shutil
    import subprocess
    if shutil.which("make") is None:
        pytest.skip("no make here")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stub = tmp_path / "python"
    stub.write_text(f'#!/bin/sh\nif [ "$3" = list ]; then echo smem; echo naive; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    stub.chmod(0o755)
    shutil.copy(os.path.join(repo, "Makefile"), tmp_path / "Makefile")
    (tmp_path / "generated").mkdir()
    mine = tmp_path / "generated" / "my_kernel.cu"
    mine.write_text("// mine\n")
    stale = tmp_path / "generated" / f"{PRESETS['smem'].config.name}.cu"
    stale.write_text("// stale\n")
    env = {**os.environ, "PYTHONPATH": repo}
    done = subprocess.run(["make", "-s", "generate", f"PYTHON={stub}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert mine.read_text() == "// mine\n"
    assert stale.read_text() == render(PRESETS["smem"].config)
    assert (tmp_path / "generated" / f"{PRESETS['naive'].config.name}.cu").exists()


def tuned_db(path, gpu="NVIDIA H200", shape=(4096, 4096, 4096)):
    """A tuning database whose fp16 rrr winner at ``shape`` is preset wgmma_ring's config."""
    cfg = PRESETS["wgmma_ring"].config
    key = f"{gpu}|fp16|rrr|{'x'.join(map(str, shape))}|wgmma"
    row = {"config": cfg.as_dict(), "status": "ok", "tflops": 700.0}
    path.write_text(json.dumps({"version": 1, "entries": {key: {
        "candidates": {cfg.name: row}, "winner": cfg.name, "family": "wgmma"}}}))
    return cfg


@pytest.mark.parametrize("how", ["default", "env", "--db"])
def test_explain_reads_the_database_gemm_reads_and_names_it(workdir, monkeypatch, how):
    path = workdir / ("default-db.json" if how != "--db" else "mine.json")
    if how == "default":  # no $GEMMGEN_TUNE_DB: the user cache directory's tune.json
        monkeypatch.delenv("GEMMGEN_TUNE_DB")
        monkeypatch.setenv("XDG_CACHE_HOME", str(workdir / "cache"))
        path = workdir / "cache" / "gemmgen" / "tune.json"
        path.parent.mkdir(parents=True)
    cfg = tuned_db(path)
    args = ["explain", "4096", "4096", "4096"] + (["--db", str(path)] if how == "--db" else [])
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert cfg.name in result.output and "exact" in result.output
    assert f"database: {path}" in result.output


def test_explain_without_a_database_file_says_so(workdir):
    result = invoke(["explain", "64", "64", "64"])
    assert result.exit_code == 0, result.output
    assert f"database: {workdir / 'default-db.json'} (no file: nothing tuned)" in result.output


def test_explain_a_corrupt_default_database_is_one_line_naming_it(workdir):
    (workdir / "default-db.json").write_text("{oops")
    lines = assert_clean(invoke(["explain", "64", "64", "64"]), 1, "default-db.json")
    assert len(lines) == 1 and "GEMMGEN_TUNE_DB" in lines[0]


def test_explain_fp8_reads_the_database_too(workdir):
    result = invoke(["explain", "64", "64", "64", "--dtype", "e4m3"])
    assert result.exit_code == 0, result.output
    assert f"database: {workdir / 'default-db.json'}" in result.output


def test_explain_names_the_callers_shape_beside_the_swapped_one(workdir):
    result = invoke("explain 1 57344 8192 --dtype bf16 --layout rcr".split())
    assert result.exit_code == 0, result.output
    out = result.output
    assert "M=1 N=57344 K=8192 (run swapped as M=57344 N=1)" in out
    assert "224 tiles" in out and "smallest that runs in one wave" not in out, out
    assert "- N = 1:" not in out  # the kernel's N is the caller's M
    fits = invoke("explain 1 8192 8192 --dtype bf16".split()).output
    assert "64 rows: the smallest that runs in one wave" in fits, fits
    plain = invoke("explain 4096 4096 4096".split()).output
    assert "M=4096 N=4096 K=4096" in plain and "swapped" not in plain, plain


EXTRA_CASES = [
    # FP8-only options with another dtype, grouped-only options without --groups
    ("explain 64 64 64 --dtype fp16 --scaling row", U, "--scaling"),
    ("explain 64 64 64 --fast-accum", U, "--fast-accum"),
    ("explain 64 64 64 --dist skew90", U, "--dist"),
    ("explain 64 64 64 --grouping k", U, "--grouping"),
    ("explain 64 64 64 --dtype e4m3 --lda 1", U, "--lda"),
    ("explain 64 64 64 --dtype e4m3 --layout rcr --ldb 63", U, "--ldb"),
    ("explain 64 64 64 --dtype e4m3 --ldc 8", U, "--ldc"),
    ("explain 64 64 64 --db nonexistent.json", U, "nonexistent.json"),
    ("explain 64 64 64 --db corruptdb.json", U, "corruptdb.json is not valid JSON"),
    ("tune --m 64 --n 64 --k 64 --dtype fp16 --scaling row", U, "--scaling"),
    ("tune --m 64 --n 64 --k 64 --fast-accum", U, "--fast-accum"),
    ("tune --m 64 --n 64 --k 64 --dist skew90", U, "--dist"),
    ("tune --m 64 --n 64 --k 64 --grouping k", U, "--grouping"),
    # exit codes of a few more error paths (docs/concepts.md: 2 = the caller's mistake)
    ("emit --preset nosuch", U, "--preset"),
    ("explain 0x4 4 4", U, "is not a valid integer"),
    ("explain 64 64 64 --dtype bf16 --cc 50", U, "no kernel family takes dtype 'bf16' on sm_50"),
    ("explain 64 64 64 --groups 4 --dtype bf16 --layout ccc", U, "layout"),
    # --db names the GEMM database: a grouped problem refuses it rather than ignore it
    ("explain 4096 4096 4096 --groups 8 --dtype bf16 --db emptydb.json", U, "grouped tuning file"),
    ("tune --m 4096 --n 4096 --k 4096 --groups 8 --dtype bf16 --db x.json", U,
     "grouped tuning file"),
    ("emit --preset smem -o missing/dir/k.cu", U, "does not exist"),
    # FP8 grouped kernels are M-grouped, layout rcr: tuning says so before it needs a GPU
    ("tune --m 4096 --n 4096 --k 4096 --groups 8 --dtype e4m3 --grouping k", U, "--grouping"),
    ("tune --m 4096 --n 4096 --k 4096 --groups 8 --dtype e4m3 --layout rrr", U, "--layout"),
    ("tune --m 4096 --n 4096 --k 4096 --groups 8 --dtype fp32", U,
     "or e4m3/e5m2 with block scales"),
    ("explain 4096 4096 4096 --groups 8 --dtype fp32", U, "or e4m3/e5m2 with block scales"),
]


def test_explain_groups_names_the_fp8_grouped_kernel(workdir):
    """explain --groups --dtype e4m3: the grouped kernel's FP8 axis, bf16 out, block scales."""
    got = invoke("explain 32768 4096 7168 --groups 256 --dtype e4m3".split())
    assert got.exit_code == 0, got.output
    assert "gemm_grouped_m_e4m3_" in got.output and "out bf16" in got.output
    assert "_sblock" in got.output
    from gemmgen.heuristics.grouped import choose, row_counts
    routed = choose("e4m3", "m", "rcr", "bf16", 256, 32768, 4096, 7168,
                    row_counts("random", 32768, 256))
    assert f"kernel  {routed.config.name}" in got.output, "the dispatch's choice (random routing)"


@pytest.mark.parametrize("line, code, match", EXTRA_CASES, ids=[c[0] for c in EXTRA_CASES])
def test_more_bad_command_lines(workdir, line, code, match):
    test_bad_command_line(workdir, line, code, match)


def test_explain_groups_reads_the_grouped_tuning_file(workdir, monkeypatch):
    """explain --groups says what grouped_gemm runs: the tuned winner of the grouped tuning
    file (named in the output) where it has one for the GPU, else the cost model's choice."""
    import json

    from gemmgen import PRESETS
    from gemmgen.heuristics import grouped_db
    path = workdir / "grouped.json"
    monkeypatch.setenv("GEMMGEN_GROUPED_DB", str(path))
    line = "explain 8192 4096 7168 --groups 8 --dtype bf16".split()
    plain = invoke(line)
    assert plain.exit_code == 0, plain.output
    assert "how     default" in plain.output and f"{path} (no file" in plain.output
    cfg = PRESETS["grouped_small"].config.replace(dtype="bf16", out="bf16", layout="rcr")
    key = grouped_db.key("NVIDIA H200", "bf16", "bf16", "m", "rcr", 8, 8192, 4096, 7168,
                         "uniform")
    entry = {"candidates": {cfg.name: {"config": cfg.as_dict(), "status": "ok"}},
             "winner": cfg.name}
    path.write_text(json.dumps({"version": 1, "entries": {key: entry}}))
    tuned = invoke(line)
    assert tuned.exit_code == 0, tuned.output
    assert "how     tuned" in tuned.output and cfg.name in tuned.output, tuned.output
    other = invoke(line + ["--gpu", "NVIDIA H100 80GB HBM3"])  # tuned on another GPU only
    assert "how     default" in other.output, other.output
    path.write_text("{not json")
    bad = invoke(line)
    assert_clean(bad, 2, "grouped tuning file")
    assert "is not valid JSON" in bad.output, bad.output
