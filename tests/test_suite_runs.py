"""Suite runs with the GPU faked: the runners make one row per case in suite order (failures
included, gemm's swapped choices launched swapped), honour the time limit, and the command
line writes one results file and plot per suite and GPU, merging partial runs."""
import json
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest
from click.testing import CliRunner
from test_suites import INFO, fake_rows

import gemmgen.cli.suite as cli_suite
import gemmgen.tune.suite_kinds as kinds
import gemmgen.tune.suite_runs as runs
from gemmgen.__main__ import main
from gemmgen.compile.nvcc import BuildError
from gemmgen.tune import results, suites
from gemmgen.tune.baseline import torch_op
from gemmgen.tune.bench import Timing
from gemmgen.tune.suite_run import RunEnv
from gemmgen.tune.suite_runs import run_cases


class FakeProblem:
    """Problem's attributes, no buffers; 'cannot' shapes fail as an allocation would."""

    made: ClassVar[list] = []

    def __init__(self, m, n, k, rng, l2, dtype, out, layout, batch=None, device_data=False):
        if (m, n, k) == (8192, 8192, 8192) and dtype == "bf16":
            raise MemoryError("out of memory")
        self.m, self.n, self.k, self.out, self.layout, self.batch = m, n, k, out, layout, None
        FakeProblem.made.append((m, n, k, dtype, layout, device_data))


def fake_baseline(p, budget_s, which):
    """``baseline.bench_baseline`` without a GPU: 2 ms, named as the real one names it."""
    assert which == "torch_ops"
    return Timing(2e-3, 2e-3, 2e-3, 9), 1e-6, torch_op(p.layout, p.batch)


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """The runners' GPU calls replaced: sm_90, kernels 'built' (one config fails to build),
    every kernel 1 ms and the PyTorch baseline 2 ms; ``launched`` records (kernel name,
    swap)."""
    launched = []

    def build_many(configs, arch=None):
        return [BuildError("k.cu", "error: no") if c.name.startswith("gemm_simt_f32")
                else SimpleNamespace(config=c, name=c.name, registers=128, smem_bytes=0)
                for c in configs]

    def bench_kernel(kernel, p, budget_s, swap=False):
        launched.append((kernel.name, swap))
        return Timing(1e-3, 1e-3, 1e-3, 9), 1e-6
    FakeProblem.made = []
    for name, value in (("device_cc", lambda: 90), ("device_arch", lambda: "sm_90"),
                        ("build_many", build_many), ("compile_many", lambda *a, **k: []),
                        ("Problem", FakeProblem), ("cublas_available", lambda: None),
                        ("bench_baseline", fake_baseline), ("resolve", lambda k, b: "torch_ops"),
                        ("bench_kernel", bench_kernel)):
        monkeypatch.setattr(kinds, name, value)
    monkeypatch.setattr(runs, "resolve", lambda kind, b: "torch_ops" if b == "torch" else b)
    return SimpleNamespace(launched=launched, env=RunEnv(INFO, db=str(tmp_path / "db.json")))


def test_dispatch_rows_follow_the_suite_and_record_every_failure(fake_gpu):
    suite = suites.load("odd")
    cases = suites.expand(suite)
    rows = run_cases(suite, cases, fake_gpu.env)
    assert [r["case"] for r in rows] == [c.label for c in cases]
    decode = next(r for r in rows if r["case"] == "fp16 rrr 1x8192x8192")
    assert decode["passed"] and decode["swap"] and decode["pct_cublas"] == 200.0
    assert (decode["name"], True) in fake_gpu.launched
    ieee = [r for r in rows if r["dtype"] == "fp32" and "math" not in r]
    assert ieee and all(not r["passed"] and "BuildError" in r["error"] for r in ieee)
    assert all(r["passed"] for r in rows if r not in ieee)
    assert all(made[-1] for made in FakeProblem.made)  # data drawn on the GPU


