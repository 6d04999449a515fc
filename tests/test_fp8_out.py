"""An e4m3 D without a GPU: the fp8 family's quant axis (rules, parameters, header, emitted
epilogue), the recipe's two extra operands, the heuristic's choices, and the PyTorch op's
checks, reference and fake implementation."""
import pytest

from gemmgen.model.config import ConfigError
from gemmgen.model.presets import PRESETS

FP8 = {name: p.config for name, p in PRESETS.items() if p.config.family == "fp8"}


@pytest.mark.parametrize("change, rule", [
    (dict(out="e4m3"), "F27"),
    (dict(quant="tensor"), "F28"),
    (dict(out="e4m3", quant="1x128", bn=64, partials=1), "F29"),
])
def test_quant_rules_name_themselves(change, rule):
    with pytest.raises(ConfigError) as info:
        FP8["fp8_block_prom2"].replace(**change)
    assert rule in {v.rule.id for v in info.value.violations}, str(info.value)


def test_an_e4m3_d_adds_its_scales_and_amax_to_the_kernel():
    from gemmgen.codegen.render import render
    base = FP8["fp8_block_prom2"]
    cfg = base.replace(out="e4m3", quant="1x128")
    names = [p.name for p in cfg.params()]
    assert names[-6:] == ["scale_d", "sd_m", "sd_n", "amax", "amax_slots", "amax_count"]
    assert "scale_d" not in [p.name for p in base.params()]
    assert cfg.name.endswith("_oute4m3_q1x128") and cfg.out_bytes == 1
    assert cfg.template_constants()["OUT_GROUPS"] == cfg.bn // 128
    src = render(cfg)
    assert "using bias_t = __nv_bfloat16;" in src and "e4m3_pair" in src
    assert "atomicMax(amax_slots + blockIdx.x, bits)" in src and "*amax = all" in src and "scale_d[(size_t)row * sd_m" in src
    assert "D e4m3 (saturating to +-448, bias bf16): per row and 128 columns" in src
    tensor = render(base.replace(out="e4m3", quant="tensor"))
    assert "qf_tensor = 1.f / __ldg(scale_d)" in tensor and "__shfl_xor_sync" not in tensor


def test_the_heuristic_chooses_a_valid_kernel_for_every_shape():
    from gemmgen.heuristics.fp8 import choose_fp8
    for m in (1, 64, 200, 4096):
        for n, k in ((131, 300), (2112, 7168), (32768, 512)):
            for scaling, fast in (("tensor", True), ("row", True), ("block", False)):
                for quant in ("tensor", "1x128"):
                    cfg = choose_fp8(m, n, k, scaling, fast, out="e4m3", quant=quant).config
                    assert cfg.out == "e4m3" and cfg.quant == quant and not cfg.violations()


