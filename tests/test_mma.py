"""The mma family without a GPU: model figures, the swizzle's bank mapping, dispatch order, every
rule firing alone as a static_assert, and the static evidence (ptxas, SASS) of every preset on
sm_80 (sm_90 too with make test-all; the family also runs on sm_86 and sm_89)."""
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from breakers import MMA_BREAKERS, breaker, pairwise_variants

from gemmgen import FAMILIES, PRESETS, ConfigError, render
from gemmgen.compile.nvcc import BuildError, _run_nvcc, parse_ptxas_kernels, tool_path
from gemmgen.heuristics.select import choose
from gemmgen.model.config import LAYOUTS
from gemmgen.model.dtypes import ELEM_BYTES
from gemmgen.model.families import default_family, families_for
from gemmgen.model.families.mma import MMA_RULES, MmaConfig, fallback_of

MMA = {n: p.config for n, p in PRESETS.items() if p.config.family == "mma"}
ARCHS = ("sm_80",)  # Ampere in CI; Hopper with make test-all (SLOW_ARCHS); sm_86, sm_89 left out
SLOW_ARCHS = ("sm_90",)
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
    from gemmgen.model.arch import get_arch
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


def _evidence(groups) -> tuple[dict, dict]:
    """(ptxas report, SASS) per (kernel, arch) of ``groups`` ([(configs, archs)]), one nvcc
    call per group, run side by side (CI has two cores)."""
    if tool_path("cuobjdump") is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    with tempfile.TemporaryDirectory(prefix="gemmgen-mma-") as tmp:
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(lambda job: _compile_group(*job, tmp), groups))
    report, sass = {}, {}
    for rep, text in done:
        report.update(rep)
        sass.update(_sass_by_function(text))
    return report, sass


@pytest.fixture(scope="module")
def static_evidence(nvcc):
    """Every preset for ARCHS, in two nvcc calls."""
    presets = list(MMA.values())
    return _evidence([(presets[0::2], ARCHS), (presets[1::2], ARCHS)])


def _check_preset(cfg, report, sass, arch) -> None:
    """A preset's ptxas report and SASS on ``arch``: no spills, stack or static shared memory;
    HMMA; LDSM, LDGSTS and the vector loads exactly where its switches ask for them."""
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


@pytest.mark.parametrize("name", list(MMA))
def test_preset_compiles_without_spills_and_with_its_instructions(
        static_evidence, name):
    for arch in ARCHS:
        _check_preset(MMA[name], *static_evidence, arch)


@pytest.mark.slow
def test_every_preset_also_assembles_for_hopper(nvcc):
    presets = list(MMA.values())
    report, sass = _evidence([(presets[0::2], SLOW_ARCHS), (presets[1::2], SLOW_ARCHS)])
    for cfg in presets:
        for arch in SLOW_ARCHS:
            _check_preset(cfg, report, sass, arch)


@pytest.mark.slow  # make test-all: CI's five minutes
def test_every_layout_and_epilogue_compiles(nvcc):
    report, sass = _evidence([(VARIANTS[0::2], ("sm_80",)), (VARIANTS[1::2], ("sm_80",))])
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


STAGED = [n for n, c in MMA.items() if c.staged_c]


def _np_expr(expr: str) -> str:
    """A C expression of the staged epilogue as a NumPy one: / and % of non-negative ints,
    max/min, one top-level ``cond ? a : b``, ``(size_t)`` casts."""
    expr = expr.replace("(size_t)", "").replace("/", "//")
    expr = re.sub(r"\bmax\(", "np.maximum(", re.sub(r"\bmin\(", "np.minimum(", expr))
    if m := re.fullmatch(r"(\w+) \? (\w+) : (.*)", expr):
        expr = f"np.where({m[1]}, {m[2]}, {m[3]})"
    return expr


