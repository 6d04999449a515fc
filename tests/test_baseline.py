"""The baseline, without a GPU: which one a run gets (PyTorch with CUDA -> F.linear /
torch.matmul, only CuPy -> cublasGemmEx (CuPy), neither -> none), which PyTorch op a layout
gets and that it computes C = A B on the Problem's views, TF32 set from the dtype and restored,
rows and headers naming the baseline, and old results files (cublas_* fields only) still
rendering their tables."""
import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import gemmgen.tune.baseline as baseline
from gemmgen.model.presets import PRESETS
from gemmgen.tune import results, tables
from gemmgen.tune.bench import Timing, kernel_row
from gemmgen.tune.suite_rows import failed_row
from gemmgen.tune.suites import Case

ROOT = Path(__file__).resolve().parent.parent
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("has_torch, has_cupy, asked, got", [
    (True, True, "torch", "torch"), (True, False, "torch", "torch"),
    (False, True, "torch", "cublas"), (False, False, "torch", None),
    (True, True, "cublas", "cublas"), (True, False, "cublas", None)])
def test_the_baseline_is_torch_where_pytorch_runs_else_cupy_else_none(
        monkeypatch, has_torch, has_cupy, asked, got):
    monkeypatch.setattr(baseline, "torch_available", lambda: None if has_torch else "no torch")
    monkeypatch.setattr(baseline, "cublas_available", lambda: None if has_cupy else "no cupy")
    assert baseline.choose(asked) == got
    key = {"torch": "torch_ops", "cublas": "cublas", None: "unavailable"}[got]
    assert baseline.resolve("dispatch", asked) == baseline.resolve("presets", asked) == key
    assert baseline.resolve("dispatch", "none") == "none"
    assert baseline.resolve("fp8", "scaled_mm") == "scaled_mm"


def test_a_cpu_only_pytorch_is_not_a_baseline():
    assert "CUDA" in baseline.torch_available()  # this test machine's torch is CPU-only


def test_rcr_is_f_linear_and_every_other_layout_torch_matmul():
    assert baseline.torch_op("rcr") == "F.linear"
    assert baseline.torch_op("rcr", batch=4) == "torch.matmul"
    for layout in ("rrr", "crr", "rcc", "ccc", "rrc"):
        assert baseline.torch_op(layout) == "torch.matmul"


def fake_problem(layout, dtype="fp32", batch=None, seed=0):
    """A Problem's attributes with host arrays standing in for GPUArrays, stored as Problem
    stores them (a column-major operand as its transpose)."""
    rng = np.random.default_rng(seed)
    m, n, k = 5, 7, 3
    lead = (batch,) if batch else ()
    A = rng.standard_normal((*lead, m, k)).astype(np.float32)
    B = rng.standard_normal((*lead, k, n)).astype(np.float32)

    def stored(x, col):
        return SimpleNamespace(host=np.ascontiguousarray(np.swapaxes(x, -1, -2) if col else x))
    c = stored(np.zeros((*lead, m, n), np.float32), layout[2] == "c")
    p = SimpleNamespace(m=m, n=n, k=k, layout=layout, dtype=dtype, out="fp32", batch=batch,
                        sets=1, a=[stored(A, layout[0] == "c")], b=[stored(B, layout[1] == "c")],
                        c=[c], bias=SimpleNamespace(host=np.ones(n, np.float32)))
    return p, A @ B


@pytest.fixture
def on_cpu(monkeypatch):
    """as_torch wraps the host stand-ins (zero-copy, as on the GPU); calls are recorded."""
    calls = []
    monkeypatch.setattr(baseline, "as_torch", lambda arr, dtype, t: torch.from_numpy(arr.host))
    linear, matmul = torch.nn.functional.linear, torch.matmul
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda *a, **k: calls.append("F.linear") or linear(*a, **k))
    monkeypatch.setattr(torch, "matmul",
                        lambda *a, **k: calls.append("torch.matmul") or matmul(*a, **k))
    return calls


@pytest.mark.parametrize("layout, batch", [("rcr", None), ("rrr", None), ("crr", None),
                                           ("rrc", None), ("ccc", None), ("rcr", 2),
                                           ("rrr", 3)])
def test_the_op_computes_a_b_into_c_on_the_views(on_cpu, layout, batch):
    p, ref = fake_problem(layout, batch=batch)
    call = baseline.torch_call(p, torch)
    call(0, True)
    got = p.c[0].host
    got = np.swapaxes(got, -1, -2) if layout[2] == "c" else got
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert on_cpu == [baseline.torch_op(layout, batch)]


def test_bias_goes_to_f_linear_and_other_epilogues_are_refused(on_cpu):
    p, ref = fake_problem("rcr")
    baseline.torch_call(p, torch, "bias")(0, True)
    np.testing.assert_allclose(p.c[0].host, ref + 1, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="epilogue"):
        baseline.torch_call(fake_problem("rrr")[0], torch, "bias")
    with pytest.raises(ValueError, match="epilogue"):
        baseline.torch_call(p, torch, "relu")