def test_recipe_patches_the_scale_and_amax_operands(nvcc, monkeypatch):
    """Operands 6 (scale_d) and 7 (amax) are patched where the compiled kernel reads them, and
    the 1 x 128 scales' strides follow them."""
    import struct
    from types import SimpleNamespace

    from gemmgen.compile.cache import compile_cached
    from gemmgen.codegen.render import render
    from gemmgen.runtime import driver as driver_mod, tma
    from gemmgen.runtime.kernel import Kernel
    from gemmgen.runtime.recipe import PATCH_POINTER, KernelArgs, Ref, Scale
    cfg = FP8["fp8_tensor_fast"].replace(out="e4m3", quant="1x128")
    cubin, _ = compile_cached(render(cfg), "sm_90a", cfg.name)
    kernel = Kernel(cfg, "sm_90a", cubin)
    monkeypatch.setattr(driver_mod, "current_device", lambda: 0)
    monkeypatch.setattr(driver_mod, "device_attribute", lambda dev, name: 132)
    monkeypatch.setattr(tma, "encode", lambda spec, name: bytes(128))
    monkeypatch.setattr(type(kernel), "function", lambda self, dev=None, suffix="":
                        SimpleNamespace(handle=9, dynamic_smem=cfg.smem_bytes))
    m, n, k = 256, 512, 1024
    recipe = kernel.launches(KernelArgs(
        m, n, k, Ref(0, 0x7000000), k, Ref(1, 0x8000000), k, Ref(2, 0x9000000), n,
        scale_a=Scale(Ref(4, 0xa000000), 0, 0), scale_b=Scale(Ref(5, 0xb000000), 0, 0),
        scale_d=Scale(Ref(6, 0xc000000), 1, m), amax=Ref(7, 0xd000000)), 0)
    gemm, = recipe.launches
    kinds = {p.index: p.kind for p in gemm.patches}
    assert kinds[6] == PATCH_POINTER and kinds[7] == PATCH_POINTER
    slots = {w.tag: w for w in recipe.workspaces}    # amax gathered per CTA, zero between calls
    assert slots["amax slots"].nbytes == 4 * gemm.grid[0] and slots["amax slots"].zero
    assert slots["amax counter"].nbytes == 4 and slots["amax counter"].zero
    names = [p.name for p in cfg.params()]
    at = kernel.launcher._offsets[names.index("sd_m")]
    assert struct.unpack_from("@ii", gemm.params, at) == (1, m)


torch = pytest.importorskip("torch", reason="PyTorch is not installed")


def _operands(m=100, n=300, k=256):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn).t()
    return a, b, torch.tensor(0.5), torch.tensor(0.25)


def test_the_cpu_op_quantizes_the_reference_product():
    import gemmgen.torch as gt
    a, b, sa, sb = _operands()
    v = gt.scaled_mm_reference(a, b, sa, sb, out_dtype=torch.float32)
    q, s, amax = gt.scaled_mm_quantized(a, b, sa, sb)
    rq, rs = gt.quantize_reference(v, (1, 128))
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)
    assert s.shape == (100, 3) and s.stride() == (1, 100)
    assert float(amax) == float(v.abs().max())
    scale = torch.tensor(0.01)
    q, s, amax = gt.scaled_mm_quantized(a, b, sa, sb, block=None, scale=scale)
    assert s is scale and float(q.float().abs().max()) == 448.0   # v / 0.01 saturates


@pytest.mark.parametrize("kwargs, match", [
    (dict(block=None), "scale is required"),
    (dict(block=(2, 2)), "block must be"),
    (dict(scale=torch.tensor(1.0)), "scale is for block='tensor'"),
    (dict(block=None, scale=torch.ones(2)), "scale must be one float32 value"),
    (dict(bias=torch.zeros(300)), "bias must hold"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    import gemmgen.torch as gt
    from gemmgen.runtime.operands import OperandError
    with pytest.raises(OperandError, match=match):
        gt.scaled_mm_quantized(*_operands(), **kwargs)


def test_fake_implementation_gives_the_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    import gemmgen.torch  # noqa: F401  (registers the op)
    with FakeTensorMode() as mode:
        a, b, sa, sb = (mode.from_tensor(x) for x in _operands(64, 520, 256))
        q, s, amax = torch.ops.gemmgen.scaled_mm_quantized(a, b, sa, sb)
    assert q.shape == (64, 520) and q.dtype == torch.float8_e4m3fn
    assert s.shape == (64, 5) and s.stride() == (1, 64) and amax.shape == (1,)


def test_gemm_refuses_an_e4m3_d_by_name():
    import numpy as np
    import ml_dtypes
    import gemmgen
    from gemmgen.runtime.operands import OperandError
    A = np.ones((4, 32), ml_dtypes.float8_e4m3fn)
    B = np.ones((32, 8), ml_dtypes.float8_e4m3fn)
    with pytest.raises(OperandError, match="scaled_mm_quantized"):
        gemmgen.gemm(A, B, out_dtype="e4m3")
