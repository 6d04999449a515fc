"""What a fused epilogue costs on the wgmma kernel: the kernel gemmgen chooses for the plain
linear layer (x @ W^T, bf16, layout rcr), built again with each epilogue, beside the plain
kernel and beside PyTorch unfused (F.linear, then the activation or the scale), on the same
data. Graph-captured (kernel only): 20 launches per graph cycling over input sets that
together exceed twice the L2, median of 15 graph replays. Each variant's cost is its time over
that of the plain kernel timed next to it (the pair's order alternating), median of 6 rounds.
Every output is poisoned first and checked against float64 (||C - ref|| / ||ref||, beside
PyTorch's own error on the same inputs).

Usage on the GPU machine, from the repository root:
    PYTHONPATH=$PWD python3 benchmarks/investigations/epilogue_cost.py [tag]
writes $OUT/epilogue_cost_<tag>.json when $OUT is set. EPILOGUE_OVERLAP=1 adds bias + GELU and
bias + SiLU with the activation deferred into the next tile's main loop (``overlap``);
EPILOGUE_ONLY (names, comma-separated) and EPILOGUE_SHAPES (MxNxK, comma-separated) narrow it.

    python3 benchmarks/investigations/epilogue_cost.py compile DIR   # CPU: the cubins, into DIR

EPILOGUE_CUBINS=DIR runs the cubins found there instead of compiling on the GPU machine (the
compile step chooses for EPILOGUE_GPU, by default "NVIDIA H200"; a kernel of another GPU's
choice is built there).
EPILOGUE_BUFFERS=1 adds each epilogue with C staged whole or through chunk buffers (BUFFERS;
EPILOGUE_BUFFER_COUNTS, comma-separated, names others).
EPILOGUE_NCU=1 only checks each kernel and launches it twice more, for ncu (no timing).
EPILOGUE_ALT=TAG:DIR[,TAG:DIR ...] adds each kernel found among DIR's cubins again (``e [TAG]``):
the same configs built from other checkouts, timed in the same run."""
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

from gemmgen.heuristics.select import decide
from gemmgen.heuristics.tunedb import TuneDB
from gemmgen.runtime.build import build
from gemmgen.runtime.device import device_identity

import graph_timing  # beside this script (its folder is sys.path[0] when it runs)

SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096)]
EPILOGUES = {  # gemmgen epilogue: (tree operands, PyTorch unfused on y = x @ W^T)
    "none": ((), lambda y, o: y),
    "bias": (("bias",), lambda y, o: y + o["bias"]),
    "bias_gelu": (("bias",), lambda y, o: F.gelu(y + o["bias"], approximate="tanh")),
    "silu(acc + bias)": (("bias",), lambda y, o: F.silu(y + o["bias"])),
    "gelu(acc + bias)": (("bias",), lambda y, o: F.gelu(y + o["bias"], approximate="tanh")),
    "acc*col_scale + bias": (("bias", "col_scale"), lambda y, o: y * o["col_scale"] + o["bias"]),
    "acc*row_scale + bias": (("bias", "row_scale"),
                             lambda y, o: y * o["row_scale"][:, None] + o["bias"]),
    "acc + R": (("R",), lambda y, o: y + o["R"]),
}
if os.environ.get("EPILOGUE_ONLY"):  # e.g. "none,acc + R"
    EPILOGUES = {e: v for e, v in EPILOGUES.items()
                 if e == "none" or e in os.environ["EPILOGUE_ONLY"].split(",")}
if os.environ.get("EPILOGUE_SHAPES"):  # e.g. "4096x4096x14336"
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in os.environ["EPILOGUE_SHAPES"].split(",")]
OVERLAP = {"bias_gelu overlapped": "bias_gelu", "silu(acc + bias) overlapped": "silu(acc + bias)"}
"""The same epilogue with the activation deferred into the next tile's main loop (overlap)."""
BUFFERS = (0, 1, 2)
"""EPILOGUE_BUFFERS=1 adds each epilogue on the plain kernel's tile with C staged whole (0) or
through 1 or 2 chunk buffers, each at the deepest ring that fits (``e [cs1 st4 v1]``: one buffer,
4 stages, one vector staged in shared memory)."""
VARIANT_OF = dict(OVERLAP)
"""Each timed variant's epilogue, where its name is not the epilogue's own."""
ALT = {}
"""The variants loaded from EPILOGUE_ALT's cubins: {name: folder}."""
REPS, ROUNDS, REPLAYS = 20, int(os.environ.get("EPILOGUE_ROUNDS", 6)), 15


