"""Where a small tile's K step goes: the wgmma kernel with clock64 stamps around each K step of
each CTA's first tile, on one bf16 rcr layer's rotating inputs (small_m.py's inputs), unsplit
tiles of 64 x 32 to 128 x 128 with rings of 4 to 12 stages and 2-CTA clusters (``CASES``).

The rendered kernel is edited as text (``STAMPS``): the producer's elected lane stamps when
stage s was free (its empty-barrier wait returned) and when it issued the stage's TMA loads;
the first consumer thread stamps when it began to wait for the stage, when the stage was full
and when wgmma_wait<1> returned. Stamps go to a ``__device__`` array read back after the fifth
launch (not graph-captured; the error check's launch and three more come first). Each kernel
also runs without its wgmmas (the loads' own pace), without its loads (the consumer's own
pace) and with each tile's K loop starting at a different K tile (``MODES``). The stamps cost
time themselves: the stamped kernels' graph-captured times (``graph_ms``) run above the plain
kernels' (64 x 64 at 128 x 2048 x 2048: 8.5 us stamped, 8.0 to 8.2 us plain in mid_m.py's
runs; 64 x 32: 10.27 against 8.29).

Per CTA it reports: the first stage's load latency (issue to full), the steady K step (mean
interval between full stages over steps 8 and on), the share of the consumer's loop spent
waiting for full stages and for its wgmmas, how far the producer runs ahead, and the issue-to-
full latency of the loads once the ring is primed; and per stage from the eighth on (median):
the producer's time from a free stage to its loads issued and its wait for the next free
stage, the consumer's wait for a full stage, its wgmmas (issue to wait_group 1 returning) and
its release and loop back to the next wait. The medians over the CTAs.

    python3 benchmarks/investigations/k_step_timeline.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/k_step_timeline.py run DIR       # GPU: $OUT/k_step_timeline_*.json

K_STEP_HOT=1 runs every launch on one input set, warm in the L2 (file suffix ``_hot``);
K_STEP_ONLY=TEXT runs only the cases whose label holds TEXT, and K_STEP_MODES (comma-separated)
only those modes; K_STEP_WAITER=1 stamps the kernels with waiter.py's waiter warp patched in (the
consumer stamps when it leaves the named barrier that stands for its full-barrier wait; file
suffix ``_waiter``).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import mid_m
import small_m
import waiter
from gemmgen.heuristics import shapes

CASES = (  # (M, N, K, BM, BN, stages (0: the deepest ring that fits), cluster M x N): unsplit
    (128, 2048, 2048, 64, 64, 0, 1, 1),
    (128, 2048, 2048, 64, 64, 4, 1, 1),
    (128, 2048, 2048, 64, 64, 6, 1, 1),
    (128, 2048, 2048, 64, 64, 12, 1, 1),
    (128, 2048, 2048, 64, 64, 0, 2, 1),
    (128, 2048, 2048, 64, 64, 0, 1, 2),
    (128, 2048, 2048, 64, 32, 0, 1, 1),
    (128, 2048, 2048, 64, 32, 0, 2, 1),
    (128, 2048, 2048, 64, 32, 12, 1, 1),
    (128, 2048, 2048, 64, 128, 0, 1, 1),
    (128, 2048, 2048, 128, 128, 0, 1, 1),
    (256, 1024, 4096, 64, 64, 0, 1, 1),
    (256, 1024, 4096, 64, 64, 0, 2, 1),
    (256, 1024, 4096, 64, 64, 0, 1, 2),
    (256, 4096, 4096, 128, 128, 0, 1, 1),
    (2048, 2048, 2048, 128, 128, 0, 1, 1),
)
HOT = os.environ.get("K_STEP_HOT") == "1"
WAITER = os.environ.get("K_STEP_WAITER") == "1"
MAX_CTAS, MAX_STEPS, FIELDS = 264, 128, 6
"""trace[cta][step][field]: fields 0 empty-free, 1 issued (producer), 2 wait begun, 3 full,
4 wgmma done (consumer); step MAX_STEPS - 1 holds entry clock, smid, end clock."""

TRACE = (f"__device__ long long gg_trace[{MAX_CTAS}][{MAX_STEPS}][{FIELDS}];\n"
         "__device__ __forceinline__ long long gg_clock() { long long c; "
         'asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)); return c; }\n'
         "#define GG(step, f) do { if (blockIdx.x < " + str(MAX_CTAS) + " && (step) < "
         + str(MAX_STEPS - 1)
         + ") gg_trace[blockIdx.x][step][f] = gg_clock(); } while (0)\n")

# Lines of the rendered kernel the stamps and modes edit (with their indentation).
ENTRY = "    const int M = m_arg;\n"
EMPTY_WAIT = ("                    mbar_wait(empty_bar + 8 * s, phase ^ 1);"
              "   // a fresh barrier passes parity 1\n"
              "                    if (leader) {\n")
EXPECT = "                        mbar_expect_tx(full_bar + 8 * s, STAGE_BYTES);\n"
LOAD = "                        load_stage(s, tile, (kt0 + kt) * BK);\n"
LOAD_A = "        tma_load(a_dst, &tmap_a, bar, k0, tile.m0, za);\n"
LOAD_B = "        tma_load(b_dst, &tmap_b, bar, k0, tile.n0, zb);\n"
FULL_WAIT = (("\n                " + waiter.MEET if WAITER else  # not the waiter warp's
              "                mbar_wait(full_bar + 8 * s, phase);") + "\n")
MMA = "                mma_stage(acc, s, cw * M_ITERS, kt == 0);\n"
WGMMA_WAIT = ("                wgmma_wait<1>();"
              "            // the previous stage's wgmma has finished reading\n")
EPILOGUE = "            epilogue(acc, tile, nk, cw, cw * CONSUMER_ROWS);\n"
CONSUMER = "if (local == 0 && wtid == 0 && wg == 1) "
LAST = f"gg_trace[blockIdx.x][{MAX_STEPS - 1}]"

STAMPS = (  # (text of the rendered kernel, replacement): each must occur exactly once
    (ENTRY, ENTRY + f"    if (threadIdx.x == 0 && blockIdx.x < {MAX_CTAS}) {{ unsigned smid; "
     'asm volatile("mov.u32 %0, %%smid;" : "=r"(smid)); '
     f"{LAST}[0] = gg_clock(); {LAST}[1] = smid; }}\n"),
    (EMPTY_WAIT, EMPTY_WAIT + "                        if (t == first_tile) GG(kt, 0);\n"),
    (LOAD, LOAD + "                        if (t == first_tile) GG(kt, 1);\n"),
    (FULL_WAIT, f"                {CONSUMER}GG(kt, 2);\n" + FULL_WAIT
     + f"                {CONSUMER}GG(kt, 3);\n"),
    (WGMMA_WAIT, WGMMA_WAIT + f"                {CONSUMER}GG(kt, 4);\n"),
    (EPILOGUE, EPILOGUE + f"            {CONSUMER}{{ if (blockIdx.x < {MAX_CTAS}) "
     f"{LAST}[2] = gg_clock(); }}\n"),
)


def configs() -> dict:
    """{(M, N, K, label): config} of ``CASES``: mid_m.py's base kernel with the case's tile,
    ring and cluster."""
    out = {}
    for m, n, k, bm, bn, stages, cm, cn in CASES:
        tiles = mid_m.candidates(m, n, k)  # no 64 x 64 tile among them at M = 2048: the rules'
        base = (tiles.get("64x64 sk1") or tiles["rules"])[0].replace(
            check=False, **shapes.mid_tile(bm, bn), store="tma" if bn % 64 == 0 else "direct")
        base = base.replace(check=False, cluster_m=cm, cluster_n=cn)
        cfg = base.replace(check=False, stages=stages) if stages else small_m._deepest(base)
        if cfg is None or cfg.violations():
            print("skipped", m, n, k, bm, bn, stages, cm, cn, cfg and cfg.violations())
            continue
        out[(m, n, k, f"{bm}x{bn} st{cfg.stages} cl{cm}x{cn}")] = cfg
    return out

SPARSE = os.environ.get("K_STEP_SPARSE") == "1"
"""K_STEP_SPARSE=1: the consumer stamps only when each stage was full (and the kernel's entry and
the tile's end): one stamp a stage, for the pace with the least added work (steady_step and
all_steps hold; the per-stage breakdowns do not)."""
if SPARSE:
    STAMPS = (STAMPS[0], (FULL_WAIT, FULL_WAIT + f"                {CONSUMER}GG(kt, 3);\n"),
              STAMPS[-1])


STAGGER = "(t * 5) % max(nk, 1)"
"""The stagger modes start each tile's K loop at a different K tile (the tile index times 5,
modulo the tile's K tiles), so that the CTAs sharing an operand tile read different lines of
it at the same time."""
STAGGERED = LOAD.replace("(kt0 + kt)", "(kt0 + (kt + STAGGER) % nk)")
MODES = {  # what each mode takes out of the stamped kernel (its output is then wrong)
    "full": (),
    "no_mma": ((MMA, ""),),
    "no_tma": ((EXPECT, "                        mbar_arrive(full_bar + 8 * s);\n"),
               (LOAD, "")),
    "stagger": ((LOAD, STAGGERED),),
    "no_mma_stagger": ((MMA, ""), (LOAD, STAGGERED)),
    "no_mma_a_only": ((MMA, ""), (EXPECT, EXPECT.replace("STAGE_BYTES", "A_STAGE_BYTES")),
                      (LOAD_B, "")),
    "no_mma_a_twice": ((MMA, ""), (EXPECT, EXPECT.replace("STAGE_BYTES",
                                                          "STAGE_BYTES + A_STAGE_BYTES")),
                       (LOAD_A, LOAD_A + LOAD_A)),
}
"""full: the kernel as rendered; no_mma: the consumers issue no wgmma (the loads' own pace);
no_tma: the producer arrives on the full barrier without loading (the consumers' own pace);
the stagger modes: STAGGER above; no_mma_a_only and no_mma_a_twice: the loads' pace with one
TMA box a stage (A's; B is not loaded) and with three (A's twice, into the same place): whether
a stage costs by its boxes or by its bytes. The last two apply to K-major A and B only."""


def instrumented(cfg, mode: str = "full") -> str:
    """The rendered source of ``cfg`` with ``TRACE`` and ``STAMPS`` put in, less ``mode``'s
    parts."""
    import gemmgen
    src = waiter.sources(cfg)["waiter"] if WAITER else gemmgen.render(cfg)
    for old, new in STAMPS + tuple((o, n.replace("STAGGER", STAGGER)) for o, n in MODES[mode]):
        if src.count(old) != 1:
            raise SystemExit(f"{cfg.name}: {old.strip()[:60]!r} occurs {src.count(old)} times")
        src = src.replace(old, new)
    head = src.index("extern \"C\" __global__")
    return src[:head] + TRACE + src[head:]


def cases() -> list:
    """[((M, N, K, label), config, mode)]: every config in full and without wgmma; the
    unclustered ones in every other mode too, the box modes only for the 8-stage 64-row tiles;
    only those whose label holds K_STEP_ONLY, where it is set."""
    only = os.environ.get("K_STEP_ONLY")  # a label substring: run only those cases
    modes = os.environ.get("K_STEP_MODES", ",".join(MODES)).split(",")
    return [(case, cfg, mode) for case, cfg in configs().items() for mode in modes
            if (mode == "full" or cfg.cluster == 1 or mode == "no_mma")
            and (not only or only in case[3])
            and (not mode.startswith("no_mma_a") or "st8 cl1x1" in case[3])]


def cubin_path(folder: str, cfg, mode: str) -> Path:
    return Path(folder, f"{cfg.name}.{mode}{'.sparse' if SPARSE else ''}"
                        f"{'.waiter' if WAITER else ''}.trace.cubin")


def compile_all(folder: str) -> None:
    from gemmgen.compile.nvcc import cubin_of
    os.makedirs(folder, exist_ok=True)
    for _, cfg, mode in cases():
        path = cubin_path(folder, cfg, mode)
        if not path.exists():
            cubin, res = cubin_of(instrumented(cfg, mode), "sm_90a", f"{cfg.name}_{mode}")
            path.write_bytes(cubin)
            print(cfg.name, mode, res.registers, "registers")


def read_trace(kernel):
    """gg_trace of ``kernel``'s module, as an int64 numpy array."""
    import numpy as np

    from gemmgen.runtime import driver
    mod = kernel.module()
    ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
    driver.check(driver._lib().cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size),
                                                    ctypes.c_void_p(mod.handle), b"gg_trace"),
                 "cuModuleGetGlobal")
    out = np.zeros((MAX_CTAS, MAX_STEPS, FIELDS), dtype=np.int64)
    driver.check(driver._lib().cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p), ptr,
                                               ctypes.c_size_t(size.value)), "cuMemcpyDtoH")
    return out, ptr.value, size.value


