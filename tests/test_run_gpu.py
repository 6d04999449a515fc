"""make test-gpu's runner (tests/run_gpu.py) without a GPU: the JUnit reports it reads, the
summary it writes, and that it fails where nothing ran."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run_gpu  # noqa: E402

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_gpu" name="test_a[x]" time="1.0"/>
<testcase classname="tests.test_gpu" name="test_b" time="1.0"><failure message="boom">t</failure></testcase>
<testcase classname="tests.test_gpu_fp8" name="test_c" time="0"><skipped message="no GPU"/></testcase>
<testcase classname="tests.test_gpu_fp8" name="test_d" time="0"><error message="fixture"/></testcase>
</testsuite></testsuites>"""


def test_the_summary_counts_each_outcome_and_names_the_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMGEN_COMMIT", "abc123")
    xml = tmp_path / "r.xml"
    xml.write_text(REPORT)
    cases = run_gpu.outcomes(xml)
    got = run_gpu.summary(cases, ["NVIDIA H200", "NVIDIA H200"], 12.34)
    assert (got["passed"], got["failed"], got["errors"], got["skipped"]) == (1, 1, 1, 1)
    assert "failing" not in got                      # the ids are failures' keys, in order
    assert list(got["failures"]) == ["tests/test_gpu.py::test_b", "tests/test_gpu_fp8.py::test_d"]
    assert got["failures"] == {"tests/test_gpu.py::test_b": "boom", "tests/test_gpu_fp8.py::test_d":
                               "fixture"}
    assert got["skipped_tests"] == {"tests/test_gpu_fp8.py::test_c": "no GPU"}
    assert got["commit"] == "abc123" and got["gpus"] == 2 and got["seconds"] == 12.3
    json.dumps(got)  # what the runner writes


def test_a_missing_report_counts_nothing(tmp_path):
    assert run_gpu.outcomes(tmp_path / "absent.xml") == []


def test_without_a_gpu_the_runner_fails_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(run_gpu, "gpus", lambda: [])
    assert run_gpu.main(["--out", str(tmp_path)]) == 1
    assert not list(tmp_path.iterdir())
