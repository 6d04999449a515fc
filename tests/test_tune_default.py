"""The tuner against gemm's default (no GPU): the default and its neighbours are measured first,
a winner is kept only where it beats the default by the margin, and dispatch honours an entry
where the default stands."""
import pytest
from fake_tuning import DEVICE, FakeRunner, fake_compile

from gemmgen.heuristics import tunedb
from gemmgen.heuristics.select import decide
from gemmgen.tune.default import MARGIN, Candidate, defaults, neighbours, settle
from gemmgen.tune.search import Request, plan, tune

SHAPE = (16, 4096, 4096)  # decode-like: gemm swaps the operands (64 tiles: K not split)


def _default(m=SHAPE[0], n=SHAPE[1], k=SHAPE[2]):
    return defaults("FakeGPU", 90, "bf16", m, n, k, "rcr")[0]


def _tune(tmp_path, speed, shape=SHAPE, max_configs=4):
    db = tunedb.TuneDB(tmp_path / "db.json")
    runner = FakeRunner(speed)
    req = Request(*shape, dtype="bf16", layout="rcr", max_configs=max_configs)
    key, entry, stats = tune(req, db, runner, compile_fn=fake_compile, jobs=2)
    return db, runner, key, entry


def test_the_default_is_what_gemm_runs_without_a_database():
    choice = decide(None, "FakeGPU", "bf16", *SHAPE, 90, "rcr")
    cand = _default()
    assert (cand.config, cand.swap, cand.role) == (choice.config, choice.swap, "default")
    assert cand.swap and cand.config.split_k == 1


def test_the_plan_holds_the_default_first_and_its_neighbours():
    chosen, stats = plan(Request(*SHAPE, dtype="bf16", layout="rcr", max_configs=4), DEVICE)
    cands = [c for c, _ in chosen]
    assert cands[0].name == _default().name and cands[0].role == "default"
    near = [c for c in cands if c.role == "neighbour"]
    assert stats["around_default"] == 1 + len(near) and len(near) >= 5
    assert any(not c.swap for c in near)  # the unswapped problem
    assert any(c.swap and c.config.split_k != cands[0].config.split_k for c in near)
    assert any(c.config.split_k > 1 and c.config.split_inline for c in near)
    assert {c.config.bm for c in near} >= {64, 128}
    assert len([c for c in cands if c.role == "sampled"]) <= 4
    assert len({c.name for c in cands}) == len(cands)


def test_neighbours_of_a_wide_problem_keep_the_operands():
    base = _default(256, 4544, 4544)
    near = neighbours(base, 256, 4544, 4544, "rcr")
    assert not base.swap and near
    stages = {c.config.stages for c in near}
    assert base.config.stages - 1 in stages
    assert all(not c.config.violations() for c in near)


def test_the_default_is_timed_first_and_launched_swapped(tmp_path):
    _, runner, _, entry = _tune(tmp_path, lambda name: 100.0)
    first = _default().name
    assert runner.submitted[0] == first and runner.swaps[first] is True
    assert entry["default"] == first and entry["candidates"][first]["role"] == "default"
    assert entry["candidates"][first]["swap"] is True


def test_a_slower_best_candidate_is_not_stored(tmp_path):
    first = _default().name
    db, _, key, entry = _tune(tmp_path, lambda name: 200.0 if name == first else 90.0)
    assert entry["winner"] is None and entry["default_stands"] is True
    assert entry["default_tflops"] == 200.0
    assert tunedb.TuneDB(db.path).entries[key]["default_stands"] is True


@pytest.mark.parametrize("gain, kept", [(1.02, False), (1.05, True)])
def test_a_winner_must_beat_the_default_by_the_margin(tmp_path, gain, kept):
    first = _default().name
    other = [c for c, _ in plan(Request(*SHAPE, dtype="bf16", layout="rcr", max_configs=4),
                                DEVICE)[0] if c.role == "neighbour"][0].name
    speeds = {first: 100.0, other: 100.0 * gain}
    db, _, key, entry = _tune(tmp_path, lambda name: speeds.get(name, 50.0))
    stored = tunedb.TuneDB(db.path).entries[key]
    assert stored["winner"] == (other if kept else None)
    assert stored["default_stands"] is (not kept)
    if kept:  # gemm runs the stored winner, swapped as measured
        choice = decide(tunedb.TuneDB(db.path), "FakeGPU", "bf16", *SHAPE, 90, "rcr")
        assert choice.how == "exact" and choice.swap == stored["candidates"][other]["swap"]


