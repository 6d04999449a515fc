"""The grouped FP8 kernel with A's block scales M-major (DeepGEMM's and torch._scaled_mm's
layout, as gemmgen.torch.fp8.quantize writes them: the consumers load one scale per row and K
block, with its address arithmetic) against K-contiguous ones (one 16-byte load per row and
window of four K blocks), and with M-major scales copied into a K-contiguous buffer inside
each timed call (a copy_ before the GEMM, what the grouped launcher's ``<name>_scales`` does).
Layouts: "m" (as given), "k" (made K-contiguous before timing), "kt" (copied in the call).

On DeepGEMM's two contiguous problems (grouped_fp8.py's inputs), each output checked against
float64 of the dequantized inputs (the last group); then 3 rounds, each timing the
per-expert torch._scaled_mm loop and the three layouts (order reversed every other round),
graph-captured (kernel only), 0.3 s a row. Run it from a checkout whose grouped_gemm does not
copy the scales itself (before the launcher's copy), else "m" is "kt". Usage on the GPU
machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/grouped_fp8_scale_layout.py
$OUT/scale_layout.json when $OUT is set.
"""
import json, os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grouped_fp8 as gf
from gemmgen import grouped_gemm
from gemmgen.tune.suite_fp8 import graph_time

rows = []
for name, g, per, n, k, routed in gf.PROBLEMS[:2]:
    counts, w, sw, sets = gf.inputs(g, per, n, k, routed)
    b = w.transpose(1, 2)
    flops = 2.0 * sum(counts) * n * k
    for st in sets:
        st["sa_k"] = st["sa"].contiguous()
        st["buf"] = torch.empty_like(st["sa_k"])
    def call(layout):
        def f(i):
            st = sets[i]
            if layout == "m":
                sa = st["sa"]
            elif layout == "k":
                sa = st["sa_k"]
            else:
                st["buf"].copy_(st["sa"]); sa = st["buf"]
            grouped_gemm(st["a"], b, st["offs"], st["out"], scale_a=sa, scale_b=sw,
                         stream=torch.cuda.current_stream().cuda_stream)
        return f
    # correctness of each layout
    for layout in ("m", "k", "kt"):
        st = sets[0]
        st["out"].fill_(float("nan"))
        call(layout)(0)
        torch.cuda.synchronize()
        s, c = st["bounds"][g - 1]
        ref = (gf.dequantize(st["a"][s:s + c], st["sa"][s:s + c], (1, 128)).double()
               @ gf.dequantize(w[g - 1], sw[g - 1], (128, 128)).double().t())
        got = st["out"][s:s + c].double()
        err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
        strides = (st["sa"] if layout == "m" else st["sa_k"]).stride()
        print(name, layout, "sa strides", strides, "err", err, flush=True)
    for rnd in range(3):
        base = graph_time(torch, gf.loop_call(sets), len(sets), 0.3)
        order = ("m", "k", "kt") if rnd % 2 == 0 else ("kt", "k", "m")
        for layout in order:
            t = graph_time(torch, call(layout), len(sets), 0.3)
            r = dict(case=name, round=rnd, layout=layout,
                     tflops=round(flops / t.median / 1e12, 1),
                     loop_tflops=round(flops / base.median / 1e12, 1),
                     ratio=round(base.median / t.median, 3))
            print(json.dumps(r), flush=True)
            rows.append(r)
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "scale_layout.json"), "w"), indent=1)
