"""What an inline split-K costs, and where: block tiles of 64 x 64, 64 x 128 (one consumer, the
waiter warp) and 128 x 128 (two consumers) with K unsplit and split into 2, 4 and 8 slices,
rings as the shape rules deepen them, on bf16 rcr forward layers whose tiles leave SMs idle,
beside F.linear. Each split kernel also runs with one-line patches of its rendered source:

- ``fence1``: the split path takes the stream-K path's protocol: no fence per thread before the
  barrier; one thread fences (``fence.acq_rel.gpu``) before its arrival on the tile's counter
  and, where it is the last, after it (CUTLASS's ``arrive_inc`` / ``wait_eq``);
- ``shared``: every slice waits for the tile's others (arrivals and departures counted in the
  tile's counter, which the last to depart zeroes) and sums a 1/SPLIT_K share of the elements, in slice order, then stores that
  share of C: each reads one tile's worth of partials where the last to arrive read all;
- ``loads128``: ``fence1`` with 128 registers for each pass of the reduction (64 as rendered),
  halving its round trips to L2;
- ``noload`` (a bound, wrong sums): the last slice reads no partials;
- ``nostore`` (a bound, wrong sums): no slice writes or reads partials; fences and counters stay;
- ``nosync`` (a bound, wrong sums): no partials, fences or counters: slice SPLIT_K - 1 of a
  tile runs the epilogue. Its time over the unsplit kernel's is what splitting costs beside
  the reduction.

Each split kernel's cluster split-K twin (``split_cluster``: one tile per CTA, the slices of a
tile one cluster, summed through distributed shared memory) runs as its own row, as rendered.

Graph-captured back to back as layer_sweep.py times (input sets past twice the L2, REPS
launches a graph, median of 9 replays, two rounds in opposite orders, the faster kept); every
output poisoned first and checked against float64 (the bounds fail that check by design).

    python3 benchmarks/investigations/split_cost.py compile DIR   # CPU: the cubins
    python3 benchmarks/investigations/split_cost.py run DIR       # GPU: $OUT/split_cost_<GPU>.json
    python3 benchmarks/investigations/split_cost.py report FILE   # CPU: the summary again

Once the shape rules took the cluster split-K where the tiles x slices are at most half the
SMs (``splitk.CLUSTER_SPLIT_CTAS``), the rules' kernels against those an older checkout (OLD:
its tree) chose, on every layer of both sets where they differ, at M = 1 to 1024
(``SPLIT_AB_MS``; rules_ab.py):

    python3 benchmarks/investigations/split_cost.py ab-compile DIR OLD  # CPU: both sides
    python3 benchmarks/investigations/split_cost.py ab-run DIR          # GPU: $OUT/split_cluster_ab_<GPU>.json

The rules' cluster split-K kernels at the same M, as an older tree's templates render them
against this checkout's (a change to the cluster sum, same configs):

    python3 benchmarks/investigations/split_cost.py sum-ab-compile DIR OLD  # CPU: both sides
    python3 benchmarks/investigations/split_cost.py sum-ab-run DIR          # GPU: $OUT/cluster_sum_ab_<GPU>.json
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import layer_sweep  # beside this script
import rules_ab
import small_m

LAYERS = (("train", 256, 576, 7168), ("train", 256, 1024, 4096), ("train", 512, 768, 3072),
          ("train", 128, 2048, 2048), ("train", 1024, 576, 7168), ("test", 256, 896, 4864),
          ("test", 512, 2304, 2048), ("test", 256, 1536, 7168), ("test", 1024, 768, 3072),
          ("test", 512, 128, 896))
"""(set, M, N, K): layers of the llm suite (training) and of small_m.py's other families."""
TILES = ((64, 64), (64, 128), (128, 128))
SPLITS = (1, 2, 4, 8)
SMS = 132
AB_MS = tuple(int(m) for m in os.environ.get("SPLIT_AB_MS", "1,8,16,32,64,128,256,512,1024")
              .split(","))

