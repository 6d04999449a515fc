"""The verifier on NumPy stand-in kernels: it must pass a right kernel and catch wrong ones."""
import json
import math

import numpy as np
import pytest

from gemmgen.tune import results
from gemmgen.tune.verify import BATCH_CASES, CASES, check, compare, reference, sweep, tolerance


def right(A, B, C, alpha, beta, bias=None):
    out = alpha * (A @ B) if alpha != 0 else np.zeros((A.shape[0], B.shape[1]))  # BLAS
    return out if beta == 0 else out + beta * C


def test_a_right_kernel_passes_every_case():
    res = sweep("numpy", right, seed=1)
    assert len(res) == len(CASES) and all(r.passed for r in res), [r for r in res if not r.passed]
    assert all(r.rel_error < 1e-5 for r in res)


def test_unwritten_elements_fail_through_the_nan_poison():
    def skips_last_row(A, B, C, alpha, beta, bias=None):
        C[:-1] = right(A, B, C, alpha, beta)[:-1]
        return C
    r = check("k", skips_last_row, 65, 33, 16, 1.0, 0.0, np.random.default_rng(0))
    assert not r.passed and math.isinf(r.rel_error) and r.worst == (64, 0)


def test_reading_c_when_beta_is_zero_fails():
    def reads_c(A, B, C, alpha, beta, bias=None):
        return alpha * (A @ B) + beta * C  # 0 * NaN = NaN
    r = check("k", reads_c, 16, 16, 16, 1.0, 0.0, np.random.default_rng(0))
    assert not r.passed


def test_reading_a_when_alpha_is_zero_fails():
    def reads_a(A, B, C, alpha, beta, bias=None):
        return alpha * (A @ B) + beta * C  # 0 * NaN = NaN: the case poisons A and B
    r = check("k", reads_a, 32, 16, 8, 0.0, 2.0, np.random.default_rng(0))
    assert not r.passed and math.isinf(r.rel_error)


def test_a_missing_k_tile_fails():
    def drops_tail(A, B, C, alpha, beta, bias=None):
        return alpha * (A[:, :-8] @ B[:-8]) + (beta * C if beta else 0)
    r = check("k", drops_tail, 64, 64, 128, 1.0, 0.0, np.random.default_rng(0))
    assert not r.passed and r.rel_error > 1e-2


def test_compare_and_reference():
    A, B, C = np.eye(2, dtype=np.float32), np.full((2, 2), 2, np.float32), np.ones((2, 2), np.float32)
    assert np.array_equal(reference(A, B, C, 0.5, 3.0), np.full((2, 2), 4.0))
    ref = np.ones((2, 2))
    assert compare(np.ones((2, 2), np.float32), ref) == (0.0, (0, 0))
    assert compare(np.array([[1, 1], [1, np.nan]], np.float32), ref) == (math.inf, (1, 1))
    assert compare(np.zeros((2, 2), np.float32), np.zeros((2, 2)))[0] == 0.0
    assert math.isinf(compare(np.ones((2, 2), np.float32), np.zeros((2, 2)))[0])


def test_tolerance_grows_with_k():
    assert tolerance(0) < tolerance(1024) < tolerance(8192) < 1e-4
    assert tolerance(4096) == pytest.approx(8 * 2 ** -24 * math.sqrt(4097))


def doc():
    row = {"kernel": "warptile", "name": "gemm_x", "M": 4096, "N": 4096, "K": 4096,
           "tflops": 30.0, "cublas_tflops": 40.0, "pct_cublas": 75.0, "rel_error": 1e-6,
           "passed": True, "registers": 128}
    return {"gpu": "NVIDIA H100 80GB HBM3", "cuda_version": "13.0", "rows": [row]}


