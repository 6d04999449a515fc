"""Smoke-test sweep candidates before timing them (GPU): each in its own process under a time
limit, several at once, so a kernel that hangs or faults costs its limit and nothing else.

python3 benchmarks/smoke.py --family wgmma [--only SUBSTR] [--jobs 6] [--limit 60]
    prints one line per candidate: ok (with the errors of each case) or FAIL/TIMEOUT, and last
    the labels that passed, space-separated (for explore.py --only).
python3 benchmarks/smoke.py --one LABEL --family wgmma    (what each process runs)

Cases: a ragged shape with 16-byte rows (several tiles per CTA, every layout path of TMA),
alpha/beta, a strided batch with a broadcast B, and 4096^3 against a float64 reference.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

CASES = ((520, 776, 328, 1.0, 0.0), (1032, 2056, 1040, 1.5, -0.5), (4096, 4096, 4096, 1.0, 0.0))


def candidates(family: str) -> dict:
    """explore.py's candidate configs of ``family``, by label; for "<family>-presets" (e.g.
    mma-presets) that family's presets, by name."""
    if family.endswith("-presets"):
        from gemmgen import PRESETS
        fam = family[:-len("-presets")]
        return {n: p.config for n, p in PRESETS.items() if p.config.family == fam}
    import runpy
    pool = runpy.run_path(__file__.replace("smoke.py", "explore.py"), run_name="explore")
    return {"simt": pool["CANDIDATES"], "wmma": pool["WMMA_CANDIDATES"],
            "wgmma": pool["WGMMA_CANDIDATES"]}[family]


def one(family: str, label: str) -> int:
    import numpy as np

    from gemmgen.runtime.build import build
    from gemmgen.tune.verify import check, device_runner
    cfg = candidates(family)[label]
    kernel = build(cfg)
    rng = np.random.default_rng(0)
    run = device_runner(kernel)
    errs, ok = [], True
    for m, n, k, alpha, beta in CASES:
        r = check(label, run, m, n, k, alpha, beta, rng, cfg.dtype, cfg.acc, cfg.out,
                  cfg.layout, cfg.epilogue)
        errs.append(f"{m}x{n}x{k}:{r.rel_error:.1e}")
        ok &= r.passed
    r = check(label, run, 200, 136, 104, 1.0, 0.5, rng, cfg.dtype, cfg.acc, cfg.out,
              cfg.layout, cfg.epilogue, batch=3, broadcast_b=True)
    errs.append(f"b3:{r.rel_error:.1e}")
    ok &= r.passed
    print(("ok " if ok else "WRONG ") + " ".join(errs) + f" path={getattr(kernel, 'last_path', '')}")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="wgmma")
    ap.add_argument("--only", action="append")
    ap.add_argument("--one")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--limit", type=float, default=60)
    args = ap.parse_args()
    if args.one:
        return one(args.family, args.one)
    cfgs = candidates(args.family)
    labels = [lbl for lbl in cfgs if not args.only or any(o in lbl for o in args.only)]
    from gemmgen.compile.cache import compile_many  # compile everything first, in parallel
    compile_many([cfgs[lbl] for lbl in labels])

    def run(label):
        t = time.time()
        try:
            out = subprocess.run([sys.executable, __file__, "--family", args.family, "--one",
                                  label], capture_output=True, text=True, timeout=args.limit)
            text = (out.stdout.strip().splitlines() or [""])[-1]
            if out.returncode and not text.startswith("WRONG"):
                text = "FAIL " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]
        except subprocess.TimeoutExpired:
            text = f"TIMEOUT after {args.limit:.0f} s"
        return label, text, time.time() - t
    passed = []
    with ThreadPoolExecutor(args.jobs) as ex:
        for label, text, secs in ex.map(run, labels):
            print(f"{label:<36} {secs:5.1f}s {text}", flush=True)
            if text.startswith("ok"):
                passed.append(label)
    print("PASSED " + " ".join(passed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
