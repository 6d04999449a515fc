"""Odd, skinny and FP32-accurate paths of the wgmma family on the GPU: verification and timing.

python3 benchmarks/paths.py checks [--limit 200] [--only SUBSTR]
    verify every path configuration below (gemmgen.verify's sweep: odd shapes, K = 0,
    alpha/beta, beta = 0 over NaN, batches), each in its own process under a time limit.
python3 benchmarks/paths.py check LABEL          (what each process runs)
python3 benchmarks/paths.py time --out FILE [--part odd,skinny,decode,fp32]
    time each path beside cuBLAS in the same run (rotated inputs, CUDA events, medians) and
    write the rows as JSON: odd shapes (repack against the WMMA fallback, with the cost
    model's predictions), skinny shapes (split-K, swapped operands), decode shapes (with the
    copy bandwidth measured in the same run) and 3xTF32 against cuBLAS SGEMM (speed, and the
    error on standard-normal and wide-range data, normwise and in ulps).
"""
from __future__ import annotations

import argparse
import json
import os
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


# ---- timing -----------------------------------------------------------------------------------
def _copy_bandwidth(nbytes: int) -> float:
    """Bytes/s (read + write) of a device-to-device copy of ``nbytes``, median of 20."""
    import pycuda.driver as drv
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    start, end = drv.Event(), drv.Event()
    times = []
    for i in range(25):
        start.record()
        drv.memcpy_dtod_async(dst, src, nbytes)
        end.record()
        end.synchronize()
        if i >= 5:
            times.append(end.time_since(start) / 1e3)
    times.sort()
    return 2 * nbytes / times[len(times) // 2]


def _row(label, p, kernel, launch=None, extra=None):
    from gemmgen.tune.bench import bench_kernel, tflops, time_launches
    if launch is None:
        timing, err = bench_kernel(kernel, p)
    else:
        err = p.error_of(lambda: launch(0), kernel.config.epilogue)
        timing = time_launches(launch, p.sets)
    row = {"kernel": label, "name": kernel.name, "config": kernel.config.as_dict(),
           "M": p.m, "N": p.n, "K": p.k, "dtype": p.dtype, "layout": p.layout,
           "tflops": round(tflops(p.m, p.n, p.k, timing.median), 3),
           "time_us": round(timing.median * 1e6, 2), "rel_error": err,
           "path": getattr(kernel, "last_path", "")}
    row.update(extra or {})
    print(f"  {label:34s} {row['tflops']:8.2f} TFLOP/s {row['time_us']:9.1f} us "
          f"err {err:.1e} {row['path']}", flush=True)
    return row


def _helpers_alone(kernel, m: int) -> float:
    """Median seconds of the helper kernels a TMA kernel launched before its GEMM (the repack
    or the 3xTF32 split) for its prepared launch with M = ``m``, timed without the GEMM."""
    from gemmgen.tune.bench import time_launches
    before = next(ready for key, ready in kernel._launches.items() if key[0] == m)[3]
    return time_launches(lambda i: [kernel._helper_launch(s, None, False) for s in before],
                         1).median


def _cublas(p, label="cuBLAS"):
    from gemmgen.tune.bench import bench_cublas, tflops
    timing, err = bench_cublas(p)
    row = {"kernel": label, "M": p.m, "N": p.n, "K": p.k, "dtype": p.dtype, "layout": p.layout,
           "tflops": round(tflops(p.m, p.n, p.k, timing.median), 3),
           "time_us": round(timing.median * 1e6, 2), "rel_error": err}
    print(f"  {label:34s} {row['tflops']:8.2f} TFLOP/s {row['time_us']:9.1f} us err {err:.1e}",
          flush=True)
    return row


def _swapped(kernel, p):
    """Launch ``kernel`` (laid out for the transposed problem) as C^T = B^T A^T on p's
    row-major buffers."""
    def launch(i):
        kernel.launch_raw(p.n, p.m, p.k, 1.0, int(p.b[i].gpudata), p.ldb, int(p.a[i].gpudata),
                          p.lda, 0.0, int(p.c[i].gpudata), p.ldc, 0, 0, 0, 0, 1)
    return launch


def time_odd(rng, l2, rows):
    from gemmgen.tune.bench import Problem
    from gemmgen.runtime.build import build
    from gemmgen.heuristics.cost import unaligned
    p_ = _presets()
    for dtype, base in (("fp16", p_["wgmma_tma_store"]), ("bf16", p_["wgmma_bf16"])):
        m, n, k = 4095, 4097, 4093
        print(f"== odd {m}x{n}x{k} {dtype}", flush=True)
        p = Problem(m, n, k, rng, l2, dtype, dtype, "rrr")
        cub = _cublas(p)
        est = {e.path: round(e.seconds * 1e6, 1) for e in unaligned(
            m, n, k, 1, dtype, {"A": (m, k, 1), "B": (k, n, 1)})}
        for bm, bn in ((256, 128), (128, 128), (128, 192)):
            try:
                alt = build(base.replace(store="direct", bm=bm, bn=bn))
                rows.append(dict(_row(f"repack {bm}x{bn}", p, alt), part="odd",
                                 cublas_tflops=cub["tflops"]))
            except Exception as exc:  # noqa: BLE001 - record and go on
                print(f"  {bm}x{bn}: {type(exc).__name__}: {exc}"[:300], flush=True)
        kern = build(base.replace(store="direct"))
        r = _row("repack", p, kern, extra={"predicted_us": est})
        fb = kern.fallback
        f = _row("fallback (WMMA)", p, fb)
        rows += [dict(cub, part="odd"), dict(r, part="odd", cublas_tflops=cub["tflops"]),
                 dict(f, part="odd", cublas_tflops=cub["tflops"])]
        # the pack steps alone
        t = _helpers_alone(kern, m)
        rows.append({"part": "odd", "kernel": "repack: pack kernels only", "dtype": dtype,
                     "M": m, "N": n, "K": k, "time_us": round(t * 1e6, 2)})
        print(f"  pack kernels alone {t * 1e6:.1f} us", flush=True)


def time_skinny(rng, l2, rows, shapes=((128, 8192, 8192),), dtypes=("fp16", "bf16")):
    from gemmgen.tune.bench import Problem
    from gemmgen.runtime.build import build
    p_ = _presets()
    for dtype in dtypes:
        base = p_["wgmma_tma_store"] if dtype == "fp16" else p_["wgmma_bf16"]
        for m, n, k in shapes:
            print(f"== skinny {m}x{n}x{k} {dtype}", flush=True)
            p = Problem(m, n, k, rng, l2, dtype, dtype, "rrr")
            cub = _cublas(p)
            rows.append(dict(cub, part="skinny"))
            cands = [("preset", {}, False)]
            for bm, bn, sk in ((128, 256, 4), (128, 128, 2), (128, 128, 4), (64, 128, 4)):
                one = dict(consumers=1, regs_producer=0, regs_consumer=0) if bm == 64 else {}
                cands.append((f"split-K {sk} {bm}x{bn}",
                              dict(store="direct", bm=bm, bn=bn, split_k=sk, **one), False))
            bn_s = max(8, -(-m // 8) * 8) if m < 256 else 128
            for bm, sk in ((128, 1), (128, 2), (128, 4), (256, 2)):
                cands.append((f"swap {bm}x{min(256, bn_s)} split-K {sk}",
                              dict(store="direct", bm=bm, bn=min(256, bn_s), split_k=sk,
                                   layout="ccc"), True))
            for label, changes, swap in cands:
                try:
                    kern = build(base.replace(**changes))
                    r = _row(label, p, kern, _swapped(kern, p) if swap else None)
                    rows.append(dict(r, part="skinny", cublas_tflops=cub["tflops"]))
                except Exception as exc:  # noqa: BLE001 - record and go on
                    print(f"  {label}: {type(exc).__name__}: {exc}"[:300], flush=True)


def time_decode(rng, l2, rows):
    from gemmgen.tune.bench import Problem
    from gemmgen.runtime.build import build
    p_ = _presets()
    n = k = 8192
    bw = _copy_bandwidth(n * k * 2)
    print(f"== decode: copy bandwidth {bw / 1e12:.2f} TB/s (read + write)", flush=True)
    rows.append({"part": "decode", "kernel": "copy bandwidth", "bytes_per_s": bw})
    for dtype in ("fp16", "bf16"):
        base = p_["wgmma_tma_store"] if dtype == "fp16" else p_["wgmma_bf16"]
        for m in (1, 8, 16, 64, 128):
            p = Problem(m, n, k, rng, l2, dtype, dtype, "rrr")
            cub = _cublas(p, f"cuBLAS M={m}")
            b_bytes = n * k * 2
            cub["read_bw_pct_copy"] = round(100 * b_bytes / (cub["time_us"] * 1e-6) / bw, 1)
            rows.append(dict(cub, part="decode"))
            bn = max(8, -(-m // 8) * 8)
            for bm, sk, st in ((128, 2, 6), (64, 1, 8), (64, 2, 8), (128, 1, 6), (128, 1, 8)):
                one = dict(consumers=1, regs_producer=0, regs_consumer=0) if bm == 64 else {}
                try:
                    cfg = base.replace(store="direct", bm=bm, bn=bn, split_k=sk, stages=st,
                                       layout="ccc", **one)
                    kern = build(cfg)
                    r = _row(f"swap {bm}x{bn} split-K {sk} st{st} M={m}", p, kern,
                             _swapped(kern, p))
                except Exception as exc:  # noqa: BLE001
                    print(f"  swap {bm}x{bn} split-K {sk}: {type(exc).__name__}: {exc}"[:300],
                          flush=True)
                    continue
                r["read_bw_pct_copy"] = round(100 * b_bytes / (r["time_us"] * 1e-6) / bw, 1)
                r["cublas_tflops"] = cub["tflops"]
                rows.append(dict(r, part="decode"))


CHOSEN_SHAPES = (
    ("fp16", 4095, 4097, 4093), ("bf16", 4095, 4097, 4093), ("fp16", 4096, 4096, 4096),
    ("fp16", 8192, 8192, 8192), ("bf16", 4096, 4096, 4096), ("fp16", 128, 8192, 8192),
    ("bf16", 128, 8192, 8192), ("fp16", 1, 8192, 8192), ("fp16", 8, 8192, 8192),
    ("fp16", 16, 8192, 8192), ("fp16", 64, 8192, 8192), ("bf16", 1, 8192, 8192),
    ("bf16", 8, 8192, 8192), ("bf16", 16, 8192, 8192), ("bf16", 64, 8192, 8192),
    ("fp16", 1024, 1024, 1024), ("fp16", 2048, 2048, 2048), ("fp16", 256, 256, 65536),
)
"""Shapes whose chosen kernel (``gemmgen.heuristics.select.decide``, as gemm picks it) is timed."""


def time_chosen(rng, l2, rows, shapes=CHOSEN_SHAPES):
    """The kernel gemm would run for each shape (no tuning database), beside cuBLAS."""
    from gemmgen.tune.bench import Problem
    from gemmgen.runtime.build import build
    from gemmgen.runtime.device import device_cc
    from gemmgen.heuristics.select import decide
    print("== the kernels gemm chooses", flush=True)
    for dtype, m, n, k in shapes:
        p = Problem(m, n, k, rng, l2, dtype, dtype, "rrr")
        item = 2
        choice = decide(None, "", dtype, m, n, k, device_cc(), "rrr", "none",
                        n * item % 16 == 0)
        cub = _cublas(p, f"cuBLAS {dtype} {m}x{n}x{k}")
        kern = build(choice.config)
        r = _row(f"gemmgen {dtype} {m}x{n}x{k}", p, kern,
                 _swapped(kern, p) if choice.swap else None,
                 {"swap": choice.swap, "reasons": choice.reasons})
        rows += [dict(cub, part="chosen"), dict(r, part="chosen", cublas_tflops=cub["tflops"],
                                                 ratio=round(r["tflops"] / cub["tflops"], 3))]


def time_before(rng, l2, rows, shapes=CHOSEN_SHAPES):
    """What gemm ran before the shape rules: the dtype's default preset as it is (the WMMA
    fallback where TMA cannot read an operand), beside the kernel gemm chooses now."""
    from gemmgen.tune.bench import Problem
    from gemmgen.runtime.build import build
    from gemmgen.runtime.device import device_cc
    from gemmgen.heuristics.select import decide
    print("== the default preset (before) against the kernel gemm chooses (now)", flush=True)
    for dtype, m, n, k in shapes:
        p = Problem(m, n, k, rng, l2, dtype, dtype, "rrr")
        base = build(_presets()["wgmma_tma_store" if dtype == "fp16" else "wgmma_bf16"])
        choice = decide(None, "", dtype, m, n, k, device_cc(), "rrr", "none", n * 2 % 16 == 0)
        now = build(choice.config)
        b = _row(f"before {dtype} {m}x{n}x{k}", p, base)
        r = _row(f"now {dtype} {m}x{n}x{k}", p, now, _swapped(now, p) if choice.swap else None)
        rows += [dict(b, part="before"), dict(r, part="before", before_tflops=b["tflops"],
                                              ratio=round(r["tflops"] / b["tflops"], 3))]


def _ulps(c, ref):
    """Median, 99th percentile and largest |C - ref| in units of the float32 spacing at ref."""
    import cupy
    r32 = ref.astype(cupy.float32)
    ulp = cupy.abs(cupy.nextafter(r32, cupy.float32(cupy.inf)) - r32).astype(cupy.float64)
    u = cupy.abs(c.astype(cupy.float64) - ref) / cupy.maximum(ulp, 1e-45)
    q = cupy.percentile(u, cupy.array([50.0, 99.0]))
    return float(q[0]), float(q[1]), float(u.max())


def time_fp32(rng, l2, rows, sizes=(4096, 8192)):
    import cupy
    import numpy as np
    from gemmgen.tune.bench import Problem, _cupy_float32
    from gemmgen.runtime.build import build
    p_ = _presets()
    k3 = build(p_["wgmma_3xtf32"])
    simt = build(p_["warptile_tuned"])
    alts = [build(p_["wgmma_3xtf32"].replace(**ch)) for ch in (
        {"flush": 2}, {"flush": 4}, {"bn": 160, "stages": 5, "flush": 2})]
    for s in sizes:
        print(f"== fp32 {s}^3: 3xTF32 against cuBLAS SGEMM", flush=True)
        p = Problem(s, s, s, rng, l2, "fp32", "fp32", "rrr")
        cub = _cublas(p, "cuBLAS SGEMM")
        r = _row("3xtf32", p, k3)
        w = _row("simt warptile_tuned", p, simt)
        for alt in alts:
            rows.append(dict(_row(f"3xtf32 bn{alt.config.bn} flush {alt.config.flush}", p, alt),
                             part="fp32",
                             cublas_tflops=cub["tflops"]))
        t = _helpers_alone(k3, s)
        print(f"  split3 pack kernels alone {t * 1e6:.1f} us", flush=True)
        rows += [dict(cub, part="fp32"), dict(r, part="fp32", cublas_tflops=cub["tflops"],
                                               split3_us=round(t * 1e6, 2)),
                 dict(w, part="fp32", cublas_tflops=cub["tflops"])]
    # accuracy: standard normal and wide range (exponents over 2^-20..2^20, mixed signs)
    s = 2048
    p = Problem(s, s, s, rng, l2, "fp32", "fp32", "rrr")
    from gemmgen.tune.bench import bench_cublas
    for data in ("normal", "wide", "cancel"):
        A = rng.standard_normal((s, s)).astype(np.float32)
        B = rng.standard_normal((s, s)).astype(np.float32)
        if data == "wide":
            A *= np.exp2(rng.integers(-20, 21, (s, s))).astype(np.float32)
            B *= np.exp2(rng.integers(-20, 21, (s, s))).astype(np.float32)
        if data == "cancel":  # rows of A and columns of B that nearly cancel
            A[:, s // 2:] = -A[:, :s // 2] * (1 + 1e-3 * rng.standard_normal((s, s // 2)))
        p.a[0].set(A)
        p.b[0].set(B)
        ref = cupy.asarray(A, dtype=cupy.float64) @ cupy.asarray(B, dtype=cupy.float64)
        out = {}
        for label, run in (("3xtf32", lambda: p.launch(k3, 0)),
                           ("3xtf32 flush 2", lambda: p.launch(alts[0], 0)),
                           ("3xtf32 flush 4", lambda: p.launch(alts[1], 0)),
                           ("simt", lambda: p.launch(simt, 0))):
            run()
            c = _cupy_float32(p.c[0], "fp32", False)
            err = float(cupy.linalg.norm(c - ref) / cupy.linalg.norm(ref))
            out[label] = {"rel_error": err, "ulps_p50_p99_max": _ulps(c, ref)}
        p.A, p.B = A, B
        p._refs.clear()
        bench_cublas(p)  # leaves cuBLAS's C of set 0 in p.c[0] (last launch was set 0)
        c = _cupy_float32(p.c[0], "fp32", False)
        out["cublas_sgemm"] = {
            "rel_error": float(cupy.linalg.norm(c - ref) / cupy.linalg.norm(ref)),
            "ulps_p50_p99_max": _ulps(c, ref)}
        print(f"  accuracy {data}: " + json.dumps(out), flush=True)
        rows.append({"part": "fp32-accuracy", "data": data, "M": s, "N": s, "K": s, **out})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("checks", "check", "time"))
    ap.add_argument("label", nargs="?")
    ap.add_argument("--limit", type=float, default=200)
    ap.add_argument("--only", action="append")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--part", default="odd,skinny,decode,fp32,chosen")
    a = ap.parse_args()
    if a.cmd == "check":
        return check_one(a.label)
    if a.cmd == "checks":
        return run_checks(a.limit, a.only, a.jobs)
    import numpy as np
    from gemmgen.tune.bench import device_info
    info = device_info()
    rng = np.random.default_rng(0)
    rows: list = []
    parts = a.part.split(",")
    try:
        for part, fn in (("odd", time_odd), ("skinny", time_skinny), ("decode", time_decode),
                         ("fp32", time_fp32), ("chosen", time_chosen),
                         ("before", time_before)):
            if part in parts:
                fn(rng, info["l2_bytes"], rows)
    finally:
        doc = {**info, "git_commit": os.environ.get("GEMMGEN_GIT_COMMIT", ""),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
        if a.out:
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
