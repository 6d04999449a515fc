"""Rewrite the scheduling flags of the promotion's FFMA runs in a cubin, for an A/B on the GPU.

ptxas (13.0) marks every other FFMA of a promotion run (F += s * P over a 64-register partial
set) "do not yield, reuse the scale operand". DeepGEMM's early FP8 kernels cleared those two
flags on part of each run (their README: yielding lets the warp scheduler interleave the other
warpgroup's wgmma issue with the promotion, 10%+ on fine-grained scaling). This script does the
same, on its own reading of the encoding seen in ``cuobjdump -sass`` of sm_90a cubins: in the
high 64-bit word of an instruction, bit 45 (0x0000200000000000) set means "do not yield" and
bit 59 (0x0800000000000000) is the reuse flag of operand B. With ``--fraction f`` the first
``f`` of the flagged FFMAs of each run of at least ``--min-run`` consecutive FFMAs lose both
flags; a negative ``f`` instead sets both flags on the first ``-f`` of the FFMAs that have
neither and whose successor reads the same scale register (the scale then stays in the reuse
cache through the whole run). Nothing else changes. The result is checked: the same instructions, in the same
order, with only those flags changed (cuobjdump of the patched cubin).

    python3 benchmarks/investigations/ffma_yield.py IN.cubin OUT.cubin [--fraction 0.5]
    PYTHONPATH=$PWD GEMMGEN_CACHE_DIR=/tmp/gc-0.5 GROUPED_FP8_ONLY=deepgemm \
        python3 benchmarks/investigations/ffma_yield.py --grouped-fp8 0.5

The second form runs ``grouped_fp8.py`` in this process with every grouped FP8 cubin patched
as it is built (give each fraction its own kernel cache). A diagnostic, not part of the build:
a run's register reuse is given up where it yields.
"""
from __future__ import annotations

import argparse
import os
import re
import runpy
import struct
import sys

NO_YIELD = 0x0000200000000000
REUSE_B = 0x0800000000000000
_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\* (0x[0-9a-f]{16}) \*/")
_HIGH = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")


def text_sections(cubin: bytes) -> dict[str, int]:
    """{function name: file offset of its .text section} of a cubin."""
    from gemmgen.runtime.tma import elf_sections
    return {name[len(".text."):]: at for name, (at, _) in elf_sections(cubin).items()
            if name.startswith(".text.")}


def instructions(sass: str) -> dict[str, list[tuple[int, str, int]]]:
    """{function: [(address, text, high word)]} from ``cuobjdump -sass``."""
    funcs, name, lines = {}, None, sass.splitlines()
    for i, line in enumerate(lines):
        if "Function :" in line:
            name = line.split("Function :")[1].strip()
            funcs[name] = []
            continue
        m = _LINE.match(line)
        if m and name:
            high = int(_HIGH.search(lines[i + 1]).group(1), 16)
            funcs[name].append((int(m.group(1), 16), m.group(2), high))
    return funcs


def ffma_runs(insts, min_run: int) -> list[list[tuple[int, str, int]]]:
    """Maximal runs of consecutive FFMA instructions, at least ``min_run`` long."""
    runs, cur = [], []
    for inst in insts + [(0, "END", 0)]:
        if inst[1].startswith("FFMA"):
            cur.append(inst)
            continue
        if len(cur) >= min_run:
            runs.append(cur)
        cur = []
    return runs


def patch(cubin: bytes, sass: str, fraction: float, min_run: int = 16) -> tuple[bytes, int]:
    """The cubin with the flags of the first ``fraction`` of each run's flagged FFMAs
    cleared, and how many were."""
    out, changed = bytearray(cubin), 0
    sections = text_sections(cubin)
    for func, insts in instructions(sass).items():
        base = sections[func]
        for run in ffma_runs(insts, min_run):
            if fraction < 0:
                picked = _unflagged_reusable(run)
                picked = picked[:int(len(picked) * -fraction)]
            else:
                flagged = [x for x in run if x[2] & NO_YIELD and x[2] & REUSE_B]
                picked = flagged[:int(len(flagged) * fraction)]
            for addr, _, high in picked:
                at = base + addr + 8
                assert struct.unpack_from("<Q", out, at)[0] == high, (func, hex(addr))
                struct.pack_into("<Q", out, at, high ^ (NO_YIELD | REUSE_B))
                changed += 1
    return bytes(out), changed


def _operand_b(text: str) -> str:
    return text.replace(".reuse", "").split(",")[2].strip()


def _unflagged_reusable(run):
    """The FFMAs of a run with neither flag whose successor reads the same operand B register:
    those a negative fraction marks "reuse B, do not yield" (as ptxas marks the others)."""
    return [x for x, y in zip(run, run[1:])
            if not x[2] & (NO_YIELD | REUSE_B) and _operand_b(x[1]) == _operand_b(y[1])]


def sass_of(path: str) -> str:
    from gemmgen.compile.nvcc import sass
    return sass(open(path, "rb").read())


def install(fraction: float, match: str = "grouped_m_e4m3") -> None:
    """Patch every cubin whose kernel name contains ``match`` as gemmgen's cache builds it."""
    from gemmgen.compile import cache
    from gemmgen.compile.nvcc import sass
    build = cache.cubin_of

    def patched(source, arch, stem, timeout=120):
        cubin, res = build(source, arch, stem, timeout)
        if match in stem:
            cubin, changed = patch(cubin, sass(cubin), fraction)
            print(f"ffma_yield: {stem}: {changed} FFMAs changed", file=sys.stderr)
        return cubin, res
    cache.cubin_of = patched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="?"), ap.add_argument("dst", nargs="?")
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--min-run", type=int, default=16)
    ap.add_argument("--grouped-fp8", type=float, metavar="FRACTION",
                    help="run grouped_fp8.py with the grouped FP8 cubins patched")
    args = ap.parse_args(argv)
    if args.grouped_fp8 is not None:
        install(args.grouped_fp8)
        here = os.path.dirname(os.path.abspath(__file__))
        sys.argv = [os.path.join(here, "grouped_fp8.py")]
        runpy.run_path(sys.argv[0], run_name="__main__")
        return 0
    before = sass_of(args.src)
    data, changed = patch(open(args.src, "rb").read(), before, args.fraction, args.min_run)
    open(args.dst, "wb").write(data)
    after = instructions(sass_of(args.dst))
    for func, insts in instructions(before).items():
        new = after[func]
        assert [(a, t.replace(".reuse", "")) for a, t, _ in insts] == \
               [(a, t.replace(".reuse", "")) for a, t, _ in new], func
        diff = [(a, h ^ g) for (a, _, h), (_, _, g) in zip(insts, new) if h != g]
        assert all(x == NO_YIELD | REUSE_B for _, x in diff), func
    print(f"{args.dst}: {changed} FFMAs changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
