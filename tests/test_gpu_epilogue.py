"""On a Hopper GPU: every epilogue-tree node against float64 on odd shapes in every layout, the
dual GEMM (SwiGLU), the overlap, amax and aux, and the swapped small-M path.

Written against the API below before the runtime took trees; the runtime now implements it
(gemmgen.runtime.epilogue_args, tree_api, dual; CPU checks in tests/test_epilogue_runtime.py),
except the swap, which gemm does not take for a tree (the vectors keep their sides). Every call
goes through ``_gemm`` and ``_kernel`` below, so adapting it is a change in one place:

- ``gemmgen.gemm(A, B, C=None, *, alpha=1.0, beta=0.0, bias=None, epilogue=EXPR,
  row_scale=None, col_scale=None, row_bias=None, R=None, aux=None, amax=None)`` returns C.
  row_scale and col_scale: fp32 vectors of M and N; row_bias (M) and bias (N): C's dtype;
  R: M x N in its own layout and dtype (the tree's ``R(layout=..., dtype=...)``, else C's);
  aux: an M x N output the caller allocates in C's dtype and layout; amax: a one-element
  float32 device array the caller zeroes (the kernel atomicMax-es its bits).
- The dual GEMM: ``gemmgen.gemm(A, Bg, epilogue="silu(gate)*up", up=Bu)`` with Bg, Bu the
  nn.Linear weights as K x N column-major views (layout "rcr"), or a built dual kernel called
  the same way (``_kernel``).
- A built kernel (``gemmgen.build(cfg)``) takes the same keywords when called.
- Operands a tensor map cannot describe are repacked (the WMMA fallback renders no trees), and
  gemm may swap operands for a small M by passing ``Epilogue.transposed()``'s kernel the
  swapped vectors (docs-notes/epilogue_abi.md section 7).
"""
import math

import numpy as np
import pytest

from gemmgen import PRESETS
from gemmgen.model.config import LAYOUTS
from gemmgen.model.dtypes import UNIT_ROUNDOFF
from gemmgen.model.epilogue import Epilogue
from gemmgen.tune.epilogue_reference import evaluate
from gemmgen.tune.verify import tolerance

pytestmark = pytest.mark.gpu

NODE_TREES = [
    "acc*row_scale", "acc*col_scale", "acc + row_bias", "acc + bias", "alpha*acc + beta*C",
    "acc + R", "acc + R(layout='c')", "acc + R(layout='r', dtype='fp32')", "relu(acc + bias)",
    "gelu(acc + bias)", "gelu_erf(acc + row_bias)", "silu(acc*col_scale)", "cast(acc, bf16)",
    "silu(acc*row_scale*col_scale + bias) + R", "gelu(aux(alpha*acc + bias))",
]
ODD = [(200, 264, 152), (136, 136, 72), (8, 1032, 256)]  # ragged tiles, 16-byte rows


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy")
    from gemmgen.runtime.device import device_cc
    if device_cc() != 90:
        pytest.skip("the wgmma family runs on sm_90 (Hopper) only")
    return cupy


def _gemm(A, B, C=None, **kw):
    import gemmgen
    return gemmgen.gemm(A, B, C, **kw)


def _kernel(cfg, A, B, C=None, **kw):
    import gemmgen
    return gemmgen.build(cfg)(A, B, C, **kw)


