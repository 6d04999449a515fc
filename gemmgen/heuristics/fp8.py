"""Which FP8 kernel runs a problem: the tuning database's winner for the shape and scaling,
else a preset of the fp8 family chosen by shape and fitted to it.

- M <= 128 (decode, memory-bound): promoted (blockwise, per tensor or row), the tile and split
  of least modelled cost (``_block_decode``); fast, ``_fast_decode``.
- Larger M, no epilogue: the tile and split-K of least modelled time (``_prefill``): tiles of
  128 x 256 and 128 x 128 with a 2 x 1 cluster (fast only), 128 x 128 without, 64 x 128 (up to
  1024 rows), unsplit or with the tiles past the last whole wave split.
- Larger M otherwise: fast, 128 x 256 tiles (fp8_tensor_cluster, fp8_tensor_fast,
  fp8_row_fast); promoted, 128 x 128 tiles with two partial sets (fp8_tensor_promoted,
  fp8_block_prom2); blockwise through a TMA store and the deepest ring beside its staging
  where ``_prefill`` finds no tile (``_tma_store``).
- Blockwise, every M: the overlapped main loop (``_overlap``).

Nothing here needs a GPU.
"""
from __future__ import annotations

import math

from ..model.families.hopper.split import split_tail
from ..model.presets import PRESETS
from . import cost
from .ring import deepest, deepest_buffered, waited
from .select import Choice
from .tunedb import TuneDB

DECODE_M = 128  # M up to which the problem is treated as memory-bound (decode shapes)

def tune_dtype(a: str, b: str, scaling: str, fast: bool) -> str:
    """The tuning database's dtype field of an FP8 problem: ``e4m3e4m3:block:promoted``."""
    return f"{a}{b}:{scaling}:{'fast' if fast else 'promoted'}"


def base_preset(m: int, scaling: str, fast: bool) -> str:
    """The preset an FP8 problem starts from, by M, scaling and accumulation."""
    if m <= DECODE_M:
        return "fp8_row_decode" if fast else "fp8_block_decode"
    if fast:  # TMA stores and B multicast to 2 CTAs along M: 1.00-1.12x torch._scaled_mm at
        # 4096^3-8192^3 where the plain 128x256 kernel reached 0.80-0.95x (same H200 run)
        return "fp8_tensor_cluster"
    return "fp8_block_prom2" if scaling == "block" else "fp8_tensor_promoted"


FAST_DECODE_FILL, FAST_DECODE_SLICE_BLOCKS = 0.5, 24  # share of SMs reached; K blocks a slice


def _fast_decode(cfg, m: int, n: int, k: int, sms: int) -> tuple[int, int, int]:
    """(BN, split, tiles) of fast accumulation at M <= DECODE_M, on 64-row tiles: BN 128 where
    its tiles reach FAST_DECODE_FILL of the SMs, else 64; then the smallest split of 1, 2 or 4
    whose work units reach it (else 4), halved while a slice would keep fewer than
    FAST_DECODE_SLICE_BLOCKS K blocks. Fitted on a grid of 64 x {64, 128} x split {1, 2, 4, 8}
    timed on the layers of Llama-3-8B, Mistral-7B's MLP and DeepSeek-V3's decode rows (M 16,
    64, 128): within 1% of the best training score, the thresholds that split least. On an
    H200 it reaches 0.967 of the grid's best on that training set and 0.962 on held-out
    Qwen2.5-7B, Gemma-2-9B, Phi-3-mini and Llama-3.1-70B layers (0.904x and 0.892x
    torch._scaled_mm; the rule it replaces, 64 x 256 tiles split to fill the SMs, 0.753x and
    0.74x): benchmarks/results/fp8_decode_sweep_NVIDIA_H200.json."""
    rows = math.ceil(m / 64)
    bn = 128 if rows * math.ceil(n / 128) >= FAST_DECODE_FILL * sms else 64
    if cfg.quant == "1x128":
        bn = 128  # whole 128-column scale groups in a tile (F29)
    tiles = rows * math.ceil(n / bn)
    split = next((s for s in (1, 2, 4) if tiles * s >= FAST_DECODE_FILL * sms), 4)
    while split > 1 and math.ceil(k / 128) / split < FAST_DECODE_SLICE_BLOCKS:
        split //= 2
    return bn, split, tiles