@pytest.mark.parametrize("rematch_gain, kept", [(1.01, False), (1.04, True)])
def test_a_winner_is_timed_again_beside_the_default(tmp_path, rematch_gain, kept):
    """A candidate 10% faster in its single timing is timed again side by side with the
    default; it stays the winner only if it is still 3% faster there."""
    first = _default().name
    other = [c for c, _ in plan(Request(*SHAPE, dtype="bf16", layout="rcr", max_configs=4),
                                DEVICE)[0] if c.role == "neighbour"][0].name
    speeds = {first: 100.0, other: 110.0}
    db = tunedb.TuneDB(tmp_path / "db.json")
    runner = FakeRunner(lambda name: speeds.get(name, 50.0))
    runner.rematch = lambda name: 100.0 * (rematch_gain if name == other else 1.0)
    req = Request(*SHAPE, dtype="bf16", layout="rcr", max_configs=4)
    key, entry, stats = tune(req, db, runner, compile_fn=fake_compile, jobs=2)
    assert runner.rematched == [first, other]
    stored = tunedb.TuneDB(db.path).entries[key]
    h2h = stored["head_to_head"]
    assert (h2h["default"], h2h["winner"]) == (first, other) and stats["head_to_head"] == h2h
    assert h2h["default_ms"] / h2h["winner_ms"] == pytest.approx(rematch_gain, rel=1e-3)
    assert stored["winner"] == (other if kept else None)
    assert stored["default_stands"] is (not kept)


def test_no_rematch_where_the_default_stands(tmp_path):
    _, runner, _, entry = _tune(tmp_path, lambda name: 100.0)
    assert entry["winner"] is None and not hasattr(runner, "rematched")
    assert "head_to_head" not in entry


def test_a_head_to_head_about_another_candidate_is_ignored():
    entry = {"default": "d", "candidates": {
        "d": {"status": "ok", "tflops": 100.0}, "a": {"status": "ok", "tflops": 120.0},
        "b": {"status": "ok", "tflops": 110.0}},
        "head_to_head": {"default": "d", "winner": "b", "default_ms": 1.0, "winner_ms": 1.0}}
    assert settle(entry) == "a"  # the rematch was about b: a is provisional until its own
    entry["head_to_head"].update(winner="a")
    assert settle(entry) is None and entry["default_stands"] is True
    entry["head_to_head"].update(winner_ms=0.9)
    assert settle(entry) == "a"
    entry["head_to_head"].update(winner_ms=None)
    assert settle(entry) is None

