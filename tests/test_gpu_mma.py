"""On a GPU of sm_80 or newer: the mma family's ladder and tuned presets over the usual sweep
(odd shapes, alpha/beta, beta = 0 over NaN C, every layout and epilogue, strided batches,
specialized shapes, unaligned operands)."""
import numpy as np
import pytest

from gemmgen import PRESETS, build
from gemmgen.tune.verify import (
    ALIGNED_CASES,
    BATCH_CASES,
    CASES,
    check,
    compare,
    device_runner,
    reference,
    sweep_kernel,
    tolerance,
)

pytestmark = pytest.mark.gpu
MMA = [name for name, p in PRESETS.items() if p.config.family == "mma"]


@pytest.fixture(scope="module")
def ampere_or_newer():
    from gemmgen.runtime.device import device_cc
    if device_cc() < 80:
        pytest.skip("the mma family needs sm_80 or newer")


def _fits(cfg) -> bool:
    """Whether the device lets one block have the preset's shared memory (the tuned presets
    need 135 KiB: not on sm_86/sm_89)."""
    from gemmgen.model.arch import get_arch
    from gemmgen.runtime.device import device_arch
    try:
        return cfg.smem_bytes <= get_arch(device_arch()).smem_per_block_optin
    except ValueError:
        return True


@pytest.mark.parametrize("name", MMA)
def test_preset_is_correct_over_the_sweep(ampere_or_newer, name):
    cfg = PRESETS[name].config
    if not _fits(cfg):
        pytest.skip(f"{name} needs {cfg.smem_bytes} bytes of shared memory per block")
    kernel = build(cfg)
    assert kernel.local_bytes == 0, f"{name} uses local memory"
    results = sweep_kernel(name, kernel, CASES, batch_cases=BATCH_CASES)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize("name", ["mma_base", "mma_prefetch", "mma_fp16", "mma_tf32"])
def test_layouts_and_epilogues(ampere_or_newer, name):
    from breakers import pairwise_variants

    from gemmgen.runtime.build import build_many
    configs = [c for c in pairwise_variants(PRESETS[name].config) if _fits(c)]
    if not configs:
        pytest.skip(f"{name} does not fit this device's shared memory")
    for cfg, kernel in zip(configs, build_many(configs)):
        results = sweep_kernel(cfg.name, kernel, (CASES[2], CASES[6]) + ALIGNED_CASES,
                               batch_cases=BATCH_CASES[1:])
        assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize("spec", [(256, 256, 256), (200, 136, 104), (None, 256, None)])
def test_specialized_shapes(ampere_or_newer, spec):
    m, n, k = spec
    cfg = PRESETS["mma_fp16"].config.replace(m=m, n=n, k=k)
    results = sweep_kernel(cfg.name, build(cfg))
    assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize("name", ["mma_fp16", "mma_ldgsts", "mma_vec", "mma_tf32"])
def test_offset_base_pointer_and_odd_leading_dimension(ampere_or_newer, name):
    """A base 2 (or 4) bytes off 16-byte alignment and lda = 129: the element-wise copy path;
    B and C aligned take the 16-byte path in the same launch."""
    torch = pytest.importorskip("torch")
    cfg = PRESETS[name].config
    kernel = build(cfg)
    dt = np.float32 if cfg.dtype == "tf32" else np.float16
    rng = np.random.default_rng()
    A = rng.standard_normal((130, 129), dtype=np.float32).astype(dt)
    B = rng.standard_normal((128, 136), dtype=np.float32).astype(dt)
    a = torch.from_numpy(A).cuda()[:, 1:]
    out = kernel(a, torch.from_numpy(B).cuda())
    torch.cuda.synchronize()
    err, worst = compare(out.float().cpu().numpy(), reference(A[:, 1:], B, None, 1.0, 0.0))
    assert err <= tolerance(128, cfg.dtype, "fp32", cfg.out), (err, worst)


@pytest.mark.parametrize("name", ["mma_base", "mma_epilogue", "mma_tf32"])
def test_alpha_zero_reads_neither_a_nor_b_and_beta_zero_not_c(ampere_or_newer, name):
    cfg = PRESETS[name].config
    kernel = build(cfg)
    rng = np.random.default_rng()
    r = check(name, device_runner(kernel), 136, 72, 40, 0.0, 2.0, rng, cfg.dtype, cfg.acc,
              cfg.out)  # check() plants NaN in A and B when alpha == 0
    assert r.passed, r
    r = check(name, device_runner(kernel), 264, 520, 200, 1.0, 0.0, rng, cfg.dtype, cfg.acc,
              cfg.out)  # C is all NaN when beta == 0
    assert r.passed, r


def test_gemm_takes_mma_where_wgmma_cannot(ampere_or_newer):
    """On any GPU: tf32 with a row-major B goes to mma (wgmma tf32 reads K-major B only);
    below sm_90 every 16-bit problem does."""
    torch = pytest.importorskip("torch")
    import gemmgen
    from gemmgen.runtime.api import chosen
    from gemmgen.runtime.device import device_cc
    a = torch.randn(264, 200, device="cuda")
    b = torch.randn(200, 136, device="cuda")
    out = gemmgen.gemm(a, b, dtype="tf32")
    kernel, _ = chosen(a, b, dtype="tf32")
    assert kernel.config.family == "mma"
    ref = a.double() @ b.double()
    assert float((out.double() - ref).norm() / ref.norm()) < 3e-3
    if device_cc() != 90:
        h, g = a.half(), b.half()
        out = gemmgen.gemm(h, g)
        assert chosen(h, g)[0].config.family == "mma"
        assert float((out.double() - ref).norm() / ref.norm()) < 1e-2
