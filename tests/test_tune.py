"""Tuning without a GPU: enumeration, pruning, ranking, the database, resuming and dispatch."""
import contextlib

import numpy as np
import pytest
from fake_tuning import DEVICE, FakeRunner, fake_compile, fake_speed

from gemmgen import PRESETS
from gemmgen.heuristics import tunedb
from gemmgen.heuristics.select import choose
from gemmgen.runtime.arrays import dtype_name_of
from gemmgen.model.space import (
    DeviceLimits,
    blocks_per_sm,
    enumerate_configs,
    predict,
    rank,
    select,
    unfit_reason,
)
from gemmgen.tune.search import Request, plan, tune


@pytest.mark.parametrize("family, dtype", [("simt", "fp32"), ("wmma", "fp16"), ("wmma", "tf32")])
def test_enumeration_yields_only_valid_configs(family, dtype):
    configs = enumerate_configs(family, dtype)
    assert len(configs) > 100
    assert all(not c.violations() for c in configs)
    assert all(c.dtype == dtype for c in configs)


def test_pruning_drops_what_the_device_cannot_hold():
    small = DeviceLimits("tiny", "sm_86", 10, 100 * 1024, 64 * 1024)
    configs = enumerate_configs("wmma", "fp16")
    too_big = [c for c in configs if c.smem_bytes > 64 * 1024]
    assert too_big and all("shared memory" in unfit_reason(c, small) for c in too_big)
    ranked = rank(configs, 4096, 4096, 4096, small)
    assert {c.name for c, _ in ranked}.isdisjoint({c.name for c in too_big})


def test_model_counts_waves_and_registers():
    cfg = PRESETS["warptile_tuned"].config  # 128x128 tiles, 256 threads, min_blocks 2
    p = predict(cfg, 4096, 4096, 4096, DEVICE, registers=128)
    assert p["blocks"] == 32 * 32 and p["blocks_per_sm"] == 2
    assert p["waves"] == pytest.approx(1024 / 264, abs=1e-3)
    assert p["tail_efficiency"] == pytest.approx((1024 / 264) / 4, abs=1e-3)
    assert blocks_per_sm(cfg, DEVICE, registers=168) == 1  # 168 regs: one 256-thread block


def test_selection_keeps_seeds_and_spreads_over_tile_shapes():
    ranked = rank(enumerate_configs("simt"), 4096, 4096, 4096, DEVICE)
    seed = PRESETS["warptile_tuned"].config.name
    chosen = select(ranked, 20, seeds=(seed,))
    assert len(chosen) == 20 and chosen[0][0].name == seed
    shapes = {(c.bm, c.bn, c.bk, c.wm, c.wn) for c, _ in chosen}
    assert len(shapes) >= 19  # one variant per tile shape before any second variant
    in_space = {c.name for c, _ in ranked}
    many = tuple(n for n in (p.config.name for p in PRESETS.values()) if n in in_space)
    assert len(many) > 3
    few = select(ranked, 3, seeds=many[::-1])
    assert [c.name for c, _ in few] == list(many[::-1][:3])  # seeds in order, never over count


def test_request_names_c_dtype_and_its_family_per_layout():
    assert Request(64, 64, 64, dtype="bf16").out == "bf16"
    assert Request(64, 64, 64, dtype="tf32").out == "fp32"
    assert Request(64, 64, 64, dtype="tf32").family_on("sm_90") == "mma"  # row-major B
    assert Request(64, 64, 64, dtype="tf32", layout="rcr").family_on("sm_90") == "wgmma"
    assert Request(64, 64, 64, dtype="fp16").family_on("sm_80") == "mma"


def test_plan_counts_each_step():
    chosen, stats = plan(Request(4096, 4096, 4096, max_configs=30), DEVICE)
    assert len(chosen) == stats["chosen"] == 30
    assert stats["valid"] >= stats["ranked"] > 0


