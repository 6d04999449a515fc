"""On a GPU (H100/H200) with PyTorch: gemmgen.grouped_gemm and gemmgen::grouped_mm against a
float64 reference per group, over empty groups, 1-row groups, groups that are not a multiple of
the tile and a 90% skew, into NaN-poisoned outputs (a skipped element stays NaN, a row written
past its group shows), every preset, the masked and K-grouped forms, autograd, and capture in
a CUDA graph whose replays follow new offsets."""
import math

import pytest

from gemmgen.heuristics.grouped import offsets, row_counts
from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU (H100/H200) for PyTorch", allow_module_level=True)

import gemmgen  # noqa: E402
import gemmgen.torch as gt  # noqa: E402
from gemmgen import PRESETS, grouped_gemm  # noqa: E402
from gemmgen.torch.grouped import reference as grouped_reference  # noqa: E402

GROUPED = {n: p.config for n, p in PRESETS.items() if p.config.family == "grouped"}
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
COUNTS = {
    "uniform": row_counts("uniform", 1024, 8),
    "empty": [0, 130, 0, 0, 1, 255, 0, 64],
    "one-row": [1] * 7 + [300],
    "ragged": [129, 127, 65, 63, 191, 257],
    "skew90": row_counts("skew90", 2000, 16),
}


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """The presets and the configurations the dispatch picks here, compiled at once."""
    from gemmgen.compile.cache import compile_many
    done = compile_many(list(GROUPED.values()), arch="sm_90a")
    errors = [d for d in done if isinstance(d, Exception)]
    assert not errors, errors


def _offs(counts):
    return torch.tensor(offsets(counts), dtype=torch.int32, device="cuda")


def _nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def _check(out, ref, k, dtype, out_dtype, what):
    """Relative Frobenius error against the float64 reference within the K-dependent bound;
    an empty reference must come out as exact zeros."""
    got = out.double()
    assert bool(torch.isfinite(got).all()), f"{what}: NaN or inf left in the output"
    norm = float(torch.linalg.norm(ref))
    if norm == 0.0:  # an empty group (no rows: nothing to check) or an all-zero product
        assert got.numel() == 0 or float(got.abs().max()) == 0.0, f"{what}: not zero"
        return
    err = float(torch.linalg.norm(got - ref)) / norm
    assert err <= tolerance(k, dtype, "fp32", out_dtype), (what, err)


def _m_operands(counts, n, k, dtype, b_layout, extra=21):
    g, t = len(counts), sum(counts) + extra
    a = torch.randn(t, k, device="cuda").to(DT[dtype])
    w = torch.randn(g, n, k, device="cuda").to(DT[dtype])     # the experts' [G, N, K] weights
    b = w.transpose(1, 2) if b_layout == "c" else w.transpose(1, 2).contiguous()
    return a, b, _offs(counts)


@pytest.mark.parametrize("dist", list(COUNTS))
@pytest.mark.parametrize("preset", ["grouped_bf16", "grouped_small", "grouped_dgrad",
                                    "grouped_fp16", "grouped_bf16_ends"])
def test_m_grouped_per_group_against_float64(preset, dist):
    cfg = GROUPED[preset]
    a, b, offs = _m_operands(COUNTS[dist], 384, 320, cfg.dtype, cfg.layout[1])
    out = _nan((a.shape[0], 384), DT[cfg.out])
    got = grouped_gemm(a, b, offs, out, config=cfg)
    torch.cuda.synchronize()
    assert got is out
    ref = grouped_reference(a.double(), b.double(), offs)
    for g, (s, e) in enumerate(zip([0] + offsets(COUNTS[dist])[:-1], offsets(COUNTS[dist]))):
        _check(out[s:e], ref[s:e], 320, cfg.dtype, cfg.out, f"{preset} {dist} group {g}")
    _check(out[e:], ref[e:], 320, cfg.dtype, cfg.out, "rows past offs[-1] (zeros)")