def configs(gpu: str, cc: int):
    """{(shape, variant): config}: decide's plain kernel for each shape on ``gpu`` (compute
    capability ``cc`` x 10) with each epilogue (decide's own kernel for an epilogue the plain
    one's config cannot take: a staged residual needs the whole C tile staged)."""
    out = {}
    for m, n, k in SHAPES:
        base = decide(TuneDB(None), gpu, "bf16", m, n, k, cc, "rcr", "none", True,
                      "native", 1)
        assert not base.swap, base
        for e in EPILOGUES:  # where the plain kernel cannot take e, decide's kernel for e
            if os.environ.get("EPILOGUE_BUFFERS") and e != "none":
                continue  # each epilogue's variants below instead
            trial = base.config.replace(check=False, epilogue=e)
            out[(m, n, k), e] = trial if not trial.violations() else decide(
                TuneDB(None), gpu, "bf16", m, n, k, cc, "rcr", e, True, "native", 1).config
        for name, e in OVERLAP.items():
            if os.environ.get("EPILOGUE_OVERLAP") and e in EPILOGUES:
                out[(m, n, k), name] = base.config.replace(epilogue=e, overlap=True)
        for e in EPILOGUES if os.environ.get("EPILOGUE_BUFFERS") else ():
            counts = os.environ.get("EPILOGUE_BUFFER_COUNTS")  # e.g. "0,1"
            counts = tuple(map(int, counts.split(","))) if counts else BUFFERS
            for b in counts if e != "none" else ():
                fit = next((t for st in range(8, 1, -1) if not (t := base.config.replace(
                    check=False, epilogue=e, c_stages=b, stages=st)).violations()), None)
                if fit is not None:
                    name = f"{e} [cs{b} st{fit.stages} v{len(fit.vectors)}]"
                    VARIANT_OF[name] = e
                    out[(m, n, k), name] = fit
    for alt in filter(None, os.environ.get("EPILOGUE_ALT", "").split(",")):
        tag, folder = alt.split(":", 1)  # every kernel again, from another checkout's cubins
        for (shape, e), cfg in [(key, cfg) for key, cfg in out.items() if key[1] not in ALT]:
            if not os.path.exists(os.path.join(folder, cfg.name + ".cubin")):
                continue  # only the kernels found there
            name = f"{e} [{tag}]"
            VARIANT_OF[name], ALT[name] = VARIANT_OF.get(e, e), folder
            out[shape, name] = cfg
    return out


def compile_to(folder):
    from gemmgen.compile.cache import compile_many
    os.makedirs(folder, exist_ok=True)
    todo = {c.name: c for c in configs(os.environ.get("EPILOGUE_GPU", "NVIDIA H200"), 90).values()}
    for cfg, done in zip(todo.values(), compile_many(list(todo.values()), arch="sm_90a")):
        with open(os.path.join(folder, cfg.name + ".cubin"), "wb") as f:
            f.write(done[0])
    print(f"{len(todo)} cubins in {folder}")


def load(cfg, folder=None):
    """The kernel of ``cfg``: from the cubin in ``folder`` (by default EPILOGUE_CUBINS) where
    there is one, else built."""
    from gemmgen.runtime.build import adopt_pycuda, from_cubin
    folder = folder or os.environ.get("EPILOGUE_CUBINS")
    path = os.path.join(folder or "", cfg.name + ".cubin")
    if folder and os.path.exists(path):
        adopt_pycuda()
        with open(path, "rb") as f:
            return from_cubin(cfg, "sm_90a", f.read())
    return build(cfg)


def operands(m, n, dt, gen):
    return {"bias": torch.randn(n, device="cuda", dtype=dt, generator=gen),
            "col_scale": torch.rand(n, device="cuda", generator=gen) + 0.5,
            "row_scale": torch.rand(m, device="cuda", generator=gen) + 0.5,
            "R": torch.randn(m, n, device="cuda", dtype=dt, generator=gen)}