def test_a_problem_that_cannot_be_set_up_fails_each_of_its_rows(fake_gpu):
    cases = suites.expand(suites.load("epilogues"))
    rows = kinds.run_dispatch(cases, fake_gpu.env, baseline="none")
    assert len(rows) == len(cases) == 24
    big_bf16 = [r for r in rows if r["dtype"] == "bf16" and r["M"] == 8192]
    assert len(big_bf16) == 6 and all("MemoryError: out of memory" in r["error"]
                                      for r in big_bf16)
    fine = [r for r in rows if r not in big_bf16]
    assert all(r["passed"] and r["pct_cublas"] == 100.0 for r in fine)  # against epilogue none
    assert {r["kernel"] for r in fine} == {"gemm", "gemm[bias]", "gemm[relu]", "gemm[gelu]",
                                           "gemm[bias_relu]", "gemm[bias_gelu]"}


def test_presets_run_as_they_are_beside_cublas(fake_gpu):
    cases = suites.select(suites.expand(suites.load("ladder")), "wgmma")
    rows = kinds.run_presets(cases, fake_gpu.env)
    assert [r["kernel"] for r in rows] == [c.preset for c in cases]
    assert all(r["passed"] and r["how"] == "preset" and r["cublas_tflops"] == 68.719
               and "baseline_error" not in r for r in rows)
    assert {(m[3], m[4]) for m in FakeProblem.made} == {("fp16", "rrr"), ("bf16", "rrr"),
                                                       ("tf32", "rcr"), ("fp32", "rrr")}


def test_past_the_deadline_no_problem_starts(fake_gpu):
    env = fake_gpu.env
    env.deadline = time.monotonic() - 1
    cases = suites.expand(suites.load("square"))
    assert kinds.run_dispatch(cases, env) == [] and env.not_run == len(cases)


@pytest.fixture
def fake_cli(monkeypatch):
    """``gemmgen bench --suite`` with the GPU replaced by fake rows."""
    calls = []

    def run_cases(suite, cases, env):
        calls.append(len(cases))
        rows = fake_rows(suite, cases, fail_every=None)
        env.checkpoint(rows[:2])
        return rows
    monkeypatch.setattr(cli_suite, "require_gpu", lambda: None)
    monkeypatch.setattr(cli_suite, "device_info", lambda: INFO)
    monkeypatch.setattr(cli_suite, "run_cases", run_cases)
    return calls


def test_a_suite_run_writes_one_results_file_and_plot_per_suite_and_gpu(tmp_path, fake_cli):
    pytest.importorskip("matplotlib")
    out = CliRunner().invoke(main, ["bench", "--suite", "square", "--results-dir",
                                    str(tmp_path)])
    assert out.exit_code == 0, out.output
    path = tmp_path / "square_NVIDIA_H200.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["square_NVIDIA_H200.json",
                                                          "square_NVIDIA_H200.png"]
    doc = results.load(path)
    assert (doc["suite"], doc["suite_file"], len(doc["rows"])) == (
        "square", "benchmarks/suites/square.toml", 20)
    assert doc["complete"] and "geomean" in out.output
    report = CliRunner().invoke(main, ["report", str(path), "--size", "4096"])
    assert report.exit_code == 0 and "| gemm | fp16 / fp16 |" in report.output

    again = CliRunner().invoke(main, ["bench", "--suite", "square", "--only", "fp16 rrr 1024",
                                      "--results-dir", str(tmp_path)])
    assert again.exit_code == 0, again.output
    merged = json.loads(path.read_text())
    assert len(merged["rows"]) == 20 and [r["selection"]["only"] for r in merged["runs"]] == [
        None, "fp16 rrr 1024"]
    assert fake_cli == [20, 1]


def test_json_and_plot_paths_can_be_given(tmp_path, fake_cli):
    pytest.importorskip("matplotlib")
    out = CliRunner().invoke(main, ["bench", "--suite", "llm", "--quick", "--only", "gpt2.c_fc",
                                    "--max-rows", "6", "--json", str(tmp_path / "a.json"),
                                    "--plot", str(tmp_path / "a.png")])
    assert out.exit_code == 0, out.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert len(doc["rows"]) == 6 and (tmp_path / "a.png").exists()
    assert doc["selection"] == {"only": "gpt2.c_fc", "quick": True, "max_rows": 6, "cases": 6}
