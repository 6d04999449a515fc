"""Small-M linear layers (M = 1 to 256, forward rcr, bf16): which wgmma tile, split-K and
operand swap beat F.linear, on the layers of the llm suite's models (training) and of seven
other public model families (test, never used to fit a rule).

For each layer and M every candidate runs beside F.linear on the same data: the shape rules'
choice (``decide``), the swapped kernel (M <= 128) in 64- and 128-row tiles, the unswapped one
(M >= 128) in six block tiles, each with K unsplit or split into 2, 3, 4, 6 or 8 slices (inline
reduction) where a slice keeps at least 8 K tiles. Graph-captured (kernel only): REPS launches
per graph cycling over input sets that together exceed twice the L2 (up to 64 sets), median of
REPLAYS graph replays. Every candidate's output is poisoned (NaN) first and checked against
float64 (||C - ref|| / ||ref||, beside F.linear's own error). Each candidate is also tried in
clusters of 2 x 1 and 1 x 2 CTAs sharing the other operand's tile by TMA multicast, where the
rules allow it (not with split-K); swapped, from M = 16, also in tiles of half of M, whose pairs
along N can share the weights' tile (cluster 1 x 2). At M <= 64 a device copy of the weights' bytes (rotated as
the weights are) is timed in the same graph style: ``copy_ms``, ``weight_bytes``.

    python3 benchmarks/investigations/small_m.py compile DIR     # CPU: the cubins, into DIR
    python3 benchmarks/investigations/small_m.py run DIR [TAG]    # GPU: $OUT/small_m_<TAG>.json
    python3 benchmarks/investigations/small_m.py summarize FILE   # CPU: this checkout's rules

SMALL_M_ONLY (comma-separated M values) and SMALL_M_SETS ("train", "test") narrow a run;
SMALL_M_BEFORE=DIR adds, beside each inline split-K candidate, the same kernel's cubin from
DIR (compiled from an earlier commit with the same kernel parameters: inline split-K cubins
from before the fragment-order partials take two more and do not load), labelled "... before".
"""
from __future__ import annotations

import json
import math
import os
import sys
import tomllib
from pathlib import Path

from gemmgen.heuristics.select import decide
from gemmgen.heuristics.tunedb import TuneDB

ROOT = Path(__file__).resolve().parents[2]
MS = (1, 8, 16, 32, 64, 128, 256)
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_SLICE = 8           # K tiles (of 64) a slice keeps at least
ROWS = (64, 128)         # swapped: the kernel's BM (over the caller's N)
TILES = ((64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256))  # unswapped
CLUSTERS = ((2, 1), (1, 2))  # cluster shapes tried beside each candidate (where valid)
REPLAYS = 9
TEST = {  # family: (source, {layer: (N, K)}), out_features x in_features as in config.json
    "phi3_mini": ("https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json",
                  {"qkv_proj": (9216, 3072), "o_proj": (3072, 3072),
                   "gate_up_proj": (16384, 3072), "down_proj": (3072, 8192)}),
    "gemma2_2b": ("https://huggingface.co/google/gemma-2-2b/blob/main/config.json",
                  {"q_proj": (2048, 2304), "k_proj": (1024, 2304), "o_proj": (2304, 2048),
                   "gate_proj": (9216, 2304), "down_proj": (2304, 9216)}),
    "llama3_2_1b": ("https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json",
                    {"q_proj": (2048, 2048), "k_proj": (512, 2048), "gate_proj": (8192, 2048),
                     "down_proj": (2048, 8192)}),
    "qwen2_5_0_5b": ("https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json",
                     {"q_proj": (896, 896), "k_proj": (128, 896), "gate_proj": (4864, 896),
                      "down_proj": (896, 4864)}),
    "falcon_7b": ("https://huggingface.co/tiiuae/falcon-7b/blob/main/config.json",
                  {"query_key_value": (4672, 4544), "dense": (4544, 4544),
                   "dense_h_to_4h": (18176, 4544), "dense_4h_to_h": (4544, 18176)}),
    "opt_1_3b": ("https://huggingface.co/facebook/opt-1.3b/blob/main/config.json",
                 {"q_proj": (2048, 2048), "fc1": (8192, 2048), "fc2": (2048, 8192)}),
    "deepseek_v3": ("https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
                    {"q_a_proj": (1536, 7168), "q_b_proj": (24576, 1536),
                     "kv_a_proj_with_mqa": (576, 7168), "kv_b_proj": (32768, 512),
                     "o_proj": (7168, 16384), "gate_proj": (18432, 7168),
                     "down_proj": (7168, 18432)}),
}


