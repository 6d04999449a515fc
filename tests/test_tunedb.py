"""The tuning database file: concurrent writers, hostile entries, the nearest-shape limit, file
modes and symlinks. No GPU."""
import json
import multiprocessing
import os
import stat
import warnings

import pytest

from gemmgen import PRESETS
from gemmgen.heuristics import tunedb
from gemmgen.heuristics.select import decide

GPU = "G"
GOOD = PRESETS["wgmma_tma_store"].config.replace(layout="rcr", group=16)
SIMT = PRESETS["tile2d"].config.as_dict()


def _row(cfg=GOOD, tflops=600.0, **extra):
    return {"config": cfg.as_dict(), "status": "ok", "tflops": tflops, **extra}


def _writer(path, proc, count, barrier):
    """One process of the concurrency test: ``count`` results of its own, and one candidate in
    the key every process shares."""
    barrier.wait()
    db = tunedb.TuneDB(path)
    for i in range(count):
        k = tunedb.key(GPU, "fp32", 64 + proc, 64 + i, 64)
        db.record(k, "c", {"status": "ok", "tflops": float(i), "config": {}})
    db.record(tunedb.key(GPU, "fp32", 1, 1, 1), f"p{proc}", {"status": "ok",
                                                             "tflops": float(proc)})


def test_concurrent_writers_keep_every_result(tmp_path):
    path = str(tmp_path / "db.json")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_writer, args=(path, p, 50, barrier)) for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    entries = json.loads((tmp_path / "db.json").read_text())["entries"]
    shared = entries.pop(tunedb.key(GPU, "fp32", 1, 1, 1))
    assert len(entries) == 200
    assert set(shared["candidates"]) == {"p0", "p1", "p2", "p3"}
    assert shared["winner"] == "p3"  # chosen again over the merged candidates


def test_save_merges_what_another_process_wrote_since(tmp_path):
    a, b = tunedb.TuneDB(tmp_path / "db.json"), tunedb.TuneDB(tmp_path / "db.json")
    k = tunedb.key(GPU, "fp32", 8, 8, 8)
    a.record(k, "x", {"status": "ok", "tflops": 1.0, "config": SIMT})
    b.record(k, "y", {"status": "ok", "tflops": 2.0, "config": SIMT})
    b.record(tunedb.key(GPU, "fp32", 9, 9, 9), "z", {"status": "wrong", "tflops": 0.0})
    a.entry(k)["cublas_tflops"] = 5.0
    a.save()
    got = tunedb.TuneDB(tmp_path / "db.json").entries
    assert set(got) == {k, tunedb.key(GPU, "fp32", 9, 9, 9)}
    assert set(got[k]["candidates"]) == {"x", "y"} and got[k]["winner"] == "y"
    assert got[k]["cublas_tflops"] == 5.0


