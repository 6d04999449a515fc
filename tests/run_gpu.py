"""Run the GPU test suite spread over the visible GPUs and write its summary
(``make test-gpu``).

Two pytest runs share one private cubin cache:

1. ``-m "gpu and not multi_gpu"`` with pytest-xdist, ``--per-gpu`` workers per GPU, each worker
   pinned to one GPU (``GEMMGEN_TEST_GPUS``: tests/conftest.py sets the worker's
   ``CUDA_VISIBLE_DEVICES``), tests handed out one by one to whichever worker is free
   (``--dist worksteal``; a kernel two workers need is compiled once, under the cubin
   cache's build lock);
2. ``-m "gpu and multi_gpu"``: the tests that need every GPU of the machine, in one process.

The summary, ``benchmarks/results/gpu-tests_<GPU>.json`` (``--out``): the commit
(``$GEMMGEN_COMMIT``, else ``git rev-parse HEAD``), the GPU and how many, passed, failed,
errors and skipped counts, the wall seconds, the failing tests (``failures``: each id with
the first 600 characters of its message, what a rare failure left), and the skipped tests
with their reasons (a skipped test is not a passed one). Exits 1 if a test failed or
errored, or if no GPU test ran.

    python3 tests/run_gpu.py [--out DIR] [--per-gpu N] [-- extra pytest arguments]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpus() -> list[str]:
    """Names of the visible GPUs (nvidia-smi), in device order; [] without a GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        names = [names[int(i)] for i in visible.split(",") if i.strip().isdigit()
                 and int(i) < len(names)]
    return names


def commit() -> str:
    found = os.environ.get("GEMMGEN_COMMIT")
    if found:
        return found
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def outcomes(xml_path: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) of each test case of a JUnit XML report; outcome is
    passed, failed, error or skipped."""
    if not xml_path.exists():
        return []
    out = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        test_id = f"{path}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or "")[:600]
                break
        out.append((test_id, outcome, message))
    return out


def run_pytest(marker: str, xml_path: Path, env: dict, workers: int, extra: list[str]) -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", marker, f"--junitxml={xml_path}",
           "-p", "no:cacheprovider", *extra]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "worksteal"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def summary(cases: list, names: list[str], seconds: float) -> dict:
    count = {k: sum(1 for _, o, _ in cases if o == k)
             for k in ("passed", "failed", "error", "skipped")}
    return {
        "commit": commit(), "gpu": names[0] if names else None, "gpus": len(names),
        "passed": count["passed"], "failed": count["failed"], "errors": count["error"],
        "skipped": count["skipped"], "seconds": round(seconds, 1),
        "failures": {t: m for t, o, m in cases if o in ("failed", "error")},
        "skipped_tests": {t: m for t, o, m in cases if o == "skipped"},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--per-gpu", type=int, default=3, help="pytest-xdist workers per GPU")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    names = gpus()
    if not names:
        print("run_gpu: no GPU visible (nvidia-smi found none)", file=sys.stderr)
        return 1
    env = dict(os.environ, GEMMGEN_TEST_GPUS=",".join(str(i) for i in range(len(names))),
               PYTHONUNBUFFERED="1")
    env.setdefault("GEMMGEN_CACHE_DIR", tempfile.mkdtemp(prefix="gemmgen-gpu-tests-"))
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        xml1, xml2 = Path(tmp) / "spread.xml", Path(tmp) / "multi.xml"
        run_pytest("gpu and not multi_gpu", xml1, env, args.per_gpu * len(names), args.extra)
        solo = {k: v for k, v in env.items() if k != "GEMMGEN_TEST_GPUS"}
        run_pytest("gpu and multi_gpu", xml2, solo, 1, args.extra)
        cases = outcomes(xml1) + outcomes(xml2)
    result = summary(cases, names, time.monotonic() - start)
    out = Path(args.out) / f"gpu-tests_{(names[0]).replace(' ', '_')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['passed']} passed, {result['failed']} failed, {result['errors']} errors, "
          f"{result['skipped']} skipped in {result['seconds']} s on {len(names)} x {names[0]}"
          f" -> {out}")
    for test_id in result["failures"]:
        print("FAILED", test_id)
    ran = result["passed"] + result["failed"] + result["errors"]
    return 1 if result["failed"] or result["errors"] or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