def test_fp32_output_and_the_dispatchs_choice():
    a, b, offs = _m_operands(COUNTS["ragged"], 512, 256, "bf16", "c")
    out = grouped_gemm(a, b, offs, out_dtype="fp32")
    assert out.dtype == torch.float32 and out.shape == (a.shape[0], 512)
    _check(out, grouped_reference(a.double(), b.double(), offs), 256, "bf16", "fp32", "fp32 out")
    again = grouped_gemm(a, b, offs, out_dtype="fp32")  # the plan's fast path
    torch.cuda.synchronize()
    assert torch.equal(again, out)


@pytest.mark.parametrize("ends", [False, True])
def test_masked_rows_past_the_counts_are_untouched(ends):
    cfg = GROUPED["grouped_bf16_ends" if ends else "grouped_bf16"]
    counts = [0, 1, 200, 256, 17, 129]
    g, m, n, k = len(counts), 256, 384, 192
    a = torch.randn(g, m, k, device="cuda").bfloat16()
    b = torch.randn(g, n, k, device="cuda").bfloat16().transpose(1, 2)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = _nan((g, m, n), torch.bfloat16)
    grouped_gemm(a, b, out=out, counts=cnt, expected_m=128, config=cfg if ends else None)
    torch.cuda.synchronize()
    ref = torch.bmm(a.double(), b.double())
    for i, c in enumerate(counts):
        _check(out[i, :c], ref[i, :c], k, "bf16", "bf16", f"masked group {i}")
        assert bool(torch.isnan(out[i, c:]).all()), f"group {i}: rows past its count written"
    full = grouped_gemm(a, b, config=cfg)  # no counts: every row (torch._grouped_mm's 3-D x 3-D)
    _check(full, ref, k, "bf16", "bf16", "batched")


@pytest.mark.parametrize("dist, out_dtype", [("empty", "bf16"), ("ragged", "bf16"),
                                             ("skew90", "bf16"), ("ragged", "fp32")])
def test_k_grouped_weight_gradient(dist, out_dtype):
    counts = COUNTS[dist]
    t, m, n = sum(counts), 320, 384
    x = torch.randn(t, m, device="cuda").bfloat16()       # tokens x in_features
    dy = torch.randn(t, n, device="cuda").bfloat16()      # tokens x out_features
    offs = _offs(counts)
    out = _nan((len(counts), m, n), DT[out_dtype])
    grouped_gemm(x.t(), dy, offs, out, out_dtype=out_dtype)
    torch.cuda.synchronize()
    ref = grouped_reference(x.t().double(), dy.double(), offs)
    for g, c in enumerate(counts):
        _check(out[g], ref[g], max(c, 1), "bf16", out_dtype,
               f"wgrad {dist} group {g} ({c} rows)")