def _staged_epilogue(src: str) -> dict:
    """The staged epilogue's statements, read from the rendered source: staging stores (shared
    index, accumulator element), the write-out's idx/rr/cc, global coordinates, the row guard,
    n_in, the global and shared offsets and the 16-byte-store condition."""
    body = src[src.index("float* cst = "):]
    out = {"stores": []}
    out["rc"] = re.search(r"const int r = (.*?), c = (.*?);", body).groups()
    for idx, e in re.findall(r"cst\[(.*?)\] = alpha \* acc_ref\(i, j, (.*?)\);", body):
        out["stores"].append((idx, e))
    if m := re.search(r"float2\*>\(cst \+ (.*?)\) =\s*make_float2\(alpha \* acc_ref\(i, j, "
                      r"(.*?)\), alpha \* acc_ref\(i, j, (.*?)\)\);", body, re.S):
        out["stores"] += [(m[1], m[2]), (f"{m[1]} + 1", m[3])]
    out["idx"] = re.search(r"const int idx = (.*?);", body)[1]
    out["rr"], out["cc"] = re.search(r"const int rr = (.*?), cc = (.*?);", body).groups()
    g = re.search(r"const int (g[mn]) = (.*?), (g[mn]) = (.*?);", body).groups()
    out["g"] = {g[0]: g[1], g[2]: g[3]}
    line = re.search(r"if \((.*?)\) continue;", body)[1]
    out["guards"] = re.findall(r"!\((\w+) \|\| (g[mn]) < (\w+)\)", line)
    assert out["guards"], line
    out["n_in"] = re.search(r"const int n_in = (.*?);", body)[1]
    out["dst"] = re.search(r"out_t\* dst = C \+ (.*?);", body)[1]
    out["src"] = re.search(r"const float\* src = cst \+ (.*?);", body)[1]
    out["vec"] = re.search(r"const bool c_vec = ldc % EPI_VEC == 0 && reinterpret_cast<size_t>"
                           r"\(C\) % 16 == 0;", body) is not None
    assert len(out["stores"]) == 2, out["stores"]
    return out