FENCE_BEFORE = ("        __threadfence();\n        named_sync(BAR_STORE_BASE + cw, WARPGROUP);\n"
                "        volatile int* last_flag")
ARRIVE = ("            const int arrived = atomicAdd(sem, 1);\n"
          "            *last_flag = arrived == SPLIT_K - 1;\n"
          "            if (arrived == SPLIT_K - 1) atomicExch(sem, 0);  // zero again for the next launch\n")
FENCE_AFTER = "        if (finish) {\n        __threadfence();\n"
LOAD = "__ldcg(P0 + (size_t)s * SPLIT_TILE_ELEMS + (c0 + j) * WARPGROUP)"
STORE = "__stcg(P + (mi * ACC_PER_WGMMA + i) * WARPGROUP, acc[mi][i]);"
LOADS = "constexpr int SPLIT_LOADS = 64;"


def _fence1(src: str) -> str:
    src = src.replace(FENCE_BEFORE, FENCE_BEFORE.replace("        __threadfence();\n", ""))
    src = src.replace(ARRIVE, (
        '            asm volatile("fence.acq_rel.gpu;\\n" ::: "memory");\n'
        "            const int arrived = atomicAdd(sem, 1);\n"
        "            *last_flag = arrived == SPLIT_K - 1;\n"
        "            if (arrived == SPLIT_K - 1) {\n"
        "                atomicExch(sem, 0);\n"
        '                asm volatile("fence.acq_rel.gpu;\\n" ::: "memory");\n'
        "            }\n"))
    return src.replace(FENCE_AFTER, "        if (finish) {\n")


FINISH = "        bool finish = whole(tile);  // a whole tile: the epilogue runs on its own sums\n"
OWNED = """        bool finish = whole(tile);
        constexpr int SPLIT_ELEMS = M_ITERS * ACC_PER_WGMMA;
        constexpr int SPLIT_SHARE = 2 * ((SPLIT_ELEMS + 2 * SPLIT_K - 1) / (2 * SPLIT_K));
        const int lo = finish ? 0 : tile.split * SPLIT_SHARE;
        const int hi = finish ? SPLIT_ELEMS : lo + SPLIT_SHARE;
        auto owned = [&](int e) -> bool { return e >= lo && e < hi; };
"""
SYNC_START = FENCE_BEFORE
SYNC_END = "        if (finish) {  // a whole tile, or the last slice"
SHARED_SUM = r"""        named_sync(BAR_STORE_BASE + cw, WARPGROUP);  // the warpgroup's partials are stored
        if (wtid == 0) {  // arrivals (low 16 bits) and departures (high) of this tile's slices
            int* sem = split_sem + (size_t)tile.slot * M_SPLIT + cw;
            asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
            atomicAdd(sem, 1);
            int now;
            do {
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(now) : "l"(sem) : "memory");
            } while ((now & 0xffff) != SPLIT_K);
            if (atomicAdd(sem, 0x10000) >> 16 == SPLIT_K - 1) atomicExch(sem, 0);  // all have seen it
            asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
        }
        named_sync(BAR_STORE_BASE + cw, WARPGROUP);  // every slice's partials are in
        {
        const float* P0 = split_tile;
#pragma unroll
        for (int mi = 0; mi < M_ITERS; ++mi)
#pragma unroll
            for (int i = 0; i < ACC_PER_WGMMA; ++i) {
                const int e = mi * ACC_PER_WGMMA + i;
                if (!owned(e)) continue;
                float part[SPLIT_K];
#pragma unroll
                for (int s = 0; s < SPLIT_K; ++s) part[s] = __ldcg(P0 + (size_t)s * SPLIT_TILE_ELEMS + e * WARPGROUP);
                float v = 0.f;
#pragma unroll
                for (int s = 0; s < SPLIT_K; ++s) v += part[s];
                acc[mi][i] = v;
            }
        finish = true;
        }
        }
"""
STORE_LOOP = ("            for (int i = 0; i < ACC_PER_WGMMA; i += 2) {\n"
              "                const int gm = tile.m0 + row0 + mi * 64")