def test_cuda_graph_replays_follow_new_offsets():
    """The offsets are read on the device: a captured call, replayed after the offsets
    changed in place, computes the new grouping (nothing was copied to the host)."""
    a, b, offs = _m_operands(COUNTS["uniform"], 256, 256, "bf16", "c", extra=0)
    out = torch.empty(a.shape[0], 256, dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        grouped_gemm(a, b, offs, out, stream=stream.cuda_stream)  # warm-up: build and plan
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        grouped_gemm(a, b, offs, out, stream=stream.cuda_stream)
    for counts in (COUNTS["uniform"], [0, 1000, 0, 0, 1, 23, 0, 0], [128] * 4 + [0] * 4):
        offs.copy_(_offs(counts))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = grouped_reference(a.double(), b.double(), offs)
        _check(out, ref, 256, "bf16", "bf16", f"replay with counts {counts}")


def test_op_forward_backward_and_graph():
    counts = COUNTS["empty"]
    t = sum(counts) + 5
    x = torch.randn(t, 256, device="cuda").bfloat16().requires_grad_()
    w = torch.randn(len(counts), 384, 256, device="cuda").bfloat16().requires_grad_()
    offs = _offs(counts)
    y = gt.grouped_mm(x, w.transpose(1, 2), offs)
    dy = torch.randn_like(y)
    y.backward(dy)
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    yd = grouped_reference(xd, wd.transpose(1, 2), offs)
    yd.backward(dy.double())
    _check(y.detach(), yd.detach(), 256, "bf16", "bf16", "op forward")
    _check(x.grad, xd.grad, 384, "bf16", "bf16", "dA (through the op)")
    for g, c in enumerate(counts):
        _check(w.grad[g], wd.grad[g], max(c, 1), "bf16", "bf16", f"dB group {g} (K-grouped)")
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad():
        gt.grouped_mm(x, w.transpose(1, 2), offs)  # warm-up outside capture
        with torch.cuda.graph(graph):
            captured = gt.grouped_mm(x, w.transpose(1, 2), offs)
        graph.replay()
    torch.cuda.synchronize()
    _check(captured, yd.detach(), 256, "bf16", "bf16", "op in a CUDA graph")


def test_op_matches_torch_grouped_mm():
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this PyTorch has no _grouped_mm")
    a, b, offs = _m_operands(row_counts("random", 4096, 8, seed=3), 1024, 512, "bf16", "c", 0)
    ours, theirs = gt.grouped_mm(a, b, offs), torch._grouped_mm(a, b, offs)
    err = float(torch.linalg.norm(ours.double() - theirs.double()) /
                torch.linalg.norm(theirs.double()))
    assert math.isfinite(err) and err < 2 * tolerance(512, "bf16", "fp32", "bf16"), err
    assert gemmgen.grouped_gemm is grouped_gemm


# ---- FP8 with block scales (the grouped family's FP8 axis) ----------------------------------
def _fp8_experts(g, n, k):
    """Experts' [G, N, K] e4m3 weights with 128 x 128 block scales [G, ceil(N/128), ceil(K/128)],
    and their float64 dequantized values."""
    from gemmgen.torch.fp8 import dequantize, quantize
    qs, ss, deq = [], [], []
    for _ in range(g):
        q, s = quantize(torch.randn(n, k, device="cuda"), (128, 128))
        qs.append(q), ss.append(s), deq.append(dequantize(q, s, (128, 128)).double())
    return torch.stack(qs), torch.stack(ss), torch.stack(deq)


def _fp8_tokens(t, k):
    """Tokens [T, K] in e4m3 with 1 x 128 scales [T, ceil(K/128)] (M-major, as quantize
    writes them) and the float64 dequantized values."""
    from gemmgen.torch.fp8 import dequantize, quantize
    q, s = quantize(torch.randn(t, k, device="cuda") * 3.0, (1, 128))
    return q, s, dequantize(q, s, (1, 128)).double()


FP8_TOL = {"bf16": tolerance(640, "e4m3", "fp32", "bf16", "promoted every 128"),
           "fp32": tolerance(640, "e4m3", "fp32", "fp32", "promoted every 128")}


@pytest.mark.parametrize("dist", ["uniform", "empty", "one-row", "ragged"])
@pytest.mark.parametrize("out_dtype", ["bf16", "fp32"])
def test_fp8_m_grouped_contiguous_against_float64(dist, out_dtype):
    """FP8 e4m3 tokens and experts with block scales against float64 of the dequantized
    inputs: K = 640 (five scale blocks: the promoted pairs' odd last block), N = 384 (three
    B scale blocks per expert), ragged groups and rows past offs[G-1] that must come out 0."""
    counts, n, k = COUNTS[dist], 384, 640
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(sum(counts) + 21, k)
    offs = _offs(counts)
    out = _nan((a.shape[0], n), DT[out_dtype])
    got = grouped_gemm(a, w.transpose(1, 2), offs, out, scale_a=sa, scale_b=sw,
                       out_dtype=out_dtype)
    torch.cuda.synchronize()
    assert got is out
    end = _check_fp8_groups(out, ad, wd, counts, dist, out_dtype)
    assert float(out[end:].double().abs().max()) == 0.0, "rows past offs[G-1] not zero"


def _check_fp8(out, ref, tol, what):
    got = out.double()
    assert bool(torch.isfinite(got).all()), f"{what}: NaN or inf left in the output"
    norm = float(torch.linalg.norm(ref))
    if norm == 0.0:
        return
    err = float(torch.linalg.norm(got - ref)) / norm
    assert err <= tol, (what, err, tol)


def _check_fp8_groups(out, ad, wd, counts, what, out_dtype="bf16", tol=None) -> int:
    """Each group's rows of ``out`` (one after another, ``counts`` of them) against float64 of
    its dequantized tokens ``ad`` times its expert ``wd[g]``, within ``tol`` (default: K = 640's
    bound); the first row past the groups."""
    tol = FP8_TOL[out_dtype] if tol is None else tol
    start = 0
    for g, c in enumerate(counts):
        _check_fp8(out[start:start + c], ad[start:start + c] @ wd[g].t(), tol,
                   f"{what} group {g}")
        start += c
    return start


@pytest.mark.parametrize("dist", ["empty", "ragged"])
@pytest.mark.parametrize("layout", ["k-contiguous", "m-contiguous", "a-m-major-copied"])
def test_fp8_scale_windows_across_windows_and_tiles(dist, layout, monkeypatch):
    """K = 1536: three windows of four K blocks per tile, each window's scales loaded during
    the window before it, and each tile's epilogue run under the next tile's first wgmmas
    (across empty groups and a 1-row group with "empty"). The scales either contiguous in K
    (one 16-byte load per row and window), contiguous in M and N (A's as quantize writes
    them, B's transposed: one load per row and block), or A's M-major with B's K-contiguous,
    which the call copies into K-contiguous rows first (``<name>_scales``; the work threshold
    lowered so that this small problem takes it)."""
    from gemmgen.runtime.grouped import plan_grouped
    from gemmgen.runtime.hopper import grouped as hopper_grouped
    counts, n, k = COUNTS[dist], 256, 1536
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(sum(counts) + 21, k)       # sa M-major, sw [G, N/128, K/128] K-major
    if layout == "k-contiguous":
        sa = sa.contiguous()
    elif layout == "m-contiguous":
        sw = sw.transpose(1, 2).contiguous().transpose(1, 2)
    else:
        monkeypatch.setattr(hopper_grouped, "SCALES_MIN_FLOP", 0)
    assert (sa.stride(1) == 1) == (layout == "k-contiguous")
    assert (sw.stride(2) == 1) == (layout != "m-contiguous")
    args = (a, w.transpose(1, 2), _offs(counts), None)
    path = plan_grouped(*args, scale_a=sa, scale_b=sw, config=GROUPED["grouped_fp8"]).recipe.path
    assert ("scales K-contiguous" in path) == (layout == "a-m-major-copied"), path
    out = _nan((a.shape[0], n), torch.bfloat16)
    grouped_gemm(a, w.transpose(1, 2), _offs(counts), out, scale_a=sa, scale_b=sw,
                 config=GROUPED["grouped_fp8"])
    torch.cuda.synchronize()
    end = _check_fp8_groups(out, ad, wd, counts, f"{layout} {dist}",
                            tol=tolerance(k, "e4m3", "fp32", "bf16", "promoted every 128"))
    assert float(out[end:].double().abs().max()) == 0.0, "rows past offs[G-1] not zero"


@pytest.mark.parametrize("dist", ["empty", "ragged"])
def test_fp8_split_n_contiguous_and_masked_against_float64(dist):
    """The column-split kernel (64-row tiles, each consumer 128 of the 256 columns): N = 384,
    so the second consumer of the last column tile starts past N (its B scale block is
    clamped, it stores nothing); ragged groups, rows past offs[G-1] zero; then the masked
    form, rows past each count untouched."""
    cfg = GROUPED["grouped_fp8_split_n"]
    counts, n, k = COUNTS[dist], 384, 640
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(sum(counts) + 21, k)
    out = _nan((a.shape[0], n), torch.bfloat16)
    grouped_gemm(a, w.transpose(1, 2), _offs(counts), out, scale_a=sa, scale_b=sw, config=cfg)
    torch.cuda.synchronize()
    end = _check_fp8_groups(out, ad, wd, counts, f"split-n {dist}")
    assert float(out[end:].double().abs().max()) == 0.0, "rows past offs[G-1] not zero"
    g, m = len(counts), 320
    toks = [_fp8_tokens(m, k) for _ in range(g)]
    masked = _nan((g, m, n), torch.bfloat16)
    cnt = torch.tensor([min(c, m) for c in counts], dtype=torch.int32, device="cuda")
    gemmgen.build(cfg)(torch.stack([q for q, _, _ in toks]), w.transpose(1, 2), masked,
                       counts=cnt, scale_a=torch.stack([s for _, s, _ in toks]), scale_b=sw)
    torch.cuda.synchronize()
    for i, c in enumerate(cnt.tolist()):
        _check_fp8(masked[i, :c], toks[i][2][:c] @ wd[i].t(), FP8_TOL["bf16"], f"masked {i}")
        assert bool(torch.isnan(masked[i, c:]).all()), f"group {i}: rows past its count written"


def test_fp8_m_grouped_masked_through_the_kernel_call():
    """The masked form (A [G, M, K], scale_a [G, M, ceil(K/128)], per-group counts) through
    ``kernel(A, B, C, offs=..., counts=..., scale_a=..., scale_b=...)``, the one call every
    kernel takes: rows past each count stay as poisoned."""
    counts = [0, 1, 130, 256, 17]
    g, m, n, k = len(counts), 256, 256, 512
    w, sw, wd = _fp8_experts(g, n, k)
    toks = [_fp8_tokens(m, k) for _ in range(g)]
    a = torch.stack([q for q, _, _ in toks])
    sa = torch.stack([s for _, s, _ in toks])                  # [G, M, kb], M-major per group
    kernel = gemmgen.build(GROUPED["grouped_fp8"])
    out = _nan((g, m, n), torch.bfloat16)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    kernel(a, w.transpose(1, 2), out, counts=cnt, scale_a=sa, scale_b=sw)
    torch.cuda.synchronize()
    for i, c in enumerate(counts):
        _check_fp8(out[i, :c], toks[i][2][:c] @ wd[i].t(), FP8_TOL["bf16"], f"masked {i}")
        assert bool(torch.isnan(out[i, c:]).all()), f"group {i}: rows past its count written"


def test_fp8_grouped_graph_replays_follow_new_offsets():
    counts = [64, 200, 0, 300]
    n, k = 256, 384
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(600, k)
    offs = _offs(counts)
    out = _nan((600, n), torch.bfloat16)
    grouped_gemm(a, w.transpose(1, 2), offs, out, scale_a=sa, scale_b=sw)  # warm up: plan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_gemm(a, w.transpose(1, 2), offs, out, scale_a=sa, scale_b=sw,
                     stream=torch.cuda.current_stream().cuda_stream)
    new = [300, 0, 250, 50]
    offs.copy_(_offs(new))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check_fp8_groups(out, ad, wd, new, "replay")