def _emulate_staged_epilogue(cfg, m: int, n: int, ldc: int):
    """Every CTA of an M x N launch through the rendered staged epilogue: which accumulator
    element each shared float holds, and which element of C (as an offset from C, ldc apart)
    each write-out store covers with which shared float. Returns the failures found."""
    src, k = render(cfg), cfg.template_constants()
    ep = _staged_epilogue(src)
    c_col = cfg.layout[2] == "c"
    k.update(M=m, N=n, ldc=ldc, M_FULL=int(bool(cfg.m) and m % cfg.bm == 0),
             N_FULL=int(bool(cfg.n) and n % cfg.bn == 0))
    tid = np.arange(k["THREADS"])
    warp, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    wm0, wn0 = (warp // k["WARPS_N"]) * k["WM"], (warp % k["WARPS_N"]) * k["WN"]
    names = dict(k, np=np, g=g, t=t, wm0=wm0, wn0=wn0, tid=tid)
    ev = lambda expr, **more: eval(_np_expr(expr), {}, {**names, **more})  # noqa: E731,S307
    # staging: shared float -> accumulator element (tile row, tile column), the PTX ISA's
    # m16n8 C fragment: element e of tile (i, j) is row g + 8 (e / 2), column 2 t + e % 2
    held, limit = {}, cfg.smem_bytes // 4
    errors = []
    for i in range(k["FRAGS_M"]):
        for j in range(k["FRAGS_N"]):
            for h in range(2):
                for idx_expr, e_expr in ep["stores"]:
                    more = dict(i=i, j=j, h=h, r=ev(ep["rc"][0], i=i, j=j, h=h),
                                c=ev(ep["rc"][1], i=i, j=j, h=h))
                    slot, e = ev(idx_expr, **more), ev(e_expr, **more)
                    row = wm0 + i * k["MMA_M"] + g + 8 * (e // 2)
                    col = wn0 + j * k["MMA_N"] + 2 * t + e % 2
                    for s, rc in zip(np.broadcast_to(slot, tid.shape).tolist(),
                                     zip(row.tolist(), col.tolist())):
                        if s in held or not 0 <= s < limit:
                            errors.append(f"staging slot {s} twice or past {limit}")
                        held[s] = rc
    assert len(held) == cfg.bm * cfg.bn
    held_r, held_c = np.full(limit, -1), np.full(limit, -1)
    for s_, (r_, c_) in held.items():
        held_r[s_], held_c[s_] = r_, c_
    written = np.zeros(m * n, dtype=np.int64)  # stores per element of C
    for tile_m in range(-(-m // cfg.bm)):
        for tile_n in range(-(-n // cfg.bn)):
            m0, n0 = tile_m * cfg.bm, tile_n * cfg.bn
            for it in range(k["EPI_ITERS"]):
                v = dict(m0=m0, n0=n0, it=it)
                idx = ev(ep["idx"], **v)
                v.update(idx=idx, rr=ev(ep["rr"], idx=idx), cc=ev(ep["cc"], idx=idx))
                v.update({name: ev(expr, **v) for name, expr in ep["g"].items()})
                live = np.ones(tid.shape, bool)
                for full, gx, ext in ep["guards"]:
                    live &= np.logical_or(k[full], v[gx] < k[ext])
                n_in = np.where(live, ev(ep["n_in"], **v), 0)
                dst, sh = ev(ep["dst"], **v), ev(ep["src"], **v)
                c_vec = ep["vec"] and ldc % k["EPI_VEC"] == 0  # C's base itself 16-byte aligned
                vec = live & (n_in == k["EPI_VEC"]) & c_vec
                if np.any((dst[vec] * ELEM_BYTES[cfg.out]) % 16):
                    errors.append(f"tile ({tile_m},{tile_n}): misaligned 16-byte store")
                e = np.arange(k["EPI_VEC"])[:, None]
                on = e < n_in  # the elements each thread stores
                gm = np.broadcast_to(v["gm"] + (e if c_col else 0), on.shape)[on]
                gn = np.broadcast_to(v["gn"] + (0 if c_col else e), on.shape)[on]
                off = (dst + e)[on]
                slot = (sh + e)[on]
                inside = (gm < m) & (gn < n) & (gm >= m0) & (gm < m0 + cfg.bm) & \
                    (gn >= n0) & (gn < n0 + cfg.bn)
                if not inside.all():
                    errors.append(f"tile ({tile_m},{tile_n}) stores outside its tile or "
                                  f"{m}x{n}: C{list(zip(gm[~inside], gn[~inside]))[:3]}")
                    continue
                if np.any(off != (gn * ldc + gm if c_col else gm * ldc + gn)):
                    errors.append(f"tile ({tile_m},{tile_n}): store offset is not its element")
                if np.any(held_r[slot] != gm - m0) or np.any(held_c[slot] != gn - n0):
                    errors.append(f"tile ({tile_m},{tile_n}): a store reads another "
                                  f"element's shared float")
                np.add.at(written, gm * n + gn, 1)
    if np.any(written != 1):
        errors.append(f"{int(np.sum(written == 0))} elements never written, "
                      f"{int(np.sum(written > 1))} written twice")
    return errors


@pytest.mark.parametrize("name", STAGED)
def test_staged_epilogue_writes_each_element_once_from_its_own_tile(name):
    """The staged C write-out (gty111 step 9) emulated from the rendered source, every CTA of
    ragged launches (the H200 report: 520x776 and 136x136 wrong in columns 0..7 only): every
    element of C exactly once, from the shared float holding its own accumulator, inside
    M x N and the CTA's tile, 16-byte stores 16-byte aligned; row- and column-major C (the
    latter stages the tile transposed), A and B either way (they size the pipeline the tile
    reuses), the preset's dtype (tf32: 4 floats a store), ldc padded or not a multiple of
    the 16-byte run (element stores). Checks index math and bounds, not timing."""
    base = MMA[name]
    for layout in ("rrr", "rrc", "ccr", "ccc"):  # the write-out depends on C's layout only
        cfg = base.replace(layout=layout)
        for m, n, pad in ((136, 136, 0), (520, 776, 0), (131, 262, 8), (129, 200, 3)):
            ldc = (m if layout[2] == "c" else n) + pad
            errors = _emulate_staged_epilogue(cfg, m, n, ldc)
            assert not errors, (name, layout, m, n, ldc, errors[:5])
