"""On a GPU: every preset on random data over odd shapes, and every accepted argument kind."""
import numpy as np
import pytest

from gemmgen import PRESETS, BuildError, OperandError, build, emit, load
from gemmgen.runtime.build import build_many
from gemmgen.tune.verify import CASES, compare, reference, sweep_kernel, tolerance

pytestmark = pytest.mark.gpu
GEMM_PRESETS = [n for n, p in PRESETS.items() if p.config.family != "grouped"]
"""The presets run as plain GEMMs (the grouped family's: tests/test_gpu_grouped.py)."""


@pytest.fixture(scope="module")
def kernels():
    built = build_many([PRESETS[name].config for name in GEMM_PRESETS])  # compiled in parallel
    for name, k in zip(GEMM_PRESETS, built):
        if isinstance(k, BuildError):
            raise k
    return dict(zip(GEMM_PRESETS, built))


@pytest.mark.parametrize("name", GEMM_PRESETS)
def test_preset_is_correct_over_the_shape_sweep(kernels, name):
    results = sweep_kernel(name, kernels[name], CASES)
    failed = [r for r in results if not r.passed]
    assert not failed, failed


def test_compiled_resources_match_the_model(kernels):
    for name, k in kernels.items():
        assert k.smem_bytes == k.config.static_smem_bytes, name
        assert k.local_bytes == 0, f"{name} uses local memory (spills)"


def operands(rng, m=130, n=70, k=45):
    A = rng.standard_normal((m, k), dtype=np.float32)
    B = rng.standard_normal((k, n), dtype=np.float32)
    C = rng.standard_normal((m, n), dtype=np.float32)
    return A, B, C


def assert_close(out, A, B, C, alpha, beta, dtype="fp32", out_dtype="fp32"):
    err, worst = compare(np.asarray(out), reference(A, B, C, alpha, beta))
    assert err <= tolerance(A.shape[1], dtype, "fp32", out_dtype), (err, worst)


def test_numpy_arrays_are_copied_and_c_updated_in_place(kernels):
    rng = np.random.default_rng()
    A, B, C = operands(rng)
    kernel = kernels["warptile_db"]
    out = kernel(A, B)
    assert isinstance(out, np.ndarray)
    assert_close(out, A, B, None, 1.0, 0.0)
    C0 = C.copy()
    same = kernel(A, B, C, alpha=0.5, beta=-1.5)
    assert same is C
    assert_close(C, A, B, C0, 0.5, -1.5)


def test_gpuarrays_stay_on_the_gpu(kernels):
    """PyCUDA GPUArrays in and out, made under a context of this thread's own (a test run
    before it in the same worker may have left none current)."""
    from pycuda import gpuarray

    from gemmgen.runtime.device import pycuda_context
    rng = np.random.default_rng()
    A, B, C = operands(rng)
    with pycuda_context():
        c = gpuarray.to_gpu(C)
        out = kernels["vectorized"](gpuarray.to_gpu(A), gpuarray.to_gpu(B), c, alpha=2.0,
                                    beta=0.5)
        assert out is c
        assert_close(c.get(), A, B, C, 2.0, 0.5)


def test_cupy_arrays_without_copy_including_padded_leading_dimensions(kernels):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    A, B, C = operands(rng, 200, 132, 68)
    a_big = cupy.asarray(np.pad(A, ((0, 0), (0, 12))))  # lda = 80
    b_big = cupy.asarray(np.pad(B, ((0, 0), (0, 4))))   # ldb = 136
    c = cupy.asarray(C)
    ptr = c.data.ptr
    out = kernels["warptile_db"](a_big[:, :68], b_big[:, :132], c, beta=1.0)
    assert out is c and out.data.ptr == ptr
    assert_close(cupy.asnumpy(c), A, B, C, 1.0, 1.0)
    new = kernels["warptile_db"](cupy.asarray(A), cupy.asarray(B))
    assert isinstance(new, cupy.ndarray)
    assert_close(cupy.asnumpy(new), A, B, None, 1.0, 0.0)


def test_torch_tensors_without_copy(kernels):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    A, B, C = operands(rng)
    a, b = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    c = torch.full((A.shape[0], B.shape[1]), float("nan"), device="cuda")
    out = kernels["tile2d"](a, b, c)
    assert out is c
    torch.cuda.synchronize()
    assert_close(c.cpu().numpy(), A, B, None, 1.0, 0.0)
    new = kernels["tile2d"](a, b)
    assert isinstance(new, torch.Tensor) and new.device == a.device


def test_bad_arguments_are_named(kernels):
    A = np.ones((4, 4), np.float64)
    with pytest.raises(OperandError, match="A has dtype float64"):
        kernels["smem"](A, np.ones((4, 4), np.float32))


