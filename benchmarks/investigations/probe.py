"""Probe one kernel with structured inputs, to locate a wrong result (GPU).

Usage (on the GPU machine): python3 benchmarks/investigations/probe.py PRESET [M N K]

With A = I (A[i, k] = 1 where i == k) the product's row i is B's row i; with B = I, column j is
A's column j. For each output row (column) the probe reports which row of B (column of A) it
equals, so a swizzle, descriptor or store-index mistake shows up as a permutation, a gap or a
block of zeros instead of the identity mapping. Then it runs one random case and prints the
relative error and the worst element.
"""
from __future__ import annotations

import sys

import numpy as np

from gemmgen import PRESETS, build
from gemmgen.runtime.arrays import numpy_dtype
from gemmgen.tune.verify import compare, reference, tolerance


def _match(rows: np.ndarray, candidates: np.ndarray) -> list:
    """For each row of ``rows``: the index of the equal row of ``candidates``, 'z' for all
    zeros, '?' for no match."""
    out = []
    for r in rows:
        if not np.any(r):
            out.append("z")
            continue
        hit = np.where(np.all(np.isclose(candidates, r, rtol=1e-2, atol=1e-2), axis=1))[0]
        out.append(int(hit[0]) if len(hit) else "?")
    return out


def main() -> int:
    name = sys.argv[1]
    m, n, k = (int(x) for x in sys.argv[2:5]) if len(sys.argv) >= 5 else (128, 256, 64)
    cfg = PRESETS[name].config
    kernel = build(cfg)
    ab, out = numpy_dtype(cfg.dtype), numpy_dtype(cfg.out)
    rng = np.random.default_rng(0)
    lay = cfg.layout

    def run(A, B):
        Ad = np.asfortranarray(A) if lay[0] == "c" else A
        Bd = np.asfortranarray(B) if lay[1] == "c" else B
        C = np.full((m, n), np.nan, np.float32).astype(out)
        C = np.asfortranarray(C) if lay[2] == "c" else C
        return np.asarray(kernel(Ad, Bd, C, alpha=1.0, beta=0.0)).astype(np.float64)

    eye_a = np.eye(m, k, dtype=np.float32).astype(ab)
    B = rng.integers(-3, 4, (k, n)).astype(np.float32).astype(ab)
    C = run(eye_a, B)
    got = _match(C[:min(m, k)], B.astype(np.float64))
    print(f"A = I: output rows -> B rows (first 32): {got[:32]}")
    print(f"       rows matching themselves: {sum(1 for i, g in enumerate(got) if g == i)}/{len(got)}")
    A = rng.integers(-3, 4, (m, k)).astype(np.float32).astype(ab)
    eye_b = np.eye(k, n, dtype=np.float32).astype(ab)
    C = run(A, eye_b)
    got = _match(C[:, :min(n, k)].T, A.T.astype(np.float64))
    print(f"B = I: output cols -> A cols (first 32): {got[:32]}")
    print(f"       cols matching themselves: {sum(1 for i, g in enumerate(got) if g == i)}/{len(got)}")
    A = rng.standard_normal((m, k), dtype=np.float32).astype(ab)
    B = rng.standard_normal((k, n), dtype=np.float32).astype(ab)
    err, worst = compare(run(A, B), reference(A, B, None, 1.0, 0.0))
    tol = tolerance(k, cfg.dtype, cfg.acc, cfg.out)
    print(f"random {m}x{n}x{k}: rel error {err:.2e} (bound {tol:.1e}) worst {worst} "
          f"path {getattr(kernel, 'last_path', 'n/a')}")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