def _operands(cp, m, n, k, layout, dtype="fp16", r_dtype=None, r_col=None, seed=0):
    """Device operands in ``layout`` and their float64 leaves for the reference."""
    rng = np.random.default_rng(seed)
    store = {"fp16": np.float16, "fp32": np.float32}
    t = store.get(dtype, np.float16)

    def mat(rows, cols, col, kind):
        x = rng.standard_normal((rows, cols)).astype(kind)
        dev = cp.asfortranarray(cp.asarray(x)) if col else cp.asarray(x)
        return dev, x.astype(np.float64)
    A, a = mat(m, k, layout[0] == "c", t)
    B, b = mat(k, n, layout[1] == "c", t)
    C, c = mat(m, n, layout[2] == "c", t)
    R, r = mat(m, n, layout[2] == "c" if r_col is None else r_col, store.get(r_dtype or dtype))
    vec = {"row_scale": rng.uniform(0.5, 2, m).astype(np.float32),
           "col_scale": rng.uniform(0.5, 2, n).astype(np.float32),
           "row_bias": rng.standard_normal(m).astype(t), "bias": rng.standard_normal(n).astype(t)}
    dev = {"A": A, "B": B, "C": C, "R": R, **{k_: cp.asarray(v) for k_, v in vec.items()}}
    leaves = {"acc": a @ b, "C": c, "R": r, "row_scale": vec["row_scale"][:, None].astype(float),
              "row_bias": vec["row_bias"][:, None].astype(float),
              "col_scale": vec["col_scale"].astype(float), "bias": vec["bias"].astype(float)}
    return dev, leaves


def _tol(tree: str, k: int, dtype: str = "fp16", out: str = "fp16") -> float:
    """tune.verify's bound plus the roundings a tree adds: one of C's dtype per cast or staged
    value, and the tanh.approx of gelu and silu (relative 2^-11 at most, PTX ISA)."""
    ops = Epilogue.parse(tree).ops()
    extra = sum(UNIT_ROUNDOFF.get(n.attr("dtype"), 2 ** -4) for n in Epilogue.parse(tree)
                .root.walk() if n.op == "cast")
    approx = 2 ** -11 if (ops["gelu"] or ops["silu"]) and out != "fp32" else 0.0
    return tolerance(k, dtype, "fp32", out) + 4 * extra + 2 * approx


def _rel(out, ref) -> float:
    got = cp_to_np(out).astype(np.float64)
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