def clear_trace(ptr: int, size: int) -> None:
    from gemmgen.runtime import driver
    driver.check(driver._lib().cuMemsetD8_v2(ctypes.c_uint64(ptr), ctypes.c_ubyte(0),
                                             ctypes.c_size_t(size)), "cuMemsetD8")


def analyse(tr, ctas: int, steps: int) -> dict:
    """The per-CTA figures of the module doc, as medians over the CTAs that ran a tile."""
    import numpy as np
    rows = []
    for b in range(ctas):
        t = tr[b, :steps].astype(float)
        entry, end = tr[b, MAX_STEPS - 1, 0], tr[b, MAX_STEPS - 1, 2]
        if not t[0, 3] or not entry:
            continue
        full, begun, done, free, issued = t[:, 3], t[:, 2], t[:, 4], t[:, 0], t[:, 1]
        later = slice(min(8, steps - 2), steps)
        if SPARSE:
            rows.append({"steady_step": float(np.mean(np.diff(full[later]))),
                         "all_steps": (full[-1] - full[0]) / max(steps - 1, 1),
                         "first_full": full[0] - entry, "after_loop": end - full[-1]})
            continue
        rows.append({
            "first_issue": issued[0] - entry, "first_latency": full[0] - issued[0],
            "steady_step": float(np.mean(np.diff(full[later]))),
            "all_steps": (done[-1] - full[0]) / max(steps - 1, 1),
            "full_wait_share": float(np.sum(full - begun) / (done[-1] - begun[0])),
            "wgmma_wait_share": float(np.sum(done - full) / (done[-1] - begun[0])),
            "primed_latency": float(np.median(full[later] - issued[later])),
            "producer_lead": float(np.median(full[later] - free[later])),
            "producer_issue": float(np.median(issued[later] - free[later])),
            "producer_wait": float(np.median(free[later][1:] - issued[later][:-1])),
            "consumer_full_wait": float(np.median(full[later] - begun[later])),
            "consumer_wgmma": float(np.median(done[later] - full[later])),
            "consumer_release": float(np.median(begun[later][1:] - done[later][:-1])),
            "loop": done[-1] - entry, "after_loop": end - done[-1] if end else 0.0,
        })
    keys = rows[0].keys() if rows else []
    return {"ctas": len(rows), **{k: round(float(np.median([r[k] for r in rows])), 1)
                                  for k in keys},
            "steady_step_p10_p90": [round(float(np.percentile([r["steady_step"] for r in rows],
                                                                q)), 1) for q in (10, 90)]}


