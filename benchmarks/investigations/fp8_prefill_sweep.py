"""FP8 above decode (M = 256 to 4096): the block tiles of a small grid, each unsplit and with the
cluster tiles past the persistent grid's last whole wave split (split-K 2, 4 or 8 over the tail:
the split slices in one wave, at least 4 K blocks each), beside torch._scaled_mm (cuBLASLt) on
the same FP8 tensors and scales, on the forward layers of fp8_decode_sweep.py's training models
(Llama-3-8B, Mistral-7B's MLP, DeepSeek-V3) and held-out ones (Qwen2.5-7B, Gemma-2-9B,
Phi-3-mini, Llama-3.1-70B).

Per-tensor scales with fast accumulation (default); with ``block``, blockwise scales (1 x 128
activations, 128 x 128 weights) promoted every K block, overlapped main loop; with
``promoted``, per-tensor scales promoted every K block (torch._scaled_mm's default,
use_fast_accum=False), where the run also times M = 16, 64 and 128 (``FP8_MS``) over the tiles
and splits of the blockwise decode model, and the rule before it as "previous". The tiles are those
choose_fp8 weighs (``gemmgen.heuristics.fp8.PREFILL_TILES``): fast, 128 x 256 with a 2 x 1
cluster (B multicast), 128 x 128 with and without one, and (M <= 1024) 64 x 128 with one
consumer; blockwise, 128 x 128 and (M <= 1024) 64 x 128. Graph-captured (kernel only; 10 calls
per graph, median of 7 replays), operands rotating over sets past twice the L2, after a
warm-up of torch's call (so that the first timing of a row finds the GPU at its working clock),
in two rounds (the second in the reverse order, the mean of the two kept; torch timed before,
between and after them, the mean kept); every output poisoned with NaN first and checked
against float64 of the dequantized operands (within twice torch._scaled_mm's error plus 1e-3).

    python3 benchmarks/investigations/fp8_prefill_sweep.py compile DIR [block|promoted]  # CPU
    python3 benchmarks/investigations/fp8_prefill_sweep.py run DIR [block|promoted]      # GPU
    python3 benchmarks/investigations/fp8_prefill_sweep.py summarize FILE ...    # CPU
    python3 benchmarks/investigations/fp8_prefill_sweep.py fit FILE ...          # CPU

``run`` writes $OUT/fp8_prefill_sweep[_block|_promoted]_<GPU>[_M...].json after each row (``FP8_MS``
names the M to run, comma-separated, and tags the file). ``summarize`` scores
this checkout's choose_fp8 on each file's timings: per set and M, the geomean and lowest of
torch's time over the picked candidate's, beside the rule before tiles and tail splits were
weighed (``PREVIOUS``) and the grid's best. ``fit`` chooses the constants of the rule's cost
model (``gemmgen.heuristics.fp8.PREFILL``) on the training rows alone, pooled over the files,
and writes the point and its scores into them.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import small_m  # beside this script
from fp8_decode_sweep import TEST, TRAIN
from gemmgen.heuristics import fp8
from gemmgen.heuristics.fp8 import choose_fp8

MS = tuple(int(m) for m in os.environ.get("FP8_MS", "256,512,1024,2048,4096").split(","))
"""The M of a run (``FP8_MS``, comma-separated; the file name is then tagged with them)."""
MODE = next((m for m in ("block", "promoted") if m in sys.argv[3:]), "fast")
BLOCK, FAST = MODE == "block", MODE == "fast"
SCALING = "block" if BLOCK else "tensor"
SMS = 132
REPS, REPLAYS = 10, 7


PREVIOUS = {"fast": "128x256cl2 sk1", "block": "128x128 sk1", "promoted": "previous"}
"""The candidate choose_fp8 ran above decode before the tiles and tail splits were weighed
(promoted per tensor: "previous", its own candidate, ``_previous_promoted``)."""


def _base():
    return choose_fp8(4096, 4096, 4096, SCALING, FAST, sms=SMS).config.replace(
        check=False, split_k=1, cluster_m=1, cluster_n=1)


def candidates(m: int, n: int, k: int) -> dict:
    """{"TILE skS": config}: every tile x split the rule weighs above decode
    (``fp8.prefill_options``); for promoted per tensor, the decode grid at M <= 128
    (``_decode_grid``) and the rule before (``_previous_promoted``) as "previous"."""
    out = {"previous": _previous_promoted(m, n, k)} if MODE == "promoted" else {}
    if m <= fp8.DECODE_M:
        return {**out, **_decode_grid(m, n, k)}
    return {**out, **{f"{label} sk{c.split_k}": c
                      for label, c in fp8.prefill_options(_base(), m, n, k, SMS)}}


def _decode_grid(m: int, n: int, k: int) -> dict:
    """The tiles and splits ``fp8._block_decode`` weighs (64 or, above 64 rows, 128 rows; BN 64
    or 128; split 1, 2, 4 or 8, slices of at least 8 K blocks), on the rule's decode base."""
    base = choose_fp8(64, 4096, 4096, SCALING, FAST, sms=SMS).config
    out = {}
    for bm in (64, 128) if m > 64 else (64,):
        for bn in (64, 128):
            for split in (1, 2, 4, 8):
                if split > 1 and math.ceil(k / 128) / split < fp8.BLOCK_DECODE["slice_blocks"]:
                    continue
                c = base.replace(check=False, bm=bm, bn=bn, consumers=1 if bm == 64 else 2,
                                 regs_consumer=240 if bm == 64 else 232, split_k=split)
                c = c.replace(check=False, stages=fp8._deepest(c))
                if not c.violations():
                    out[f"d{bm}x{bn} sk{split}"] = c
    return out


