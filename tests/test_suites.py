"""Benchmark suites without a GPU: every suite file reads and expands as declared, bad files
are refused naming the file and the key, and the runner's pure parts (selection, rows,
header, merging, file names, plots) work on fake timings."""
import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from gemmgen.heuristics.select import decide, math_dtype
from gemmgen.model.presets import GEMM_PRESETS, PRESETS
from gemmgen.tune import suites
from gemmgen.tune.baseline import torch_op
from gemmgen.tune.bench import Timing, kernel_row
from gemmgen.tune.suite_kinds import dispatch_label
from gemmgen.tune.suite_run import (
    case_fields,
    document,
    failed_row,
    merge,
    out_dtype,
    problem_groups,
    suite_row,
)
from gemmgen.tune.suite_torch import captured, torch_row

SUITES = Path(__file__).resolve().parent.parent / "benchmarks" / "suites"
INFO = {"gpu": "NVIDIA H200", "cuda_version": "13.0", "cuda_driver": "13.0", "sms": 132,
        "l2_bytes": 50 << 20}
SIZES = {"ladder": (len(GEMM_PRESETS), len(GEMM_PRESETS)), "square": (20, 20),
         "odd": (23, 23), "epilogues": (24, 24), "llm": (1092, 390), "torch": (390, 234),
         "fp8": (132, 87), "moe": (36, 24)}
"""Cases of each suite: the whole suite and --quick."""


def test_every_suite_file_reads_and_expands_as_declared():
    assert sorted(SIZES) == sorted(p.stem for p in SUITES.glob("*.toml"))
    for name, (full, quick) in SIZES.items():
        suite = suites.load(name)
        assert suite.suite_file == f"benchmarks/suites/{name}.toml"
        assert (len(suites.expand(suite)), len(suites.expand(suite, quick=True))) == (full, quick)


def test_ladder_is_every_preset_in_its_dtype_and_layout():
    cases = suites.expand(suites.load("ladder"))
    assert [c.preset for c in cases] == list(GEMM_PRESETS)  # fp8: the fp8 suite; grouped: moe
    for c in cases:
        cfg = PRESETS[c.preset].config
        dtype = "fp32" if c.math == "3xtf32" else cfg.dtype  # fp32 data, beside SGEMM
        assert (c.dtype, c.layout, c.m, c.n, c.k) == (dtype, cfg.layout, 4096, 4096, 4096)
    assert [c.preset for c in cases if c.math == "3xtf32"] == ["wgmma_3xtf32"]


def test_odd_holds_the_skinny_decode_and_3xtf32_rows():
    cases = suites.expand(suites.load("odd"))
    shapes = {(c.dtype, c.shape, c.math) for c in cases}
    for dt in ("fp16", "bf16"):
        for s in ("4095x4097x4093", "128x8192x8192", "1x8192x8192", "8x8192x8192",
                  "16x8192x8192", "64x8192x8192", "256x256x65536"):
            assert (dt, s, "native") in shapes
    assert ("fp32", "8192x8192x8192", "3xtf32") in shapes


def test_llm_layers_run_as_gemmgen_torch_runs_them():
    """forward rcr, dgrad rrr, wgrad crr: the problems gemmgen.torch.linear_problems lists."""
    torch = pytest.importorskip("torch")  # noqa: F841 - gemmgen.torch imports it
    from gemmgen.torch import linear_problems
    suite = suites.load("llm")
    cases = [c for c in suites.expand(suite) if c.model == "llama3_8b" and c.tokens == 16
             and c.dtype == "fp16" and c.layer == "down_proj"]
    got = {(c.dtype, c.m, c.n, c.k, c.layout) for c in cases}
    want = {p[:5] for p in linear_problems(16, 14336, 4096, "fp16", "nk")}
    assert got == want


def test_shared_problems_run_once_with_their_other_names():
    cases = suites.expand(suites.load("llm"))
    keys = [c.key() for c in cases]
    assert len(keys) == len(set(keys))
    k_proj = next(c for c in cases if c.model == "llama3_8b" and c.layer == "k_proj")
    assert {"llama3_8b.v_proj", "mistral_7b.k_proj", "mixtral_8x7b.v_proj"} <= set(k_proj.aliases)
    assert not any(c.model == "mistral_7b" for c in cases)  # every Mistral layer is Llama's


