"""Compare results files of one suite, row by row (same case in both): each row's ratio to
its same-run baseline after / before, and the kernel's time before / after. Prints a JSON
summary: rows, geomean and minimum of the ratio change, rows below 0.95, and both sides'
geomean ratio to the baseline.

    python3 benchmarks/investigations/before_after.py BEFORE.json AFTER.json [LABEL]
    python3 benchmarks/investigations/before_after.py --before B1.json B2.json ... \
        --after A1.json A2.json ... [--label LABEL] [--rows]

With several runs a side (checkouts alternated on one GPU), a row's ratio on each side is the
median over that side's runs, and the summary adds the noise: over every pair of runs of one
side, the geomean and minimum of the same-checkout change and its rows below 0.95 (what a
single pair would show with nothing changed). ``--rows`` lists the rows below 0.95 with each
side's ratios.

Used on checkouts run one after the other on one GPU (the older from a ``git archive``, each
suite's ``benchmarks/run.py`` importing its own checkout's gemmgen).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import median


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


def _merged(docs: list[dict]) -> dict:
    """One document whose rows carry the median ratio and time over ``docs`` (the rows that
    every run has)."""
    rows = [{r["case"]: r for r in d["rows"] if _ratio(r)} for d in docs]
    cases = [c for c in rows[0] if all(c in r for r in rows[1:])]
    out = []
    for c in cases:
        times = [r[c]["time_ms"] for r in rows if r[c].get("time_ms")]
        out.append({"case": c, "ratio": median([_ratio(r[c]) for r in rows]),
                    "time_ms": median(times) if len(times) == len(rows) else None,
                    "ratios": [round(_ratio(r[c]), 3) for r in rows]})
    return {"git_commit": docs[0].get("git_commit", ""), "rows": out}


def noise(docs: list[dict]) -> dict | None:
    """Over every pair of runs of one checkout, each taken both ways: the lowest same-checkout
    ratio change, and the most rows below 0.95 any pair shows."""
    pairs = [compare(a, b) for i, a in enumerate(docs) for b in docs[i + 1:]]
    pairs += [compare(b, a) for i, a in enumerate(docs) for b in docs[i + 1:]]
    if not pairs:
        return None
    return {"pairs": len(pairs) // 2,
            "ratio_change_min": min(p["ratio_change_min"] for p in pairs),
            "rows_below_0.95_most": max(p["rows_below_0.95"] for p in pairs)}


def compare_runs(before: list[dict], after: list[dict], list_rows: bool = False) -> dict:
    """``compare`` of the per-row medians over several runs a side, with each side's noise."""
    b, a = _merged(before), _merged(after)
    out = {"runs_before": len(before), "runs_after": len(after), **compare(b, a),
           "noise_before": noise(before), "noise_after": noise(after)}
    if list_rows:
        rb = {r["case"]: r for r in b["rows"]}
        out["rows_below"] = [{"case": r["case"], "change": round(r["ratio"] / rb[r["case"]]["ratio"], 3),
                              "before": rb[r["case"]]["ratios"], "after": r["ratios"]}
                             for r in a["rows"] if r["case"] in rb
                             and r["ratio"] / rb[r["case"]]["ratio"] < 0.95]
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--before" not in argv:
        with open(argv[0]) as f, open(argv[1]) as g:
            out = compare(json.load(f), json.load(g))
        if len(argv) > 2:
            out = {"label": argv[2], **out}
        print(json.dumps(out))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", nargs="+", required=True)
    parser.add_argument("--after", nargs="+", required=True)
    parser.add_argument("--label")
    parser.add_argument("--rows", action="store_true")
    args = parser.parse_args(argv)
    before, after = ([json.loads(Path(p).read_text()) for p in paths]
                     for paths in (args.before, args.after))
    out = compare_runs(before, after, args.rows)
    print(json.dumps({"label": args.label, **out} if args.label else out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