def _split_to_fill(tiles: int, k: int) -> int:
    """The retired rule's split: 1 where the tiles fill half the SMs, else the most slices (up
    to 16) that keep the work units in one wave and 8 K blocks or more a slice."""
    if tiles * 2 > SMS:
        return 1
    return max(s for s in range(1, 17)
               if s == 1 or tiles * s <= SMS and math.ceil(k / 128) / s >= 8)


def _previous_promoted(m: int, n: int, k: int):
    """choose_fp8's promoted per-tensor pick before this sweep: fp8_tensor_promoted above
    decode; at M <= 128, 64 rows (128 above 64 rows) by 128 columns with K split until the
    work units fill the SMs (``_split_to_fill``)."""
    from gemmgen.model.presets import PRESETS
    fields = dict(dtype="e4m3", b_dtype="e4m3", out="bf16", scaling="tensor", quant="none")
    if m > fp8.DECODE_M:
        return PRESETS["fp8_tensor_promoted"].config.replace(check=False, **fields)
    base = PRESETS["fp8_block_decode"].config.replace(check=False, **fields)
    bm, cons = (64, 1) if m <= 64 else (128, 2)
    tiles = math.ceil(m / bm) * math.ceil(n / 128)
    c = base.replace(check=False, bm=bm, bn=128, consumers=cons, split_k=_split_to_fill(
        tiles, k), regs_consumer=240 if cons == 1 else 232)
    return c.replace(check=False, stages=fp8._deepest(c))


def problems() -> list:
    return [(which, model, n, k, m) for which, models in (("train", TRAIN), ("test", TEST))
            for model, layers in models.items() for n, k in layers for m in MS]


def compile_all(folder: str) -> None:
    from layer_sweep import compile_to
    compile_to(folder, [c for *_, n, k, m in problems() for c in candidates(m, n, k).values()])


