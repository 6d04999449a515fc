"""An e4m3 output quantized in the FP8 GEMM's epilogue (gemmgen.torch.scaled_mm_quantized)
against the GEMM then a quantization, as a PyTorch user runs them, on the same inputs in the
same run:

- "tensor": per-tensor e4m3 inputs, fast accumulation, the output scaled by a given per-tensor
  scale (delayed scaling) with its amax. Baselines: torch._scaled_mm to bf16, then
  ``y.abs().amax()`` and ``(y / scale).clamp(-448, 448).to(e4m3)`` (PyTorch ops), or then
  ``gemmgen.torch.quantize(y, None)`` (two kernels: amax, then the cast); for reference
  torch._scaled_mm straight to e4m3 with ``scale_result`` (cuBLASLt's fused cast, no amax).
- "1x128": DeepSeek-V3 blockwise inputs (promoted), the output quantized per row and 128
  columns. Baselines: torch._scaled_mm (blockwise) to bf16, then ``gemmgen.torch.quantize(y,
  (1, 128))`` (one kernel) or ``quantize_reference`` (PyTorch ops).

Each is also timed beside the plain GEMM to bf16 (torch._scaled_mm and gemmgen's scaled_mm).
Timings: graph-captured (kernel only) and eager (host included), 20 calls, median of 10, the
inputs rotating over sets past twice the L2. The fused output is checked against float64 on
the dequantized inputs: its error may exceed that of quantizing the exact product by 10% plus
the GEMM's tolerance; amax within 2%.

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_out.py
writes $OUT/fp8_out_<GPU>.json when $OUT is set."""
import json
import math
import os

import torch

import gemmgen.torch as gt
from gemmgen.tune.fp8_verify import fp8_tolerance

import graph_timing  # beside this script (its folder is sys.path[0] when it runs)

E4M3 = torch.float8_e4m3fn
SHAPES = {
    "tensor": [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336),
               (2048, 28672, 4096), (512, 8192, 28672), (128, 7168, 16384), (16, 57344, 8192)],
    "1x128": [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 7168, 2048),
              (2048, 4096, 4096), (128, 7168, 16384)],
}
REPS, REPLAYS = 20, 10


def timed(fn, sets: int) -> dict:
    return {"graph_ms": graph_timing.graph_ms(lambda i: fn(i % sets), REPS, REPLAYS, warmup=3),
            "eager_ms": graph_timing.eager_ms(lambda i: fn(i % sets), REPS, REPLAYS)}


def operands(mode: str, m: int, n: int, k: int, sets: int):
    """Input sets (a, b column-major, scale_a, scale_b, torch's scale_a, torch's scale_b)."""
    block_a, block_w = ((None, None) if mode == "tensor" else ((1, 128), (128, 128)))
    out = []
    for _ in range(sets):
        a, sa = gt.quantize(torch.randn(m, k, device="cuda"), block_a)
        w, sw = gt.quantize(torch.randn(n, k, device="cuda") * k ** -0.5, block_w)
        sb = sw if mode == "tensor" else sw.t()
        tsa = sa if mode == "tensor" else sa.t().contiguous().t()   # PyTorch's M-major a
        out.append((a, w.t(), sa, sb, tsa, sb))
    return out


def reference(mode, a, b, sa, sb):
    block_a, block_w = ((None, None) if mode == "tensor" else ((1, 128), (128, 128)))
    return (gt.dequantize(a, sa, block_a).double()
            @ gt.dequantize(b.t(), sb if mode == "tensor" else sb.t(), block_w).double().t())


def rel(x, ref) -> float:
    x = x.double()
    if not bool(torch.isfinite(x).all()):
        return math.inf
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))


def check(mode, m, n, k, ops, scale) -> dict:
    """The fused output's error against float64, beside quantizing the exact product."""
    a, b, sa, sb, _, _ = ops
    ref = reference(mode, a, b, sa, sb)
    fast = mode == "tensor"
    if mode == "tensor":
        q, _, amax = gt.scaled_mm_quantized(a, b, sa, sb, block=None, scale=scale,
                                            use_fast_accum=True)
        got = rel(q.double() * float(scale), ref)
        exact = (ref / float(scale)).clamp(-448, 448).float().to(E4M3).double() * float(scale)
        floor = rel(exact, ref)
    else:
        q, s, amax = gt.scaled_mm_quantized(a, b, sa, sb)
        got = rel(gt.dequantize(q, s), ref)
        rq, rs = gt.quantize_reference(ref.float(), (1, 128))
        floor = rel(gt.dequantize(rq, rs), ref)
    top = float(ref.abs().max())
    amax_err = abs(float(amax) - top) / top
    ok = got <= floor * 1.1 + fp8_tolerance(k, "fp32", fast) and amax_err <= 0.02
    return {"error": got, "quantized_exact_error": floor, "amax_rel_error": amax_err, "ok": ok}


