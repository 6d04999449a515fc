"""The mma family without a GPU: model figures, the swizzle's bank mapping, dispatch order, every
rule firing alone as a static_assert, and the static evidence (ptxas, SASS) of every preset on
sm_80, sm_86, sm_89 and sm_90."""
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from breakers import MMA_BREAKERS, breaker, pairwise_variants

from gemmgen import FAMILIES, PRESETS, ConfigError, render
from gemmgen.dispatch import choose
from gemmgen.families import default_family, families_for
from gemmgen.families.mma import MMA_RULES, MmaConfig, fallback_of
from gemmgen.model import LAYOUTS
from gemmgen.nvcc import BuildError, _run_nvcc, parse_ptxas_kernels, tool_path

MMA = {n: p.config for n, p in PRESETS.items() if p.config.family == "mma"}
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
LADDER = ["mma_base", "mma_vec", "mma_bfco", "mma_ldgsts", "mma_reg", "mma_prefetch",
          "mma_ldmatrix", "mma_swizzle", "mma_epilogue"]


def test_ladder_adds_one_switch_per_step():
    assert [n for n in MMA if n in LADDER] == LADDER
    names = ("vector", "skew", "cp_async", "acc_smem", "stages", "ldmatrix", "swizzle",
             "staged_c")
    for prev, step in zip(LADDER, LADDER[1:]):
        a, b = MMA[prev].as_dict(), MMA[step].as_dict()
        changed = {k for k in a if a[k] != b[k]}
        assert changed and changed <= set(names) | {"frag_db"}, (step, changed)
        assert (a["bm"], a["bn"], a["bk"]) == (b["bm"], b["bn"], b["bk"])


def test_figures_of_the_tuned_preset():
    c = MMA["mma_tuned"]  # 128x256x32 fp16, 8 warps of 64x64, 4 stages, 128-byte swizzle
    assert (c.threads, c.frags, c.acc_regs) == (256, (4, 8), 128)
    assert c.pipeline_bytes == 4 * (128 * 32 + 32 * 256) * 2
    assert c.c_stage_bytes == 128 * (256 + 8) * 4 and c.smem_bytes == c.c_stage_bytes
    # A rows are 64 bytes (4 chunks: XOR pattern every 2 rows); B rows 512 bytes (8-chunk XOR).
    assert (c.sw_span("A"), c.sw_div("A"), c.sw_span("B"), c.sw_div("B")) == (4, 2, 8, 1)
    assert c.ldsm("A") and c.ldsm("B")
    tf = MMA["mma_tf32"].replace(layout="rrr")
    assert tf.ldsm("A") and not tf.ldsm("B"), "tf32 .trans does not exist: N-major B is LDS"
    assert tf.ctypes()["mma_shape"] == "m16n8k8"


def test_defaults_fit_every_arch_and_tuned_presets_fit_sm80_and_sm90():
    from gemmgen.arch import get_arch
    for dtype, name in FAMILIES["mma"].defaults.items():
        assert MMA[name].smem_bytes <= get_arch("sm_86").smem_per_block_optin, name
    for name in ("mma_tuned", "mma_tuned_bf16", "mma_tuned_tf32"):
        assert MMA[name].smem_bytes <= get_arch("sm_80").smem_per_block_optin, name