def _inputs(m, n, k, l2, block=BLOCK):
    """Operand sets (a, b K x N column-major, scale_a, scale_b) past twice the L2, and the
    float64 product of set 0's dequantized operands; ``block``: 1 x 128 / 128 x 128 scales."""
    import torch

    import gemmgen.torch as gt
    a_block, w_block = ((1, 128), (128, 128)) if block else (None, None)
    sets = max(2, -(-2 * l2 // (n * k + m * k)))
    out = []
    for _ in range(sets):
        a, sa = gt.quantize(torch.randn(m, k, device="cuda"), a_block)
        w, sw = gt.quantize(torch.randn(n, k, device="cuda") * k ** -0.5, w_block)
        out.append((a, w.t(), sa, sw.t() if block else sw))
    a, b, sa, sb = out[0]
    ref = (gt.dequantize(a, sa, a_block).double()
           @ gt.dequantize(b.t(), sb.t() if block else sb, w_block).double().t())
    return out, ref


def time_row(dev, m: int, n: int, k: int, configs: dict, block: bool = BLOCK,
             fast: bool = FAST) -> dict:
    """One problem's timings on ``dev`` (a layer_sweep.Device): operand sets past twice the L2
    (``_inputs``), torch._scaled_mm's error and time (warmed up first, then before, between
    and after two rounds) and each of ``configs`` ({label: config}) checked against float64
    (D poisoned first; ok within twice torch's error + 1e-3) and timed in the two rounds, the
    second in reverse order, their mean kept: {"torch_error", "candidates", "torch_rounds_ms",
    "torch_ms"}."""
    import torch

    from gemmgen.runtime.operands.scales import check_fp8
    from gemmgen.runtime.plans import plan_scaled
    sets, ref = _inputs(m, n, k, dev.l2, block)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def theirs(i):
        a, b, sa, sb = sets[i % len(sets)]
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

    def error(launch):
        d.fill_(float("nan"))
        launch(0)
        torch.cuda.synchronize()
        return ((d.double() - ref).norm() / ref.norm()).item()
    want = torch._scaled_mm(*sets[0], out_dtype=torch.bfloat16, use_fast_accum=fast)
    torch_err = ((want.double() - ref).norm() / ref.norm()).item()
    row = {"torch_error": torch_err, "candidates": {}}
    launches = {}
    for label, cfg in configs.items():
        plan = plan_scaled(dev.kernel(cfg), check_fp8(*sets[0][:2], *sets[0][2:], d), 0)

        def launch(i, plan=plan):
            a, b, sa, sb = sets[i % len(sets)]
            plan.run(a, b, d, None, sa, sb, stream=torch.cuda.current_stream().cuda_stream)
        err = error(launch)
        row["candidates"][label] = {"config": cfg.name, "error": err,
                                    "ok": err <= 2 * torch_err + 1e-3}
        launches[label] = launch
    dev.graph_ms(theirs, REPS, 3 * REPLAYS)  # warm-up: the GPU at its working clock
    torch_ms = [dev.graph_ms(theirs, REPS, REPLAYS)]
    for order in (list(launches), list(reversed(launches))):
        for label in order:
            c = row["candidates"][label]
            c.setdefault("rounds_ms", []).append(dev.graph_ms(launches[label], REPS, REPLAYS))
        torch_ms.append(dev.graph_ms(theirs, REPS, REPLAYS))
    for c in row["candidates"].values():
        c["ms"] = sum(c["rounds_ms"]) / 2
    row["torch_rounds_ms"] = torch_ms
    row["torch_ms"] = sum(torch_ms) / len(torch_ms)
    return row


def run(folder: str) -> None:
    from layer_sweep import Device
    dev = Device(folder)
    rows = []
    limit = int(os.environ.get("SWEEP_ROWS", 10 ** 9))
    for which, model, n, k, m in problems()[:limit]:
        row = {"set": which, "model": model, "M": m, "N": n, "K": k,
               **time_row(dev, m, n, k, candidates(m, n, k))}
        c = row["candidates"]
        best = min((x for x in c if c[x]["ok"]), key=lambda x: c[x]["ms"])
        print(json.dumps({"set": which, "M": m, "N": n, "K": k, "best": best,
                          "previous_x": round(row["torch_ms"] / c[PREVIOUS[MODE]]["ms"], 3),
                          "best_x": round(row["torch_ms"] / c[best]["ms"], 3),
                          "all_ok": all(v["ok"] for v in c.values())}), flush=True)
        rows.append(row)
        _save(dev.gpu, rows)


def _save(gpu: str, rows: list) -> None:
    tag = "_M" + "_".join(map(str, MS)) if "FP8_MS" in os.environ else ""
    name = f"fp8_prefill_sweep{'' if FAST else '_' + MODE}_{gpu.replace(' ', '_')}{tag}.json"
    doc = {"investigation": "fp8_prefill_sweep", "gpu": gpu, "scaling": SCALING,
           "fast_accum": FAST, "git_commit": os.environ.get("GEMMGEN_COMMIT"),
           "timing": "graph-captured, kernel only", "out": "bf16", "method": __doc__,
           "rows": rows}
    Path(os.environ.get("OUT", "."), name).write_text(json.dumps(doc, indent=1))


def _geomean(xs):
    return round(small_m._geomean(xs), 3) if xs else None


def score(doc: dict, pick) -> dict:
    """{set M: (geomean, lowest)} of torch's time over ``pick(row)``'s candidate's."""
    out = {}
    for which in ("train", "test"):
        for m in (*MS, "all"):
            xs = [r["torch_ms"] / r["candidates"][pick(r)]["ms"] for r in doc["rows"]
                  if r["set"] == which and m in ("all", r["M"])]
            if xs:
                out[f"{which} M={m}"] = [_geomean(xs), round(min(xs), 3)]
    return out


def _kind(doc: dict) -> str:
    """A file's accumulation: "fast", "block" or "promoted" (per tensor)."""
    return "block" if doc["scaling"] == "block" else "fast" if doc["fast_accum"] else "promoted"


def pick_rule(r: dict, doc: dict) -> str:
    """The label of this checkout's choose_fp8 pick among a row's candidates (ValueError where
    it was not timed)."""
    cfg = choose_fp8(r["M"], r["N"], r["K"], doc["scaling"], doc["fast_accum"], sms=SMS).config
    found = [x for x, v in r["candidates"].items() if v["config"] == cfg.name]
    if not found:
        raise ValueError(f"{cfg.name} was not timed at {r['M']}x{r['N']}x{r['K']}")
    return found[0]


def summarize(paths: list) -> dict:
    out = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        c_ok = lambda r: [x for x, v in r["candidates"].items() if v["ok"]]  # noqa: E731
        out[path] = {
            "this checkout": score(doc, lambda r: pick_rule(r, doc)),
            "previous rule": score(doc, lambda r: PREVIOUS[_kind(doc)]),
            "best": score(doc, lambda r: min(c_ok(r), key=lambda x: r["candidates"][x]["ms"])),
            "all_ok": all(v["ok"] for r in doc["rows"] for v in r["candidates"].values())}
    print(json.dumps(out, indent=1))
    return out


def _grid(kind: str) -> list:
    """PREFILL points for ``kind``: fixed cost, split cost, slice floor, a split kernel's
    factor, DRAM cost per MB, tile costs."""
    import itertools
    tiles = list(fp8.PREFILL_TILES[kind])
    return [{"fix": f, "split": sp, "min_slice": ms, "split_kernel": sk, "dram": dr,
             "cost": dict(zip(tiles, (1.0, *cs)))}
            for f, sp, ms, sk, dr in itertools.product(
                (0, 2, 4), (0, 2, 4), (fp8.PREFILL_MIN_SLICE, 8), (1.0, 1.02, 1.04),
                (0, 0.25, 0.5, 1, 2))
            for cs in itertools.product((0.9, 1.0, 1.1, 1.2), repeat=len(tiles) - 1)]


def _picks(grid: list, r: dict, opts: list):
    """The index into ``opts`` that ``fp8.prefill_pick`` takes at each point of ``grid`` for
    row ``r``, computed for all points at once (numpy): the same costs and ties."""
    import numpy as np
    m, n, k = r["M"], r["N"], r["K"]
    kb = math.ceil(k / 128)
    g = {key: np.array([p[key] for p in grid], dtype=float)
         for key in ("fix", "split", "min_slice", "split_kernel", "dram")}
    cost = np.full((len(grid), len(opts)), np.inf)
    for j, (label, c) in enumerate(opts):
        tile = np.array([p["cost"][label] for p in grid])
        zero = {"fix": 0, "split": 0}
        base = fp8.prefill_time(c, m, n, k, SMS, zero)          # linear in fix and split:
        d_fix = fp8.prefill_time(c, m, n, k, SMS, {"fix": 1, "split": 0}) - base
        d_split = fp8.prefill_time(c, m, n, k, SMS, {"fix": 0, "split": 1}) - base
        t = (tile * (base + d_fix * g["fix"] + d_split * g["split"])
             + g["dram"] * fp8.dram_mb(c, m, n, k))
        if c.split_k > 1:
            t = np.where(kb / c.split_k < g["min_slice"], np.inf, t * g["split_kernel"])
        cost[:, j] = t * (1 + 1e-12 * (c.split_k * 64 + j))   # ties: fewer slices, then order
    return cost.argmin(axis=1)


def _scores(d: dict) -> dict:
    """This checkout's scores on a file, the previous rule's and the grid's best, and each
    split pick's speed-up over its tile unsplit ([M, N, K, pick, x])."""
    def best(r):
        c = r["candidates"]
        return min((x for x in c if c[x]["ok"]), key=lambda x: c[x]["ms"])
    splits = []
    for r in d["rows"]:
        label = pick_rule(r, d)
        c, whole = r["candidates"], label.split()[0] + " sk1"
        if whole in c and label != whole:
            gain = c[whole]["ms"] / c[label]["ms"]
            splits.append([r["M"], r["N"], r["K"], label, round(gain, 3)])
    return {"scores": score(d, lambda r: pick_rule(r, d)),
            "previous": score(d, lambda r: PREVIOUS[_kind(d)]), "best": score(d, best),
            "split_picks": splits}


def fit(paths: list) -> dict:
    """Per accumulation, the PREFILL point of best training score over the files of that
    accumulation given (pooled: the product of each file's training geomean of torch's time
    over the pick's; ``_grid``, ties to the earlier point); each file gets ``fit``: the point
    and this checkout's scores with it (``summarize``'s, through choose_fp8, which must agree
    with the grid's own picks)."""
    import numpy as np
    docs = {path: json.loads(Path(path).read_text()) for path in paths}
    out = {}
    for kind in ("fast", "block", "promoted"):
        mine = {p: d for p, d in docs.items() if _kind(d) == kind}
        if not mine:
            continue
        scaling = next(iter(mine.values()))["scaling"]
        base = choose_fp8(4096, 4096, 4096, scaling, kind == "fast", sms=SMS).config.replace(
            check=False, split_k=1, cluster_m=1)
        grid = _grid(kind)
        total = np.zeros(len(grid))
        for d in mine.values():
            logs, rows = np.zeros(len(grid)), 0
            for r in d["rows"]:
                if r["set"] != "train" or r["M"] <= fp8.DECODE_M:  # decode: not this model
                    continue
                opts = fp8.prefill_options(base, r["M"], r["N"], r["K"], SMS)
                ms = np.array([r["candidates"][f"{lb} sk{c.split_k}"]["ms"] for lb, c in opts])
                logs += np.log(r["torch_ms"] / ms[_picks(grid, r, opts)])
                rows += 1
            total += logs / rows
        best = grid[int(np.argmax(total))]    # the first of equal scores
        saved = fp8.PREFILL[kind]
        fp8.PREFILL[kind] = best
        try:
            for path, d in mine.items():
                d["fit"] = {"prefill": best, "fitted_on": sorted(mine), **_scores(d)}
                Path(path).write_text(json.dumps(d, indent=1))
                out[path] = d["fit"]
        finally:
            fp8.PREFILL[kind] = saved
        out[kind] = {"train_geomean_product": round(float(np.exp(total.max())), 4)}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "compile":
        compile_all(args[0])
    elif command == "run":
        run(args[0])
    elif command == "fit":
        fit(args)
    else:
        summarize(args)
