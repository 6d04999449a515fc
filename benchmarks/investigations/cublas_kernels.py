"""Which cuBLASLt kernel F.linear runs per layer: torch.profiler's kernel names and their mean
device time over five calls (bf16, x M x K times an N x K weight), for the layers where the
shape rules trail F.linear most (M = 32 to 4096). The names carry cuBLASLt's tile (e.g.
``nvjet_sm90_tst_144x128_64x6_1x2``: a 144 x 128 tile, BK 64 with 6 stages, a 1 x 2 cluster).

    python3 benchmarks/investigations/cublas_kernels.py   # GPU: $OUT/cublas_kernels_<GPU>.json
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ROWS = [(1024, 512, 3584), (1024, 576, 7168), (1024, 768, 3072), (1024, 2304, 768),
        (1024, 2304, 2048), (1024, 512, 2048), (512, 1024, 4096), (512, 768, 3072),
        (256, 512, 2048), (256, 2304, 2048), (128, 512, 2048), (128, 2048, 2048),
        (4096, 896, 896), (1024, 4544, 4544), (1024, 14336, 4096), (1024, 4672, 4544),
        (64, 3072, 3072), (32, 128, 896), (1024, 128, 896)]


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    rows = {}
    for m, n, k in ROWS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            F.linear(x, w)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                F.linear(x, w)
            torch.cuda.synchronize()
        rows[f"{m}x{n}x{k}"] = [(e.key, e.device_time_total / e.count)
                                for e in prof.key_averages() if e.device_time_total > 0]
        print(m, n, k, rows[f"{m}x{n}x{k}"], flush=True)
    gpu = torch.cuda.get_device_name(0)
    out = {"investigation": "cublas_kernels", "gpu": gpu, "method": __doc__,
           "torch": torch.__version__, "rows": rows}
    Path(os.environ.get("OUT", "."), f"cublas_kernels_{gpu.replace(' ', '_')}.json").write_text(
        json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
