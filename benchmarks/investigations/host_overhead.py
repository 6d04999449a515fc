"""Host time per call of gemmgen's PyTorch entry points beside PyTorch's own, on shapes so
small that the host sets the pace (x 1 x 256, weights 256 x 256, bf16): F.linear,
gemmgen.torch.linear, the op torch.ops.gemmgen.linear called directly, the SwiGLU formula
(two F.linear, silu, *) and gemmgen.torch.swiglu (at one row: PyTorch's formula, from the
compiled launcher), each with autograd on, under torch.no_grad() and under
torch.inference_mode(). Microseconds per call: 2000 calls between two synchronizations, the
least of 5.

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/host_overhead.py
writes $OUT/host_overhead.json when $OUT is set."""
import contextlib
import json
import os
import time

import torch
from torch.nn import functional as F

import gemmgen.torch as gt
from gemmgen.torch.mlp import reference

CALLS = 2000


def per_call_us(fn) -> float:
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / CALLS * 1e6)
    return best


def _below(op, *args):
    """``op`` past the Autograd dispatch key (what a no-grad fast path would call)."""
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def main():
    dt, k, n = torch.bfloat16, 256, 256
    x = torch.randn(1, k, device="cuda").to(dt)
    w, g, u = (torch.randn(n, k, device="cuda").to(dt).requires_grad_() for _ in range(3))
    linear_op = torch.ops.gemmgen.linear.default
    entries = {
        "F.linear": lambda: F.linear(x, w),
        "gemmgen.torch.linear": lambda: gt.linear(x, w),
        "torch.ops.gemmgen.linear": lambda: linear_op(x, w, None, "none"),
        "torch.ops.gemmgen.linear below autograd": lambda: _below(linear_op, x, w, None, "none"),
        "swiglu formula (PyTorch)": lambda: reference(x, g, u),
        "gemmgen.torch.swiglu": lambda: gt.swiglu(x, g, u),
    }
    modes = {"autograd": contextlib.nullcontext, "no_grad": torch.no_grad,
             "inference_mode": torch.inference_mode}
    rows = []
    for mode, ctx in modes.items():
        with ctx():
            for name, fn in entries.items():
                rows.append({"entry": name, "mode": mode, "us_per_call": per_call_us(fn)})
                print(json.dumps(rows[-1]), flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "launcher": gt.LAUNCHER, "rows": rows,
           "what": "host microseconds per call, x 1 x 256, weights 256 x 256, bf16"}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "host_overhead.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