@pytest.mark.parametrize("dtype, tf32", [("fp32", False), ("tf32", True)])
def test_tf32_follows_the_dtype_and_is_restored(monkeypatch, on_cpu, dtype, tf32):
    seen = []
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "default_stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def time_launches(launch, sets, budget):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        for i in range(3):
            launch(i % sets)
        return Timing(1e-3, 1e-3, 1e-3, 3)
    monkeypatch.setattr(baseline, "time_launches", time_launches)
    p, ref = fake_problem("rcr", dtype)
    p.error_of = lambda run, epilogue: (run(), float(np.linalg.norm(p.c[0].host - ref)))[1]
    before = torch.backends.cuda.matmul.allow_tf32
    timing, err = baseline.bench_torch(p, 0.01)
    assert seen == [tf32] and err < 1e-5 and timing.median == 1e-3
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_rows_name_their_baseline():
    cfg = PRESETS["naive"].config
    kernel = SimpleNamespace(config=cfg, name=cfg.name, registers=32, smem_bytes=0)
    p = SimpleNamespace(m=64, n=64, k=64, batch=None, out="fp32", layout="rrr")
    t = Timing(1e-3, 1e-3, 1e-3, 9)
    row = kernel_row("naive", kernel, p, t, 1e-7, (Timing(2e-3, 2e-3, 2e-3, 9), 1e-7,
                                                   "torch.matmul"))
    assert row["baseline"] == "torch.matmul" and row["pct_baseline"] == row["pct_cublas"] == 200
    assert row["baseline_tflops"] == row["cublas_tflops"] and row["baseline_rel_error"] == 1e-7
    bare = kernel_row("naive", kernel, p, t, 1e-7, None)
    assert bare["baseline"] is None and bare["baseline_tflops"] is None
    failed = failed_row(Case("bf16", 1, 2, 3), "gemm", "BuildError: x")
    assert failed["baseline"] is None and failed["pct_baseline"] is None


def test_gemmgen_bench_names_the_baseline_in_rows_and_header(monkeypatch):
    cfg = PRESETS["naive"].config
    kernel = SimpleNamespace(config=cfg, name=cfg.name, registers=32, smem_bytes=0)
    info = {"gpu": "FakeGPU", "l2_bytes": 1 << 20, "cuda_version": "12.8", "cuda_driver": "12.8"}
    monkeypatch.setattr(baseline, "device_info", lambda: info)
    monkeypatch.setattr(baseline, "choose", lambda asked="torch": "torch")
    monkeypatch.setattr(baseline, "Problem", lambda m, n, k, *a: SimpleNamespace(
        m=m, n=n, k=k, batch=None, out="fp32", layout="rrr"))
    monkeypatch.setattr(baseline, "bench_torch",
                        lambda p, budget, **kw: (Timing(2e-3, 2e-3, 2e-3, 9), 1e-7))
    monkeypatch.setattr(baseline, "bench_kernel",
                        lambda k, p: (Timing(1e-3, 1e-3, 1e-3, 9), 1e-7))
    doc = baseline.run_bench([("naive", kernel)], [(64, 64, 64)])
    assert doc["baseline_label"] == "F.linear / torch.matmul" and "F.linear" in doc["baseline"]
    assert [r["baseline"] for r in doc["rows"]] == ["torch.matmul"]
    assert "base" in results.table(doc["rows"]) and "200.0" in results.table(doc["rows"])


def test_old_results_files_still_render_their_tables():
    path = ROOT / "benchmarks/results/NVIDIA_H200.json"
    doc = json.loads(path.read_text())
    assert all("baseline_tflops" not in r for r in doc["rows"])  # written before the change
    old, _ = tables.summary(doc, {"by": "dtype,layout"})
    assert len(old) > 2 and all("-" not in line.split("|")[4] for line in old[2:])
    renamed = {**doc, "rows": [{**{k: v for k, v in r.items() if "cublas" not in k},
                                "baseline_tflops": r.get("cublas_tflops"),
                                "pct_baseline": r.get("pct_cublas")} for r in doc["rows"]]}
    assert tables.summary(renamed, {"by": "dtype,layout"})[0] == old
    assert results.row_baseline({"cublas_tflops": 3.0, "pct_cublas": 9.0}, "pct") == 9.0
    assert results.row_baseline({"baseline_tflops": 2.0, "cublas_tflops": 3.0}) == 2.0


def test_the_timers_share_their_counts_and_summary():
    """Every timer (eager launches, graph replays of gemmgen's launches or of PyTorch's calls,
    the suites') sizes its warm-up and timed repetitions and summarizes its times one way."""
    from gemmgen.tune.bench import GRAPH_LAUNCHES, graph_launches, repetitions, summary
    assert repetitions(1e-3, 0.25) == (20, 200) and repetitions(0.1, 0.25) == (2, 5)
    assert repetitions(0.01, 0.25) == (5, 25) and repetitions(0.0, 0.25) == (20, 200)
    assert graph_launches(1e-3) == 1 and graph_launches(1e-5) == 20
    assert graph_launches(0.0) == GRAPH_LAUNCHES
    t = summary([5.0, 1.0, 3.0, 2.0, 4.0], 5)
    assert (t.median, t.reps) == (3.0, 5) and t.p20 < t.median < t.p80
    assert summary([2.0], 1) == Timing(2.0, 2.0, 2.0, 1)