def test_fp8_torch_op_against_float64_and_under_torch_compile():
    """gemmgen.torch.grouped_mm with scales (the op gemmgen::scaled_grouped_mm) runs the
    kernel on CUDA tensors, matches float64 of the dequantized inputs, and traces without a
    graph break."""
    counts, n, k = COUNTS["ragged"], 256, 512
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(sum(counts), k)
    offs, b = _offs(counts), w.transpose(1, 2)
    got = gt.grouped_mm(a, b, offs, scale_a=sa, scale_b=sw)
    torch.cuda.synchronize()
    _check_fp8_groups(got, ad, wd, counts, "op")
    fn = torch.compile(lambda *x: gt.grouped_mm(x[0], x[1], x[2], scale_a=x[3], scale_b=x[4]),
                       fullgraph=True)
    assert torch.equal(fn(a, b, offs, sa, sw), got)


@pytest.mark.parametrize("copied", [False, True])
def test_fp8_op_from_the_compiled_launcher_inside_a_graph(copied, monkeypatch):
    """A repeated FP8 grouped call runs from the compiled launcher (no Python): captured in a
    CUDA graph from the table, its replays follow new offsets. ``copied``: K = 1024 and the
    work threshold lowered, so that the recipe copies A's M-major scales into a K-contiguous
    workspace first (the launcher's per-stream workspace, inside the graph)."""
    from gemmgen.runtime.grouped import plan_grouped
    from gemmgen.runtime.hopper import grouped as hopper_grouped
    from gemmgen.torch import launcher
    if not gt.LAUNCHER:
        pytest.skip(f"the compiled launcher is not loaded: {launcher.why_not()}")
    counts, n, k = [64, 0, 190, 30], 256, 1024 if copied else 384
    if copied:
        monkeypatch.setattr(hopper_grouped, "SCALES_MIN_FLOP", 0)
    w, sw, wd = _fp8_experts(len(counts), n, k)
    a, sa, ad = _fp8_tokens(sum(counts), k)
    offs, b = _offs(counts), w.transpose(1, 2)
    path = plan_grouped(a, b, offs, scale_a=sa, scale_b=sw).recipe.path
    assert ("scales K-contiguous" in path) == copied, path
    gt.grouped_mm(a, b, offs, scale_a=sa, scale_b=sw)          # plan, then from the table
    held = torch.ops.gemmgen_launcher.recipes_held()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gt.grouped_mm(a, b, offs, scale_a=sa, scale_b=sw)
    assert torch.ops.gemmgen_launcher.recipes_held() == held, "the graph reused the recipe"
    new = [100, 100, 0, 84]
    offs.copy_(_offs(new))
    graph.replay()
    torch.cuda.synchronize()
    _check_fp8_groups(out, ad, wd, new, "launcher replay")