def cp_to_np(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tree", NODE_TREES)
def test_every_node_against_float64_on_odd_shapes(cp, layout, tree):
    epi = Epilogue.parse(tree)
    r_node = next((n for n in epi.root.walk() if n.op == "R"), None)
    r_col = None if r_node is None or r_node.attr("layout") is None else r_node.attr("layout") == "c"
    for m, n, k in ODD:
        dev, leaves = _operands(cp, m, n, k, layout, r_dtype=r_node and r_node.attr("dtype"),
                                r_col=r_col)
        alpha, beta = 1.5, -0.5
        aux = cp.empty_like(dev["C"]) if epi.count("aux") else None
        kw = {name: dev[name] for name in ("row_scale", "col_scale", "row_bias", "bias", "R")
              if epi.count(name)}
        out = _gemm(dev["A"], dev["B"], dev["C"].copy(order="K"), alpha=alpha, beta=beta,
                    epilogue=tree, aux=aux, **kw)
        ref, rec = evaluate(epi, {**leaves, "alpha": alpha, "beta": beta})
        assert _rel(out, ref) <= _tol(tree, k), (tree, layout, m, n, k, _rel(out, ref))
        if aux is not None:
            assert _rel(aux, rec["aux"]) <= _tol(tree, k), (tree, layout, "aux")


@pytest.mark.parametrize("tree", ["silu(acc*row_scale*col_scale + bias) + R", "bias_gelu"])
def test_truly_odd_extents(cp, tree):
    """M, N, K of 127, 129, 131: rows that a tensor map cannot describe. Assumes the runtime
    repacks A and B and stores C directly (a tree kernel with store="direct"): the WMMA
    fallback renders no trees."""
    m, n, k = 127, 129, 131
    dev, leaves = _operands(cp, m, n, k, "rrr", seed=6)
    epi = Epilogue.parse(tree)
    kw = {name: dev[name] for name in ("row_scale", "col_scale", "bias", "R") if epi.count(name)}
    out = _gemm(dev["A"], dev["B"], dev["C"].copy(order="K"), alpha=1.0, beta=0.5,
                epilogue=tree, **kw)
    ref, _ = evaluate(epi, {**leaves, "alpha": 1.0, "beta": 0.5})
    assert _rel(out, ref) <= _tol(tree, k)


@pytest.mark.parametrize("out_dtype", ["fp32", "e4m3 cast"])
def test_amax_is_the_max_of_what_it_measures(cp, out_dtype):
    m, n, k = 200, 264, 152
    tree = ("amax(acc*col_scale + bias)" if out_dtype == "fp32"
            else "cast(amax(acc*col_scale + bias), e4m3)")
    dtype = "fp32" if out_dtype == "fp32" else "fp16"
    dev, leaves = _operands(cp, m, n, k, "rrr", dtype="fp16")
    if dtype == "fp32":
        dev["bias"] = dev["bias"].astype(cp.float32)
    amax = cp.zeros(1, dtype=cp.float32)
    C = cp.zeros((m, n), dtype=cp.float32 if dtype == "fp32" else cp.float16)
    _gemm(dev["A"], dev["B"], C, epilogue=tree, col_scale=dev["col_scale"], bias=dev["bias"],
          amax=amax)
    _, rec = evaluate(tree, {**leaves, "alpha": 1.0, "beta": 0.0})
    got = float(cp_to_np(amax)[0])
    assert math.isclose(got, rec["amax"], rel_tol=tolerance(k, "fp16", "fp32", "fp32") * 4)


@pytest.mark.parametrize("layout", ["rcr", "rcc", "ccr"])
def test_dual_gemm_swiglu_against_float64(cp, layout):
    cfg = PRESETS["wgmma_tma_store"].config.replace(dual=True, bn=128, stages=4, layout=layout,
                                                    epilogue="silu(gate)*up")
    for m, n, k in ODD[:2] + [(1024, 1024, 512)]:
        dev, _ = _operands(cp, m, n, k, layout, seed=1)
        dev_u, _ = _operands(cp, m, n, k, layout, seed=2)
        out = _kernel(cfg, dev["A"], dev["B"], up=dev_u["B"])
        a64 = cp_to_np(dev["A"]).astype(np.float64)
        gate = a64 @ cp_to_np(dev["B"]).astype(np.float64)
        up = a64 @ cp_to_np(dev_u["B"]).astype(np.float64)
        ref, _ = evaluate("silu(gate)*up", {"gate": gate, "up": up})
        assert _rel(out, ref) <= _tol("silu(acc)", k), (layout, m, n, k)


@pytest.mark.parametrize("tree", ["bias_gelu", "silu(acc*row_scale*col_scale + bias) + R"])
@pytest.mark.parametrize("layout", ["rrr", "rrc"])
@pytest.mark.parametrize("m, n, k", [(1000, 2056, 1024), (2000, 4104, 256)])
def test_overlap_matches_float64_with_the_staged_pre_activation(cp, tree, layout, m, n, k):
    """Deferred passes inside the next tile's main loop: one tile per CTA at 1000 x 2056, two
    or three at 2000 x 4104 (odd edges both); C poisoned first, so a tile left unfinished
    fails."""
    cfg = PRESETS["wgmma_overlap"].config.replace(layout=layout, epilogue=tree)
    dev, leaves = _operands(cp, m, n, k, layout, seed=3)
    epi = Epilogue.parse(tree)
    kw = {name: dev[name] for name in ("row_scale", "col_scale", "bias", "R") if epi.count(name)}
    c = dev["C"].copy(order="K")
    c.fill(np.nan)
    out = _kernel(cfg, dev["A"], dev["B"], c, alpha=1.0, beta=0.0, **kw)
    ref, _ = evaluate(epi, {**leaves, "alpha": 1.0, "beta": 0.0}, staged="fp16")
    assert _rel(out, ref) <= _tol(tree, k), (tree, layout)


@pytest.mark.parametrize("m", [1, 8, 64])
def test_small_m_keeps_row_and_column_vectors_apart_through_the_swap(cp, m):
    tree = "silu(acc*row_scale*col_scale + bias) + R"
    dev, leaves = _operands(cp, m, 2048, 1024, "rrr", seed=4)
    out = _gemm(dev["A"], dev["B"], epilogue=tree, row_scale=dev["row_scale"],
                col_scale=dev["col_scale"], bias=dev["bias"], R=dev["R"])
    ref, _ = evaluate(tree, {**leaves, "alpha": 1.0, "beta": 0.0})
    assert _rel(out, ref) <= _tol(tree, 1024)


def test_gelu_tanh_error_is_within_the_documented_bound(cp):
    """The kernel's GELU (tanh.approx.f32, fp16 C) against float64, element by element: at most
    0.5 |x| 2^-11 for the approximation plus half an fp16 ulp of the result and the accumulation
    error (templates/_epilogue_tree.cu.j2)."""
    m, n, k = 256, 256, 64
    dev, leaves = _operands(cp, m, n, k, "rrr", seed=5)
    out = cp_to_np(_gemm(dev["A"], dev["B"], epilogue="gelu(acc)")).astype(np.float64)
    x = leaves["acc"]
    ref, _ = evaluate("gelu(acc)", {"acc": x})
    bound = 0.5 * np.abs(x) * 2 ** -11 + np.abs(ref) * 2 ** -11 + 8 * 2 ** -24 * math.sqrt(k) * (
        np.abs(x) + 1)
    assert np.all(np.abs(out - ref) <= bound + 1e-6)


@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("shift", [0, 1])
def test_staged_vectors_aligned_or_not_with_a_ragged_last_tile(cp, pingpong, shift):
    """The epilogue's vectors, staged in shared memory at each tile's start: 16 bytes per
    cp.async where a vector's view is 16-byte aligned (shift 0), element by element where it is
    not (shift 1: views one element into their buffers); N = 4104 leaves a last column tile of
    8 columns (the rest zero-filled), M = 2056 a last row tile of 8 rows; 561 tiles, so each
    consumer takes several and its two slots alternate."""
    tree = "acc*row_scale*col_scale + bias + row_bias"
    cfg = PRESETS["wgmma_tma_store"].config.replace(bm=128, bn=128, stages=4,
                                                    pingpong=pingpong, epilogue=tree)
    assert [v.leaf for v in cfg.vectors] == ["bias", "col_scale", "row_scale", "row_bias"]
    m, n, k = 2056, 4104, 128
    dev, leaves = _operands(cp, m, n, k, "rrr", seed=7)
    kw = {}
    for name in ("row_scale", "col_scale", "row_bias", "bias"):
        whole = cp.zeros(dev[name].size + shift, dtype=dev[name].dtype)
        whole[shift:] = dev[name]
        kw[name] = whole[shift:]
    out = _kernel(cfg, dev["A"], dev["B"], dev["C"].copy(order="K"), **kw)
    ref, _ = evaluate(tree, {**leaves, "alpha": 1.0, "beta": 0.0})
    assert _rel(out, ref) <= _tol(tree, k), (pingpong, shift, _rel(out, ref))


@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("pad", [0, 1])
def test_staged_residual_in_place_of_c_with_ragged_tiles(cp, pingpong, pad):
    """R copied into the C staging tile at each tile's start, 16 bytes per cp.async (rows
    16-byte aligned: pad 0) or element by element (a leading dimension of N + 1: pad 1); ragged
    last row and column tiles, several tiles per consumer."""
    tree = "acc + bias + R"
    cfg = PRESETS["wgmma_tma_store"].config.replace(bm=128, bn=128, stages=4,
                                                    pingpong=pingpong, epilogue=tree)
    assert cfg.residual_staged
    m, n, k = 2056, 4104, 128
    dev, leaves = _operands(cp, m, n, k, "rrr", seed=8)
    R = cp.zeros((m, n + pad), dtype=dev["R"].dtype)
    R[:, :n] = dev["R"]
    out = _kernel(cfg, dev["A"], dev["B"], dev["C"].copy(order="K"), bias=dev["bias"],
                  R=R[:, :n])
    ref, _ = evaluate(tree, {**leaves, "alpha": 1.0, "beta": 0.0})
    assert _rel(out, ref) <= _tol(tree, k), (pingpong, pad, _rel(out, ref))


@pytest.mark.parametrize("bn, tree, extra", [
    (144, "none", {}), (160, "none", {}), (144, "acc + bias + R", {}), (160, "bias_gelu", {}),
    (144, "none", {"split_k": 2, "split_inline": True}), (144, "bias_gelu", {"pingpong": True}),
    (136, "none", {"out": "fp32"})])
def test_narrow_c_chunks_store_through_tma(cp, bn, tree, extra):
    """Tiles whose rows of C are not whole 128-byte rows stage C in 64- or 32-byte swizzled
    chunks for the TMA store (128 x 144: 32 bytes, 128 x 160: 64, fp32 128 x 136: 32), plain,
    with the staged residual, with GELU's epilogue, an inline split-K, ping-pong consumers;
    ragged last tiles (N = 4104 is no multiple of the width) and several tiles per consumer."""
    cfg = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", bm=128, bn=bn, stages=4,
                                                    epilogue=tree, **extra)
    assert cfg.store == "tma" and cfg.c_swizzle == (64 if bn == 160 else 32)
    _check_ragged_rcr(cp, cfg, tree, seed=9)


