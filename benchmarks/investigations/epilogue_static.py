"""Static figures of the epilogue-tree, dual-GEMM and overlap kernels (no GPU): ptxas resources,
the highest register the SASS uses (setmaxnreg kernels report their launch count to ptxas),
accumulator sets of the HGMMAs, and where the activation's MUFU instructions sit (between the
main loop's first HGMMA and its last wait, or after it).

python3 benchmarks/investigations/epilogue_static.py [--json benchmarks/results/epilogue_static.json]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gemmgen, not an installed one

from gemmgen import PRESETS, BuildError
from gemmgen.compile.cache import compile_many
from gemmgen.compile.nvcc import nvcc_version, sass

B = PRESETS["wgmma_tma_store"].config
T1 = "silu(acc*row_scale*col_scale + bias) + R"
T2 = "cast(amax(aux(gelu_erf(alpha*acc*row_scale*col_scale + beta*C + row_bias + bias)) + R(dtype='fp32')), e4m3)"
VARIANTS = {
    "bias_gelu (today)": B.replace(epilogue="bias_gelu"),
    "bias_gelu, overlap (preset wgmma_overlap)": PRESETS["wgmma_overlap"].config,
    "tree T1": B.replace(epilogue=T1),
    "tree T1, overlap": B.replace(epilogue=T1, overlap=True),
    "tree T1, col-major C, overlap": B.replace(epilogue=T1, overlap=True, layout="rrc"),
    "tree T1, bf16, overlap": PRESETS["wgmma_bf16"].config.replace(epilogue=T1, overlap=True),
    "tree T2 (every node)": B.replace(epilogue=T2),
    "tree T1, ping-pong 128x128": B.replace(epilogue=T1, pingpong=True, bn=128, stages=4),
    "tree T1, split-K 3, direct, crc": B.replace(epilogue=T1, store="direct", split_k=3,
                                                 layout="crc"),
    "dual SwiGLU 128x128 (2 x 64 accumulators)": B.replace(dual=True, bn=128, stages=4,
                                                           layout="rcr", epilogue="silu(gate)*up"),
    "dual SwiGLU bf16, cluster 2x1": PRESETS["wgmma_bf16"].config.replace(
        dual=True, bn=128, stages=4, layout="rcr", epilogue="silu(gate)*up", cluster_m=2),
    "dual SwiGLU + R, col-major C": B.replace(dual=True, bn=128, stages=4, layout="rcc",
                                              epilogue="silu(gate)*up + R"),
}


def figures(cfg, cubin: bytes, res) -> dict:
    text = sass(cubin)
    main = text.split(f"Function : {cfg.name}\n")[1].split("Function :")[0]
    lines = [ln for ln in main.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]
    first = next(i for i, ln in enumerate(lines) if "HGMMA" in ln)
    last_wait = max(i for i, ln in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
    mufu = [i for i, ln in enumerate(lines) if "MUFU.TANH" in ln or "MUFU.EX2" in ln]
    return {
        "name": cfg.name, "ptxas_registers": res.registers,
        "max_register_in_sass": max(int(r) for r in re.findall(r"\bR(\d+)\b", main)) + 1,
        "spill_bytes": res.spills, "stack_bytes": res.stack_bytes,
        "smem_dynamic_bytes": cfg.smem_bytes, "consumer_registers": cfg.consumer_regs,
        "acc_regs_per_consumer": cfg.acc_regs,
        "accumulator_sets": len(set(re.findall(r"HGMMA\.\S+ (R\d+),", main))),
        "hgmma": sum("HGMMA" in ln for ln in lines),
        "mufu_tanh_ex2": len(mufu),
        "mufu_in_main_loop": sum(first < i < last_wait for i in mufu),
        "sass_instructions": len(lines),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    configs = list(VARIANTS.values())
    rows = {}
    for (label, cfg), done in zip(VARIANTS.items(), compile_many(configs, arch="sm_90a")):
        if isinstance(done, BuildError):
            rows[label] = {"name": cfg.name, "error": done.log[-400:]}
            continue
        rows[label] = figures(cfg, done[0], done[1])
        r = rows[label]
        print(f"{label:44s} regs {r['ptxas_registers']} (SASS max R{r['max_register_in_sass'] - 1})"
              f" spill {r['spill_bytes']} stack {r['stack_bytes']} smem {r['smem_dynamic_bytes']}"
              f" acc sets {r['accumulator_sets']} MUFU {r['mufu_in_main_loop']}/"
              f"{r['mufu_tanh_ex2']} in main loop")
    if args.json:
        out = {"what": __doc__.split("\n")[0], "nvcc": nvcc_version(), "arch": "sm_90a",
               "trees": {"T1": T1, "T2": T2}, "kernels": rows}
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
