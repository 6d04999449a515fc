"""Shipped tuned tables, recorded model GEMMs and shapes files, without a GPU."""
import json

import pytest
from click.testing import CliRunner

from gemmgen import PRESETS
from gemmgen.heuristics import shipped
from gemmgen.heuristics.select import choose, decide
from gemmgen.heuristics.tunedb import TuneDB, key
from gemmgen.model.problem import Problem, ShapesError, load_problems, save_problems

GPU = "NVIDIA H200"


def _table(tmp_path, monkeypatch, shapes):
    """A shipped table for GPU whose winner at each (M, N, K) is the wgmma preset with a 64-row
    tile (a config the shape rules never pick at these sizes)."""
    cfg = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", bm=64, consumers=1,
                                                    regs_producer=0, regs_consumer=0)
    data = {"version": 1, "provenance": {"gpu": GPU, "cuda": "13.0", "commit": "abc",
                                         "date": "2026-11-24"}, "entries": {}}
    for m, n, k in shapes:
        data["entries"][key(GPU, "bf16", m, n, k, "rcr", "wgmma")] = {
            "candidates": {cfg.name: {"config": cfg.as_dict(), "status": "ok",
                                      "tflops": 500.0}}, "winner": cfg.name}
    monkeypatch.setattr(shipped, "TABLES", tmp_path)
    shipped.shipped.cache_clear()
    shipped.table_path(GPU).write_text(json.dumps(data))
    return cfg


def test_the_shipped_table_is_used_near_its_buckets_only(tmp_path, monkeypatch):
    cfg = _table(tmp_path, monkeypatch, [(256, 4096, 4096)])
    got, how = choose(None, GPU, "bf16", 256, 4096, 4096, 90, "rcr")
    assert (got.name, how) == (cfg.name, "table")
    assert choose(None, GPU, "bf16", 300, 4096, 4096, 90, "rcr")[1] == "table"  # near in M
    assert choose(None, GPU, "bf16", 4096, 4096, 4096, 90, "rcr")[1] == "default"  # far in M
    assert choose(None, GPU, "bf16", 256, 4096, 4095, 90, "rcr")[1] == "default"  # another K
    assert choose(None, GPU, "bf16", 256, 4096, 4096, 90, "rrr")[1] == "default"  # layout
    assert choose(None, "NVIDIA H100 80GB HBM3", "bf16", 256, 4096, 4096, 90, "rcr")[1] \
        == "default"  # another GPU
    assert shipped.provenance(GPU)["commit"] == "abc"
    assert "the table shipped for this GPU" in decide(None, GPU, "bf16", 256, 4096, 4096, 90,
                                                      "rcr").reasons[0]


def test_a_shipped_entry_without_a_winner_is_left_out(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [(256, 4096, 4096)])
    data = json.loads(shipped.table_path(GPU).read_text())
    data["entries"][key(GPU, "bf16", 1024, 4096, 8192, "rcr", "wgmma")] = {
        "candidates": {}, "winner": None}
    shipped.table_path(GPU).write_text(json.dumps(data))
    shipped.shipped.cache_clear()
    with pytest.warns(UserWarning, match="1024x4096x8192.* skipped: it has no winner"):
        assert choose(None, GPU, "bf16", 1024, 4096, 8192, 90, "rcr")[1] == "default"
    assert choose(None, GPU, "bf16", 300, 4096, 4096, 90, "rcr")[1] == "table"


@pytest.mark.parametrize("prov", [None, {}, {"gpu": GPU, "cuda": "13.0", "commit": "abc"},
                                  {"gpu": GPU, "cuda": "13.0", "commit": "", "date": "x"}])
def test_a_shipped_table_without_its_provenance_is_not_used(tmp_path, monkeypatch, prov):
    _table(tmp_path, monkeypatch, [(256, 4096, 4096)])
    data = json.loads(shipped.table_path(GPU).read_text())
    data["provenance"] = prov
    shipped.table_path(GPU).write_text(json.dumps(data))
    shipped.shipped.cache_clear()
    with pytest.warns(UserWarning, match="not used: its provenance lacks"):
        assert choose(None, GPU, "bf16", 256, 4096, 4096, 90, "rcr")[1] == "default"
    assert shipped.provenance(GPU) is None


def test_every_shipped_table_holds_winners_with_provenance():
    """What gemmgen ships: per table, its provenance and a winner in every entry (a table of
    no winners changes nothing and is not shipped); without any table, the rules decide."""
    for path in sorted(shipped.TABLES.glob("*.json")):
        data = json.loads(path.read_text())
        assert all(data.get("provenance", {}).get(f) for f in shipped.PROVENANCE), path
        assert data["entries"] and all(e.get("winner") for e in data["entries"].values()), path
    shipped.shipped.cache_clear()
    gpus = {p.stem for p in shipped.TABLES.glob("*.json")}
    if "NVIDIA_H200" not in gpus:
        assert shipped.shipped(GPU) is None and shipped.provenance(GPU) is None
        assert decide(None, GPU, "bf16", 256, 4096, 4096, 90, "rcr").how.startswith("default")


