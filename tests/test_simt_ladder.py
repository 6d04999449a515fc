"""The SIMT ladder's last steps (issue 12): static evidence that each technique is in the
machine code and does what it claims, without a GPU. Every preset also goes through
test_nvcc's preset test (sm_80 and sm_90: no spills, no stack, the model's shared memory) and
test_gpu's sweep."""
import re
from collections import Counter

import pytest

from gemmgen import PRESETS, render
from gemmgen.model.config import WARP_SIZE
from gemmgen.model.families.simt.rules import LANES_M, LANES_N

NEW_STEPS = ["simt_cs", "simt_swizzle", "simt_fragdb", "simt_256x128", "simt_peel", "simt_best"]
BANKS = 32


def test_new_steps_follow_the_ladder_one_technique_each():
    names = list(PRESETS)
    assert names.index("warptile_tuned") < names.index("simt_cs")
    assert [n for n in names if n in NEW_STEPS] == NEW_STEPS
    prev = PRESETS["warptile_tuned"].config.as_dict()
    for name in NEW_STEPS:
        cur = PRESETS[name].config.as_dict()
        changed = {k for k in cur if cur[k] != prev[k]}
        # one technique per step; the swizzle drops the padding it replaces, the cuBLAS
        # tile changes the tile fields together
        assert changed and (len(changed) == 1 or changed <= {"swizzle_a", "skew"}
                            or changed <= {"bm", "bk", "wm", "wn", "min_blocks"}), (name, changed)
        prev = cur


def _sts_phase_banks(addresses_words):
    """Bank conflicts of one warp-wide 128-bit shared store: 4 phases of 8 lanes, each lane
    16 bytes; returns the worst number of distinct 16-byte rows hitting one bank."""
    worst = 1
    for phase in range(4):
        count = Counter()
        for lane in range(phase * 8, phase * 8 + 8):
            for w in range(4):
                count[(addresses_words[lane] + w) % BANKS] += 1
        worst = max(worst, max(count.values()))
    return worst


