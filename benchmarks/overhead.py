"""Per-call cost of ``gemmgen.gemm`` against ``torch.matmul`` on small PyTorch tensors (GPU).

python3 benchmarks/overhead.py [--size 256] [--dtype fp16] [--calls 3000] [--json PATH]

Both are called back to back on the same tensors and the device is synchronized once at the
end, so at a size where the kernel takes a few microseconds the figure is the host's cost per
call: argument checks, dispatch, output allocation and the launch. The median of five
repetitions is reported, with the kernel each call ran and a correctness check.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def per_call(fn, calls: int, torch) -> float:
    """Seconds per call: ``calls`` calls back to back, then one device synchronize."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    import gemmgen
    from gemmgen.runtime.api import chosen
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    n = args.size
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = torch.empty(n, n, device="cuda", dtype=dt)
    out = gemmgen.gemm(a, b)
    ref = (a.double() @ b.double())
    err = float((out.double() - ref).norm() / ref.norm())
    kernel, how = chosen(a, b)
    cases = {
        "torch.matmul(a, b)": lambda: torch.matmul(a, b),
        "gemmgen.gemm(a, b)": lambda: gemmgen.gemm(a, b),
        "torch.matmul(a, b, out=c)": lambda: torch.matmul(a, b, out=c),
        "gemmgen.gemm(a, b, c)": lambda: gemmgen.gemm(a, b, c),
    }
    res = {}
    for label, fn in cases.items():
        res[label] = statistics.median(per_call(fn, args.calls, torch) for _ in range(5)) * 1e6
    ratio = res["gemmgen.gemm(a, b)"] / res["torch.matmul(a, b)"]
    ratio_out = res["gemmgen.gemm(a, b, c)"] / res["torch.matmul(a, b, out=c)"]
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "size": n,
           "dtype": args.dtype, "calls": args.calls, "us_per_call": res,
           "ratio": round(ratio, 3), "ratio_with_out": round(ratio_out, 3),
           "kernel": kernel.name, "how": how, "rel_error": err}
    for label, us in res.items():
        print(f"{label:<28} {us:7.2f} us/call")
    print(f"gemmgen.gemm / torch.matmul: {ratio:.2f} (with out: {ratio_out:.2f}); kernel "
          f"{kernel.name} ({how}), rel error {err:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
