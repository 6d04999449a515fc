"""On a Hopper GPU: the wgmma family end to end, its TMA and fallback paths, and dispatch."""
import numpy as np
import pytest

from gemmgen import PRESETS, BuildError, build
from gemmgen.tune.verify import (
    ALIGNED_CASES,
    BATCH_CASES,
    CASES,
    compare,
    reference,
    sweep_kernel,
    tolerance,
)

pytestmark = pytest.mark.gpu
WGMMA = [name for name, p in PRESETS.items() if p.config.family == "wgmma"]


@pytest.fixture(scope="module")
def hopper():
    from gemmgen.runtime.device import device_cc
    if device_cc() != 90:
        pytest.skip("the wgmma family runs on sm_90 (Hopper) only")


@pytest.mark.parametrize("name", WGMMA)
def test_preset_is_correct_on_the_tma_and_the_fallback_path(hopper, name):
    kernel = build(PRESETS[name].config)
    results = sweep_kernel(name, kernel, CASES, batch_cases=BATCH_CASES)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    by_shape = {(r.m, r.n, r.k, r.alpha, r.beta): r.path for r in results}
    split3 = kernel.config.math == "3xtf32"  # its split kernel takes any operand
    for m, n, k, alpha, beta in ALIGNED_CASES:
        reads = split3 and alpha != 0 and k > 0  # A and B are split only when they are read
        assert by_shape[(m, n, k, alpha, beta)] == ("tma + 3xtf32" if reads else "tma"), (m, n, k)
    odd = by_shape[(127, 129, 131, 1.0, 0.0)]  # K = 131: rows of 262 bytes
    assert odd == "tma + 3xtf32" if split3 else odd.startswith("fallback"), odd


def test_offset_base_pointer_and_odd_leading_dimension_fall_back(hopper):
    torch = pytest.importorskip("torch")
    kernel = build(PRESETS["wgmma_tma_store"].config)
    rng = np.random.default_rng()
    A = rng.standard_normal((130, 129), dtype=np.float32).astype(np.float16)
    B = rng.standard_normal((128, 136), dtype=np.float32).astype(np.float16)
    a = torch.from_numpy(A).cuda()[:, 1:]        # base + 2 bytes, lda = 129
    out = kernel(a, torch.from_numpy(B).cuda())
    torch.cuda.synchronize()
    assert kernel.last_path.startswith("fallback") and "A" in kernel.last_path
    err, worst = compare(out.float().cpu().numpy(), reference(A[:, 1:], B, None, 1.0, 0.0))
    assert err <= tolerance(128, "fp16", "fp32", "fp16"), (err, worst)


@pytest.mark.parametrize("name", ["wgmma_tma_store", "wgmma_ws", "wgmma_tf32", "wgmma_cluster"])
def test_layouts_and_epilogues(hopper, name):
    from breakers import pairwise_variants

    from gemmgen.runtime.build import build_many
    configs = pairwise_variants(PRESETS[name].config)
    assert len(configs) >= 2
    for cfg, kernel in zip(configs, build_many(configs)):
        results = sweep_kernel(cfg.name, kernel, (CASES[2],) + ALIGNED_CASES,
                               batch_cases=BATCH_CASES[2:])
        assert all(r.passed for r in results), [r for r in results if not r.passed]


def test_alpha_zero_does_not_read_a(hopper):
    rng = np.random.default_rng()
    for name in ("wgmma_tma_store", "wmma_pipeline", "warptile_tuned"):
        cfg = PRESETS[name].config
        dt = np.float32 if cfg.dtype == "fp32" else np.float16
        A = rng.standard_normal((136, 72), dtype=np.float32).astype(dt)
        A[3, 5] = np.nan
        B = rng.standard_normal((72, 64), dtype=np.float32).astype(dt)
        C = rng.standard_normal((136, 64), dtype=np.float32).astype(dt)
        out = build(cfg)(A, B, C.copy(), alpha=0.0, beta=2.0)
        assert np.array_equal(np.asarray(out, np.float32), 2 * C.astype(np.float32)), name


def test_gemm_prefers_wgmma_and_falls_back_by_layout(hopper):
    torch = pytest.importorskip("torch")
    import gemmgen
    from gemmgen.runtime.api import chosen
    a = torch.randn(264, 200, device="cuda", dtype=torch.float16)
    b = torch.randn(200, 136, device="cuda", dtype=torch.float16)
    out = gemmgen.gemm(a, b)
    kernel, how = chosen(a, b)
    assert kernel.config.family == "wgmma" and how.startswith("default")
    ref = a.double() @ b.double()
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-3
    again = gemmgen.gemm(a, b)              # the cached plan
    assert float((again.double() - ref).norm() / ref.norm()) < 1e-3
    af, bf = a.float(), b.float()
    out = gemmgen.gemm(af, bf, dtype="tf32")  # row-major B: tf32 wgmma cannot read it
    kernel, _ = chosen(af, bf, dtype="tf32")
    assert kernel.config.family == "mma"
    assert float((out.double() - ref).norm() / ref.norm()) < 3e-3
    out = gemmgen.gemm(af, bf.t().contiguous().t(), dtype="tf32")  # column-major B: wgmma
    kernel, _ = chosen(af, bf.t().contiguous().t(), dtype="tf32")
    assert kernel.config.family == "wgmma"
    assert float((out.double() - ref).norm() / ref.norm()) < 3e-3


def test_parameter_offsets_match_the_driver(hopper):
    from gemmgen.codegen.render import render
    from gemmgen.compile.cache import compile_cached, target_arch
    from gemmgen.runtime.device import device_arch
    from gemmgen.runtime.tma import driver_param_layout, param_layout
    cfg = PRESETS["wgmma_cluster"].config
    arch = target_arch(cfg, device_arch())
    cubin, _ = compile_cached(render(cfg, arch), arch, cfg.name)
    ours = param_layout(cubin, cfg.name)
    assert tuple(zip(ours.offsets, ours.sizes)) == driver_param_layout(cubin, cfg.name)


def test_older_arch_is_a_clear_build_error():
    with pytest.raises(BuildError, match="needs sm_90a"):
        build(PRESETS["wgmma_tma"].config, arch="sm_80")