def _check_ragged_rcr(cp, cfg, tree: str, seed: int, k: int = 256) -> None:
    """``cfg`` (layout rcr) with epilogue ``tree`` on 2056 x 4104 x ``k`` (ragged last tiles,
    several tiles per consumer), C poisoned (NaN) first, against float64."""
    m, n = 2056, 4104
    dev, leaves = _operands(cp, m, n, k, "rcr", seed=seed)
    C = cp.full((m, n), np.nan, dtype=cp.float32 if cfg.out == "fp32" else cp.float16)
    epi = Epilogue.parse("acc" if tree == "none" else tree)
    kw = {name: dev[name] for name in ("bias", "R") if epi.count(name)}
    out = _kernel(cfg, dev["A"], dev["B"], C, **kw)  # C poisoned; beta = 0 never reads it
    ref, _ = evaluate(epi, {**leaves, "alpha": 1.0, "beta": 0.0})
    assert not np.isnan(cp_to_np(out)).any(), cfg.name
    assert _rel(out, ref) <= _tol(str(tree), k, out=cfg.out), (cfg.name, _rel(out, ref))


@pytest.mark.parametrize("bn, stages, c_stages, tree, extra", [
    (256, 4, 2, "none", {}), (256, 4, 1, "none", {}), (224, 4, 2, "none", {}),
    (256, 4, 2, "bias_gelu", {}), (192, 5, 1, "silu(acc + bias)", {}),
    (256, 4, 2, "none", {"split_k": 2, "split_inline": True}),
    (256, 4, 2, "none", {"pingpong": True, "bm": 64}),
    (128, 4, 2, "none", {"out": "fp32"}), (144, 6, 2, "bias", {})])
