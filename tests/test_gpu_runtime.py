"""On a GPU: any thread, any device, the compiled launcher (hit, miss, fallback) and recipes."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import gemmgen

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def _rel(out, ref) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_gemm_from_eight_threads_at_once_with_different_shapes():
    """NumPy and PyTorch operands from 8 threads (none of them PyCUDA's), each its own shape."""
    torch = _torch()
    shapes = [(64 + 37 * i, 96 + 29 * i, 128 + 16 * i) for i in range(8)]
    errors, results = [], {}
    barrier = threading.Barrier(len(shapes))

    def work(i, m, n, k):
        try:
            rng = np.random.default_rng(i)
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            ref = a.astype(np.float64) @ b
            barrier.wait()
            host = gemmgen.gemm(a.astype(np.float16), b.astype(np.float16))
            ta = torch.from_numpy(a).cuda().half()
            tb = torch.from_numpy(b).cuda().half()
            dev = gemmgen.gemm(ta, tb)
            torch.cuda.synchronize()
            results[i] = (_rel(host.astype(np.float64), ref),
                          _rel(dev.double().cpu().numpy(), ref))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=work, args=(i, *s)) for i, s in enumerate(shapes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 8 and all(max(r) < 5e-3 for r in results.values()), results


def test_kernel_call_from_a_new_thread():
    k = gemmgen.build(gemmgen.PRESETS["wgmma_tma_store"].config)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, 200)).astype(np.float16)
    b = rng.standard_normal((200, 136)).astype(np.float16)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("c", k(a, b)))
    t.start()
    t.join()
    assert _rel(out["c"].astype(np.float64), a.astype(np.float64) @ b) < 5e-3


@pytest.mark.multi_gpu
def test_every_gpu_of_the_process():
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: the two-GPU case needs a machine with two")
    for dev in range(torch.cuda.device_count()):
        a = torch.randn(257, 300, device=f"cuda:{dev}", dtype=torch.float16)
        b = torch.randn(300, 129, device=f"cuda:{dev}", dtype=torch.float16)
        for out in (gemmgen.gemm(a, b), torch.ops.gemmgen.gemm(a, b)):
            assert out.device.index == dev
            ref = a.double() @ b.double()
            assert float((out.double() - ref).norm() / ref.norm()) < 5e-3


def test_the_op_runs_through_the_compiled_launcher():
    torch = _torch()
    import gemmgen.torch as gt
    if not gt.LAUNCHER:
        pytest.skip(f"launcher not loaded: {gt.launcher.why_not()}")
    torch.ops.gemmgen_launcher.clear_recipes()
    a = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # a miss, then hits: one recipe for the signature
        out = gt.gemm(a, w.t(), bias)
    assert torch.ops.gemmgen_launcher.recipes_held() == 1
    ref = torch.addmm(bias.double(), a.double(), w.double().t())
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
    gt.gemm(a[:32], w.t(), bias)  # another M: a new signature
    assert torch.ops.gemmgen_launcher.recipes_held() == 2
    with pytest.raises(ValueError, match="bias must hold N = 1024"):
        gt.gemm(a, w.t(), bias[:5])  # checked by the planner, never cached


def test_launcher_in_a_cuda_graph_and_on_a_side_stream():
    torch = _torch()
    import gemmgen.torch as gt
    a = torch.randn(128, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.float16)
    gt.gemm(a, b)  # warm up: plan and build before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = gt.gemm(a, b)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = gt.gemm(a, b)
    a.copy_(torch.randn_like(a))
    g.replay()
    ref = a.double() @ b.double()
    assert float((captured.double() - ref).norm() / ref.norm()) < 5e-3
    assert on_side.shape == (128, 384)


def test_python_fallback_where_the_launcher_is_off():
    _torch()
    code = ("import warnings, torch, gemmgen.torch as gt\n"
            "assert not gt.LAUNCHER\n"
            "a = torch.randn(100, 80, device='cuda', dtype=torch.float16)\n"
            "b = torch.randn(80, 60, device='cuda', dtype=torch.float16)\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    out = gt.gemm(a, b)\n"
            "assert any('launcher is not loaded' in str(x.message) for x in w), w\n"
            "ref = a.double() @ b.double()\n"
            "assert float((out.double() - ref).norm() / ref.norm()) < 5e-3\n"
            "print('fallback ok')\n")
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "GEMMGEN_LAUNCHER": "0", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0 and "fallback ok" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("layout", ["rcr", "rrr", "crr"])
def test_tune_in_each_layout_of_a_training_step(tmp_path, layout):
    """The tuner builds, verifies and times its candidates in the requested layout (forward
    rcr, dgrad rrr, wgrad crr), beside cuBLAS in that layout."""
    from gemmgen.heuristics.tunedb import TuneDB
    from gemmgen.tune.search import Request, WorkerPool, tune
    req = Request(256, 512, 768, "fp16", None, 120, 3, layout=layout)
    db = TuneDB(tmp_path / "db.json")
    pool = WorkerPool(req, None)
    try:
        _, entry, stats = tune(req, db, pool)
    finally:
        pool.close()
    rows = entry["candidates"].values()
    assert all(r["status"] == "ok" for r in rows), [(r["status"], r.get("reason")) for r in rows]
    assert bool(entry["winner"]) != entry["default_stands"]
    assert entry["layout"] == layout and entry["cublas_tflops"]
    flip = {"r": "c", "c": "r"}
    swapped = flip[layout[1]] + flip[layout[0]] + flip[layout[2]]  # C^T = B^T A^T
    assert all(r["config"]["layout"] == (swapped if r["swap"] else layout) for r in rows)
