"""gemmgen.torch.swiglu (one dual GEMM) against PyTorch eager, F.silu(F.linear(x, w_gate)) *
F.linear(x, w_up), on MLP shapes (K hidden, N intermediate) of Llama-3-8B (4096, 14336),
Qwen2.5-7B (3584, 18944) and Qwen2-1.5B (1536, 8960), M tokens from 1 to 4096; bf16, the gate
and up weights one buffer (as patch leaves them). Two timings of each: eager (20 calls back to
back between CUDA events, host included) and graph-captured (kernel only, 20 calls per graph,
median of 10 replays); the weights rotate over sets past twice the L2. Every output checked
against float64 (||y - ref|| / ||ref||, beside PyTorch's own error).

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/swiglu.py
writes $OUT/swiglu.json when $OUT is set. SWIGLU_DUAL_MIN_M=0 runs the dual GEMM at every M
(``gemmgen.torch.mlp.DUAL_MIN_M``; the file is then swiglu_dual_min_m_0.json)."""
import json
import os

import torch

import gemmgen.torch as gt
import gemmgen.torch.mlp as mlp
from gemmgen.torch.mlp import reference

import graph_timing  # beside this script (its folder is sys.path[0] when it runs)

SHAPES = [(4096, 14336), (3584, 18944), (1536, 8960)]  # K, N
MS = [1, 16, 128, 1024, 4096]
REPS = 20


def timed(fn, sets, graph: bool) -> float:
    """Milliseconds per call of ``fn`` (called with a set index, cycling over ``sets``): REPS
    calls in a CUDA graph (kernel only) or back to back between CUDA events (eager, host
    included), median of 10."""
    if graph:
        return graph_timing.graph_ms(lambda i: fn(i % sets), REPS, 10, warmup=3)
    return graph_timing.eager_ms(lambda i: fn(i % sets), REPS, 10)


def main():
    forced = os.environ.get("SWIGLU_DUAL_MIN_M")
    if forced is not None:
        mlp.DUAL_MIN_M = int(forced)
    dt = torch.bfloat16
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for k, n in SHAPES:
        sets = max(2, -(-2 * l2 // (2 * n * k * 2)))
        both = [torch.randn(2 * n, k, device="cuda").to(dt) * k ** -0.5 for _ in range(sets)]
        ws = [(b[:n], b[n:]) for b in both]
        for m in MS:
            x = torch.randn(m, k, device="cuda").to(dt)
            want = reference(x.double(), ws[0][0].double(), ws[0][1].double())
            got = gt.swiglu(x, *ws[0])
            err = float((got.double() - want).norm() / want.norm())
            err_t = float((reference(x, *ws[0]).double() - want).norm() / want.norm())
            row = {"M": m, "N": n, "K": k, "error": err, "torch_error": err_t,
                   "ok": bool(err == err and err <= max(2 * err_t, 1e-2))}
            for mode in ("eager", "graph"):
                ours = timed(lambda i: gt.swiglu(x, *ws[i]), sets, mode == "graph")
                theirs = timed(lambda i: reference(x, *ws[i]), sets, mode == "graph")
                row[f"{mode}_ms"], row[f"{mode}_torch_ms"] = ours, theirs
                row[f"{mode}_x_torch"] = theirs / ours
            print(json.dumps({a: round(b, 4) if isinstance(b, float) else b
                              for a, b in row.items()}), flush=True)
            rows.append(row)
    out = {"gpu": torch.cuda.get_device_name(), "rows": rows, "dual_min_m": mlp.DUAL_MIN_M,
           "launcher": gt.LAUNCHER,
           "what": "gemmgen.torch.swiglu beside F.silu(F.linear) * F.linear, bf16"}
    name = "swiglu.json" if forced is None else f"swiglu_dual_min_m_{forced}.json"
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