def _indexer(cfg, op):
    """The template's a_idx / b_idx, from the constants the template receives."""
    k = cfg.template_constants()
    ch, ld, sdiv, mask = (k["CHUNK_ELEMS"], k[f"{op}_LD"], k[f"{op}_SW_DIV"],
                          k[f"{op}_SW_MASK"])
    return lambda r, c: r * ld + ((c // ch) ^ ((r // sdiv) & mask)) * ch + c % ch


@pytest.mark.parametrize("name", ["mma_swizzle", "mma_tuned", "mma_tf32", "mma_bf16"])
@pytest.mark.parametrize("layout", ["rrr", "ccc"])
def test_swizzle_is_a_permutation_and_ldmatrix_phases_are_conflict_free(name, layout):
    cfg = MMA[name].replace(layout=layout)
    for op in "AB":
        rows, row = cfg._rows(op)
        ch, idx = cfg.chunk_elems, _indexer(cfg, op)
        seen = {idx(r, c) for r in range(rows) for c in range(row)}
        assert seen == set(range(rows * row)), f"{op}: the swizzle must permute each row"
        for r0 in range(0, rows - 7, 8):  # 8 rows at one chunk column: one ldmatrix phase
            for c in range(0, row, ch):
                banks = {(idx(r0 + i, c) * cfg.elem_bytes // 16) % 8 for i in range(8)}
                assert len(banks) == 8, (op, r0, c, banks)


def test_padding_step_is_conflict_free_too():
    cfg = MMA["mma_bfco"]  # rows of 32 + 8 halves = 80 bytes
    idx = _indexer(cfg, "A")
    banks = {(idx(i, 0) * 2 // 16) % 8 for i in range(8)}
    assert len(banks) == 8


def test_every_violation_is_named_with_its_numbers():
    with pytest.raises(ConfigError) as info:
        MMA["mma_fp16"].replace(skew=8, stages=1)
    text = str(info.value)
    assert "M20 swizzle-no-skew" in text and "SKEW = 8" in text
    assert "M17 pipeline-cp-async" not in text and len(info.value.violations) == 1


def test_dispatch_prefers_mma_below_hopper_and_wgmma_on_it():
    assert [f.name for f in families_for("fp16", 80)][:2] == ["mma", "wmma"]
    assert default_family("bf16", 86).name == "mma" and default_family("tf32", 89).name == "mma"
    assert default_family("fp16", 90).name == "wgmma"
    assert choose(None, "A", "fp16", 512, 512, 512, cc=80)[0].family == "mma"
    assert choose(None, "L4", "tf32", 64, 64, 64, cc=89, layout="crc")[0].family == "mma"
    assert choose(None, "H", "tf32", 64, 64, 64, cc=90, layout="rrr")[0].family == "mma"
    assert choose(None, "H", "fp32", 64, 64, 64, cc=80)[0].family == "simt"
    assert FAMILIES["mma"].arch_for(86) == "sm_86" and FAMILIES["mma"].arch_for(90) == "sm_90"
    with pytest.raises(ValueError, match="needs sm_80 or newer"):
        FAMILIES["mma"].arch_for(75)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_and_epilogue_is_accepted(layout):
    for name in ("mma_tuned", "mma_tf32", "mma_base"):
        cfg = MMA[name].replace(layout=layout, epilogue="bias_gelu")
        assert cfg.name.endswith(f"_l{layout}_ebias_gelu") or layout == "rrr"
        assert render(cfg).count("static_assert(") == len(MMA_RULES)


def test_fallback_of_takes_the_same_problem():
    w = PRESETS["wgmma_tma_store"].config.replace(layout="crc", epilogue="relu")
    fb = fallback_of(w)
    assert (fb.family, fb.dtype, fb.out, fb.layout, fb.epilogue) == ("mma", "fp16", w.out, "crc",
                                                                     "relu")


def _kernel_lines(sources):
    """(first line, last line, kernel name) of each source in their concatenation."""
    spans, line = [], 1
    for src, name in sources:
        n = src.count("\n") + 1
        spans.append((line, line + n - 1, name))
        line += n
    return spans


def test_every_rule_fires_alone_as_a_static_assert_in_one_nvcc_call(nvcc, tmp_path):
    """All breakers in one translation unit: nvcc reports each failed static_assert with its
    line, which names the kernel; each kernel fires exactly its own rule."""
    cfgs = {rule.id: breaker("mma", rule.name) for rule in MMA_RULES}
    assert set(MMA_BREAKERS) == {r.name for r in MMA_RULES}
    sources = [(render(c, "sm_80"), c.name) for c in cfgs.values()]
    src = tmp_path / "breakers.cu"
    src.write_text("\n".join(s for s, _ in sources))
    with pytest.raises(BuildError) as info:
        _run_nvcc(["-cubin", "-arch=sm_80", "-std=c++17", "-o", str(tmp_path / "k.cubin")],
                  src, 300)
    fired: dict[str, set] = {}
    spans = _kernel_lines(sources)
    for line, rid in re.findall(r'\((\d+)\): error: static assertion failed with "([A-Z]\d+)',
                                info.value.log):
        owner = next(name for lo, hi, name in spans if lo <= int(line) <= hi)
        fired.setdefault(owner, set()).add(rid)
    assert {cfgs[rid].name: {rid} for rid in cfgs} == fired


def _compile_group(configs, archs, tmp):
    """One nvcc call: ``configs`` as one translation unit, its PTX (compute_80: the sm_80
    feature set every arch shares) assembled by ptxas for each of ``archs`` into one fatbin;
    returns (ptxas report per (kernel, arch), cuobjdump's SASS listing)."""
    src = Path(tmp) / f"{configs[0].name}.cu"
    src.write_text("\n".join(render(c) for c in configs))
    fatbin = src.with_suffix(".fatbin")
    code = ",".join(archs)
    log = _run_nvcc(["-fatbin", "-std=c++17", f"-gencode=arch=compute_80,code=[{code}]",
                     "-o", str(fatbin)], src, 600)
    sass = subprocess.run([tool_path("cuobjdump"), "-sass", str(fatbin)], capture_output=True,
                          text=True, timeout=300, check=True).stdout
    return parse_ptxas_kernels(log), sass


def _sass_by_function(sass: str) -> dict[tuple[str, str], str]:
    """SASS text per (function, arch) of a cuobjdump listing of a fatbin."""
    out, arch, fn, buf = {}, None, None, []
    for line in sass.splitlines():
        if m := re.match(r"\s*arch = (sm_\d+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function : (\S+)", line):
            if fn:
                out[(fn, fn_arch)] = "\n".join(buf)
            fn, fn_arch, buf = m.group(1), arch, []
        elif fn:
            buf.append(line)
    if fn:
        out[(fn, fn_arch)] = "\n".join(buf)
    return out


# Layout and epilogue paths: every layout and epilogue once, for 16-bit and TF32 kernels of
# the tuned presets' switches on a small tile (the paths do not depend on the tile; a small
# one compiles fast).
VARIANTS = (pairwise_variants(MmaConfig(64, 64, 32, 32, 32, out="fp16", stages=3))
            + pairwise_variants(MmaConfig(64, 64, 16, 32, 32, dtype="tf32", stages=3))[::2])


@pytest.fixture(scope="module")
def static_evidence(nvcc):
    """Every preset for the four archs and the layout variants for sm_80, in three nvcc calls
    run side by side (CI has two cores)."""
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    presets = list(MMA.values())
    jobs = [(presets[0::2], ARCHS), (presets[1::2], ARCHS), (VARIANTS, ("sm_80",))]
    with tempfile.TemporaryDirectory(prefix="gemmgen-mma-") as tmp:
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda job: _compile_group(*job, tmp), jobs))
    report, sass = {}, {}
    for rep, text in done:
        report.update(rep)
        sass.update(_sass_by_function(text))
    return report, sass


@pytest.mark.parametrize("name", list(MMA))
def test_preset_compiles_for_every_arch_without_spills_and_with_its_instructions(
        static_evidence, name):
    report, sass = static_evidence
    cfg = MMA[name]
    for arch in ARCHS:
        res = report[(cfg.name, arch)]
        assert res.spills == 0 and res.stack_bytes == 0, f"{arch}: {res}"
        assert 0 < res.registers <= 255 and res.smem_bytes == 0, f"{arch}: {res}"
        text = sass[(cfg.name, arch)]
        assert "HMMA" in text, f"{arch}: no tensor-core instruction"
        assert ("LDSM" in text) == (cfg.ldsm("A") or cfg.ldsm("B")), arch
        assert ("LDGSTS" in text) == cfg.cp_async, arch
        assert not re.search(r"\b(LDL|STL)\b", text), f"{arch}: local memory"
        if cfg.vector:  # the 16-byte path and, for unaligned operands, the element path
            assert re.search(r"LDG\.E\.(U16|16)\b|LDG\.E\b(?!\.128)", text), arch


def test_every_layout_and_epilogue_compiles(static_evidence):
    report, sass = static_evidence
    assert len({c.layout for c in VARIANTS}) == 8 and len({c.epilogue for c in VARIANTS}) == 6
    for cfg in VARIANTS:
        res = report[(cfg.name, "sm_80")]
        assert res.spills == 0 and res.stack_bytes == 0, f"{cfg.name}: {res}"
        assert "HMMA" in sass[(cfg.name, "sm_80")], cfg.name


def _args(line: str, call: str) -> list[str]:
    """The two arguments of ``call(...)`` in ``line`` (a C expression each)."""
    start = line.index(call + "(") + len(call) + 1
    depth, parts, cur = 0, [], ""
    for ch in line[start:]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in parts + [cur]]


def _c_eval(expr: str, **names) -> int:
    """A C integer expression of non-negative values (/ truncates) evaluated in Python."""
    return eval(expr.replace("/", "//"), {}, names)  # noqa: S307 (our own template's text)


def _expected(dtype: str, operand: str, reg: int, half: int, g: int, t: int) -> tuple[int, int]:
    """(row, col) of the element an mma fragment register holds: A (m, k), B (k, n), from the
    PTX ISA's fragment layouts of m16n8k16 (16-bit, two halves per register) and m16n8k8."""
    if dtype == "tf32":
        return ((g + 8 * (reg % 2), t + 4 * (reg // 2)) if operand == "A" else (t + 4 * reg, g))
    if operand == "A":
        return g + 8 * (reg % 2), 2 * t + half + 8 * (reg // 2)
    return 2 * t + half + 8 * reg, g


@pytest.mark.parametrize("dtype", ["fp16", "tf32"])
@pytest.mark.parametrize("layout", ["rrr", "ccr", "rcr", "crr"])
@pytest.mark.parametrize("ldmatrix", [True, False])
def test_fragment_addresses_of_the_template_give_the_mma_layouts(dtype, layout, ldmatrix):
    """Emulate the rendered kernel's fragment loads for one warp at kk = 16 (8 for tf32):
    shared tiles filled with their element coordinates through the template's own swizzled
    index, the lane addresses read from the rendered source, ldmatrix's documented delivery
    (row i / 4, 16-bit pair i % 4 of matrix j in register j; .trans: the transpose); every
    register must hold the element the PTX ISA's fragment layout asks for."""
    base = dict(out="fp32") if dtype == "tf32" else dict(out="fp16")
    cfg = MmaConfig(64, 64, 32, 32, 32, dtype=dtype, stages=2, ldmatrix=ldmatrix,
                    layout=layout, **base)
    src = render(cfg)
    k = cfg.template_constants()
    kk = 16 if dtype == "fp16" else 8
    tiles = {}
    for op in "AB":
        rows, row = cfg._rows(op)
        idx, flat = _indexer(cfg, op), {}
        col = layout["AB".index(op)] == "c"
        for r in range(rows):
            for c in range(row):
                # A element (m, k) or B element (k, n), whatever the stored orientation
                flat[idx(r, c)] = (c, r) if col else (r, c)
        tiles[op] = (flat, idx)
    words = 2 if dtype == "fp16" else 1  # elements per 32-bit register
    for op, var, dst in (("A", "as", "a"), ("B", "bs", "r")):
        flat, idx = tiles[op]
        held = {}  # (lane, register) -> elements
        line = next((ln for ln in src.splitlines() if f"({dst}, {var} + {op.lower()}_idx(" in ln
                     and "ldsm_x4" in ln), None)
        if k[f"{op}_LDSM"]:
            assert line is not None, f"{op}: no ldmatrix in the source"
            r_expr, c_expr = _args(line, f"{op.lower()}_idx")
            trans = "ldsm_x4_trans" in line
            addr = [idx(_c_eval(r_expr, lane=ln, kk=kk, mb=0, nb=0, CHUNK_ELEMS=cfg.chunk_elems),
                        _c_eval(c_expr, lane=ln, kk=kk, mb=0, nb=0, CHUNK_ELEMS=cfg.chunk_elems))
                    for ln in range(32)]
            for lane in range(32):
                for j in range(4):
                    rows = addr[8 * j:8 * j + 8]
                    if trans:  # the transpose: stored rows 2(i%4), 2(i%4)+1, column i/4
                        got = [flat[rows[2 * (lane % 4) + e] + lane // 4] for e in range(2)]
                    else:
                        got = [flat[rows[lane // 4] + words * (lane % 4) + e]
                               for e in range(words)]
                    held[(lane, j)] = got
        else:
            assert line is None, f"{op}: ldmatrix where the config has none"
            at = f"{op.lower()}_at"
            lines = [ln for ln in src.splitlines() if f"{var}[{at}(" in ln and "=" in ln]
            assert len(lines) == (4 if op == "A" else 2), lines
            for reg, ln_ in enumerate(lines):
                pieces = ln_.split(f"{var}[{at}(")[1:]
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    names = dict(mb=0, kk=kk, g=g, t=t, n=g)
                    got = []
                    for piece in pieces:
                        a, b = _args(f"{at}(" + piece, at)
                        x, y = _c_eval(a, **names), _c_eval(b, **names)
                        got.append(flat[idx(*((y, x) if layout["AB".index(op)] == "c"
                                              else (x, y)))])
                    held[(lane, reg)] = got
        for (lane, j), got in held.items():
            g, t = lane // 4, lane % 4
            reg, tile = (j, 0) if op == "A" else (j % 2, j // 2)
            want = [_expected(dtype, op, reg, h, g, t) for h in range(words)]
            if op == "A":
                want = [(m, kx + kk) for m, kx in want]
            else:
                want = [(kx + kk, n + 8 * tile) for kx, n in want]
            assert got == want, (op, lane, j, got, want)