def _shared(src: str) -> str:
    a, b = src.index(SYNC_START), src.index(SYNC_END)
    src = src[:a] + SHARED_SUM + src[b:]
    assert src.count(STORE_LOOP) == 1
    src = src.replace(STORE_LOOP, STORE_LOOP.replace(
        "{\n", "{\n                if (!owned(mi * ACC_PER_WGMMA + i)) continue;\n", 1))
    return src.replace(FINISH, OWNED)


PATCHES = {
    "shared": _shared,
    "fence1": _fence1,
    "loads128": lambda s: _fence1(s).replace(LOADS, "constexpr int SPLIT_LOADS = 128;"),
    "noload": lambda s: s.replace(LOAD, "0.f"),
    "nostore": lambda s: s.replace(LOAD, "0.f").replace(STORE, "(void)P;"),
    "nosync": lambda s: s.replace(LOAD, "0.f").replace(STORE, "(void)P;")
    .replace(FENCE_BEFORE, FENCE_BEFORE.replace("        __threadfence();\n", ""))
    .replace("const int arrived = atomicAdd(sem, 1);", "const int arrived = tile.split; (void)sem;")
    .replace("if (arrived == SPLIT_K - 1) atomicExch(sem, 0);", "")
    .replace(FENCE_AFTER, "        if (finish) {\n"),
}
CLUSTER_LOAD = "const float4 p = ld_cluster4(map_cluster(own + 16 * (e / 4) * WARPGROUP, r));"
CLUSTER_WAIT = "mbar_wait_acquire_cluster(split_bar, 0);  // every slice's partials are in"
OWN_QUAD = "const float4 p = r == 0 ? mine[e / 4 * WARPGROUP] : make_float4(0.f, 0.f, 0.f, 0.f);"
CLUSTER_PATCHES = {
    "c_noload": lambda s: s.replace(CLUSTER_LOAD, OWN_QUAD),
    "c_nowait": lambda s: s.replace(CLUSTER_LOAD, OWN_QUAD).replace(CLUSTER_WAIT, ""),
}
"""Bounds of a cluster split-K (wrong sums): no loads from the other CTAs (each sums its own
partials only), and besides no wait for the other slices."""
VARIANTS = ("rendered", *PATCHES, *CLUSTER_PATCHES)


def configs(m: int, n: int, k: int) -> list:
    """The configs of one layer: every TILES x SPLITS that breaks no rule, with slices of at
    least 4 K tiles and at most two waves of CTAs, shaped as the rules shape their own."""
    from gemmgen.heuristics import shapes
    from gemmgen.heuristics.ring import deepen
    rules, _ = small_m.candidates(m, n, k)["rules"]
    base = rules.replace(check=False, layout="rcr", persistent=True, cluster_m=1, cluster_n=1,
                         split_k=1, split_inline=False, stages=2, waiter=False, c_stages=0)
    out = []
    for bm, bn in TILES:
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        for split in SPLITS:
            if split > 1 and (math.ceil(k / 64) / split < 4 or tiles * split > 2 * SMS):
                continue
            changes = {**shapes.mid_tile(bm, bn), "split_k": split, "split_inline": split > 1,
                       "store": "direct"}
            deepen(base, changes, [])
            cfg = base.replace(check=False, **changes)
            if not cfg.violations():
                out.append(cfg)
            twin = cfg.replace(check=False, persistent=False, split_inline=False,
                               split_cluster=True)
            if split > 1 and not twin.violations():
                out.append(twin)
                out.append(cfg.replace(check=False, persistent=False))  # inline, one tile a CTA
    return out


def problems() -> list:
    """[(set, N, K, M, config, swap)]."""
    return [(w, n, k, m, cfg, False) for w, m, n, k in LAYERS for cfg in configs(m, n, k)]