def layers() -> dict:
    """{"train": {(N, K): [names]}, "test": {...}}: the llm suite's forward layers, and TEST's
    (a shape in both sets is kept in train only)."""
    suite = tomllib.loads((ROOT / "benchmarks/suites/llm.toml").read_text())
    train: dict = {}
    for model, spec in suite["models"].items():
        for layer, (n, k) in spec["layers"].items():
            train.setdefault((n, k), []).append(f"{model}.{layer}")
    test: dict = {}
    for model, (_, spec) in TEST.items():
        for layer, nk in spec.items():
            if nk not in train:
                test.setdefault(nk, []).append(f"{model}.{layer}")
    return {"train": train, "test": test}


def _deepest(cfg, most: int = 8):
    """``cfg`` with the deepest ring (<= ``most`` stages) that breaks no rule, or None."""
    for st in range(most, 0, -1):
        trial = cfg.replace(check=False, stages=st)
        if not trial.violations():
            return trial
    return None


def candidates(m: int, n: int, k: int) -> dict:
    """{label: (config, swap)} for an M x N x K bf16 rcr layer; label "rules" is decide's."""
    choice = decide(TuneDB(None), "NVIDIA H200", "bf16", m, n, k, 90, "rcr", "none", True,
                    "native", 1, table=False)
    out = {"rules": (choice.config, choice.swap)}
    base = choice.config.replace(check=False, split_k=1, split_inline=False, stages=3)
    k_tiles = math.ceil(k / 64)
    shapes = []
    if m <= 128:
        bn = max(8, -(-m // 8) * 8)
        shapes += [(True, rows, bn) for rows in ROWS]
        if m >= 16:  # half of M per tile, two tiles per cluster sharing the weights' tile
            shapes += [(True, rows, max(8, -(-m // 16) * 8)) for rows in ROWS]
    if m >= 128:
        shapes += [(False, bm, bn) for bm, bn in TILES]
    # 128-row tiles: one consumer (two 64-row slices) or two; unswapped, two only
    for swap, bm, bn, two in [(*s, two) for s in shapes for two in (False, True)
                              if (two and s[1] == 128) or (not two and (s[0] or s[1] == 64))]:
        kw = dict(layout="rcc" if swap else "rcr", bm=bm, bn=bn,
                  consumers=2 if two else 1, regs_producer=40 if two else 0,
                  regs_consumer=232 if two else 0)
        for split in SPLITS:
            if split > 1 and k_tiles / split < MIN_SLICE:
                continue
            store = "direct" if (swap or split > 1 or bn < 64) else "tma"
            inline = split > 1 and (not swap or bn < 128)
            cfg = _deepest(base.replace(check=False, split_k=split, split_inline=inline,
                                        store=store, **kw))
            if cfg is None:
                continue
            label = f"{'swap' if swap else 'tile'} {bm}x{bn}{' c2' if two else ''} sk{split}"
            out[label] = (cfg, swap)
            for cm, cn in CLUSTERS:  # two CTAs share one tile of the other operand (multicast)
                twin = _deepest(cfg.replace(check=False, cluster_m=cm, cluster_n=cn))
                if twin is not None:
                    out[f"{label} cl{cm}x{cn}"] = (twin, swap)
    return out


def all_configs(sets=("train", "test"), ms=MS) -> dict:
    """{name: config} over every layer, M and candidate."""
    out = {}
    for which in sets:
        for (n, k) in layers()[which]:
            for m in ms:
                for cfg, _ in candidates(m, n, k).values():
                    out[cfg.name] = cfg
    return out


def compile_to(folder: str) -> None:
    from gemmgen.compile.cache import compile_many
    from gemmgen.compile.nvcc import BuildError
    os.makedirs(folder, exist_ok=True)
    configs = list(all_configs().values())
    todo = [c for c in configs if not os.path.exists(os.path.join(folder, c.name + ".cubin"))]
    print(f"{len(configs)} kernels, {len(todo)} to compile", flush=True)
    for cfg, done in zip(todo, compile_many(todo, arch="sm_90a")):
        if isinstance(done, BuildError):
            print("FAILED", cfg.name, str(done)[:300], flush=True)
            continue
        Path(folder, cfg.name + ".cubin").write_bytes(done[0])


def layer_inputs(m: int, n: int, k: int, gen, l2: int) -> tuple:
    """(sets, reps, xs, ws, ys, ref): input sets of an M x N x K bf16 linear layer (x M x K, w
    N x K scaled by K^-1/2, y M x N) that together exceed twice the L2 (2 to 64 sets), the
    launches per graph (20 to 64) and the float64 reference of set 0."""
    import torch
    dt = torch.bfloat16
    sets = min(64, max(2, -(-2 * l2 // ((m * k + n * k + m * n) * 2))))
    xs = [torch.randn(m, k, device="cuda", dtype=dt, generator=gen) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=dt, generator=gen) * k ** -0.5
          for _ in range(sets)]
    ys = [torch.empty(m, n, device="cuda", dtype=dt) for _ in range(sets)]
    return sets, min(64, max(20, sets)), xs, ws, ys, xs[0].double() @ ws[0].double().t()


def main_run(folder: str, tag: str) -> None:
    import torch
    import torch.nn.functional as F
    from gemmgen.runtime.build import adopt_pycuda, build, from_cubin
    from gemmgen.runtime.device import device_identity

    import graph_timing  # beside this script (needs torch: imported only to run)
    dt = torch.bfloat16
    gpu, _ = device_identity(0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    kernels: dict = {}

    def kernel(cfg, where=folder):
        if (cfg.name, where) not in kernels:
            path = Path(where, cfg.name + ".cubin")
            adopt_pycuda()
            kernels[cfg.name, where] = (from_cubin(cfg, "sm_90a", path.read_bytes())
                                        if path.exists() else build(cfg))
        return kernels[cfg.name, where]
    before = os.environ.get("SMALL_M_BEFORE")

    side = torch.cuda.Stream()  # one capture stream: gemmgen keeps workspaces per stream

    def graph_ms(launch, reps):
        return graph_timing.graph_ms(launch, reps, REPLAYS, stream=side)

    ms = [int(x) for x in os.environ.get("SMALL_M_ONLY", "").split(",") if x] or MS
    sets_wanted = os.environ.get("SMALL_M_SETS", "train,test").split(",")
    rows = []
    for which in sets_wanted:
        for (n, k), names in layers()[which].items():
            for m in ms:
                per_set = (m * k + n * k + m * n) * 2
                sets = min(64, max(2, -(-2 * l2 // per_set)))
                reps = min(64, max(20, sets))
                xs = [torch.randn(m, k, device="cuda", dtype=dt, generator=gen)
                      for _ in range(sets)]
                ws = [torch.randn(n, k, device="cuda", dtype=dt, generator=gen) * k ** -0.5
                      for _ in range(sets)]
                ys = [torch.empty(m, n, device="cuda", dtype=dt) for _ in range(sets)]
                ref = xs[0].double() @ ws[0].double().t()
                t_ref = F.linear(xs[0], ws[0]).double()
                row = {"set": which, "layers": names, "M": m, "N": n, "K": k, "sets": sets,
                       "torch_error": ((t_ref - ref).norm() / ref.norm()).item()}
                row["torch_ms"] = graph_ms(lambda i: F.linear(xs[i % sets], ws[i % sets]), reps)
                if m <= 64:  # a weight stream: beside a device copy of the weights' bytes
                    dst = torch.empty_like(ws[0])
                    row["weight_bytes"] = n * k * 2
                    row["copy_ms"] = graph_ms(lambda i: dst.copy_(ws[i % sets]), reps)
                cands = {}
                todo = [(label, cfg, swap, kernel(cfg))
                        for label, (cfg, swap) in candidates(m, n, k).items()]
                if before:  # the same inline split-K kernels as compiled before the change
                    todo += [(f"{label} before", cfg, swap, kernel(cfg, before))
                             for label, cfg, swap, _ in todo
                             if cfg.split_inline and Path(before, cfg.name + ".cubin").exists()]
                for label, cfg, swap, kern in todo:

                    def launch(i, kern=kern, swap=swap):
                        x, w, y = xs[i % sets], ws[i % sets], ys[i % sets]
                        s = torch.cuda.current_stream().cuda_stream
                        if swap:
                            kern(w, x.t(), y.t(), stream=s)
                        else:
                            kern(x, w.t(), y, stream=s)
                    ys[0].fill_(float("nan"))
                    launch(0)
                    torch.cuda.synchronize()
                    err = ((ys[0].double() - ref).norm() / ref.norm()).item()
                    cands[label] = {"config": cfg.name, "error": err,
                                    "ms": graph_ms(launch, reps)}
                row["candidates"] = cands
                best = min((c for c in cands if not c.endswith(" before")),
                           key=lambda c: cands[c]["ms"])
                print(json.dumps({"set": which, "M": m, "N": n, "K": k,
                                  "torch_us": round(row["torch_ms"] * 1e3, 2),
                                  "rules_x": round(row["torch_ms"] / cands["rules"]["ms"], 3),
                                  "best": best,
                                  "best_x": round(row["torch_ms"] / cands[best]["ms"], 3)}),
                      flush=True)
                rows.append(row)
                del xs, ws, ys, ref
                if os.environ.get("OUT"):  # what is done so far survives a time limit
                    save(tag, gpu, rows)
    save(tag, gpu, rows)


def summary(rows, pick=None) -> dict:
    """Per set and M: rows, and the geomean and worst of F.linear's time over the shape rules'
    candidate ("rules", or the label ``pick(row)`` names) and over the fastest candidate."""
    out: dict = {}
    for which in ("train", "test"):
        for m in sorted({r["M"] for r in rows}) + ["all"]:
            sel = [r for r in rows if r["set"] == which and m in ("all", r["M"])]
            if not sel:
                continue
            rules = [r["torch_ms"] / r["candidates"][pick(r) if pick else "rules"]["ms"]
                     for r in sel]
            best = [r["torch_ms"] / min(v["ms"] for c, v in r["candidates"].items()
                                        if not c.endswith(" before")) for r in sel]
            out[f"{which} M={m}"] = {
                "rows": len(sel), "rules_geomean": round(_geomean(rules), 3),
                "rules_worst": round(min(rules), 3), "best_geomean": round(_geomean(best), 3),
                "best_worst": round(min(best), 3)}
    return out


def _geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def save(tag, gpu, rows) -> None:
    if not os.environ.get("OUT"):
        return
    out = {"tag": tag, "gpu": gpu, "summary": summary(rows),
           "timing": "graph-captured, kernel only", "dtype": "bf16",
           "layout": "rcr", "method": __doc__, "test_sources": {f: s for f, (s, _) in TEST.items()},
           "rows": rows}
    Path(os.environ["OUT"], f"small_m_{tag}.json").write_text(json.dumps(out, indent=1))


def resummarize(path: str) -> None:
    """Add to a results file ``summary`` (the rules of the run) and ``summary_this_checkout``:
    this checkout's shape rules evaluated on the run's timings of the configs they choose (a
    row whose choice was not timed keeps the run's rules, counted in ``unmeasured``)."""
    doc = json.loads(Path(path).read_text())
    rows, unmeasured = doc["rows"], []

    def pick(r):
        cfg = candidates(r["M"], r["N"], r["K"])["rules"][0]
        found = [c for c, v in r["candidates"].items()
                 if v["config"] == cfg.name and not c.endswith(" before")]
        if not found:
            unmeasured.append([r["M"], r["N"], r["K"], cfg.name])
        return found[0] if found else "rules"
    doc["summary"] = summary(rows)
    doc["summary_this_checkout"] = summary(rows, pick)
    doc["summary_this_checkout_unmeasured"] = unmeasured
    Path(path).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_to(sys.argv[2])
    elif sys.argv[1] == "summarize":
        resummarize(sys.argv[2])
    else:
        main_run(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "run")
