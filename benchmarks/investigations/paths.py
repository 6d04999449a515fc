"""Odd, skinny and FP32-accurate paths of the wgmma family on the GPU: verification of each
path configuration in its own process (the timing that was here is the `odd` suite now:
python3 benchmarks/run.py odd).

python3 benchmarks/investigations/paths.py checks [--limit 200] [--only SUBSTR]
    verify every path configuration below (gemmgen.verify's sweep: odd shapes, K = 0,
    alpha/beta, beta = 0 over NaN, batches), each in its own process under a time limit.
python3 benchmarks/investigations/paths.py check LABEL          (what each process runs)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time


def _presets():
    from gemmgen.model.presets import PRESETS
    return {name: p.config for name, p in PRESETS.items()}


def checks() -> dict:
    """Path configurations to verify, by label."""
    p = _presets()
    store = p["wgmma_tma_store"]
    return {
        "preset_tma_store": store,
        "preset_ring": p["wgmma_ring"],
        "preset_cluster": p["wgmma_cluster"],
        "pingpong": store.replace(pingpong=True, bm=64),
        "repack_fp16": store.replace(store="direct"),
        "repack_bf16_ccc": p["wgmma_bf16"].replace(store="direct", layout="ccc"),
        "splitk4_fp16": store.replace(store="direct", split_k=4),
        "splitk3_fp16_crc_gelu": store.replace(store="direct", split_k=3, layout="crc",
                                               epilogue="bias_gelu"),
        "splitk2_pingpong": store.replace(store="direct", split_k=2, pingpong=True, bm=64),
        "splitk3_nonpersistent_bf16": p["wgmma_ws"].replace(split_k=3, dtype="bf16",
                                                            out="bf16", layout="rcr"),
        "splitk2_noproducer": p["wgmma_ring"].replace(split_k=2, layout="ccr"),
        "decode_bn8_splitk": store.replace(store="direct", bn=8, split_k=4, layout="ccc"),
        "3xtf32_preset": p["wgmma_3xtf32"],
        "3xtf32_crc_bias_relu_sk2": p["wgmma_3xtf32"].replace(layout="crc", epilogue="bias_relu",
                                                             split_k=2),
        "3xtf32_noproducer_rcc": p["wgmma_3xtf32"].replace(
            producer=False, consumers=1, persistent=False, regs_producer=0, regs_consumer=0,
            stages=4, bn=64, layout="rcc"),
    }


def check_one(label: str) -> int:
    from gemmgen.runtime.build import build
    from gemmgen.tune.verify import sweep_kernel
    kernel = build(checks()[label])
    res = sweep_kernel(label, kernel, seed=1)
    bad = [r for r in res if not r.passed]
    paths = sorted({r.path for r in res if r.path})
    print(f"{'ok' if not bad else 'FAIL'} {label}: {len(res) - len(bad)}/{len(res)} passed; "
          f"worst {max(r.rel_error / r.tol for r in res):.2f} of tolerance; paths {paths}")
    for r in bad[:6]:
        print(f"   {r.m}x{r.n}x{r.k} a={r.alpha} b={r.beta} err {r.rel_error:.2e} > {r.tol:.1e}"
              f" at {r.worst} path {r.path}")
    return 0 if not bad else 1


def run_checks(limit: float, only: list[str] | None, jobs: int = 4) -> int:
    from concurrent.futures import ThreadPoolExecutor

    def one(label: str) -> tuple[bool, str]:
        t = time.time()
        try:
            out = subprocess.run([sys.executable, __file__, "check", label], capture_output=True,
                                 text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return False, f"TIMEOUT {label} after {limit:.0f} s"
        text = (out.stdout + out.stderr).strip().splitlines() or ["(no output)"]
        ok = out.returncode == 0
        return ok, ("\n".join(text[-8:]) if not ok else text[-1]) + f" ({time.time() - t:.0f} s)"

    labels = [lb for lb in checks() if not only or any(o in lb for o in only)]
    fails = 0
    with ThreadPoolExecutor(jobs) as pool:
        for ok, text in pool.map(one, labels):
            print(text, flush=True)
            fails += not ok
    print(f"{fails} of {len(labels)} failed")
    return 1 if fails else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("checks", "check"))
    ap.add_argument("label", nargs="?")
    ap.add_argument("--limit", type=float, default=200)
    ap.add_argument("--only", action="append")
    ap.add_argument("--jobs", type=int, default=4)
    a = ap.parse_args()
    if a.cmd == "check":
        return check_one(a.label)
    return run_checks(a.limit, a.only, a.jobs)


if __name__ == "__main__":
    sys.exit(main())