def test_reports_render(tmp_path):
    text = results.table(doc()["rows"])
    assert "warptile" in text and "75.0" in text
    md = results.ladder_markdown(doc(), techniques={"warptile": "warp tiling"})
    assert "| warptile | fp32 / fp32 | warp tiling | 30.00 | 75.0% |" in md
    assert "| **cuBLAS** | fp32 / fp32 | `cublasGemmEx`, same run | 40.00 | 100% |" in md
    assert results.default_path("NVIDIA H100 80GB HBM3").name == "NVIDIA_H100_80GB_HBM3.json"
    path = results.write(doc(), tmp_path / "r" / "x.json")
    assert json.loads(path.read_text())["rows"][0]["tflops"] == 30.0


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = results.plot(doc(), tmp_path / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_merge_replaces_rows_of_the_same_kernel_and_shape():
    old = doc()
    new_row = {**old["rows"][0], "tflops": 31.0}
    tuned = {**old["rows"][0], "kernel": "tuned", "tflops": 35.0}
    merged = results.merge(old, {**old, "rows": [new_row, tuned]})
    assert [(r["kernel"], r["tflops"]) for r in merged["rows"]] == [("warptile", 31.0),
                                                                    ("tuned", 35.0)]


def test_layouts_batches_and_epilogues_reach_the_runner():
    seen = []

    def fused(A, B, C, alpha, beta, bias=None):
        seen.append((A.flags.f_contiguous, B.flags.f_contiguous, A.ndim, bias is not None))
        out = alpha * np.matmul(A, B) + (beta * C if beta else 0) + bias
        return 0.5 * out * (1 + np.tanh(0.7978845608028654 * (out + 0.044715 * out ** 3)))
    res = sweep("k", fused, CASES[:2], seed=0, layout="ccr", epilogue="bias_gelu",
                batch_cases=BATCH_CASES)
    assert all(r.passed for r in res), res
    assert seen[0][:2] == (True, True) and any(s[2] == 3 for s in seen) and all(s[3] for s in seen)
    wrong_act = sweep("k", lambda A, B, C, alpha, beta, bias=None: alpha * (A @ B) + bias,
                      CASES[1:2], seed=0, epilogue="bias_relu")
    assert not wrong_act[0].passed


def test_reference_epilogues():
    A = np.array([[1.0, -2.0]], np.float32)
    B = np.eye(2, dtype=np.float32)
    bias = np.array([0.5, 0.5], np.float32)
    assert np.allclose(reference(A, B, None, 1, 0, bias, "bias_relu"), [[1.5, 0.0]])
    gelu = reference(A, B, None, 1, 0, None, "gelu")
    assert gelu[0, 0] == pytest.approx(0.8412, abs=1e-4) and gelu[0, 1] == pytest.approx(-0.0454, abs=1e-4)


def _fast_gelu(sign: float, drop_bias: bool = False):
    """A 16-bit-C bias+GELU kernel whose tanh is off by the whole tanh.approx.f32 bound, in
    the direction ``sign``, rounded to fp16 as the kernel stores it."""
    from gemmgen.tune.verify import TANH_APPROX_ERROR

    def run(A, B, C, alpha, beta, bias=None):
        x = alpha * (A.astype(np.float32) @ B.astype(np.float32))
        x = x if drop_bias else x + bias.astype(np.float32)
        t = np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)) + sign * TANH_APPROX_ERROR
        return (0.5 * x * (1 + t)).astype(np.float16)
    return run


@pytest.mark.parametrize("seed", [13, 158, 183])  # these draws give x = -6.9, -3.4, -4.8
def test_a_lone_negative_gelu_within_the_tanh_approx_bound_passes(seed):
    for sign in (1.0, -1.0):
        r = check("k", _fast_gelu(sign), 1, 1, 1, 1.0, 0.0, np.random.default_rng(seed),
                  dtype="fp16", out="fp16", epilogue="bias_gelu")
        assert r.passed and r.rel_error > tolerance(1, "fp16", "fp32", "fp16"), r


def test_the_gelu_slack_still_catches_a_missing_bias_and_stays_small_on_a_matrix():
    from gemmgen.tune.verify import activation_slack
    for seed in (13, 158, 183):
        r = check("k", _fast_gelu(1.0, drop_bias=True), 1, 1, 1, 1.0, 0.0,
                  np.random.default_rng(seed), dtype="fp16", out="fp16", epilogue="bias_gelu")
        assert not r.passed, r
    r = check("k", _fast_gelu(1.0), 127, 129, 131, 1.0, 0.0, np.random.default_rng(0),
              dtype="fp16", out="fp16", epilogue="bias_gelu")
    assert r.passed and r.tol < 2e-3, r
    pre = np.array([[-3.0, 2.0]])
    assert activation_slack("bias_relu", "fp16", pre, pre) == 0.0
    assert activation_slack("gelu", "fp32", pre, pre) == 0.0
    assert activation_slack("gelu", "fp16", pre, np.zeros((1, 2))) == 0.0  # exact zero needed
