"""FP8 blockwise dense GEMMs (1 x 128 / 128 x 128 scales, promoted; DeepSeek-V3's shapes with M a
multiple of 128): torch._scaled_mm beside gemmgen.torch.scaled_mm (the fp8 family's choice)
and beside the grouped family's FP8 kernel run with one group (offs = [M]): the main loop with
windows of scales loaded a window ahead, each tile's epilogue under the next tile's first
wgmmas and the two consumers a K block apart, none of which the fp8 family's kernel has.
Graph-captured (kernel only), input sets rotated past L2, every output checked against
float64 of the dequantized inputs on 64 sampled rows. Usage on the GPU machine, from the
repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/fp8_dense_via_grouped.py
$OUT/dense_via_grouped.json when $OUT is set.
"""
import json, os, sys
import torch
from gemmgen import grouped_gemm
import gemmgen.torch as gt
from gemmgen.torch.fp8 import quantize, dequantize
from gemmgen.tune.suite_fp8 import graph_time
from gemmgen.runtime.grouped import plan_grouped

SHAPES = [(4096, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536), (4096, 32768, 512),
          (4096, 7168, 2048), (2048, 4096, 4096)]
rows = []
for m, n, k in SHAPES:
    torch.manual_seed(0)
    nsets = max(1, min(4, -(-120 * 2**20 // (m * k + n * k + 2 * m * n))))
    w, sw = quantize(torch.randn(n, k, device="cuda"), (128, 128))          # [N,K], [nb,kb]
    sets = []
    for _ in range(nsets):
        a, sa = quantize(torch.randn(m, k, device="cuda"), (1, 128))       # sa (M,kb) M-major
        sets.append((a, sa))
    b, sb = w.t(), sw.t()
    wg, swg = w.unsqueeze(0).transpose(1, 2), sw.unsqueeze(0)
    offs = torch.tensor([m], dtype=torch.int32, device="cuda")
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in sets]
    calls = {
        "torch": lambda i: torch._scaled_mm(sets[i][0], b, sets[i][1], sb,
                                            out_dtype=torch.bfloat16),
        "gemmgen": lambda i: gt.scaled_mm(sets[i][0], b, sets[i][1], sb,
                                          out_dtype=torch.bfloat16),
        "grouped1": lambda i: grouped_gemm(sets[i][0], wg, offs, outs[i], scale_a=sets[i][1],
                                           scale_b=swg,
                                           stream=torch.cuda.current_stream().cuda_stream),
    }
    a0, sa0 = sets[0]
    idx = torch.randint(0, m, (64,), device="cuda")
    ref = (dequantize(a0[idx], sa0[idx], (1, 128)).double()
           @ dequantize(w, sw, (128, 128)).double().t())
    flops = 2.0 * m * n * k
    res = {"shape": [m, n, k]}
    for name, f in calls.items():
        try:
            outs[0].fill_(float("nan"))
            got = f(0)
            got = outs[0] if got is None else got
            torch.cuda.synchronize()
            err = float(torch.linalg.norm(got[idx].double() - ref) / torch.linalg.norm(ref))
            t = graph_time(torch, f, len(sets), 0.3)
            res[name] = {"tflops": round(flops / t.median / 1e12, 1), "err": float("%.3g" % err)}
        except Exception as e:
            res[name] = {"error": str(e)[:200]}
    try:
        res["grouped1_config"] = plan_grouped(a0, wg, offs, outs[0], scale_a=sa0,
                                              scale_b=swg).kernel.config.name
    except Exception as e:
        res["grouped1_config"] = str(e)[:100]
    print(json.dumps(res), flush=True)
    rows.append(res)
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "dense_via_grouped.json"), "w"), indent=1)