def row_of(mode, m, n, k, l2) -> dict:
    sets = max(2, -(-2 * l2 // (m * k + n * k + 2 * m * n)))
    ins = operands(mode, m, n, k, sets)
    fast = mode == "tensor"
    scale = torch.tensor(8.0 / 448, device="cuda")   # |v| up to 8 (it is about N(0, 1))
    row = {"mode": mode, "M": m, "N": n, "K": k, **check(mode, m, n, k, ins[0], scale)}

    def torch_gemm(i, out=torch.bfloat16):
        a, b, _, _, tsa, tsb = ins[i]
        return torch._scaled_mm(a, b, tsa, tsb, out_dtype=out, use_fast_accum=fast)

    if mode == "tensor":
        def ours(i):
            a, b, sa, sb, _, _ = ins[i]
            return gt.scaled_mm_quantized(a, b, sa, sb, block=None, scale=scale,
                                          use_fast_accum=True)

        def then_torch(i):
            y = torch_gemm(i)
            return (y / scale).clamp(-448, 448).to(E4M3), y.abs().amax()

        def then_kernels(i):
            return gt.quantize(torch_gemm(i), None)

        inv = (1.0 / scale).reshape(())
        cases = {"fused": ours, "then_torch_ops": then_torch, "then_quantize": then_kernels,
                 "torch_fp8_out_no_amax": lambda i: torch._scaled_mm(
                     ins[i][0], ins[i][1], ins[i][4], ins[i][5], scale_result=inv,
                     out_dtype=E4M3, use_fast_accum=True)}
    else:
        def ours(i):
            a, b, sa, sb, _, _ = ins[i]
            return gt.scaled_mm_quantized(a, b, sa, sb)

        cases = {"fused": ours,
                 "then_quantize": lambda i: gt.quantize(torch_gemm(i), (1, 128)),
                 "then_torch_ops": lambda i: gt.quantize_reference(torch_gemm(i), (1, 128))}
    cases["torch_gemm_bf16"] = torch_gemm
    cases["gemmgen_gemm_bf16"] = lambda i: gt.scaled_mm(*ins[i][:4], use_fast_accum=fast)
    for name, fn in cases.items():
        try:
            for key, ms in timed(fn, sets).items():
                row[f"{name}_{key}"] = ms
        except RuntimeError as exc:
            row[f"{name}_error"] = str(exc)[:120]
    for t in ("graph_ms", "eager_ms"):
        base = min(row.get(f"then_quantize_{t}", math.inf), row.get(f"then_torch_ops_{t}", math.inf))
        row[f"x_gemm_then_quantize_{t[:-3]}"] = base / row[f"fused_{t}"]
        row[f"fused_cost_over_gemm_{t[:-3]}"] = row[f"fused_{t}"] / row[f"gemmgen_gemm_bf16_{t}"] - 1
    return row


def main():
    name = torch.cuda.get_device_name()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for mode, shapes in SHAPES.items():
        for m, n, k in shapes:
            row = row_of(mode, m, n, k, l2)
            print(json.dumps({a: round(b, 4) if isinstance(b, float) else b
                              for a, b in row.items()}), flush=True)
            rows.append(row)
    summary = {}
    for mode in SHAPES:
        for t in ("graph", "eager"):
            xs = [r[f"x_gemm_then_quantize_{t}"] for r in rows if r["mode"] == mode]
            summary[f"{mode}_{t}_geomean"] = math.exp(sum(map(math.log, xs)) / len(xs))
            summary[f"{mode}_{t}_min"] = min(xs)
    summary["all_ok"] = all(r["ok"] for r in rows)
    print(json.dumps(summary), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"fp8_out_{name.replace(' ', '_')}.json"), "w") as f:
            json.dump({"gpu": name, "torch": torch.__version__, "summary": summary, "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
