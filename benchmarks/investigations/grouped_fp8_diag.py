"""Where the grouped FP8 kernel's time goes at a tile boundary: run ``grouped_fp8.py`` with the
128 x 128 grouped FP8 kernels' rendered source changed by one diagnostic variant, to time the
kernel without one piece of work. Most variants give wrong results (the script still times
them and records the error); they bound what removing that work could buy, nothing more.

Variants (``--variant``):

- ``main``: unchanged (the same-process control).
- ``stale_first_window``: a tile's first window of scales is not loaded at the tile's start;
  it reuses the scales the previous tile last held (what loading them a tile ahead would buy).
- ``no_scale_loads``: no scale is loaded from global memory; every scale reads as 1 from a
  register (what moving all scale loads out of the consumers would buy).
- ``no_zero``: F is not zeroed at a tile's start (what folding the zeroing into the first
  promotion would buy). Only for kernels from before ca5b741: since then a tile's first
  promotion writes F and the kernel has no such zeroing to remove.

Each variant runs in its own process with its own kernel cache directory. Usage on the GPU
machine, from the repository root:
    GROUPED_FP8_ONLY=deepgemm python3 benchmarks/investigations/grouped_fp8_diag.py --variant V
"""
from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
import tempfile

MATCH = "grouped_m_e4m3_128x128x128"
KONE = "            const float kone = sa_m > -5 ? 1.0f : 2.0f;  // diag: 1, not a constant\n"


def _stale_first_window(src: str) -> str:
    old = ("            Window W, Wn;                         // the scales of a window of 4 and "
           "of the next\n            if (tile.nk >= 4) load_window(W, 0);\n")
    assert src.count(old) == 1, "stale_first_window: the window declaration"
    src = src.replace(old, "            Window W, Wn;\n"
                      "            static_assert(sizeof(W) == sizeof(keep_w));\n"
                      "            memcpy(&W, keep_w, sizeof W);\n")
    loop = "        float F[M_ITERS][ACC];\n"
    assert src.count(loop) == 1, "stale_first_window: F"
    src = src.replace(loop, loop + "        float keep_w[16] = {};\n")
    end = "            done = tile;\n"
    assert src.count(end) == 1, "stale_first_window: tile end"
    return src.replace(end, "            memcpy(keep_w, &W, sizeof W);\n" + end)


def _no_scale_loads(src: str) -> str:
    anchor = "        const int nb_total = (N + BLOCK - 1) / BLOCK;  // B scale blocks along N\n"
    assert src.count(anchor) == 1, "no_scale_loads: anchor"
    src = src.replace(anchor, anchor + KONE)
    src, n4 = re.subn(r"__ldg\(reinterpret_cast<const float4\*>\((?:pa|pb)[^;]*?\)\)",
                      "make_float4(kone, kone, kone, kone)", src)
    src, n1 = re.subn(r"__ldg\((?:pa\[|pb0|pb1)[^;]*?\)(?=;| :)", "kone", src)
    assert n4 >= 3 and n1 >= 3, f"no_scale_loads: {n4} vector and {n1} scalar loads replaced"
    return src


def _no_zero(src: str) -> str:
    n = src.count("                zero(F);\n")
    assert n >= 3, ("no_zero: no per-tile zero(F) to remove (since ca5b741 a tile's first "
                    "promotion writes F)")
    return src.replace("                zero(F);\n", "")


VARIANTS = {"main": lambda s: s, "stale_first_window": _stale_first_window,
            "no_scale_loads": _no_scale_loads, "no_zero": _no_zero}


def install(variant: str) -> None:
    """Rewrite the source of every kernel whose stem contains MATCH as it is compiled."""
    from gemmgen.compile import cache
    build = cache.cubin_of
    change = VARIANTS[variant]

    def patched(source, arch, stem, timeout=120):
        if MATCH in stem:
            source = change(source)
            print(f"grouped_fp8_diag: {stem}: variant {variant}", file=sys.stderr)
        return build(source, arch, stem, timeout)
    cache.cubin_of = patched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    args = ap.parse_args(argv)
    os.environ["GEMMGEN_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"diag-{args.variant}-")
    install(args.variant)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.argv = [os.path.join(here, "grouped_fp8.py")]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
