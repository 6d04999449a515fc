"""Bench candidate SIMT configs beside cuBLAS at a few sizes: the search behind the presets.

python3 benchmarks/explore.py [--size 4096] [--json PATH]   (needs a GPU, PyCUDA and CuPy)
"""
import argparse
import json
import sys

from gemmgen import SimtConfig, build
from gemmgen.bench import run_bench
from gemmgen.results import finish, table

W = dict(vec=4, skew=4, stages=2)
CANDIDATES = {
    "db_128x128x16_w64x32_t4x4_mb1": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, **W),
    "db_128x128x16_w64x32_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, min_blocks=2, **W),
    "db_128x128x8_w64x32_t4x4_mb2": SimtConfig(128, 128, 8, 4, 4, wm=64, wn=32, min_blocks=2, **W),
    "db_128x128x16_w32x64_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, min_blocks=2, **W),
    "db_128x128x16_w64x32_t4x4_sk0_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=0,
                                                     stages=2, min_blocks=2),
    "db_128x256x8_w64x64_t8x4_mb1": SimtConfig(128, 256, 8, 8, 4, wm=64, wn=64, **W),
    "db_256x128x8_w64x64_t4x4_mb1": SimtConfig(256, 128, 8, 4, 4, wm=64, wn=64, **W),
    "db_128x64x16_w64x32_t4x4_mb3": SimtConfig(128, 64, 16, 4, 4, wm=64, wn=32, min_blocks=3, **W),
    "db_64x64x16_w32x32_t4x4_mb4": SimtConfig(64, 64, 16, 4, 4, wm=32, wn=32, min_blocks=4, **W),
    "db_128x128x16_t8x8_mb1": SimtConfig(128, 128, 16, 8, 8, **W),
    "db_128x128x16_t8x8_mb2": SimtConfig(128, 128, 16, 8, 8, min_blocks=2, **W),
    "db_128x128x8_t8x8_mb2": SimtConfig(128, 128, 8, 8, 8, min_blocks=2, **W),
    "db_128x128x16_w32x64_t4x4_sk0_mb2": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=64, vec=4, skew=0,
                                                     stages=2, min_blocks=2),
    "db_128x128x8_w32x64_t4x4_mb2": SimtConfig(128, 128, 8, 4, 4, wm=32, wn=64, min_blocks=2, **W),
    "db_128x64x16_w32x64_t4x4_mb4": SimtConfig(128, 64, 16, 4, 4, wm=32, wn=64, min_blocks=4, **W),
    "db_64x128x16_w32x64_t4x4_mb4": SimtConfig(64, 128, 16, 4, 4, wm=32, wn=64, min_blocks=4, **W),
    "db_128x128x16_w32x32_t4x4_mb1": SimtConfig(128, 128, 16, 4, 4, wm=32, wn=32, **W),
    "sb_128x128x16_w64x32_t4x4_mb2": SimtConfig(128, 128, 16, 4, 4, wm=64, wn=32, vec=4, skew=4,
                                                 stages=1, min_blocks=2),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", action="append", default=None)
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in (s.split("x") * 3)[:3]) if "x" not in s else
             tuple(int(x) for x in s.split("x")) for s in (args.size or ["4096"])]
    targets = []
    for label, cfg in CANDIDATES.items():
        k = build(cfg)
        print(f"{label:<36} regs {k.registers:>3}  local {k.local_bytes}", flush=True)
        targets.append((label, k))
    doc = finish(run_bench(targets, sizes))
    print(doc["gpu"])
    print(table(sorted(doc["rows"], key=lambda r: -r["tflops"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