def test_select_filters_by_label_and_aliases_then_caps():
    cases = suites.expand(suites.load("llm"))
    mistral = suites.select(cases, "MISTRAL_7B.q_proj")
    assert mistral and all(c.layer == "q_proj" and c.model == "llama3_8b" for c in mistral)
    assert len(suites.select(cases, "gpt2", 5)) == 5
    assert suites.select(cases, "no such thing") == []
    assert len(suites.select(cases, "fp16 rcr T=1 ")) == 13  # one forward decode row per layer


MODEL = 'kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nmodel = "a"\n'
LAYERS = '[models.a]\nsource = "s"\nlayers = {q = [8, 8]}\n'
BAD = [
    ('kind = "presets"\nbogus = 1\n[[problems]]\nsize = 64\n', "bogus: unknown key"),
    ('kind = "nope"\n[[problems]]\nsize = 64\n', "kind: 'nope' is not one of"),
    ('[[problems]]\nsize = 64\n', "kind: None is not one of"),
    ('kind = "presets"\n', "problems: the suite needs a non-empty"),
    ('kind = "presets"\nproblems = []\n', "problems: the suite needs a non-empty"),
    ('kind = "presets"\nbaseline = "none"\n[[problems]]\nsize = 64\n', "baseline: 'none'"),
    ('kind = "presets"\n[[problems]]\nsize = 64\ndtype = "fp16"\n', "problems[0].dtype: unknown"),
    ('kind = "presets"\n[[problems]]\npreset = "nope"\nsize = 64\n', "problems[0].preset: 'nope'"),
    ('kind = "presets"\n[[problems]]\npreset = "naive"\n', "problems[0].size: required"),
    ('kind = "dispatch"\n[[problems]]\ndtype = []\nsize = 64\n', "problems[0].dtype: empty list"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp64"\nsize = 64\n', "dtype: 'fp64' is not"),
    ('kind = "dispatch"\n[[problems]]\nsize = 64\n', "problems[0].dtype: required"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nsize = "4x4"\n', "size: '4x4' is not"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nsize = 0\n', "size: 0 is not"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\n', "problems[0].size: give either"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nsize = 64\nmath = "3xtf32"\n',
     "problems[0].math: 3xtf32 runs on fp32"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nmodel = "x"\nm = 1\n',
     "problems[0].model: 'x' is not in [models]"),
    (MODEL + 'm = 1\nlayout = "ccc"\n' + LAYERS, "problems[0].layout: 'ccc' is not a"),
    (MODEL + 'm = 1\nlayer = "z"\n' + LAYERS, "problems[0].layer: 'z' is not"),
    (MODEL + 'm = 1\n' + LAYERS.replace("[8, 8]", "[8]"), "models.a.layers.q: [8] is not [N, K]"),
    (MODEL + 'm = 1\n' + LAYERS.replace('source = "s"\n', ""), "models.a: needs source"),
    (MODEL + LAYERS, "problems[0].m: required"),
    ('kind = "dispatch"\nmodels = "nope"\n[[problems]]\ndtype = "fp16"\nsize = 64\n',
     "models: 'nope' names no other suite"),
    ('kind = "torch"\n[[problems]]\ndtype = "fp16"\nsize = 64\nmode = "lazy"\n',
     "problems[0].mode: 'lazy' is not one of eager"),
    ('kind = "torch"\n[[problems]]\ndtype = "fp16"\nsize = 64\nlayout = "rrr"\n',
     "problems[0].layout: unknown key"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nsize = 64\n[quick]\nsizes = [64]\n',
     "quick.sizes: unknown key"),
    ('kind = "dispatch"\n[[problems]]\ndtype = "fp16"\nsize = 64\n[quick]\nsize = [128]\n',
     "the tables expand to no case under [quick]"),
    ('kind = "dispatch"\nbudget_s = 0\n[[problems]]\ndtype = "fp16"\nsize = 64\n',
     "budget_s: 0 is not"),
    ('kind = "dispatch"\nplot = "pie"\n[[problems]]\ndtype = "fp16"\nsize = 64\n', "plot: 'pie'"),
    ('kind = "dispatch"\nproblems = [1]\n', "problems[0] is not a table"),
    ('kind = "dispatch\n', "not valid TOML"),
]


@pytest.mark.parametrize("text, match", BAD, ids=[b[1] for b in BAD])
def test_a_bad_suite_is_refused_naming_the_file_and_key(tmp_path, text, match):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(suites.SuiteError) as err:
        suites.load(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}:") and match in message, message
    assert "\n" not in message


def test_names_resolve_from_anywhere_and_unknown_names_list_the_suites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert suites.resolve("ladder") == SUITES / "ladder.toml"
    with pytest.raises(suites.SuiteError, match="unknown suite 'nope'.*known: epilogues, fp8, ladder"):
        suites.resolve("nope")
    with pytest.raises(suites.SuiteError, match="no suite file x/nope.toml"):
        suites.resolve("x/nope.toml")


def test_results_are_named_per_suite_and_gpu(tmp_path):
    ladder = suites.load("ladder")
    assert suites.results_path(ladder, "NVIDIA H200").resolve() == \
        SUITES.parent / "results" / "ladder_NVIDIA_H200.json"
    assert suites.results_path(ladder, "NVIDIA H100 80GB HBM3", "png", tmp_path) == \
        tmp_path / "ladder_NVIDIA_H100_80GB_HBM3.png"
    other = tmp_path / "mine.toml"
    other.write_text((SUITES / "square.toml").read_text())
    mine = suites.load(str(other))
    assert suites.results_path(mine, "G") == Path("benchmarks/results/mine_G.json")
    assert mine.suite_file == str(other)


def fake_kernel(case):
    """What a runner would build for ``case`` (no GPU): the preset, or gemm's choice on an
    sm_90 device; and whether it runs swapped."""
    if case.preset:
        cfg, swap = PRESETS[case.preset].config, False
    else:
        choice = decide(None, "", math_dtype(case.dtype, case.math), case.m, case.n, case.k, 90,
                        case.layout, case.epilogue, True, case.math)
        cfg, swap = choice.config, choice.swap
    return SimpleNamespace(config=cfg, name=cfg.name, registers=168, smem_bytes=0), swap


def fake_rows(suite, cases, fail_every=7):
    """Rows as the runners make them, with made-up timings; every ``fail_every``-th fails (none for None)."""
    rows = []
    for i, c in enumerate(cases):
        if fail_every and i % fail_every == 3:
            rows.append(failed_row(c, "gemm", "BuildError: nvcc failed"))
        elif suite.kind == "torch":
            ours, base = Timing(2e-4, 1.9e-4, 2.1e-4, 70), Timing(1e-4, 1e-4, 1e-4, 70)
            rows.append(torch_row(c, ours, base, 1e-3, 1e-3, 1e-2, name="k", how="default"))
        else:
            kernel, swap = fake_kernel(c)
            p = SimpleNamespace(m=c.m, n=c.n, k=c.k, batch=None, out=out_dtype(c),
                                layout=c.layout)
            t = 1e-3 * (1 + i % 5)
            err = 1e-6 if c.dtype == "fp32" else 1e-4  # within the dtype's tolerance
            row = kernel_row(c.preset or dispatch_label(c), kernel, p, Timing(t, t, t, 9), err,
                             (Timing(2e-3, 2e-3, 2e-3, 9), err, torch_op(c.layout)))
            rows.append(suite_row(c, row, how="default", swap=swap))
    return rows


def test_rows_keep_the_report_fields_and_failures_stay():
    suite = suites.load("odd")
    cases = suites.expand(suite)
    rows = fake_rows(suite, cases)
    assert len(rows) == len(cases)
    for r, c in zip(rows, cases):
        assert {"kernel", "name", "dtype", "M", "N", "K", "tflops", "cublas_tflops",
                "pct_cublas", "rel_error", "passed", "layout", "epilogue", "batch", "time_ms",
                "p20_ms", "p80_ms", "mode", "case"} <= set(r) or "error" in r
        assert r["dtype"] == c.dtype and r["case"] == c.label  # 3xTF32 rows say fp32
    failed = [r for r in rows if not r["passed"]]
    assert failed and all(r["error"] and r["tflops"] == 0.0 for r in failed)
    three = next(r for r in rows if r.get("math") == "3xtf32" and r["passed"])
    assert three["dtype"] == "fp32"


def test_torch_rows_compare_per_call_times():
    case = suites.expand(suites.load("torch"))[0]
    row = torch_row(case, Timing(2e-5, 1e-5, 3e-5, 10), Timing(1e-5, 1e-5, 1e-5, 10), 1e-3,
                    2e-3, 1e-2, name="gemm_x", how="default, shaped", swap=True)
    assert (row["pct_cublas"], row["time_ms"], row["cublas_time_ms"]) == (50.0, 0.02, 0.01)
    assert row["passed"] and row["mode"] == "eager" and row["model"] == "gpt2"
    assert row["name"] == "gemm_x" and row["swap"] is True and row["layout"] == "rcr"


def test_the_header_says_what_was_run_and_how():
    suite = suites.load("llm")
    cases = suites.select(suites.expand(suite, quick=True), "gpt2")
    doc = document(suite, INFO, fake_rows(suite, cases), {"only": "gpt2", "quick": True},
                   baseline="torch_ops")
    for key in ("suite", "suite_file", "gpu", "cuda_version", "cuda_driver", "git_commit",
                "date", "baseline", "method", "rows"):
        assert key in doc, key
    assert (doc["suite"], doc["suite_file"]) == ("llm", "benchmarks/suites/llm.toml")
    assert "F.linear" in doc["baseline"] and "median" in doc["method"]
    assert doc["baseline_label"] == "F.linear / torch.matmul"
    assert "eager" in doc["method"] and "3x L2" in doc["method"] and "NaN" in doc["method"]
    assert doc["complete"] and doc["runs"][0]["selection"]["only"] == "gpt2"
    json.dumps(doc)  # serializable as it is


def test_a_partial_run_replaces_its_rows_and_keeps_the_others():
    suite = suites.load("square")
    cases = suites.expand(suite)
    old = document(suite, INFO, fake_rows(suite, cases, None), {})
    again = suites.select(cases, "fp16")
    new = document(suite, INFO, [{**r, "tflops": 1.0} for r in fake_rows(suite, again, None)],
                   {"only": "fp16"})
    merged = merge(old, new)
    assert len(merged["rows"]) == len(cases) and len(merged["runs"]) == 2
    assert {r["tflops"] == 1.0 for r in merged["rows"] if r["dtype"] == "fp16"} == {True}
    assert all(r["tflops"] != 1.0 for r in merged["rows"] if r["dtype"] != "fp16")


def test_cases_share_buffers_by_problem():
    groups = problem_groups(suites.expand(suites.load("epilogues")))
    assert len(groups) == 4 and all(len(g) == 6 for g in groups.values())
    torch_groups = problem_groups(suites.expand(suites.load("torch")))
    assert all([c.mode for c in g] == ["eager", "graph", "host"] for g in torch_groups.values())
    assert case_fields(next(iter(torch_groups.values()))[0])["tokens"] == 1


@pytest.mark.parametrize("name, only", [("odd", None), ("torch", "gpt2.c_attn")])
def test_bars_and_heatmaps_are_drawn(tmp_path, name, only):
    """(Lines and the llm heatmap: test_suite_runs draws them through the command line.)"""
    pytest.importorskip("matplotlib")
    from gemmgen.tune.results import plot_suite
    suite = suites.load(name)
    cases = suites.select(suites.expand(suite, quick=True), only)
    doc = document(suite, INFO, fake_rows(suite, cases), {})
    out = plot_suite(doc, tmp_path / "sub" / f"{name}.png")
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_moe_suite_runs_each_model_layer_tokens_and_routing():
    cases = suites.expand(suites.load("moe"))
    first = cases[0]
    assert (first.model, first.layer, first.tokens, first.routing, first.groups) == (
        "deepseek_v3", "gate_up", 4096, "uniform", 256)
    assert (first.m, first.n, first.k, first.layout) == (4096 * 8, 4096, 7168, "rcr")
    assert first.label == "deepseek_v3.gate_up bf16 rcr T=4096 G=256 uniform 32768x4096x7168"
    mixtral = [c for c in cases if c.model == "mixtral_8x7b"]
    assert {(c.m, c.n, c.k) for c in mixtral} == {(t * 2, 14336, 4096) for t in
                                                  (4096, 16384, 65536)}
    assert {c.routing for c in cases} == {"uniform", "skew65", "skew90"}
    assert case_fields(first)["routing"] == "uniform" and case_fields(first)["groups"] == 256


def test_moe_bars_from_rows():
    from gemmgen.tune.suite_moe import bars

    def row(groups, routing, tokens, tflops, pct, loop):
        return {"groups": groups, "routing": routing, "model": f"m{groups}", "layer": "l",
                "tokens": tokens, "tflops": tflops, "pct_cublas": pct, "pct_loop": loop,
                "passed": True}
    rows = [row(256, "uniform", 4096, 400, 130, 300), row(256, "skew90", 4096, 380, 125, 250),
            row(8, "uniform", 4096, 780, 101, 110), row(8, "skew65", 4096, 760, 112, 115)]
    got = {name: (round(v, 3), ok) for name, v, _, ok in bars(rows)}
    assert got["many experts: geomean x torch._grouped_mm"] == (1.275, True)
    assert got["many experts: geomean x loop of torch.matmul"] == (2.739, True)
    assert got["few large experts, skew65: geomean x torch._grouped_mm"] == (1.12, True)
    assert got["skewed: worst TFLOP/s x the uniform case's"] == (0.95, True)


def test_a_bad_moe_model_is_refused(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text('kind = "moe"\n[models.x]\nsource = "s"\n[models.x.layers]\nl = [8, 8]\n'
                   '[[problems]]\nmodel = "x"\nm = 16\n')
    with pytest.raises(suites.SuiteError, match="needs \\[models.x\\] with experts and top_k"):
        suites.load(str(bad))
    bad.write_text('kind = "moe"\n[models.x]\nsource = "s"\nexperts = 4\ntop_k = 2\n'
                   '[models.x.layers]\nl = [8, 8]\n[[problems]]\nmodel = "x"\nm = 16\n'
                   'routing = "zipf"\n')
    with pytest.raises(suites.SuiteError, match="routing: 'zipf' is not uniform, random"):
        suites.load(str(bad))


def test_a_captured_loop_warms_each_set_outside_capture_then_cycles_them():
    """suite_torch.captured: every set used is called once on a side stream before capture
    (PyTorch's rule for CUDA graphs), then the graph holds ``calls`` calls over the sets in
    turn; a graph of fewer calls than sets warms only the sets it uses."""
    log = []

    @contextmanager
    def phase(name):
        log.append(name)
        yield
        log.append("end " + name)
    stream = SimpleNamespace(wait_stream=lambda other: None)
    cuda = SimpleNamespace(Stream=lambda: stream, current_stream=lambda: stream,
                           stream=lambda s: phase("side"), graph=lambda g: phase("capture"),
                           CUDAGraph=lambda: "graph")
    assert captured(log.append, 3, 7, SimpleNamespace(cuda=cuda)) == "graph"
    assert log == ["side", 0, 1, 2, "end side", "capture", 0, 1, 2, 0, 1, 2, 0, "end capture"]
    log.clear()
    captured(log.append, 4, 2, SimpleNamespace(cuda=cuda))
    assert log == ["side", 0, 1, "end side", "capture", 0, 1, "end capture"]


def test_results_name_the_commit_the_run_was_given(monkeypatch):
    """A copy of the tree on a lent GPU machine has no .git of its own (or an old one): the
    results name GEMMGEN_COMMIT, the variable tests/run_gpu.py and the scripts read, else
    GEMMGEN_GIT_COMMIT, else the checkout's HEAD."""
    from gemmgen.tune import results
    monkeypatch.delenv("GEMMGEN_COMMIT", raising=False)
    monkeypatch.delenv("GEMMGEN_GIT_COMMIT", raising=False)
    head = results.git_commit()
    assert head is None or len(head) == 40
    monkeypatch.setenv("GEMMGEN_GIT_COMMIT", "abc1234")
    assert results.git_commit() == "abc1234"
    monkeypatch.setenv("GEMMGEN_COMMIT", "def5678")
    assert results.git_commit() == "def5678"