A_ROWS = (16, 32)  # fast decode: the rows of A a 64-row tile loads (a_rows), fewest holding M
BLOCK_DECODE = {"slice_blocks": 8, "unit": 512, "split": 8 * 128, "bm128": 2.0}
"""Blockwise decode's cost model (``_block_decode``): K blocks a split-K slice keeps at least;
a work unit's fixed cost (fill, drain, epilogue) and a split's (its reduction), in the units of
BN x K blocks; the cost of a 128-row tile against a 64-row one."""


def _block_decode(cfg, m: int, n: int, k: int, sms: int) -> tuple[int, int, int, int]:
    """(BM, BN, split, tiles) of blockwise decode: of 64- or (M > 64) 128-row tiles, BN 64 or
    128 and split 1, 2, 4 or 8 (slices of at least 8 K blocks), the one whose waves of work
    units cost least, a unit costing BN x its K blocks (x 2 for 128 rows) plus 512, and a
    split 8 x 128 more; ties to fewer slices, then wider tiles. The constants are the grid
    point with the best training geomean over a grid of those tiles timed on Llama-3-8B,
    Mistral-7B's MLP and DeepSeek-V3's decode layers (M 16, 64, 128) on an H100 and an H200,
    overlapped, beside torch._scaled_mm: 1.293x and 1.34x there, 1.302x and 1.345x on held-out
    Qwen2.5-7B, Gemma-2-9B, Phi-3-mini and Llama-3.1-70B layers, where the rule it replaces
    (128-row tiles above M = 64, split to fill the SMs) ran 1.097x, 1.17x, 1.099x and 1.183x:
    benchmarks/results/fp8_decode_sweep_block_*.json. Those timings split every tile; the
    kernel now splits only the tiles past the last whole wave, whose waves of units are as many
    (q + ceil(r x split / SMs) / split tile-times for q whole waves and r tiles left)."""
    c = BLOCK_DECODE
    kb = math.ceil(k / 128)
    best = None
    for bm in (64, 128) if m > 64 else (64,):
        for bn in (64, 128) if cfg.quant != "1x128" else (128,):   # F29: whole scale groups
            for split in (1, 2, 4, 8):
                if split > 1 and kb / split < c["slice_blocks"]:
                    continue
                tiles = math.ceil(m / bm) * math.ceil(n / bn)
                unit = bn * math.ceil(kb / split) * (c["bm128"] if bm == 128 else 1) + c["unit"]
                cost_ = math.ceil(tiles * split / sms) * unit + (c["split"] if split > 1 else 0)
                key = (cost_, split, -bn, bm)
                if best is None or key < best[0]:
                    best = (key, (bm, bn, split, tiles))
    return best[1]


def _decode(cfg, m: int, n: int, k: int, sms: int, reasons: list):
    """The decode preset fitted to M, N and K. Fast accumulation: ``_fast_decode``, A loaded
    A_ROWS rows a tile where M fits; promoted (blockwise, per tensor or row): ``_block_decode``
    (per tensor, its plain loop ran 0.828x-0.97x torch._scaled_mm at M = 16 to 128 on an H200,
    the rule before 0.726x-0.808x: fp8_prefill_sweep_promoted_*.json)."""
    if cfg.promote == 0:
        bm, cons = 64, 1
        bn, split, tiles = _fast_decode(cfg, m, n, k, sms)
    else:
        bm, bn, split, tiles = _block_decode(cfg, m, n, k, sms)
        cons = 1 if bm == 64 else 2
    changes = {"bm": bm, "bn": bn, "consumers": cons, "split_k": split,
               "regs_consumer": 240 if cons == 1 else 232,
               "a_rows": next((r for r in A_ROWS if m <= r), 0) if cfg.promote == 0 else 0}
    changes["stages"] = _deepest(cfg.replace(check=False, **changes))
    units = cfg.replace(check=False, **changes).work_units(m, n, sms)
    rows = f"; A loaded {changes['a_rows']} rows a tile" if changes["a_rows"] else ""
    reasons.append(f"M = {m} <= {DECODE_M}: memory-bound; {bm} x {bn} tiles ({tiles}), K split "
                   f"{split} ways -> {units} work units for {sms} SMs{rows}")
    return changes


