"""Compare two results files of one suite, row by row (same case in both): each row's ratio to
its same-run baseline after / before, and the kernel's time before / after. Prints a JSON
summary: rows, geomean and minimum of the ratio change, rows below 0.95, and both runs'
geomean ratio to the baseline.

    python3 benchmarks/investigations/before_after.py BEFORE.json AFTER.json [LABEL]

Used on two checkouts run one after the other on one GPU (one of them from a ``git archive``
of the older commit, each suite's ``benchmarks/run.py`` importing its own checkout's gemmgen).
"""
from __future__ import annotations

import json
import math
import sys


def _ratio(row: dict) -> float | None:
    if row.get("ratio"):
        return row["ratio"]
    if row.get("tflops") and row.get("baseline_tflops"):
        return row["tflops"] / row["baseline_tflops"]
    return None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def compare(before: dict, after: dict) -> dict:
    """The summary of two results documents of one suite."""
    a = {r["case"]: r for r in before["rows"]}
    b = {r["case"]: r for r in after["rows"]}
    both = [k for k in a if k in b and _ratio(a[k]) and _ratio(b[k])]
    change = [_ratio(b[k]) / _ratio(a[k]) for k in both]
    speed = [a[k]["time_ms"] / b[k]["time_ms"] for k in both
             if a[k].get("time_ms") and b[k].get("time_ms")]
    return {"before": before.get("git_commit", ""), "after": after.get("git_commit", ""),
            "rows": len(both), "ratio_change_geomean": round(_geomean(change), 3),
            "ratio_change_min": round(min(change), 3) if change else None,
            "rows_below_0.95": sum(c < 0.95 for c in change),
            "time_before_over_after_geomean": round(_geomean(speed), 3),
            "geomean_ratio_before": round(_geomean([_ratio(a[k]) for k in both]), 3),
            "geomean_ratio_after": round(_geomean([_ratio(b[k]) for k in both]), 3)}


def main() -> int:
    with open(sys.argv[1]) as f, open(sys.argv[2]) as g:
        out = compare(json.load(f), json.load(g))
    if len(sys.argv) > 3:
        out = {"label": sys.argv[3], **out}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