def test_the_users_tuning_database_wins_over_the_shipped_table(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [(256, 4096, 4096)])
    mine = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", group=16)
    db = TuneDB(tmp_path / "mine.json")
    db.entry(key(GPU, "bf16", 256, 4096, 4096, "rcr", "wgmma"))["candidates"] = {
        mine.name: {"config": mine.as_dict(), "status": "ok", "tflops": 600.0}}
    db.choose_winner(key(GPU, "bf16", 256, 4096, 4096, "rcr", "wgmma"))
    got, how = choose(db, GPU, "bf16", 256, 4096, 4096, 90, "rcr")
    assert (got.name, how) == (mine.name, "exact")


def test_shapes_files_round_trip_and_name_their_errors(tmp_path):
    probs = [Problem("bf16", 1, 4096, 4096, "rcr"), Problem("fp16", 512, 14336, 4096, "crr", 1, 3)]
    path = save_problems(probs, tmp_path / "s.json")
    assert load_problems(path) == probs
    (tmp_path / "bad.json").write_text(json.dumps([{"dtype": "bf16", "m": 0, "n": 1, "k": 1,
                                                     "layout": "rcr"}]))
    with pytest.raises(ShapesError, match="entry 0: m must be a positive int"):
        load_problems(tmp_path / "bad.json")
    (tmp_path / "lay.json").write_text(json.dumps([{"dtype": "bf16", "m": 1, "n": 1, "k": 1,
                                                     "layout": "xyz"}]))
    with pytest.raises(ShapesError, match="layout must be three of r/c"):
        load_problems(tmp_path / "lay.json")


def test_tune_shapes_checks_its_arguments(tmp_path):
    from gemmgen.cli import main
    path = save_problems([Problem("bf16", 64, 1024, 1024, "rcr")], tmp_path / "s.json")
    both = CliRunner().invoke(main, ["tune", "--shapes", str(path), "--m", "64"])
    assert both.exit_code == 2 and "give --shapes or --m, not both" in both.output
    (tmp_path / "bad.json").write_text("{")
    bad = CliRunner().invoke(main, ["tune", "--shapes", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "--shapes" in bad.output and "not valid JSON" in bad.output


def test_record_lists_a_models_gemms_forward_and_backward():
    torch = pytest.importorskip("torch")
    import gemmgen.torch as gt
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 32))
    x = torch.randn(4, 16, 64)
    fwd = gt.record(model, x)
    assert {(p.m, p.n, p.k, p.layout) for p in fwd} == {(64, 256, 64, "rcr"), (64, 32, 256, "rcr")}
    both = gt.record(model, x, backward=True)
    shapes = {(p.m, p.n, p.k, p.layout) for p in both}
    assert (64, 256, 32, "rrr") in shapes, "dgrad of the second layer: grad @ W"
    assert (32, 256, 64, "crr") in shapes, "wgrad of the second layer: grad^T @ x"
    assert all(p.dtype == "fp32" for p in both)


def test_rescoring_a_table_keeps_only_the_winners_over_the_rules(tmp_path):
    from gemmgen.tune.table import rescore
    rules = decide(None, GPU, "bf16", 256, 4096, 4096, 90, "rcr")
    other = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", bm=64, consumers=1,
                                                      regs_producer=0, regs_consumer=0)
    row = {"config": rules.config.as_dict(), "swap": rules.swap, "status": "ok", "tflops": 100.0}
    entries = {}
    for m, speed in ((256, 200.0), (512, 50.0)):  # beats the rules; does not
        rest = {"dtype": "bf16", "M": m, "N": 4096, "K": 4096, "layout": "rcr"}
        fast = {"config": other.as_dict(), "swap": False, "status": "ok", "tflops": speed}
        entries[key(GPU, "bf16", m, 4096, 4096, "rcr", "wgmma")] = {
            "candidates": {"rules": row, "v": fast}, "winner": None, **rest}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "provenance": {}, "entries": entries}))
    assert rescore(str(path)) == (2, 1)
    kept = json.loads(path.read_text())["entries"]
    assert list(kept) == [key(GPU, "bf16", 256, 4096, 4096, "rcr", "wgmma")]
    assert kept[key(GPU, "bf16", 256, 4096, 4096, "rcr", "wgmma")]["winner"] == "v"