def run(folder: str) -> None:
    import torch
    from gemmgen.runtime.build import from_cubin
    import torch.nn.functional as F
    dev = layer_sweep.Device(folder)
    out, shape = [], None
    for (m, n, k, label), cfg, mode in cases():
        kern = from_cubin(cfg, "sm_90a", cubin_path(folder, cfg, mode).read_bytes())
        if shape != (m, n, k):  # a layer's inputs and F.linear's time, once for its cases
            shape = (m, n, k)
            sets, _, xs, ws, ys, ref = small_m.layer_inputs(m, n, k, dev.gen, dev.l2)
            sets = 1 if HOT else sets  # HOT: the same inputs each launch, warm in the L2
            torch_ms = dev.graph_ms(lambda i: F.linear(xs[i % sets], ws[i % sets]), 20, 7)
        launch = layer_sweep.launcher(kern, False, xs, ws, ys, sets)
        err = layer_sweep.error(launch, ys, ref)
        _, ptr, size = read_trace(kern)
        for i in range(1, 4):
            launch(i)
        torch.cuda.synchronize()
        clear_trace(ptr, size)
        launch(4)
        torch.cuda.synchronize()
        tr, _, _ = read_trace(kern)
        steps = -(-k // cfg.bk) // max(cfg.split_k, 1)
        row = {"M": m, "N": n, "K": k, "label": label, "mode": mode, "config": cfg.name,
               "error": err,
               "graph_ms": round(dev.graph_ms(launch, 20, 7), 5),
               "torch_graph_ms": round(torch_ms, 5),
               "k_steps": steps, **analyse(tr, MAX_CTAS, min(steps, MAX_STEPS - 1))}
        print(json.dumps(row), flush=True)
        out.append(row)
    doc = {"investigation": "k_step_timeline", "gpu": dev.gpu,
           "git_commit": os.environ.get("GEMMGEN_COMMIT"),
           "timing": "clock64 stamps in one launch (the fifth), not graph-captured; SM cycles",
           "inputs": "one set, warm in the L2" if HOT else "rotated past the L2",
           "method": __doc__, "rows": out}
    Path(os.environ.get("OUT", "."),
         f"k_step_timeline_{dev.gpu.replace(' ', '_')}{'_hot' if HOT else ''}"
         f"{'_sparse' if SPARSE else ''}{'_waiter' if WAITER else ''}.json"
         ).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    {"compile": compile_all, "run": run}[sys.argv[1]](sys.argv[2])
