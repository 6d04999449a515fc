"""Whether two checkouts run the same kernels on a suite, without a GPU.

``render``: the config each case of SUITE runs in this checkout (a dispatch suite: gemmgen.gemm's
choice, ``decide`` for GPU and compute capability 90; the fp8 suite: its preset or
``choose_fp8`` for 132 SMs), rendered into DIR/<config name>.cu, with DIR/choices.json
(case label -> config name). ``compare``: the two directories' choices, then every kernel of
both compiled with ``nvcc -cubin -arch=sm_90a`` under the same file name (the name is part
of the cubin) and compared byte for byte. Identical cubins with the same choices mean the
same device code; ``launch_parity.py`` checks the launches on the GPU.

    (cd OLD && PYTHONPATH=$PWD python3 NEW/benchmarks/investigations/cubin_parity.py render llm /tmp/p/old)
    PYTHONPATH=$PWD python3 benchmarks/investigations/cubin_parity.py render llm /tmp/p/new
    python3 benchmarks/investigations/cubin_parity.py compare /tmp/p/old /tmp/p/new
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def choices(suite: str, gpu: str) -> dict:
    """Case label -> config (or the error's text) of every case of ``suite``."""
    from gemmgen.tune.suite_cases import expand
    from gemmgen.tune.suites import load
    s = load(suite)
    cases = expand(s)
    if s.kind == "fp8":
        import gemmgen.tune.suite_fp8 as sf
        sf.sm_count = lambda: 132           # the H100/H200 SM count, without a GPU
        return {c.label: v if not isinstance(v, Exception) else str(v)
                for c, v in sf._configs(cases).items()}
    # run_dispatch's decide call, spelled out: the script also runs in older checkouts
    from gemmgen.heuristics.select import decide, math_dtype
    from gemmgen.tune.suite_kinds import _c_aligned
    return {c.label: decide(None, gpu, math_dtype(c.dtype, c.math), c.m, c.n, c.k, 90,
                            c.layout, c.epilogue, _c_aligned(c), c.math).config for c in cases}


def render(suite: str, out: Path, gpu: str) -> None:
    from gemmgen.codegen.render import render as render_cfg
    out.mkdir(parents=True, exist_ok=True)
    picked = choices(suite, gpu)
    for cfg in {v.name: v for v in picked.values() if not isinstance(v, str)}.values():
        (out / f"{cfg.name}.cu").write_text(render_cfg(cfg))
    names = {k: v if isinstance(v, str) else v.name for k, v in picked.items()}
    (out / "choices.json").write_text(json.dumps(names, indent=0, sort_keys=True))
    print(f"{len(names)} cases, {len(list(out.glob('*.cu')))} kernels in {out}")


def _cubin(cu: Path) -> bytes:
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", "-o", cu.stem + ".cubin",
                    cu.name], cwd=cu.parent, check=True, capture_output=True)
    return (cu.parent / (cu.stem + ".cubin")).read_bytes()


def compare(old: Path, new: Path) -> dict:
    a, b = (json.loads((d / "choices.json").read_text()) for d in (old, new))
    kernels = sorted({p.name for p in old.glob("*.cu")} & {p.name for p in new.glob("*.cu")})
    with ThreadPoolExecutor() as pool:
        same = list(pool.map(lambda k: _cubin(old / k) == _cubin(new / k), kernels))
    return {"cases": len(a), "same_choice": sum(a.get(k) == v for k, v in b.items()),
            "kernels": len(kernels), "identical_cubins": sum(same),
            "different": [k[:-3] for k, s in zip(kernels, same) if not s]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("suite"), r.add_argument("out", type=Path)
    r.add_argument("--gpu", default="NVIDIA H200", help="the GPU name the choice is made for")
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path), c.add_argument("new", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "render":
        render(args.suite, args.out, args.gpu)
    else:
        print(json.dumps(compare(args.old, args.new), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