@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
def test_tune_groups_stores_a_verified_winner_that_the_dispatch_takes(dtype, tmp_path,
                                                                     monkeypatch):
    """gemmgen tune --groups, 16-bit and FP8 (block scales): each measured candidate verified
    against float64 (of the dequantized operands for FP8) within the bound, the dispatch's own
    choice among them, the settled winner (or the default standing) stored in the grouped
    tuning file, and grouped_gemm's dispatch then runs that for the problem."""
    from gemmgen.runtime import grouped as rt
    from gemmgen.tune.grouped_tune import tune_grouped
    monkeypatch.setenv("GEMMGEN_GROUPED_DB", str(tmp_path / "grouped_tune.json"))
    monkeypatch.setattr(rt, "_TUNED", [])
    groups, rows, n, k = 4, 1024, 256, 512
    key, entry = tune_grouped(dtype, groups, rows, n, k, max_configs=3, budget=300)
    done, default = entry["candidates"], entry["default"]
    assert default in done and len(done) in (3, 4), done   # the dispatch's own choice measured
    assert (entry["winner"] in done) != bool(entry["default_stands"]), entry
    for name, r in done.items():
        assert r["status"] == "ok", (name, r)
        assert r["rel_error"] <= tolerance(k, dtype, "fp32", "bf16") and r["tflops"] > 0, r
    offs = _offs(row_counts("uniform", rows, groups))
    if dtype == "e4m3":
        a, sa = gt.quantize(torch.randn(rows, k, device="cuda"), (1, 128))
        w, sw = zip(*(gt.quantize(torch.randn(n, k, device="cuda"), (128, 128))
                      for _ in range(groups)))
        scales = {"scale_a": sa, "scale_b": torch.stack(sw)}
        b = torch.stack(w).transpose(1, 2)
    else:
        a, b, _ = _m_operands([rows // groups] * groups, n, k, dtype, "c", extra=0)
        scales = {}
    plan = rt.plan_grouped(a, b, offs, _nan((rows, n), torch.bfloat16), **scales)
    if entry["winner"]:
        assert (plan.choice.how, plan.choice.config.name) == ("tuned", entry["winner"])
    else:  # no candidate beat the default by the margin: the dispatch keeps its choice
        assert plan.choice.how != "tuned" and plan.choice.config.name == default
    # the same entry settled without its default names the fastest: the dispatch runs that
    from gemmgen.heuristics import grouped_db
    from gemmgen.heuristics.tunedb import settle
    for field in ("head_to_head", "default", "default_stands"):
        entry.pop(field, None)
    fastest = settle(entry)
    grouped_db.store(key, entry)
    monkeypatch.setattr(rt, "_TUNED", [])
    plan = rt.plan_grouped(a, b, offs, _nan((rows, n), torch.bfloat16), **scales)
    assert (plan.choice.how, plan.choice.config.name) == ("tuned", fastest)