def _a_store_conflicts(cfg) -> int:
    """Worst bank conflict of the transposing A stores (row-major A, VEC scalar STS per
    loaded vector), following the template's index math and the model's swizzle constants."""
    env = cfg.template_constants()
    apr, vec, cols = env["A_VECS_PER_ROW"], cfg.vec, env["AS_COLS"]

    def swz(k):
        return ((k // vec) % env["SWZ_GROUPS"]) * env["SWZ_SPAN"] if cfg.swizzle_a else 0
    worst = 1
    for warp in range(cfg.warps):
        for ld in range(env["A_LOADS"]):
            for e in range(vec):
                banks = Counter()
                for lane in range(WARP_SIZE):
                    v = warp * WARP_SIZE + lane + ld * cfg.threads
                    r, c = v // apr, (v % apr) * vec
                    banks[((c + e) * cols + (r ^ swz(c + e))) % BANKS] += 1
                worst = max(worst, max(banks.values()))
    return worst


@pytest.mark.parametrize("name", ["simt_swizzle", "simt_256x128", "simt_best"])
def test_swizzled_transposing_store_is_conflict_free(name):
    cfg = PRESETS[name].config
    assert cfg.swizzle_a and _a_store_conflicts(cfg) == 1
    # with BK = 16 the padded tile it replaces conflicts 2-way (Nsight: 17 M store conflicts
    # at 4096^3 for warptile_tuned); with BK = 8 skew 4 happens to be conflict-free too
    padded = _a_store_conflicts(cfg.replace(swizzle_a=False, skew=4))
    assert padded == (2 if cfg.bk == 16 else 1)
    assert _a_store_conflicts(cfg.replace(swizzle_a=False, skew=0)) == cfg.bk // cfg.vec  # unpadded


@pytest.mark.parametrize("name", ["simt_swizzle", "simt_best"])
def test_swizzle_keeps_fragment_vectors_whole_and_reads_conflict_free(name):
    """Every k's XOR is a multiple of VEC below 32, so a fragment's float4 stays one aligned
    vector, and the 8 lane rows of a warp read 8 distinct vectors of one 32-float block."""
    cfg = PRESETS[name].config
    env = cfg.template_constants()
    assert cfg.tm == 4 and cfg.transpose_a
    for k in range(cfg.bk):
        s = ((k // cfg.vec) % env["SWZ_GROUPS"]) * env["SWZ_SPAN"]
        assert s % cfg.vec == 0 and s < WARP_SIZE <= cfg.bm
        vectors = [((lr * cfg.tm) ^ s) // 4 for lr in range(LANES_M)]  # TM = 4: one each
        assert sorted(vectors) == list(range(LANES_M))


@pytest.mark.parametrize("name", ["simt_cs", "simt_256x128", "simt_best"])
def test_c_staging_stores_and_reads_are_conflict_free(name):
    cfg = PRESETS[name].config
    env = cfg.template_constants()
    cols, tn = env["CS_COLS"], cfg.tn
    for j in range(cfg.wn_iter):
        for h in range(0, tn, 4):
            addr = [(lane // LANES_N) * cols + j * env["WN_STEP"] + (lane % LANES_N) * tn + h
                    for lane in range(WARP_SIZE)]
            assert _sts_phase_banks(addr) == 1, (j, h)
    for q in range(env["CS_READS"]):
        v = [lane + q * WARP_SIZE for lane in range(WARP_SIZE)]
        addr = [(x // env["CS_VECS_PER_ROW"]) * cols + (x % env["CS_VECS_PER_ROW"]) * 4 for x in v]
        assert _sts_phase_banks(addr) == 1
        # half a warp stores one row: 16 float4 = 256 contiguous bytes of C
        rows = [x // env["CS_VECS_PER_ROW"] for x in v]
        assert len(set(rows)) == WARP_SIZE * 4 // cfg.wn
    assert cfg.cs_bytes <= cfg.smem_bytes


def _ops(text: str) -> Counter:
    return Counter(m.group(1) for m in re.finditer(
        r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", text))


@pytest.fixture(scope="module")
def ladder_sass(nvcc):
    """SASS (sm_90) of three steps, compiled as one translation unit, per kernel name."""
    from gemmgen.compile.nvcc import compile_cubin, sass, tool_path
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    names = ["simt_cs", "simt_256x128", "simt_peel"]
    src = "\n".join(render(PRESETS[n].config) for n in names)
    cubin, _ = compile_cubin(src, "sm_90", "simt_ladder")
    parts = re.split(r"\n\s*Function : ", sass(cubin))[1:]
    by_kernel = {p.split()[0]: _ops(p) for p in parts}
    return {n: by_kernel[PRESETS[n].config.name] for n in names}


def test_smem_output_stage_is_sts128_lds128_stg128(ladder_sass):
    after = ladder_sass["simt_cs"]
    for name in ("simt_cs", "simt_256x128", "simt_peel"):
        ops = ladder_sass[name]
        assert ops["STS.128"] and ops["LDS.128"] and ops["STG.E.128"], name
        assert not any(op.startswith(("LDL", "STL")) for op in ops), name
    # direct stores: one STG.128 per TN-wide row piece; staged: 4 row vectors per (i, r)
    cfg = PRESETS["simt_cs"].config
    env = cfg.template_constants()
    assert after["STG.E.128"] >= cfg.wm_iter * cfg.tm * env["CS_READS"]
    assert after["LDS.128"] >= cfg.wm_iter * cfg.tm * env["CS_READS"]


def test_peeled_kernel_has_unchecked_vector_load_sites(ladder_sass):
    """The interior copy loads without bounds predicates, so the peeled kernel has more
    128-bit global load sites than the same kernel without peeling."""
    def vec_loads(ops):
        return sum(v for op, v in ops.items() if op.startswith("LDG.E.128"))
    assert vec_loads(ladder_sass["simt_peel"]) > vec_loads(ladder_sass["simt_256x128"])


def test_cublas_tile_fits_the_register_budget(nvcc):
    """(f) 256x128x8 with 128 accumulators per thread: under 255 registers, as ptxas reports
    in the preset test; here the model's estimate agrees that it does not spill."""
    from gemmgen.model.registers import register_cap, registers_needed
    for name in ("simt_256x128", "simt_peel", "simt_best"):
        cfg = PRESETS[name].config
        assert cfg.acc_regs == 128 and cfg.bm * cfg.bn == 256 * 128
        assert registers_needed(cfg) <= register_cap(cfg) == 255