def test_c_stages_store_chunk_by_chunk(cp, bn, stages, c_stages, tree, extra):
    """C staged chunk by chunk through one or two buffers per consumer (c_stages), so that the
    ring takes a stage more: 128 x 256 and 128 x 224 (64-byte chunks), plain, with the family's
    bias + GELU and a tree's SiLU, an inline split-K, ping-pong consumers, fp32 C, 128 x 144
    (32-byte chunks) with a bias; ragged last tiles (N = 4104), several tiles per consumer, C
    poisoned first."""
    cfg = PRESETS["wgmma_tma_store"].config.replace(
        layout="rcr", bn=bn, stages=stages, c_stages=c_stages, epilogue=tree,
        **{"bm": 128, **extra})
    assert cfg.store == "tma" and cfg.c_stages == c_stages
    _check_ragged_rcr(cp, cfg, tree, seed=10)


@pytest.mark.parametrize("bn, stages", [(144, 6), (224, 4)])
def test_c_stage_buffers_reused_across_tiles(cp, bn, stages):
    """Two C staging buffers and an odd number of chunks (128 x 144: 9, 128 x 224: 7), so
    that a tile's first chunk takes the buffer its previous tile's last chunk was stored
    from; with K = 64 one K block separates the two stores."""
    cfg = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", bm=128, bn=bn,
                                                    stages=stages, c_stages=2)
    assert cfg.c_chunks % cfg.c_stages == 1
    _check_ragged_rcr(cp, cfg, "none", seed=11, k=64)
