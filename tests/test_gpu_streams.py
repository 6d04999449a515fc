"""On a Hopper GPU with PyTorch: every path with a workspace (split-K, inline split-K, repack,
3xTF32, the dual GEMM's packed B, FP8 split-K and pack) launched from several streams at once,
each stream with its own operands and outputs, and from two CUDA graphs captured on two
streams and replayed side by side; each output against float64 (outputs poisoned with NaN
first). Workspaces are per stream (gemmgen.runtime.workspaces and the launcher's pools): a
shared one gave relative errors of 0.2 to 1.2 here."""
import math

import pytest

from gemmgen import PRESETS
from gemmgen.tune.fp8_verify import fp8_tolerance
from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device", allow_module_level=True)

CALLS = 20  # launches per stream, interleaved
BF16 = PRESETS["wgmma_bf16"].config
PATHS = {  # label: (config, (M, N, K), operand layouts, the path's note)
    "split-K 4": (BF16.replace(store="direct", split_k=4), (128, 256, 8192), "rr", "split-K 4"),
    "inline split-K 4": (BF16.replace(store="direct", split_k=4, split_inline=True),
                         (128, 256, 16384), "rr", "split-K 4 inline"),
    "stream-K 4": (BF16.replace(store="direct", split_k=4, split_inline=True, stream_k=True),
                   (384, 1024, 4096), "rr", "split-K 4 inline, stream-K"),
    "repack A+B": (BF16.replace(store="direct", layout="ccc"), (1023, 1025, 1021), "cc",
                   "repack"),
    "3xTF32": (PRESETS["wgmma_3xtf32"].config, (256, 256, 1024), "rr", "3xtf32"),
}
DUAL = PRESETS["wgmma_tma_store"].config.replace(dual=True, bn=128, stages=4, layout="rcr",
                                                 epilogue="silu(gate)*up")


@pytest.fixture(scope="module")
def hopper():
    from gemmgen.runtime.device import device_cc
    if device_cc() != 90:
        pytest.skip("the wgmma and fp8 families run on sm_90 (Hopper) only")


@pytest.fixture(scope="module")
def kernels(hopper):
    """Every kernel these tests build, compiled at once by parallel nvcc processes."""
    from gemmgen.runtime.build import build_many
    configs = {**{label: p[0] for label, p in PATHS.items()}, "dual": DUAL,
               "fp8": PRESETS["fp8_block_decode"].config}
    built = build_many(list(configs.values()))
    bad = [str(k) for k in built if isinstance(k, Exception)]
    assert not bad, bad
    return dict(zip(configs, built))


def _matrix(rows, cols, layout, dtype, gen):
    """rows x cols normals, row-major ("r") or a column-major transposed view ("c")."""
    if layout == "r":
        return torch.randn(rows, cols, device="cuda", generator=gen).to(dtype)
    return torch.randn(cols, rows, device="cuda", generator=gen).to(dtype).t()


def _nan_like(x):
    return torch.full_like(x, float("nan"))


def _err(out, ref) -> float:
    out = out.double()
    if not bool(torch.isfinite(out).all()):
        return math.inf
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def _interleaved(streams, launch):
    """``launch(i, j)`` for call j of stream i, the streams taking turns, none waiting for
    another; then the device drains."""
    torch.cuda.synchronize()  # operands and poisoned outputs are ready on every stream
    for j in range(CALLS):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                launch(i, j)
    torch.cuda.synchronize()


def _gemm_problem(cfg, shape, lay, seed):
    m, n, k = shape
    dtype = torch.float32 if cfg.dtype == "tf32" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = _matrix(m, k, lay[0], dtype, gen), _matrix(k, n, lay[1], dtype, gen)
    c_col = cfg.layout[2] == "c"
    outs = [_nan_like(torch.empty(n, m, device="cuda", dtype=dtype).t() if c_col else
                      torch.empty(m, n, device="cuda", dtype=dtype)) for _ in range(CALLS)]
    return a, b, outs, a.double() @ b.double()