_T = dict(consumers=2, cluster_m=1, regs_consumer=232, store="tma")
_T64 = dict(bm=64, consumers=1, cluster_m=1, regs_consumer=240)
PREFILL_TILES = {
    "fast": {"128x256cl2": dict(_T, bm=128, bn=256, cluster_m=2),
             "128x128": dict(_T, bm=128, bn=128),
             "128x128cl2": dict(_T, bm=128, bn=128, cluster_m=2),
             "64x128": dict(_T64, bn=128, store="tma")},
    # the 64-row promoted tile stores directly: its overlapped loop spills beside a staging tile
    "block": {"128x128": dict(_T, bm=128, bn=128),
              "64x128": dict(_T64, bn=128, store="direct")}}
"""The tiles weighed above decode (``_prefill``), by accumulation (``_kind``): fast (tensor
or row scales), blockwise, or promoted per tensor or row (the blockwise tiles); 64-row tiles
up to PREFILL_64_M rows. "cl2": a 2 x 1 cluster multicasting B."""
PREFILL_TILES["promoted"] = PREFILL_TILES["block"]
PREFILL_64_M = 1024
PREFILL_SPLITS = (2, 4, 8)
PREFILL_MIN_SLICE = 4
"""The fewest K blocks a split slice of the options keeps: the lowest slice floor (PREFILL's
``min_slice``) the fit weighs."""
PREFILL = {"fast": {"fix": 2, "split": 4, "min_slice": 4, "split_kernel": 1.02, "dram": 1,
                    "cost": {"128x256cl2": 1.0, "128x128": 0.9, "128x128cl2": 1.1,
                             "64x128": 1.0}},
           "block": {"fix": 4, "split": 4, "min_slice": 4, "split_kernel": 1.04, "dram": 2,
                     "cost": {"128x128": 1.0, "64x128": 1.2}},
           "promoted": {"fix": 4, "split": 4, "min_slice": 4, "split_kernel": 1.04, "dram": 2,
                        "cost": {"128x128": 1.0, "64x128": 1.2}}}
"""The cost model of ``_prefill``, by accumulation (``_kind``): a work unit's fixed cost (fill,
drain, epilogue) and a split's per slice, in K blocks; the K blocks a split slice keeps at
least; a split-K kernel's time against the same tile's unsplit one; the cost of a MB read from
DRAM; each tile's cost per unit of work. Each is the point of best training score on a grid
(``fp8_prefill_sweep.py fit``: the product of the two GPUs' geomeans) over the layers of
Llama-3-8B, Mistral-7B's MLP and DeepSeek-V3 on an H200 and an H100, beside torch._scaled_mm.
Per tensor, fast (M = 256 to 4096, and 8192 on the H100): 0.971x on the H200 and 0.98x on the
H100 (0.964x and 0.97x on the held-out Qwen2.5-7B, Gemma-2-9B, Phi-3-mini and Llama-3.1-70B
layers), where the 128 x 256 clustered tile alone ran 0.731x and 0.775x (0.714x, 0.755x).
Blockwise: 1.073x and 1.038x (1.067x, 1.03x) where 128 x 128 alone ran 1.007x and 0.992x
(1.001x, 0.984x). Promoted per tensor, the same point as blockwise (M = 16 to 4096, decode by
``_block_decode``): 0.954x and 0.969x (0.936x, 0.951x) where the rule before ran 0.796x and
0.773x (0.781x, 0.76x): benchmarks/results/fp8_prefill_sweep_*.json."""


def _kind(cfg) -> str:
    """The accumulation a PREFILL entry is for: "fast", "block" or "promoted"."""
    return "fast" if cfg.promote == 0 else "block" if cfg.scaling == "block" else "promoted"


