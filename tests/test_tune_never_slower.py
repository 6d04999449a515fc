"""The pure parts of benchmarks/investigations/tune_never_slower.py (the GPU script that times
gemmgen.torch.linear before and after tuning): shapes, results file, summary, exit status."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gemmgen.model.problem import load_problems

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "investigations"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def script():
    return _load("tune_never_slower")


def test_shapes_span_the_models_and_token_counts(script, tmp_path):
    rows = script.shapes()
    assert len(rows) == 24 and len({r["model"] for r in rows}) >= 3
    assert {r["M"] for r in rows} == {1, 16, 64, 256, 1024, 4096}
    assert all((r["N"], r["K"]) == script.MODELS[r["model"]][r["layer"]] for r in rows)
    assert {(64, 4672, 4544), (256, 4544, 4544)} <= {(r["M"], r["N"], r["K"]) for r in rows}
    problems = load_problems(script.shapes_file(rows, tmp_path / "s.json"))
    assert len(problems) == len({(r["M"], r["N"], r["K"]) for r in rows})
    assert {(p.dtype, p.layout) for p in problems} == {("bf16", "rcr")}
    timing = _load("tune_never_slower_timing")  # imports without a GPU (torch inside)
    assert timing.shapes() == rows


def _measured(rows, ms, ok=True):
    """The run before tuning: gemmgen.torch.linear and F.linear."""
    return {f"{r['M']}x{r['N']}x{r['K']}": {"gemmgen_ms": ms(r), "flinear_ms": 1.0, "ok": ok,
                                            "gemmgen_rel_error": 3e-3} for r in rows}


def _side_by_side(rows, before_ms, after_ms, ok=True):
    """The run after tuning: gemm with the empty and the tuned database, interleaved."""
    return {f"{r['M']}x{r['N']}x{r['K']}": {"before_ms": before_ms(r), "after_ms": after_ms(r),
                                            "flinear_ms": 1.0, "ok": ok,
                                            "before_rel_error": 3e-3, "after_rel_error": 3e-3}
            for r in rows}


@pytest.mark.parametrize("slow, status", [(1.0, 0), (1.02, 2)])
def test_run_writes_the_results_and_judges_the_bar(script, tmp_path, monkeypatch, capsys,
                                                   slow, status):
    rows = script.shapes()
    worst = rows[5]
    before = _measured(rows, lambda r: 9.0)  # the op's own run: not what the ratio uses
    after = _side_by_side(rows, lambda r: 2.0, lambda r: 2.0 * slow if r is worst else 1.5)
    runs = iter([(before, {"exit": 0}), (after, {"exit": 0})])
    monkeypatch.setattr(script, "_preflight", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(script, "_timing", lambda db, work, name, timeout, *a: next(runs))
    monkeypatch.setattr(script, "_tune", lambda db, work, args: {"exit": 0, "entries": {}})
    assert script.main(["--out", str(tmp_path)]) == status
    doc = json.loads((tmp_path / "tune_never_slower_NVIDIA_H100_80GB_HBM3.json").read_text())
    assert len(doc["rows"]) == 24 and doc["summary"]["bar"] == 0.99
    r = doc["rows"][5]
    assert r["after_over_before"] == pytest.approx(1 / slow, abs=1e-4)
    assert r["before_tflops"] == pytest.approx(2 * r["M"] * r["N"] * r["K"] / 2e-3 / 1e12,
                                               rel=1e-3)
    assert r["flinear_tflops"] and doc["summary"]["min_after_over_before"] == r["after_over_before"]
    assert doc["summary"]["meets_bar"] is (status == 0)
    out = capsys.readouterr()
    assert "min after/before" in out.out and ("NOT MET" in out.out) is (status == 2)


def test_a_failed_run_fails_loudly(script, tmp_path, monkeypatch, capsys):
    rows = script.shapes()
    before = _measured(rows, lambda r: 2.0)
    runs = iter([(before, {"exit": 0}), ({}, {"exit": 1, "error": "timing run after failed"})])
    monkeypatch.setattr(script, "_preflight", lambda: "G")
    monkeypatch.setattr(script, "_timing", lambda db, work, name, timeout, *a: next(runs))
    monkeypatch.setattr(script, "_tune", lambda db, work, args: {"exit": 0})
    assert script.main(["--out", str(tmp_path)]) == 1
    doc = json.loads((tmp_path / "tune_never_slower_G.json").read_text())
    assert doc["errors"] and len(doc["summary"]["unmeasured"]) == 24
    assert "ERROR: timing run after failed" in capsys.readouterr().err


def test_run_streams_a_child_and_kills_it_at_its_limit(script, tmp_path):
    rc, _, tail = script._run([sys.executable, "-c", "print('hello')"], "db", 30, "t")
    assert rc == 0 and "hello" in tail
    rc, secs, tail = script._run([sys.executable, "-c", "import time; time.sleep(30)"], "db",
                                 0.5, "t")
    assert rc == 124 and secs < 10 and "killed" in tail
