"""Launch one preset and cuBLAS (same dtype, same buffers) a few times at one size, for ncu.

python3 benchmarks/investigations/profile_one.py PRESET [N]     (needs a GPU, PyCUDA and CuPy)
"""
import sys

import numpy as np

from gemmgen import PRESETS, build
from gemmgen.tune.bench import Problem, bench_cublas, device_info


def main() -> int:
    name = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    kernel = build(PRESETS[name].config)
    cfg = kernel.config
    p = Problem(n, n, n, np.random.default_rng(0), device_info()["l2_bytes"], cfg.dtype, cfg.out,
                cfg.layout)
    for _ in range(3):
        p.launch(kernel, 0)
    bench_cublas(p)
    print(f"{name}: registers {kernel.registers}, dynamic smem {cfg.dynamic_smem_bytes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