def _gemm_tol(cfg, k):
    if cfg.math == "3xtf32":
        return tolerance(k, "tf32", "fp32", "fp32", math_="3xtf32")
    return tolerance(k, "bf16", "fp32", "bf16")


@pytest.mark.parametrize("label", list(PATHS))
@pytest.mark.parametrize("streams", [2, 4])
def test_kernel_paths_on_several_streams_at_once(kernels, label, streams):
    cfg, shape, lay, note = PATHS[label]
    kernel = kernels[label]
    probs = [_gemm_problem(cfg, shape, lay, seed=10 * streams + i) for i in range(streams)]
    a, b, outs, _ = probs[0]
    kernel(a, b, _nan_like(outs[0]))  # build and warm up on the default stream
    assert note in kernel.last_path, kernel.last_path
    side = [torch.cuda.Stream() for _ in range(streams)]
    _interleaved(side, lambda i, j: kernel(probs[i][0], probs[i][1], probs[i][2][j],
                                           stream=side[i]))
    tol = _gemm_tol(cfg, shape[2])
    errs = [[_err(out, ref) for out in outs] for _, _, outs, ref in probs]
    assert max(map(max, errs)) <= tol, (label, tol, errs)


def test_dual_gemm_packed_b_on_several_streams(kernels):
    kernel = kernels["dual"]
    m, n, k = 256, 512, 1024
    probs = []
    for i in range(3):
        gen = torch.Generator(device="cuda").manual_seed(40 + i)
        a = torch.randn(m, k, device="cuda", generator=gen).half()
        w = torch.randn(2 * n, k, device="cuda", generator=gen).half()
        bu, bg = w[:n].t(), w[n:].t()  # Bu before Bg: not readable in place, packed
        ref = torch.nn.functional.silu(a.double() @ bg.double()) * (a.double() @ bu.double())
        probs.append((a, bg, bu, [torch.full((m, n), float("nan"), device="cuda",
                                             dtype=torch.float16) for _ in range(CALLS)], ref))
    kernel(probs[0][0], probs[0][1], _nan_like(probs[0][3][0]), up=probs[0][2])
    assert "pack B+up" in kernel.last_path, kernel.last_path
    side = [torch.cuda.Stream() for _ in probs]
    _interleaved(side, lambda i, j: kernel(probs[i][0], probs[i][1], probs[i][3][j],
                                           up=probs[i][2], stream=side[i]))
    tol = tolerance(k, "fp16", "fp32", "fp16") + 2 * 2 ** -11  # silu's tanh.approx
    errs = [_err(out, ref) for *_, outs, ref in probs for out in outs]
    assert max(errs) <= tol, (tol, errs)


def _fp8_problem(m, n, k, seed, k_major_b=True):
    """Block-scaled e4m3 operands in scaled_mm's shapes, and the float64 product of the
    dequantized ones; B as a K x N column-major view (K-major) or row-major (packed)."""
    import gemmgen.torch as gt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen)
    a, sa = gt.quantize(x, (1, 128))
    q, sw = gt.quantize(w, (128, 128))
    ref = gt.dequantize(a, sa, (1, 128)).double() @ gt.dequantize(q, sw, (128, 128)).double().t()
    b = q.t() if k_major_b else q.t().contiguous()
    return a, b, sa, sw.t(), ref


