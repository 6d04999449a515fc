"""benchmarks/investigations/before_after.py on made-up results: per-row medians over several
runs a side, and the same-checkout noise it reports."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "investigations"))
import before_after  # noqa: E402


def _doc(ratios: dict) -> dict:
    return {"git_commit": "x", "rows": [{"case": c, "ratio": r, "time_ms": 1.0 / r}
                                        for c, r in ratios.items()]}


def test_medians_hide_one_slow_run_and_the_noise_shows_it():
    before = [_doc({"a": 1.0, "b": 1.0}), _doc({"a": 1.0, "b": 0.8}), _doc({"a": 1.0, "b": 1.0})]
    after = [_doc({"a": 0.9, "b": 1.0}), _doc({"a": 0.9, "b": 1.0}), _doc({"a": 0.9, "b": 1.0})]
    out = before_after.compare_runs(before, after, list_rows=True)
    assert out["rows"] == 2 and out["rows_below_0.95"] == 1
    assert [r["case"] for r in out["rows_below"]] == ["a"] and out["rows_below"][0]["change"] == 0.9
    assert out["noise_before"] == {"pairs": 3, "ratio_change_min": 0.8, "rows_below_0.95_most": 1}
    assert out["noise_after"]["rows_below_0.95_most"] == 0


def test_a_row_missing_from_one_run_is_left_out():
    before = [_doc({"a": 1.0, "b": 1.0}), _doc({"a": 1.0})]
    after = [_doc({"a": 1.0, "b": 0.5})]
    assert before_after.compare_runs(before, after)["rows"] == 1