def sources(cfg) -> dict:
    """{variant: source}: as rendered and, for a split kernel, each patch (all must apply)."""
    from gemmgen import render
    src = render(cfg, "sm_90a")
    out = {"rendered": src}
    patches = PATCHES if cfg.split_inline else CLUSTER_PATCHES if cfg.split_cluster else {}
    for v, patch in patches.items():
        out[v] = patch(src)
        assert out[v] != src, (v, cfg.name)
    return out


def main_run(folder: str) -> None:
    from gemmgen.runtime.build import from_cubin

    def kernels(cfg):
        return {v: from_cubin(cfg, "sm_90a", Path(folder, f"{cfg.name}.{v}.cubin").read_bytes())
                for v in VARIANTS if Path(folder, f"{cfg.name}.{v}.cubin").exists()}
    layer_sweep.sweep_variants(layer_sweep.Device(folder), problems(), kernels, save)


def _label(name: str) -> str:
    """A config's split in a row's summary: sk1, sk2i (inline, persistent), sk2i np (inline,
    one tile per CTA) or sk2c (cluster)."""
    sk = next((p for p in name.split("_") if p.startswith("sk")), "sk1")
    return sk + (" np" if sk.endswith("i") and "_npg" in name else "")


def summary(rows) -> dict:
    """Per layer, tile and split (``_label``): microseconds of each variant (the faster
    round) and of F.linear; then, over the tiles and splits timed both ways, the geomean of
    the inline split-K's time over the cluster split-K's, by consumers and by whether the
    launch has at most 64 CTAs."""
    out: dict = {}
    by: dict = {}
    for r in rows:
        cfg = r["config"]
        tile, label = cfg.split("_")[3], _label(cfg)
        key = f"{r['M']}x{r['N']}x{r['K']}"
        out.setdefault(key, {"torch_us": round(min(r["torch_us"]), 2)}).setdefault(
            tile, {})[label] = {v: round(min(r[f"{v}_us"]), 2) for v in VARIANTS
                                if f"{v}_us" in r}
        by[(key, tile, label)] = (r, min(r["rendered_us"]))
    ratios: dict = {}
    for (key, tile, label), (r, us) in by.items():
        if not label.endswith("c"):
            continue
        inline = by.get((key, tile, label[:-1] + "i"))
        if inline is None:
            continue
        m, n, _ = map(int, key.split("x"))
        bm, bn = map(int, tile.split("x")[:2])
        ctas = math.ceil(m / bm) * math.ceil(n / bn) * int(label[2:-1])
        group = f"{'one consumer' if bm == 64 else 'two consumers'}, " + (
            "at most 64 CTAs" if ctas <= 64 else "more than 64 CTAs")
        ratios.setdefault(group, []).append(inline[1] / us)
    out["inline_over_cluster"] = {
        g: {"rows": len(v), "geomean": round(small_m._geomean(v), 3),
            "lowest": round(min(v), 3), "highest": round(max(v), 3)}
        for g, v in sorted(ratios.items())}
    return out


def report(path: str) -> dict:
    """Rewrites a run's summary (``summary``) from its rows."""
    doc = json.loads(Path(path).read_text())
    return layer_sweep.write_summary(path, "summary", summary(doc["rows"]))


def save(gpu, rows, quiet=False) -> None:
    layer_sweep.save_rows("split_cost", __doc__, gpu, rows, summary(rows), "", quiet)


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        layer_sweep.compile_sources(sys.argv[2], [c for *_, c, _ in problems()], sources)
    elif sys.argv[1] == "report":
        report(sys.argv[2])
    elif sys.argv[1] == "ab-compile":
        rules_ab.compile(sys.argv[2], sys.argv[3], AB_MS)
    elif sys.argv[1] == "ab-run":
        rules_ab.run(sys.argv[2], "split_cluster_ab", __doc__, AB_MS)
    elif sys.argv[1] == "sum-ab-compile":
        rules_ab.compile_sources(sys.argv[2], sys.argv[3], AB_MS, lambda c: c.split_cluster)
    elif sys.argv[1] == "sum-ab-run":
        rules_ab.run(sys.argv[2], "cluster_sum_ab", __doc__, AB_MS)
    else:
        main_run(sys.argv[2])