def test_load_compiles_an_emitted_file(tmp_path):
    cfg = PRESETS["warptile"].config
    path = emit(cfg, tmp_path / f"{cfg.name}.cu")
    kernel = load(path)
    assert kernel.config == cfg and kernel.source_path == str(path)
    results = sweep_kernel("loaded", kernel, CASES[:3])
    assert all(r.passed for r in results)
    broken = tmp_path / "broken.cu"
    broken.write_text(path.read_text().replace("__syncthreads();", "__syncthreads()", 1))
    with pytest.raises(BuildError) as info:
        load(broken)
    assert info.value.path == str(broken) and "error" in info.value.log


def test_fp16_numpy_in_and_out(kernels):
    rng = np.random.default_rng()
    A, B, _ = operands(rng, 300, 200, 100)
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    out = kernels["wmma_pipeline"](A16, B16)
    assert out.dtype == np.float16 and out.shape == (300, 200)
    assert_close(out, A16, B16, None, 1.0, 0.0, "fp16", "fp16")
    with pytest.raises(OperandError, match="A has dtype float32; this kernel takes fp16"):
        kernels["wmma_pipeline"](A, B16)


def test_bf16_torch_tensors_and_numpy(kernels):
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng()
    A, B, _ = operands(rng, 257, 130, 96)
    a = torch.from_numpy(A).cuda().to(torch.bfloat16)
    b = torch.from_numpy(B).cuda().to(torch.bfloat16)
    c = kernels["wmma_bf16"](a, b)
    assert c.dtype == torch.bfloat16
    torch.cuda.synchronize()
    A_r = a.float().cpu().numpy().astype(ml_dtypes.bfloat16)
    B_r = b.float().cpu().numpy().astype(ml_dtypes.bfloat16)
    assert_close(c.float().cpu().numpy(), A_r, B_r, None, 1.0, 0.0, "bf16", "bf16")
    host = kernels["wmma_bf16"](A_r, B_r)
    assert host.dtype == np.dtype(ml_dtypes.bfloat16)
    assert_close(host, A_r, B_r, None, 1.0, 0.0, "bf16", "bf16")


def test_tf32_takes_float32_device_arrays(kernels):
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    A, B, C = operands(rng, 129, 250, 77)
    c = cupy.asarray(C)
    kernels["wmma_tf32"](cupy.asarray(A), cupy.asarray(B), c, alpha=0.5, beta=2.0)
    assert_close(cupy.asnumpy(c), A, B, C, 0.5, 2.0, "tf32", "fp32")


def test_tune_end_to_end_and_dispatch(tmp_path, monkeypatch):
    import gemmgen
    from gemmgen.heuristics import tunedb
    from gemmgen.runtime import api
    from gemmgen.tune.search import Request, WorkerPool, tune
    req = Request(384, 320, 200, max_configs=4, budget_s=300)
    pool = WorkerPool(req, None)
    try:
        key, entry, stats = tune(req, tunedb.TuneDB(tmp_path / "db.json"), pool)
    finally:
        pool.close()
    assert stats["measured_now"] >= 4 and bool(entry["winner"]) != entry["default_stands"]
    assert all(r["status"] == "ok" and r["rel_error"] < 1e-5 for r in entry["candidates"].values())
    default = entry["default"]
    assert entry["candidates"][default]["role"] == "default"
    if entry["winner"]:  # kept only where it beats the default by 3% in the same run
        assert entry["candidates"][entry["winner"]]["tflops"] >= \
            1.03 * entry["candidates"][default]["tflops"]
        h2h = entry["head_to_head"]  # and again when the two are timed side by side
        assert h2h["winner"] == entry["winner"] and h2h["default_ms"] >= 1.03 * h2h["winner_ms"]

    rng = np.random.default_rng()
    A, B, _ = operands(rng, 384, 320, 200)
    out = gemmgen.gemm(A, B, db=str(tmp_path / "db.json"))
    assert_close(out, A, B, None, 1.0, 0.0)
    kernel, how = api.chosen(A, B, db=str(tmp_path / "db.json"))
    if entry["winner"]:
        assert how == "exact" and kernel.name == entry["winner"]
    else:  # the default stands: gemm runs what it runs without the database
        assert how.startswith("default") and kernel.name == default

    def no_build(*args, **kwargs):
        raise AssertionError("a repeated gemm call compiled again")
    import sys
    monkeypatch.setattr(sys.modules["gemmgen.runtime.api"], "build", no_build)
    again = gemmgen.gemm(A, B, db=str(tmp_path / "db.json"))
    assert_close(again, A, B, None, 1.0, 0.0)