def test_tune_records_every_candidate_and_never_picks_a_wrong_one(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    runner = FakeRunner()
    req = Request(4096, 4096, 4096, max_configs=24)
    key, entry, stats = tune(req, db, runner, compile_fn=fake_compile, jobs=2)
    rows = entry["candidates"]
    assert len(rows) == 24 and stats["measured_now"] == 24
    statuses = {r["status"] for r in rows.values()}
    assert {"ok", "wrong", "compile_error"} <= statuses
    assert all(r["reason"] for r in rows.values() if r["status"] != "ok")
    ok = {n: r["tflops"] for n, r in rows.items() if r["status"] == "ok"}
    best, default = max(ok, key=ok.get), entry["default"]
    assert rows[best]["config"]["skew"] != 0
    assert runner.submitted[0] == default and rows[default]["role"] == "default"
    if best == default:  # the hash made gemm's own choice the fastest: it stands
        assert entry["winner"] is None and entry["default_stands"]
    else:
        assert entry["winner"] == best
    assert entry["cublas_tflops"] == 50.0 and key == "FakeGPU|fp32|rrr|4096x4096x4096|simt"

    # Resume and extend: a new process, a larger space; only the new candidates run.
    runner2 = FakeRunner()
    db2 = tunedb.TuneDB(tmp_path / "db.json")
    _, entry2, stats2 = tune(Request(4096, 4096, 4096, max_configs=30), db2, runner2,
                             compile_fn=fake_compile, jobs=2)
    # the default is timed again in every run, the others once
    assert stats2["already_measured"] == 23 and stats2["measured_now"] == 7
    assert set(runner2.submitted) & set(runner.submitted) == {default}
    assert len(entry2["candidates"]) == 30


def test_budget_stops_new_work(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    _, entry, stats = tune(Request(1024, 1024, 1024, budget_s=0, max_configs=40), db,
                           FakeRunner(), compile_fn=fake_compile, jobs=1)
    assert stats["budget_hit"] and len(entry["candidates"]) < 40


def test_database_lookup_exact_nearest_and_atomic_save(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    cfg = PRESETS["warptile"].config.as_dict()
    for shape, speed in (((4096, 4096, 4096), 40.0), ((1024, 1024, 1024), 20.0)):
        k = tunedb.key("G", "fp32", *shape)
        db.entry(k, gpu="G")
        db.record(k, "a", {"status": "ok", "tflops": speed, "config": cfg})
        db.record(k, "b", {"status": "wrong", "tflops": 99.0, "config": cfg})
    assert db.entries[tunedb.key("G", "fp32", 4096, 4096, 4096)]["winner"] == "a"
    row, how = db.lookup("G", "fp32", 4096, 4096, 4096)
    assert how == "exact" and row["tflops"] == 40.0
    row, how = db.lookup("G", "fp32", 1500, 900, 1100)
    assert how == "nearest" and row["tflops"] == 20.0
    assert db.lookup("G", "fp16", 4096, 4096, 4096) == (None, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.json", "db.json.lock"]  # no temp
    assert tunedb.TuneDB(tmp_path / "db.json").entries == db.entries


def test_dispatch_choice(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    k = tunedb.key("G", "fp32", 512, 512, 512)
    db.entry(k)
    db.record(k, "x", {"status": "ok", "tflops": 1.0, "config": PRESETS["tile2d"].config.as_dict()})
    assert choose(db, "G", "fp32", 512, 512, 512) == (PRESETS["tile2d"].config, "exact")
    assert choose(db, "G", "fp32", 600, 500, 512)[1] == "nearest"
    assert choose(db, "other", "fp32", 512, 512, 512) == (PRESETS["warptile_tuned"].config,
                                                         "default")
    assert choose(None, "G", "bf16", 1, 1, 1, cc=80)[0] == PRESETS["mma_bf16"].config
    assert choose(None, "G", "bf16", 1, 1, 1, cc=90)[0] == PRESETS["wgmma_bf16"].config


def test_each_family_keeps_its_winner_and_lookup_takes_the_fastest(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    wm, wg = PRESETS["wmma_pipeline"].config, PRESETS["wgmma_tma_store"].config
    for cfg, speed in ((wm, 220.0), (wg, 750.0)):
        k = tunedb.key("H", "fp16", 4096, 4096, 4096, family=cfg.family)
        db.entry(k)
        db.record(k, cfg.name, {"status": "ok", "tflops": speed, "config": cfg.as_dict()})
    assert len(db.entries) == 2
    assert choose(db, "H", "fp16", 4096, 4096, 4096, cc=90) == (wg, "exact")
    assert choose(db, "A", "fp16", 4096, 4096, 4096, cc=80)[1] == "default"  # other GPU
    assert db.lookup("H", "fp16", 4096, 4096, 4096, families=["wmma"])[0]["tflops"] == 220.0
    assert choose(db, "H", "fp16", 4096, 4096, 4096, cc=80)[0].family == "wmma"


def test_no_python_process_is_spawned_to_compile(monkeypatch, nvcc):
    import multiprocessing

    from gemmgen.compile.cache import compile_many

    def refuse(*args, **kwargs):
        raise AssertionError("a Python process was started")
    monkeypatch.setattr(multiprocessing.Process, "start", refuse)
    configs = [PRESETS["tile1d"].config, PRESETS["smem"].config]
    out = compile_many(configs, arch="sm_90", jobs=2)
    assert all(isinstance(r, tuple) and r[0][:4] == b"\x7fELF" for r in out)


def test_dtype_names_of_arrays():
    assert dtype_name_of(np.ones(2, np.float32)) == "fp32"
    assert dtype_name_of(np.ones(2, np.float16)) == "fp16"
    assert dtype_name_of(np.ones(2, "V2")) == "bf16"
    with pytest.raises(ValueError, match="no gemmgen kernel takes float64"):
        dtype_name_of(np.ones(2))


def test_fake_speeds_are_distinct():
    assert fake_speed("a") != fake_speed("b")


def test_gemm_layout_follows_the_operands():
    from gemmgen.runtime.api import layout_of
    a, b = np.ones((4, 6), np.float32), np.ones((6, 5), np.float32)
    assert layout_of(a, b) == "rrr"
    assert layout_of(np.asfortranarray(a), b.T.copy().T) == "ccr"
    assert layout_of(a, b, np.asfortranarray(np.ones((4, 5), np.float32))) == "rrc"


def test_database_default_path_comes_from_platformdirs(monkeypatch, tmp_path):
    import platformdirs
    monkeypatch.delenv("GEMMGEN_TUNE_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert tunedb.default_path() == platformdirs.user_cache_path("gemmgen") / "tune.json"
    if platformdirs.user_cache_path("x").is_relative_to(tmp_path):  # Linux: XDG is honoured
        assert tunedb.default_path() == tmp_path / "cache" / "gemmgen" / "tune.json"
    monkeypatch.setenv("GEMMGEN_TUNE_DB", str(tmp_path / "mine.json"))
    assert tunedb.default_path() == tmp_path / "mine.json"
    assert tunedb.TuneDB().path == tmp_path / "mine.json"
    assert tunedb.TuneDB(tmp_path / "given.json").path == tmp_path / "given.json"


@pytest.mark.parametrize("text, match", [
    ("{oops", "is not valid JSON"),
    ("[]", "not a gemmgen tuning database"),
    (b"\xff\xfe", "cannot read tuning database"),
])
def test_corrupt_database_raises_a_named_error(tmp_path, text, match):
    path = tmp_path / "db.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(tunedb.TuneDBError, match=match) as info:
        tunedb.TuneDB(path)
    assert str(path) in str(info.value)
    with pytest.raises(tunedb.TuneDBError, match="is a directory"):
        tunedb.TuneDB(tmp_path)


def test_a_candidate_that_spills_becomes_a_spill_row_and_is_never_timed(tmp_path):
    from fake_tuning import spilling_compile
    db = tunedb.TuneDB(tmp_path / "db.json")
    runner = FakeRunner()
    _, entry, _ = tune(Request(4096, 4096, 4096, max_configs=24), db, runner,
                       compile_fn=spilling_compile, jobs=2)
    spills = {n: r for n, r in entry["candidates"].items() if r["status"] == "spill"}
    assert spills and set(spills).isdisjoint(runner.submitted)
    assert all("96 bytes spill stores, 128 bytes spill loads, 104 bytes stack" in r["reason"]
               for r in spills.values())
    assert entry["winner"] not in spills
    assert "spill" in tunedb.FINAL and db.measured(tunedb.key("FakeGPU", "fp32", 4096, 4096,
                                                              4096, family="simt")) >= set(spills)


def test_the_plan_leaves_out_what_the_estimate_says_would_spill():
    from gemmgen.model.registers import spill_risk
    chosen, stats = plan(Request(4096, 4096, 4096, max_configs=500), DEVICE)
    assert stats["spill_risk"] > 0
    assert stats["valid"] >= stats["ranked"] + stats["spill_risk"] - len(PRESETS)
    seeds = {p.config.name for p in PRESETS.values()}
    assert not [c.name for c, _ in chosen if spill_risk(c.config) and c.name not in seeds]


class _DeviceArray:
    """A stand-in for a CuPy array (dispatch recognises CuPy by its module)."""

    __module__ = "cupy._stand_in"

    def __init__(self, rows: int, cols: int, ptr: int):
        self.shape, self.ndim, self.dtype = (rows, cols), 2, np.dtype(np.float16)
        self.strides = (cols * 2, 2)
        self.data = type("Mem", (), {"ptr": ptr})()
        self.device = type("Dev", (), {"id": 0})()
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": "<f2", "version": 3,
                                         "data": (ptr, False), "strides": self.strides}


def test_gemm_checks_a_signature_once_then_only_launches(monkeypatch):
    """The call-overhead fast path: the first call with a signature checks the operands and
    builds a plan; later calls with new pointers but the same signature launch directly."""
    from gemmgen.heuristics.select import Choice
    from gemmgen.runtime import api, plans
    launches, checks = [], []

    class FakeRecipe:
        device, path = 0, "tma"

        def __init__(self, args):
            self.args = args

        def run(self, ptrs, stream=None):  # the operands' addresses patched in, as launched
            x = self.args
            launches.append((x.m, x.n, x.k, x.alpha, ptrs[0], x.lda, ptrs[1], x.ldb, x.beta,
                             ptrs[2], x.ldc))

    class FakeKernel:
        config = PRESETS["wgmma_tma_store"].config

        def launches(self, args, device=None):
            return FakeRecipe(args)

        def __call__(self, A, B, C=None, **kw):  # the full path, as Kernel.__call__
            from gemmgen.runtime.launch import launch
            return launch(self, A, B, C, **kw)
    monkeypatch.setattr(api, "_kernel_for",
                        lambda *a: (FakeKernel(), Choice(FakeKernel.config, "default")))
    monkeypatch.setattr(plans.driver, "on_device", lambda device: contextlib.nullcontext())
    real_check = plans.check_gemm
    monkeypatch.setattr(plans, "check_gemm", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    monkeypatch.setattr(api, "_PLANS", {})
    for base in (1 << 20, 2 << 20, 3 << 20):
        A, B, C = (_DeviceArray(264, 200, base), _DeviceArray(200, 136, base + 4096),
                   _DeviceArray(264, 136, base + 8192))
        assert api.gemm(A, B, C, alpha=0.5, beta=2) is C
    assert len(checks) == 1 and len(launches) == 3
    m, n, k, alpha, a_ptr, lda, b_ptr, ldb, beta, c_ptr, ldc = launches[-1][:11]
    assert (m, n, k, lda, ldb, ldc) == (264, 136, 200, 200, 136, 136)
    assert (a_ptr, b_ptr, c_ptr, alpha, beta) == (3 << 20, (3 << 20) + 4096, (3 << 20) + 8192, 0.5, 2.0)
    with pytest.raises(api.OperandError, match="C is required when beta != 0"):
        api.gemm(_DeviceArray(264, 200, 0), _DeviceArray(200, 136, 0), None, beta=1.0)
    with pytest.raises(api.OperandError, match="alpha must be a real number"):
        api.gemm(A, B, C, alpha="2")
    assert len(checks) == 2  # the C-less signature was new: checked (and refused) in full
    with pytest.raises(api.OperandError, match="bias"):  # checked in full, never dropped
        api.gemm(A, B, C, bias=np.zeros(136, np.float16), epilogue="bias")
    with pytest.raises(ValueError, match="unknown epilogue 'Relu'"):
        api.gemm(A, B, C, epilogue="Relu")
    checks.clear()
    api.gemm(_DeviceArray(8, 200, 0), B, _DeviceArray(8, 136, 0))  # a new shape: checked
    assert len(checks) == 1