def test_decide_runs_the_default_where_it_stands(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    near = _default(16, 4096, 4608)  # a tuned neighbour shape whose winner would be "nearest"
    k_near = tunedb.key("FakeGPU", "bf16", 16, 4096, 4608, "rcr", "wgmma")
    db.entry(k_near)
    db.record(k_near, near.name, {"status": "ok", "tflops": 9.0, "swap": False,
                                  "config": near.config.replace(layout="rcr").as_dict()})
    assert decide(db, "FakeGPU", "bf16", *SHAPE, 90, "rcr").how == "nearest"
    k = tunedb.key("FakeGPU", "bf16", *SHAPE, "rcr", "wgmma")
    db.entry(k, default_stands=True, default="x")
    got = decide(db, "FakeGPU", "bf16", *SHAPE, 90, "rcr")
    want = decide(None, "FakeGPU", "bf16", *SHAPE, 90, "rcr")
    assert (got.config, got.swap, got.how) == (want.config, want.swap, want.how)
    assert got.how.startswith("default")


def test_settle_against_the_default():
    def entry(default, **speeds):
        return {"default": default, "candidates": {
            n: {"status": "ok", "tflops": t, "time_ms": 1 / t} for n, t in speeds.items()}}
    e = entry("d", d=100.0, a=104.0)
    assert settle(e) == "a" and not e["default_stands"] and e["default_tflops"] == 100.0
    e = entry("d", d=100.0, a=100.0 * MARGIN - 0.01)
    assert settle(e) is None and e["default_stands"]
    e = entry("d", d=100.0)
    assert settle(e) is None and e["default_stands"]
    e = entry(None, a=5.0, b=6.0)  # no default measured: the fastest verified one
    assert settle(e) == "b" and not e["default_stands"]
    assert Candidate(_default().config, True).name.endswith(" swap")


def test_tune_cli_exits_0_where_the_default_stands(tmp_path, monkeypatch):
    """A file run whose every shape keeps gemm's default succeeded (exit 0), and says so."""
    from click.testing import CliRunner

    from gemmgen.cli import tune as cli_tune
    from gemmgen.cli.main import main
    first = _default().name
    monkeypatch.setattr(cli_tune, "device_count", lambda: 1)
    monkeypatch.setattr(cli_tune, "WorkerPool", lambda req, devices: FakeRunner(
        lambda name: 200.0 if name == first else 90.0))
    monkeypatch.setattr(FakeRunner, "close", lambda self: None, raising=False)
    monkeypatch.setattr(cli_tune, "run_tune", lambda req, db, pool, **kw: tune(
        req, db, pool, compile_fn=fake_compile, jobs=2, progress=kw.get("progress")))
    m, n, k = SHAPE
    out = CliRunner().invoke(main, ["tune", "--m", str(m), "--n", str(n), "--k", str(k),
                                    "--dtype", "bf16", "--layout", "rcr", "--max-configs", "2",
                                    "--db", str(tmp_path / "db.json")])
    assert out.exit_code == 0, out.output
    assert "the default stands (200.0 TFLOP/s" in out.output and "(default)" in out.output


def test_recording_and_merging_keep_the_margin_over_the_default(tmp_path):
    """Every place that sets a winner settles it against the default: recording a candidate,
    and merging on save what another process recorded."""
    path = tmp_path / "db.json"
    k = tunedb.key("FakeGPU", "bf16", *SHAPE, "rcr", "wgmma")
    ours, theirs = tunedb.TuneDB(path), tunedb.TuneDB(path)
    for db in (ours, theirs):
        db.entry(k, default="d")
    ours.record(k, "d", {"status": "ok", "tflops": 100.0})
    ours.record(k, "a", {"status": "ok", "tflops": 102.0})  # 2%: the default stands
    assert ours.entries[k]["winner"] is None and ours.entries[k]["default_stands"]
    theirs.entry(k, default="d")
    theirs.record(k, "b", {"status": "ok", "tflops": 102.5})  # merged with ours on save
    merged = tunedb.TuneDB(path).entries[k]
    assert set(merged["candidates"]) == {"d", "a", "b"}
    assert merged["winner"] is None and merged["default_stands"]


def test_a_default_that_stands_in_rrr_keeps_other_layouts_off_the_database(tmp_path):
    """A layout with no entry of its own falls back to the rrr entry; where that entry says
    the default stands, no nearer rrr winner is taken instead."""
    from gemmgen.model.presets import PRESETS
    db = tunedb.TuneDB(tmp_path / "db.json")
    near = PRESETS["wgmma_bf16"].config  # rrr
    k_near = tunedb.key("FakeGPU", "bf16", 16, 4096, 4608, "rrr", "wgmma")
    db.entry(k_near)
    db.record(k_near, near.name, {"status": "ok", "tflops": 9.0, "swap": False,
                                  "config": near.as_dict()})
    assert decide(db, "FakeGPU", "bf16", *SHAPE, 90, "rcr").how == "nearest"
    db.entry(tunedb.key("FakeGPU", "bf16", *SHAPE, "rrr", "wgmma"), default_stands=True,
             default="x")
    got = decide(db, "FakeGPU", "bf16", *SHAPE, 90, "rcr")
    assert got.how.startswith("default")