@pytest.mark.parametrize("preset", ["warptile_tuned", "wmma_pipeline"])
def test_layout_and_epilogue_variants(preset):
    from gemmgen.runtime.build import build_many
    configs = [PRESETS[preset].config.replace(layout=lay, epilogue=epi)
               for lay, epi in (("ccc", "bias_gelu"), ("crc", "relu"), ("rcr", "bias"),
                                ("rrc", "gelu"))]
    for cfg, kernel in zip(configs, build_many(configs)):
        results = sweep_kernel(cfg.name, kernel, CASES[1:3])
        assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize("preset", ["simt_cs", "simt_peel", "simt_best"])
def test_simt_last_steps_over_layouts_and_epilogues(preset):
    """The issue-12 steps in every layout their rules accept (the smem output stage needs a
    row-major C), each with an epilogue, over odd shapes with alpha/beta."""
    from breakers import pairwise_variants

    from gemmgen.runtime.build import build_many
    configs = pairwise_variants(PRESETS[preset].config)
    assert len(configs) >= 4
    for cfg, kernel in zip(configs, build_many(configs)):
        results = sweep_kernel(cfg.name, kernel, CASES[1:3])
        assert all(r.passed for r in results), [r for r in results if not r.passed]


def test_transposed_cupy_views_are_used_without_a_copy():
    cupy = pytest.importorskip("cupy")
    kernel = build(PRESETS["warptile_tuned"].config.replace(layout="crc"))
    rng = np.random.default_rng()
    A, B, C = operands(rng, 190, 150, 70)
    a_t = cupy.asarray(np.ascontiguousarray(A.T)).T      # column-major A, a view
    c_t = cupy.asarray(np.ascontiguousarray(C.T)).T      # column-major C
    ptr = c_t.data.ptr
    out = kernel(a_t, cupy.asarray(B), c_t, alpha=0.5, beta=2.0)
    assert out is c_t and out.data.ptr == ptr
    assert_close(cupy.asnumpy(c_t), A, B, C, 0.5, 2.0)
    with pytest.raises(OperandError, match="A is row-major, but this kernel takes column-major A"):
        kernel(cupy.asarray(A), cupy.asarray(B))


def test_batched_torch_tensors_with_a_broadcast_operand():
    torch = pytest.importorskip("torch")
    kernel = build(PRESETS["wmma_pipeline"].config.replace(epilogue="bias_relu"))
    rng = np.random.default_rng()
    A = rng.standard_normal((6, 100, 64), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((64, 72), dtype=np.float32).astype(np.float16)
    bias = rng.standard_normal(72, dtype=np.float32).astype(np.float16)
    a = torch.from_numpy(A).cuda()
    b = torch.from_numpy(B).cuda().expand(6, 64, 72)         # batch stride 0
    out = kernel(a, b, bias=torch.from_numpy(bias).cuda())
    torch.cuda.synchronize()
    assert out.shape == (6, 100, 72) and out.dtype == torch.float16
    err, worst = compare(out.float().cpu().numpy(), reference(A, B, None, 1.0, 0.0, bias, "bias_relu"))
    assert err <= tolerance(64, "fp16", "fp32", "fp16"), (err, worst)


def test_specialized_kernel_checks_the_shape():
    kernel = build(PRESETS["warptile_tuned"].config.replace(m=256, n=128, k=96))
    rng = np.random.default_rng()
    A, B, _ = operands(rng, 256, 128, 96)
    assert_close(kernel(A, B), A, B, None, 1.0, 0.0)
    with pytest.raises(OperandError, match="specialized for M, N, K = 256, 128, 96"):
        kernel(A[:255], B)


@pytest.mark.parametrize("name", ["naive", "smem", "warptile_tuned", "simt_best", "wmma_pipeline",
                                  "wmma_tf32"])
def test_alpha_zero_reads_neither_a_nor_b(kernels, name):
    """BLAS semantics: alpha == 0 gives beta * C even when A and B hold NaN."""
    from gemmgen.runtime.arrays import numpy_dtype
    k = kernels[name]
    cfg = k.config
    rng = np.random.default_rng(0)
    A = np.full((67, 45), np.nan, dtype=numpy_dtype(cfg.dtype))
    B = np.full((45, 33), np.nan, dtype=numpy_dtype(cfg.dtype))
    C = rng.standard_normal((67, 33), dtype=np.float32).astype(numpy_dtype(cfg.out))
    out = k(A, B, C.copy(), alpha=0.0, beta=2.0)
    assert np.array_equal(np.asarray(out, dtype=np.float64), 2 * C.astype(np.float64))


def test_alpha_and_beta_of_the_wrong_type_are_named(kernels):
    A, B, C = operands(np.random.default_rng(0))
    with pytest.raises(OperandError, match="^alpha"):
        kernels["smem"](A, B, C, alpha="2")
    with pytest.raises(OperandError, match="^beta"):
        kernels["smem"](A, B, C, beta=1j)
