"""A few launches of gemmgen's grouped FP8 GEMM (the dispatch's choice, or CONFIG) and of the
per-expert torch._scaled_mm loop on one of grouped_fp8.py's problems, for ncu:

    ncu -k regex:'grouped|nvjet' python3 benchmarks/investigations/grouped_fp8_ncu.py [PROBLEM]
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from grouped_fp8 import PROBLEMS, _experts, _set  # noqa: E402

from gemmgen import PRESETS, grouped_gemm  # noqa: E402
from gemmgen.runtime.grouped import plan_grouped  # noqa: E402


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "deepgemm.contiguous_8x4096"
    config = os.environ.get("CONFIG") or None  # a preset name, e.g. grouped_fp8_split_n
    config = PRESETS[config].config if config else None
    _, g, per, n, k, _ = next(p for p in PROBLEMS if p[0] == name)
    torch.manual_seed(0)
    w, sw = _experts(g, n, k)
    st = _set([per] * g, n, k, w, sw)
    b = w.transpose(1, 2)
    plan = plan_grouped(st["a"], b, st["offs"], st["out"], scale_a=st["sa"], scale_b=sw,
                        config=config)
    print("config", plan.kernel.config.name, "registers", plan.kernel.registers, flush=True)
    for _ in range(3):
        grouped_gemm(st["a"], b, st["offs"], st["out"], scale_a=st["sa"], scale_b=sw,
                     config=config)
    for a_g, sa_g, b_g, sb_g, _ in st["loop"][:2]:
        torch._scaled_mm(a_g, b_g, sa_g, sb_g, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