def graph_ms(launch, sets):
    """Kernel time of ``launch`` (called with a set index) in a graph of REPS launches cycling
    over ``sets`` input sets, median of REPLAYS replays."""
    return graph_timing.graph_ms(lambda i: launch(i % sets), REPS, REPLAYS)


def main(tag):
    dt = torch.bfloat16
    gpu, cc = device_identity(0)
    chosen = configs(gpu, cc)
    gen = torch.Generator(device="cuda").manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for m, n, k in SHAPES:
        kernels = {e: load(cfg, ALT.get(e))
                   for (shape, e), cfg in chosen.items() if shape == (m, n, k)}
        per_set = (m * k + n * k + m * n) * 2
        sets = max(2, -(-2 * l2 // per_set))
        xs = [torch.randn(m, k, device="cuda", dtype=dt, generator=gen) for _ in range(sets)]
        ws = [torch.randn(n, k, device="cuda", dtype=dt, generator=gen) * k ** -0.5
              for _ in range(sets)]
        cs = [torch.empty(m, n, device="cuda", dtype=dt) for _ in range(sets)]
        ops = operands(m, n, dt, gen)
        ops_t = {o: v.to(dt) for o, v in ops.items()}  # PyTorch unfused: every operand in bf16
        row = {"M": m, "N": n, "K": k, "config": chosen[(m, n, k), "none"].name, "sets": sets}
        ref0 = xs[0].double() @ ws[0].double().t()
        for e in kernels:  # correctness, poisoned output first
            names, unfused = EPILOGUES[VARIANT_OF.get(e, e)]
            cs[0].fill_(float("nan"))
            kernels[e](xs[0], ws[0].t(), cs[0], **{o: ops[o] for o in names})
            want = unfused(ref0, {o: ops[o].double() for o in names})
            got_t = unfused(F.linear(xs[0], ws[0]), {o: ops[o] for o in names}).double()
            err = ((cs[0].double() - want).norm() / want.norm()).item()
            err_t = ((got_t - want).norm() / want.norm()).item()
            row[f"{e}|error"], row[f"{e}|torch_error"] = err, err_t
            row[f"{e}|ok"] = bool(err == err and err <= max(2 * err_t, 1e-2))
        del ref0
        if os.environ.get("EPILOGUE_NCU"):  # two more launches of each, in order, for ncu
            for e in kernels:
                names = EPILOGUES[VARIANT_OF.get(e, e)][0]
                for _ in range(2):
                    kernels[e](xs[1], ws[1].t(), cs[1], **{o: ops[o] for o in names})
            torch.cuda.synchronize()
            print(json.dumps({key: row[key] for key in row if key.endswith("ok")}), flush=True)
            continue
        times, cost = {}, {}
        for rnd in range(ROUNDS):  # each variant beside a plain run adjacent to it
            for e in kernels:
                names, unfused = EPILOGUES[VARIANT_OF.get(e, e)]
                kw = {o: ops[o] for o in names}
                kw_t = {o: ops_t[o] for o in names}
                pair = ("none", e) if rnd % 2 == 0 else (e, "none")
                got = {}
                for v in pair:
                    kv = {} if v == "none" else kw
                    got[v] = graph_ms(lambda i: kernels[v](
                        xs[i], ws[i].t(), cs[i], stream=torch.cuda.current_stream().cuda_stream,
                        **kv), sets)
                t_torch = graph_ms(lambda i: unfused(F.linear(xs[i], ws[i]), kw_t), sets)
                times.setdefault(e, []).append(got[e])
                times.setdefault(e + "|torch", []).append(t_torch)
                cost.setdefault(e, []).append(got[e] / got["none"] - 1)
        flop = 2 * m * n * k
        for key, ts in times.items():
            row[f"{key}|ms"] = statistics.median(ts)
            row[f"{key}|tflops"] = flop / statistics.median(ts) / 1e9
        for e in kernels:
            row[f"{e}|cost_vs_plain"] = statistics.median(cost[e])
            row[f"{e}|x_torch_unfused"] = row[f"{e}|torch|ms"] / row[f"{e}|ms"]
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                          for k, v in row.items()}), flush=True)
        rows.append(row)
    out = {"tag": tag, "gpu": gpu, "timing": "graph-captured, kernel only", "rows": rows}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"epilogue_cost_{tag}.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["compile"]:
        compile_to(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "run")