def prefill_options(cfg, m: int, n: int, k: int, sms: int) -> list:
    """[(tile label, config)]: each tile of PREFILL_TILES for ``cfg``'s accumulation fitted to
    ``cfg``, unsplit and with the tiles past the last whole wave split 2, 4 or 8 ways (the split
    slices in one wave, at least PREFILL_MIN_SLICE K blocks each), the deepest ring that fits;
    the valid ones."""
    kind = _kind(cfg)
    kb = math.ceil(k / 128)
    out = []
    for label, tile in PREFILL_TILES[kind].items():
        if tile["bm"] == 64 and m > PREFILL_64_M:
            continue
        t = cfg.replace(check=False, split_k=1, **tile)
        tm, tn = t.tiles(m, n)
        wave = max(1, sms // t.cluster)
        tail = split_tail(tm * tn, wave)
        for split in (1, *(s for s in PREFILL_SPLITS if tail and tail * s <= wave
                           and kb / s >= PREFILL_MIN_SLICE)):
            c = _deepen(t.replace(check=False, split_k=split))
            if not c.violations():
                out.append((label, c))
    return out


def prefill_time(cfg, m: int, n: int, k: int, sms: int, c: dict) -> float:
    """The modelled compute time of ``cfg`` (its tile and split-K) under constants ``c`` (a
    PREFILL entry), in 128 x 128 tile-K-blocks: whole waves of units of K blocks plus ``fix``,
    then, with split-K, the waves of the split tail's slices (each ceil(K blocks / split) plus
    ``fix`` plus ``split`` per slice)."""
    kb = math.ceil(k / 128)
    tm, tn = cfg.tiles(m, n)
    wave = max(1, sms // cfg.cluster)
    split = cfg.split_tiles(m, n, sms)
    whole = math.ceil((tm * tn - split) / wave)
    tail = 0 if not split else math.ceil(split * cfg.split_k / wave) * (
        math.ceil(kb / cfg.split_k) + c["fix"] + c["split"] * cfg.split_k)
    return cfg.bm * cfg.bn / (128 * 128) * (whole * (kb + c["fix"]) + tail)  # a CTA's tile


def dram_mb(cfg, m: int, n: int, k: int) -> float:
    """MB of FP8 operands read from DRAM under grouped rasterization: A once (a group's row
    panel stays in the L2 while its columns sweep), B once per group of GROUP cluster-tile
    rows."""
    tm, _ = cfg.tiles(m, n)
    return (m * k + n * k * math.ceil(tm / cfg.group)) / 2 ** 20


def prefill_pick(options: list, m: int, n: int, k: int, sms: int, c: dict):
    """The (label, config) of ``options`` of least cost under constants ``c`` (a PREFILL
    entry): the tile's cost times ``prefill_time`` plus ``dram`` per MB of ``dram_mb``, times
    ``split_kernel`` for a kernel with split-K (its whole tiles run slower too), splits keeping
    ``min_slice`` K blocks a slice; ties to fewer slices, then to the earlier option."""
    kb = math.ceil(k / 128)
    best = None
    for i, (label, cfg) in enumerate(options):
        if cfg.split_k > 1 and kb / cfg.split_k < c["min_slice"]:
            continue
        key = ((c["cost"][label] * prefill_time(cfg, m, n, k, sms, c)
                + c["dram"] * dram_mb(cfg, m, n, k))
               * (c["split_kernel"] if cfg.split_k > 1 else 1), cfg.split_k, i)
        if best is None or key < best[0]:
            best = (key, (label, cfg))
    return None if best is None else best[1]


def _prefill(cfg, m: int, n: int, k: int, sms: int, reasons: list) -> dict:
    """The tile and split-K above decode (fast or promoted accumulation): ``prefill_pick`` of
    ``prefill_options`` under PREFILL. No change where none is valid (an epilogue or D the
    tiles cannot take)."""
    kind = _kind(cfg)
    pick = prefill_pick(prefill_options(cfg, m, n, k, sms), m, n, k, sms, PREFILL[kind])
    if pick is None:
        return {}
    c = pick[1]
    tm, tn = c.tiles(m, n)
    split = c.split_tiles(m, n, sms)
    reasons.append(f"{c.bm} x {c.bn} tiles{' in 2 x 1 clusters' if c.cluster > 1 else ''} "
                   f"({tm * tn} for {sms // c.cluster} {'clusters' if c.cluster > 1 else 'SMs'})"
                   + (f", K split {c.split_k} ways over the last {split}" if split else "")
                   + ": the least modelled time of the tiles and tail splits weighed")
    if c.c_stages:
        reasons.append(f"{c.stages} stages: D staged through {c.c_stages} chunk buffer"
                       f"{'s' if c.c_stages > 1 else ''} instead of the whole tile, a deeper ring")
    return {f: getattr(c, f) for f in ("bm", "bn", "consumers", "cluster_m", "cluster_n",
                                       "regs_consumer", "store", "split_k", "stages",
                                       "c_stages")}


def _tma_store(cfg, reasons: list) -> dict:
    """A TMA store with the deepest ring that fits beside its staging tile (6 stages at 128 x
    128 with a 16-bit D, 5 with fp32) instead of stores straight from the registers (7
    stages); no change where the configuration cannot take one. For blockwise promoted
    problems with M > DECODE_M and no epilogue (a bias epilogue keeps direct stores:
    unmeasured with a TMA store; so is an fp32 D). On an H200 the TMA store ran 1.21x faster
    on five DeepSeek-V3 shapes where the difference was seen, and 1.07x on the fp8 suite's 11
    held-out blockwise rows with M = 4096 (square, DeepGEMM's, Llama-3-8B, Qwen2.5-7B; lowest
    0.99x): benchmarks/results/fp8_block_store_NVIDIA_H200.json."""
    tma = cfg.replace(check=False, store="tma")
    tma = tma.replace(check=False, stages=_deepest(tma))
    if tma.violations():
        return {}
    reasons.append(f"blockwise, M > {DECODE_M}: D through a TMA store, {tma.stages} stages")
    return {"store": "tma", "stages": tma.stages}


def _overlap(cfg, reasons: list) -> dict:
    """``overlap`` for blockwise problems (two partial sets): each unit's epilogue under the
    next unit's first wgmmas, scales loaded a window of four K blocks ahead, the two
    consumers a K block apart. On an H200 it ran 1.061x faster than the same kernel without
    on six DeepSeek-V3 shapes (lowest 0.995x), 1.073x on the fp8 suite's 19 blockwise rows with
    M = 128 to 8192 (lowest 0.929x, 2 rounds each) and 1.07x on three decode rows; per-tensor
    and row-wise promoted kernels ran 0.986x and 0.93x in decode, so they keep the plain loop:
    benchmarks/results/fp8_overlap_NVIDIA_H200.json."""
    ov = cfg.replace(check=False, overlap=True)
    if cfg.scaling != "block" or ov.violations():
        return {}
    reasons.append("blockwise: overlapped main loop (epilogue under the next unit's first "
                   "wgmmas, scales a window ahead" + (", consumers a K block apart"
                                                      if ov.stagger else "") + ")")
    return {"overlap": True}


MOST_STAGES = 9  # the deepest ring the fp8 rules ask for


def _deepest(cfg, most: int = MOST_STAGES) -> int:
    """The most stages, 2 to ``most``, whose ring fits shared memory (``ring.deepest``), else
    ``cfg``'s own: a memory-bound kernel keeps as many loads in flight as it can."""
    stages = deepest(cfg, most)
    return stages if stages >= 2 else cfg.stages


C_STAGES: tuple[int, ...] = ()
"""D staging buffers ``_deepen`` tries: none. With (2, 1), as the wgmma family's rules take
them, 128 x 256 tiles took 4 stages and two buffers (64 x 128: 9 and one) and ran 1.0x the
whole-tile kernels on an H200 where they differed (0.95-1.069x: wide N lost up to 5%, short
problems gained up to 3%; fp8_c_stages_NVIDIA_H200.json)."""


def _deepen(cfg, buffers: tuple[int, ...] | None = None):
    """``cfg`` with the deepest ring that fits and, where staging D through chunk buffers
    (``buffers``, else C_STAGES) leaves room for a deeper one, the most buffers giving it."""
    best = cfg.replace(check=False, stages=_deepest(cfg))
    tried = (C_STAGES if buffers is None else buffers) if cfg.store == "tma" else ()
    ring, n = deepest_buffered(cfg, tried, MOST_STAGES)
    return cfg.replace(check=False, stages=ring, c_stages=n) if ring > best.stages else best


def choose_fp8(m: int, n: int, k: int, scaling: str, fast: bool, a_dtype: str = "e4m3",
               b_dtype: str = "e4m3", out: str = "bf16", epilogue: str = "none",
               sms: int = cost.SMS, db: TuneDB | None = None, gpu: str = "",
               quant: str = "none") -> Choice:
    """The ``Choice`` for one FP8 problem (see the module docstring). ``fast``: fast
    accumulation (tensor and row scaling only); otherwise promoted every 128 K elements.
    ``quant``: an e4m3 D's scaling ("tensor" or "1x128"; the config field). Raises
    ``ValueError`` for fast accumulation with block scaling."""
    if fast and scaling == "block":
        raise ValueError("block scaling needs promoted accumulation (fast_accum=False): its "
                         "scales change every 128 K elements")
    fields = {"dtype": a_dtype, "b_dtype": b_dtype, "out": out, "scaling": scaling,
              "epilogue": epilogue, "quant": quant}
    if db is not None:
        row, how = db.lookup(gpu, tune_dtype(a_dtype, b_dtype, scaling, fast), m, n, k, "rcr",
                             ["fp8"])
        if row is not None:
            from ..model.families import config_from_dict
            cfg = config_from_dict(row["config"]).replace(check=False, **fields)
            if cfg.a_rows and m > cfg.a_rows:  # a nearby shape's rows of A: all of them here
                cfg = cfg.replace(check=False, a_rows=0)
            if not cfg.violations():
                return Choice(cfg, how, False, [f"fp8 family, tuned ({how} shape)"])
    name = base_preset(m, scaling, fast)
    base = PRESETS[name].config
    reasons = [(f"fp8 family, preset {name} ({scaling} scaling, "
                f"{'fast' if fast else 'promoted'} accumulation)")]
    changes = dict(fields)
    if fast:
        changes.update(promote=0, partials=1)
    elif base.promote == 0:
        changes.update(promote=128, partials=2, bn=128, stages=7)
    prefill = {}
    if m <= DECODE_M:
        changes.update(_decode(base.replace(check=False, **changes), m, n, k, sms, reasons))
    elif epilogue == "none":
        prefill = _prefill(base.replace(check=False, **changes), m, n, k, sms, reasons)
        changes.update(prefill)
    if not prefill and m > DECODE_M and scaling == "block" and not fast and epilogue == "none":
        changes.update(_tma_store(base.replace(check=False, **changes), reasons))
    if not fast:
        changes.update(_overlap(base.replace(check=False, **changes), reasons))
    cfg = base.replace(check=False, **changes)
    if m <= DECODE_M:  # where it was measured: the waiter, if the kernel takes it (ring.waited)
        cfg = waited(cfg, reasons)
    if cfg.violations() and name == "fp8_tensor_cluster":  # e.g. an epilogue it cannot take
        name = "fp8_row_fast" if scaling == "row" else "fp8_tensor_fast"
        cfg = PRESETS[name].config.replace(check=False, **changes)
    if cfg.violations():  # e.g. a wide tile the promoted register budget cannot hold
        bad = ", ".join(v.rule.id for v in cfg.violations())
        raise ValueError(f"no fp8 kernel for {m}x{n}x{k} {scaling} ({bad})")
    how = "default, shaped" if m <= DECODE_M or prefill else "default"
    return Choice(cfg, how, False, reasons)


def explain_fp8(m: int, n: int, k: int, scaling: str = "tensor", fast: bool = True,
                a_dtype: str = "e4m3", b_dtype: str = "e4m3", out: str = "bf16",
                a_k_major: bool = True, b_k_major: bool = True, sms: int = cost.SMS,
                db: TuneDB | None = None, gpu: str = "") -> str:
    """Text: the FP8 kernel ``gemmgen.gemm`` would run for this problem and why, with the cost
    model's time for it and for the transposing packs of operands that are not K-major;
    ``db`` (of GPU ``gpu``): the tuning database consulted first, as ``gemm`` does."""
    ch = choose_fp8(m, n, k, scaling, fast, a_dtype, b_dtype, out, sms=sms, db=db, gpu=gpu)
    cfg = ch.config
    lines = [(f"{m}x{n}x{k} {a_dtype} x {b_dtype} -> {out}, {scaling} scaling, "
              f"{'fast' if fast else 'promoted'} accumulation:"), f"  kernel  {cfg.name}",
             f"  how     {ch.how}", f"  config  {cfg.brief()}"]
    lines += [f"  - {r}" for r in ch.reasons]
    packs = {name: shape for name, shape, ok in (("A", (m, k), a_k_major), ("B", (n, k), b_k_major))
             if not ok}
    share = min(1.0, cfg.split_tiles(m, n, sms) * cfg.cluster * cfg.bm * cfg.bn
                / max(1, m * n))
    est = cost.fp8_estimate(m, n, k, scaling, packs, split=cfg.split_k, fast=fast,
                            split_share=share)
    if packs:
        lines.append(f"  - {' and '.join(packs)} not K-major: FP8 wgmma reads K-major operands "
                     f"only, so the module's transposing pack copies them first")
    lines.append(f"  predicted: {est}")
    return "\n".join(lines)