@pytest.mark.parametrize("k_major_b", [True, False], ids=["split-K", "split-K + pack B"])
def test_fp8_split_k_and_pack_on_several_streams(kernels, k_major_b):
    import gemmgen.torch as gt
    kernel = kernels["fp8"]
    cfg = kernel.config
    m, n, k = 64, 2112, 7168
    probs = [_fp8_problem(m, n, k, 50 + i, k_major_b) for i in range(3)]
    outs = [[torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
             for _ in range(CALLS)] for _ in probs]
    a, b, sa, sb, _ = probs[0]
    kernel(a, b, _nan_like(outs[0][0]), scale_a=sa, scale_b=sb)
    assert "split-K" in kernel.last_path and ("pack B" in kernel.last_path) != k_major_b, \
        kernel.last_path
    side = [torch.cuda.Stream() for _ in probs]
    _interleaved(side, lambda i, j: kernel(*probs[i][:2], outs[i][j], scale_a=probs[i][2],
                                           scale_b=probs[i][3], stream=side[i]))
    got = {}  # the op through the compiled launcher (or its Python path), current stream
    _interleaved(side, lambda i, j: got.setdefault(i, []).append(
        gt.scaled_mm(*probs[i][:4], out_dtype=torch.bfloat16)))
    tol = fp8_tolerance(k, "bf16", not cfg.promote)
    errs = [_err(out, p[4]) for p, o in zip(probs, outs) for out in o]
    assert max(errs) <= tol, (tol, errs)
    op_tol = fp8_tolerance(k, "bf16", True)  # whichever kernel the op chose
    errs = [_err(out, probs[i][4]) for i, o in got.items() for out in o]
    assert max(errs) <= op_tol, (op_tol, errs)


def test_linear_through_the_launcher_on_several_streams():
    """gemmgen.torch.linear at 128 x 256 x 65536 bf16 (inline split-K 4 on an H200): two and
    four streams, each its own x, W and outputs."""
    import gemmgen.torch as gt
    m, n, k = 128, 256, 65536
    for count in (2, 4):
        probs = []
        for i in range(count):
            gen = torch.Generator(device="cuda").manual_seed(60 + i)
            x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
            w = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
            probs.append((x, w, x.double() @ w.double().t()))
        gt.linear(probs[0][0], probs[0][1])  # plan and build before the streams start
        side = [torch.cuda.Stream() for _ in probs]
        got = {}
        _interleaved(side, lambda i, j: got.setdefault(i, []).append(
            gt.linear(probs[i][0], probs[i][1])))
        tol = tolerance(k, "bf16", "fp32", "bf16")
        errs = [_err(out, probs[i][2]) for i, outs in got.items() for out in outs]
        assert max(errs) <= tol, (count, tol, errs)
    if gt.LAUNCHER:
        plan = gt.ops.plan_for(probs[0][0], probs[0][1].t(), torch.empty(m, n, device="cuda",
                               dtype=torch.bfloat16), None, 1.0, 0.0, "none")
        if plan.recipe.workspaces:  # one pool per stream that ran it (and the default one)
            assert torch.ops.gemmgen_launcher.workspace_pools() >= 4, plan.recipe.path


def _capture(stream, fn):
    """A CUDA graph of ``fn()`` captured on ``stream`` (warmed up there first) and its
    result."""
    torch.cuda.synchronize()  # the operands, made on the default stream, are ready
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        out = fn()
    return g, out


@pytest.mark.parametrize("via", ["kernel split-K 4", "kernel inline split-K 4", "linear"])
def test_two_graphs_captured_on_two_streams_replay_side_by_side(kernels, via):
    """Each graph keeps the workspaces of its own capture: replays on two streams at once
    (the kernels' graphs through gemmgen's Python launches, linear's through the launcher)."""
    import gemmgen.torch as gt
    m, n, k = 128, 256, 16384
    kernel = None if via == "linear" else kernels[via.removeprefix("kernel ")]
    side = [torch.cuda.Stream() for _ in range(2)]
    probs, graphs = [], []
    for i, s in enumerate(side):
        gen = torch.Generator(device="cuda").manual_seed(70 + i)
        a = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        w = torch.randn(n, k, device="cuda", generator=gen).bfloat16()
        if kernel is None:
            g, out = _capture(s, lambda a=a, w=w: gt.linear(a, w))
        else:  # the kernel's layout is rrr: B is K x N row-major
            b, c = w.t().contiguous(), torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            g, out = _capture(s, lambda a=a, b=b, c=c, s=s: kernel(a, b, c, stream=s))
        probs.append((a, w, out))
        graphs.append(g)
    for _, _, out in probs:
        out.fill_(float("nan"))
    torch.cuda.synchronize()
    for _ in range(10):
        for g, s in zip(graphs, side):
            with torch.cuda.stream(s):
                g.replay()
    torch.cuda.synchronize()
    tol = tolerance(k, "bf16", "fp32", "bf16")
    errs = [_err(out, a.double() @ w.double().t()) for a, w, out in probs]
    assert max(errs) <= tol, (via, tol, errs)