def test_a_candidate_removed_here_is_not_brought_back_from_disk(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    k = tunedb.key(GPU, "fp32", 8, 8, 8)
    db.record(k, "x", {"status": "ok", "tflops": 1.0, "config": SIMT})
    db.record(k, "y", {"status": "ok", "tflops": 2.0, "config": SIMT})
    again = tunedb.TuneDB(tmp_path / "db.json")
    again.entries[k]["candidates"].pop("x")
    again.save()
    assert set(tunedb.TuneDB(tmp_path / "db.json").entries[k]["candidates"]) == {"y"}


def _one(path, name):
    """Open the database at ``path`` and record one ok candidate ``name`` in it."""
    tunedb.TuneDB(path).record(tunedb.key(GPU, "fp32", 8, 8, 8), name,
                               {"status": "ok", "tflops": 1.0, "config": SIMT})


BAD_CFG = {**GOOD.as_dict(), "bm": 0}
HOSTILE = {  # key -> entry; each at a shape far from the good one
    tunedb.key(GPU, "bf16", 64, 4096, 4096, "rcr", "wgmma"):
        {"candidates": {"a": _row()}, "winner": "not-there"},
    tunedb.key(GPU, "bf16", 256, 256, 256, "rcr", "wgmma"):
        {"candidates": {"a": [1, 2]}, "winner": "a"},
    tunedb.key(GPU, "bf16", 8192, 64, 64, "rcr", "wgmma"):
        {"candidates": {"a": {**_row(), "config": BAD_CFG}}, "winner": "a"},
    f"{GPU}|bf16|rcr|\u00b2x64x64|wgmma": {"candidates": {"a": _row()}, "winner": "a"},
    tunedb.key(GPU, "bf16", 64, 64, 64, "rcr", "wgmma"): {"candidates": [], "winner": None},
    tunedb.key(GPU, "bf16", 64, 64, 8192, "rcr", "wgmma"):
        {"candidates": {"a": _row(tflops="fast")}, "winner": "a"},
    tunedb.key(GPU, "bf16", 64, 8192, 64, "rcr", "wgmma"): {"candidates": {"a": _row()},
                                                            "winner": 5},
    tunedb.key(GPU, "bf16", 512, 16, 16, "rcr", "wgmma"): ["not", "an", "entry"],
    tunedb.key(GPU, "bf16", 16, 512, 16, "rcr", "wgmma"): {"candidates": {"a": _row(swap="yes")},
                                                           "winner": "a"},
    tunedb.key(GPU, "bf16", 16, 16, 512, "rcr", "wgmma"): {"candidates": {"a": _row(config=7)},
                                                           "winner": "a"},
    "bad key": {"candidates": {}},
}


def _hostile_db(tmp_path):
    entries = {tunedb.key(GPU, "bf16", 4096, 4096, 4096, "rcr", "wgmma"):
               {"candidates": {GOOD.name: _row()}, "winner": GOOD.name}, **HOSTILE}
    path = tmp_path / "db.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return path


def test_a_hostile_entry_is_skipped_with_one_warning_and_breaks_no_other_shape(tmp_path):
    path = _hostile_db(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db = tunedb.TuneDB(path)
        good = decide(db, GPU, "bf16", 4096, 4096, 4096, 90, "rcr")
        for k in HOSTILE:
            if k.count("|") == 4 and "\u00b2" not in k:
                m, n, kk = (int(x) for x in k.split("|")[3].split("x"))
                ch = decide(db, GPU, "bf16", m, n, kk, 90, "rcr")
                assert ch.how.startswith("default"), (k, ch.how)
        assert decide(db, GPU, "bf16", 3000, 5000, 4096, 90, "rcr").how == "nearest"
    assert (good.config.name, good.how) == (GOOD.name, "exact")
    texts = [str(w.message) for w in caught]
    for k in HOSTILE:
        assert sum(repr(k) in t for t in texts) == 1, (k, texts)
    assert all(str(path) in t for t in texts)
    assert len(texts) == len(HOSTILE)


def test_a_skipped_entry_stays_in_the_file_for_the_user_to_fix(tmp_path):
    path = _hostile_db(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = tunedb.TuneDB(path)
        db.record(tunedb.key(GPU, "fp32", 8, 8, 8), "x",
                  {"status": "ok", "tflops": 1.0, "config": SIMT})
    on_disk = json.loads(path.read_text())["entries"]
    assert {k: on_disk[k] for k in HOSTILE} == json.loads(json.dumps(HOSTILE))


def test_nearest_shape_lookup_stops_at_a_factor_of_two_per_extent(tmp_path):
    db = tunedb.TuneDB(tmp_path / "db.json")
    k = tunedb.key(GPU, "fp32", 1024, 1024, 1024)
    db.record(k, "a", {"status": "ok", "tflops": 1.0, "config": {}})
    assert db.lookup(GPU, "fp32", 2049, 1024, 1024)[1] == "nearest"  # (2049+1)/(1024+1) = 2
    assert db.lookup(GPU, "fp32", 512, 1500, 2000)[1] == "nearest"
    assert db.lookup(GPU, "fp32", 2051, 1024, 1024) == (None, None)
    assert db.lookup(GPU, "fp32", 1024, 1024, 500) == (None, None)


def test_save_keeps_the_files_mode(tmp_path):
    path = tmp_path / "db.json"
    path.write_text('{"version": 1, "entries": {}}')
    path.chmod(0o644)
    _one(path, "x")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o640)
    _one(path, "y")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umasks_mode(tmp_path):
    old = os.umask(0o022)
    try:
        tunedb.TuneDB(tmp_path / "new.json").save()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644


def test_save_writes_through_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "db.json"
    target.write_text('{"version": 1, "entries": {}}')
    target.chmod(0o644)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    _one(link, "x")
    assert link.is_symlink() and link.resolve() == target
    assert len(json.loads(target.read_text())["entries"]) == 1
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("text", ['{"entries": {"bad key": {"candidates": {}}}}',
                                  '{"entries": {"G|fp32|rrr|1x1x1": {"winner": null}}}'])
def test_a_malformed_entry_is_not_a_corrupt_file(tmp_path, text):
    path = tmp_path / "db.json"
    path.write_text(text)
    with pytest.warns(UserWarning, match="skipped"):
        assert tunedb.TuneDB(path).entries == {}


def test_a_removed_entry_leaves_the_file(tmp_path):
    _one(tmp_path / "db.json", "x")
    db = tunedb.TuneDB(tmp_path / "db.json")
    db.remove(tunedb.key(GPU, "fp32", 8, 8, 8))
    db.save()
    assert tunedb.TuneDB(tmp_path / "db.json").entries == {}


def test_the_grouped_file_keeps_its_mode_its_link_and_other_writers_entries(tmp_path):
    from gemmgen.heuristics import grouped_db
    target = tmp_path / "real.json"
    target.write_text('{"version": 1, "entries": {}}')
    target.chmod(0o644)
    link = tmp_path / "g.json"
    link.symlink_to(target)
    grouped_db.store("a", {"candidates": {}}, link)
    grouped_db.store("b", {"candidates": {}}, link)
    assert link.is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert set(grouped_db.load(target)) == {"a", "b"}