@pytest.mark.parametrize("label", list(PATHS))
def test_a_captured_launch_replays_each_path_correctly_and_frees_its_workspaces(kernels, label):
    """The tuner times candidates as CUDA-graph replays (bench.time_graphed): each path's
    recipe (helper launches, memsets, workspaces from the capture's pool) captured on a private
    stream gives the right C when replayed, and the capture's pool is freed afterwards."""
    import numpy as np

    from gemmgen.runtime import driver, workspaces
    from gemmgen.runtime.device import pycuda_modules
    from gemmgen.runtime.graphs import Graph, Stream
    from gemmgen.runtime.recipe import KernelArgs
    from gemmgen.tune.bench import Problem, time_graphed
    pycuda_modules()  # PyCUDA's context current: the Problem's buffers are PyCUDA's
    cfg, (m, n, k), _, _ = PATHS[label]
    kernel = kernels[label]
    p = Problem(m, n, k, np.random.default_rng(3), 1 << 20, cfg.dtype, cfg.out, cfg.layout)
    captured = len(workspaces._CAPTURED)
    stream = Stream()
    p.launch(kernel, 0, False, stream.handle)  # eager: module loaded, workspaces sized
    driver.stream_synchronize(stream.handle)
    graph = Graph(stream, lambda h: p.launch(kernel, 0, False, h))
    assert len(workspaces._CAPTURED) == captured + (1 if kernel.launches(KernelArgs.blas(
        m, n, k, 1.0, 0, p.lda, 0, p.ldb, 0.0, 0, p.ldc)).workspaces else 0)

    def replay():
        driver.synchronize()  # C poisoned on the legacy stream first
        graph.launch()
        driver.stream_synchronize(stream.handle)
    err = p.error_of(replay)
    graph.close()
    workspaces.release_captures(driver.current_device(), stream.handle)
    assert len(workspaces._CAPTURED) == captured
    assert err <= _gemm_tol(cfg, k), f"{label}: rel error {err:.2e} after a graph replay"
    timing = time_graphed(lambda i, h: p.launch(kernel, i, False, h), p.sets, 0.02)
    assert len(workspaces._CAPTURED) == captured
    assert 0 < timing.p20 <= timing.median <= timing.p80 < 1


def test_the_torch_baseline_times_as_graph_replays():
    import numpy as np

    from gemmgen.runtime.device import pycuda_modules
    from gemmgen.tune.baseline import bench_torch
    from gemmgen.tune.bench import Problem
    pycuda_modules()
    p = Problem(64, 3072, 3072, np.random.default_rng(4), 1 << 20, "bf16", "bf16", "rcr")
    timing, err = bench_torch(p, 0.02, graphed=True)
    assert err <= tolerance(3072, "bf16", "fp32", "bf16")
    assert 0 < timing.p20 <= timing.median <= timing.p80 < 1


def test_head_to_head_times_each_candidate_in_turn(kernels):
    """The tuner's rematch of a provisional winner and the default (Measurer.head_to_head)."""
    from gemmgen.tune.measure import Measurer
    names = ("split-K 4", "inline split-K 4")
    cfg = PATHS[names[0]][0]
    meas = Measurer(128, 256, 8192, "bf16", cfg.out, 2.0, seed=1, layout=cfg.layout)
    got = meas.head_to_head([(n, PATHS[n][0].as_dict(), kernels[n].cubin, {}, False)
                             for n in names], rounds=2, budget_s=0.01)
    assert set(got) == set(names) and all(0 < ms < 100 for ms in got.values()), got
