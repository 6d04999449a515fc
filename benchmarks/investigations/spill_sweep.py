"""Spill sweep: compile the tuning spaces in every layout and epilogue the rules accept and check
that each kernel either compiles with 0 spill bytes and 0 stack, or is flagged by the register
estimate (``gemmgen.model.registers.spill_risk``) so that tune and gemm never pick it.

python3 benchmarks/investigations/spill_sweep.py [--family F ...] [--epilogue E ...]
        [--jobs N] [--batch 12] [--cache PATH] [--sample N --seed S] [--json PATH]

What is compiled (no GPU; nvcc with ptxas -v, parallel processes, several kernels per
translation unit):
- coverage (default): every configuration of each family's space, in each of the 8 layouts,
  with each --epilogue, or by default ("rotate") one of today's six per (config, layout) in
  turn: no epilogue dominates the others in registers (the --sample run shows it), so every
  one is swept over the space, and the margin the estimates keep covers the others (checked
  on the --sample run, which compiles all six); the wgmma family adds WGMMA_TREE (every node
  at once) and the overlap in both C layouts, and the dual GEMM in every layout
  (``wgmma_extras``). A configuration that the estimate flags is not compiled (tune never picks it).
  Configurations that differ only in min_blocks share their code: the one with the tightest
  register cap is compiled first, and a looser one counts as clean when the tighter one is.
- --sample N: N random configurations per family in a random layout with every epilogue,
  flagged or not (the estimate's false alarms and the epilogues' ordering).

Results are cached per kernel (--cache, JSON lines), so a sweep resumes and a changed estimate
is re-judged without compiling again; the summary goes to --json (committed as
benchmarks/results/spill_sweep.json).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gemmgen, not an installed one

from gemmgen.codegen.render import render
from gemmgen.compile.nvcc import BuildError, compile_many, nvcc_version
from gemmgen.model.config import EPILOGUES, LAYOUTS
from gemmgen.model.families import FAMILIES
from gemmgen.model.registers import register_cap, registers_needed, spill_risk

WGMMA_TREE = ("cast(amax(aux(gelu_erf(alpha*acc*row_scale*col_scale + beta*C + row_bias + bias)) "
              "+ R(dtype='fp32')), e4m3)")
"""The epilogue tree the wgmma sweep adds: every loading, storing and converting node at once
(the erf GELU, whose erff is the longest activation), the heaviest a tree gets."""
DUAL_TREE = "silu(gate)*up"
OVERLAP_TREE = "silu(acc*row_scale*col_scale + bias) + R"


def arch_of(cfg) -> str:
    return "sm_90a" if cfg.family == "wgmma" else "sm_90"


def variants(cfg, layouts, epilogues) -> list:
    """``cfg`` in each layout and epilogue that its rules accept."""
    out = []
    for layout in layouts:
        for epi in epilogues:
            trial = cfg.replace(layout=layout, epilogue=epi, check=False)
            if not trial.violations():
                out.append(trial)
    return out


def wgmma_extras(cfg) -> list:
    """The epilogue tree, the dual GEMM and the overlap variants of a wgmma space config,
    where the rules allow. The tree and the overlap change only the consumer warpgroups'
    epilogue, which A's and B's layouts do not reach (TMA and wgmma descriptors read them):
    they are swept in both C layouts; the dual GEMM adds a load to the producer: every layout."""
    out = []
    c_layouts = [cfg.layout[:2] + "r", cfg.layout[:2] + "c"]
    for layout in LAYOUTS:
        changes = [{"dual": True, "epilogue": DUAL_TREE},
                   {"dual": True, "bn": cfg.bn // 2, "epilogue": DUAL_TREE}]
        if layout in c_layouts:
            changes += [{"epilogue": WGMMA_TREE}, {"overlap": True, "epilogue": "bias_gelu"},
                        {"overlap": True, "epilogue": OVERLAP_TREE}]
        for change in changes:
            trial = cfg.replace(layout=layout, check=False, **change)
            if not trial.violations():
                out.append(trial)
    return out


def rotated(cfg, layouts) -> list:
    """``cfg`` in each layout with one of today's six epilogues, the next one for each next
    (config, layout) that the rules accept: every epilogue over the space at the cost of one.
    Configs that differ only in min_blocks get the same epilogue (so one compile serves both)."""
    out = []
    key = sibling_key(cfg) or cfg.name
    start = int(hashlib.sha256(repr(key).encode()).hexdigest(), 16)
    for i, layout in enumerate(layouts):
        for j in range(len(EPILOGUES)):
            trial = cfg.replace(layout=layout, epilogue=EPILOGUES[(start + i + j) % 6],
                                check=False)
            if not trial.violations():
                out.append(trial)
                break
    return out


def coverage(families, epilogues, layouts=LAYOUTS) -> list:
    """The coverage sweep's kernels: each space config in every layout with ``epilogues``
    ("rotate": one of today's six per (config, layout), see ``rotated``), plus wgmma's extras."""
    configs = []
    for fam in families:
        for dtype in FAMILIES[fam].dtypes:
            for cfg in FAMILIES[fam].space(dtype):
                if epilogues == ["rotate"]:
                    configs += rotated(cfg, layouts)
                else:
                    configs += variants(cfg, layouts, epilogues)
                if fam == "wgmma":
                    configs += wgmma_extras(cfg)
    unique = {c.name: c for c in configs}
    return list(unique.values())


def sample(families, count, seed) -> list:
    rng = random.Random(seed)
    out = []
    for fam in families:
        pool = [c for d in FAMILIES[fam].dtypes for c in FAMILIES[fam].space(d)]
        for cfg in rng.sample(pool, min(count, len(pool))):
            layouts = [lay for lay in LAYOUTS if variants(cfg, [lay], ["none"])]
            out += variants(cfg, [rng.choice(layouts)], EPILOGUES)
    return out


def sibling_key(cfg) -> tuple | None:
    """Configs equal but for min_blocks share this key (None without a min_blocks field)."""
    d = cfg.as_dict()
    if "min_blocks" not in d:
        return None
    d.pop("min_blocks")
    return tuple(sorted((k, str(v)) for k, v in d.items()))


def compile_batch(batch) -> dict:
    """name -> record for one translation unit of kernels (one by one after a failure)."""
    arch = arch_of(batch[0])
    try:
        found = compile_many([render(c, arch) for c in batch], arch, timeout=1800)
    except BuildError as err:
        if len(batch) == 1:
            return {batch[0].name: {"error": err.log[-600:]}}
        out = {}
        for c in batch:
            out.update(compile_batch([c]))
        return out
    out = {}
    for c in batch:
        res = found.get((c.name, arch))
        out[c.name] = ({"error": "no ptxas report"} if res is None else
                       {"registers": res.registers, "spill": res.spills, "stack": res.stack_bytes})
    return out


def judge(cfg, rec: dict) -> dict:
    """The record with the estimate's verdict: ok, or why not."""
    risk = spill_risk(cfg)
    bad = "error" in rec or rec.get("spill", 0) > 0 or rec.get("stack", 0) > 0
    verdict = "ok" if not bad else "flagged" if risk else "VIOLATION"
    if not bad and risk:
        verdict = "false_alarm"
    return {**rec, "name": cfg.name, "family": cfg.family, "need": registers_needed(cfg),
            "cap": register_cap(cfg), "verdict": verdict}


def load_cache(path: Path) -> dict:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out[rec.pop("name")] = rec
    return out


def plan(configs, cache) -> tuple[list, dict]:
    """(configs to compile, name -> tighter sibling's name for the looser min_blocks ones).
    Flagged configs are left out (tune never picks them) unless ``keep_flagged``."""
    todo, inferred, groups = [], {}, {}
    for c in configs:
        key = sibling_key(c)
        groups.setdefault(key if key is not None else c.name, []).append(c)
    for members in groups.values():
        members.sort(key=lambda c: -getattr(c, "min_blocks", 1))
        tight = members[0]
        if tight.name not in cache:
            todo.append(tight)
        for loose in members[1:]:
            inferred[loose.name] = tight.name
    return todo, inferred


def compile_all(todo, cache, cache_path: Path, jobs: int, batch: int) -> None:
    """Compile ``todo`` (several kernels per translation unit, ``jobs`` nvcc processes) into
    ``cache`` and its file."""
    # Nearest the register cap first, over every family: a sweep cut short has compiled the
    # riskiest kernels of each (one arch per translation unit).
    ranked = sorted(todo, key=lambda c: (register_cap(c) - registers_needed(c), c.name))
    batches = []
    for arch in sorted({arch_of(c) for c in todo}):
        group = [c for c in ranked if arch_of(c) == arch]
        batches += [group[i:i + batch] for i in range(0, len(group), batch)]
    batches.sort(key=lambda b: register_cap(b[0]) - registers_needed(b[0]))
    start, done = time.time(), 0
    with ThreadPoolExecutor(max_workers=jobs) as pool, cache_path.open("a") as out:
        futures = {pool.submit(compile_batch, b): len(b) for b in batches}
        for i, fut in enumerate(as_completed(futures), 1):
            for name, rec in fut.result().items():
                cache[name] = rec
                out.write(json.dumps({"name": name, **rec}) + "\n")
            out.flush()
            done += futures[fut]
            if i % 20 == 0 or i == len(futures):
                print(f"  {i}/{len(futures)} units, {done / (time.time() - start):.2f} "
                      f"kernels/s", file=sys.stderr)


def _clean(rec: dict | None) -> bool:
    return rec is not None and "error" not in rec and not rec.get("spill") and not rec.get("stack")


def run(configs, cache_path: Path, jobs: int, batch: int, keep_flagged: bool,
        build: bool = True) -> dict:
    """Compile what the cache lacks (unless ``build`` is False: report on the cache) and
    judge every kernel: name -> record with verdict ("not compiled" for the rest)."""
    cache = load_cache(cache_path)
    flagged = [c for c in configs if not keep_flagged and spill_risk(c)]
    configs = [c for c in configs if keep_flagged or not spill_risk(c)]
    todo, inferred = plan(configs, cache)
    print(f"{len(configs)} kernels: {len(todo)} to compile, {len(inferred)} by a tighter "
          f"sibling (if it is clean), the rest cached", file=sys.stderr)
    by_name = {c.name: c for c in configs}
    if build:
        compile_all(todo, cache, cache_path, jobs, batch)
        # a looser sibling is compiled itself when its tighter one is not clean
        again = [by_name[n] for n, t in inferred.items() if not _clean(cache.get(t))
                 and n not in cache]
        compile_all(again, cache, cache_path, jobs, batch)
    records = {}
    for c in configs:
        rec = cache.get(c.name)
        if rec is None and c.name in inferred and _clean(cache.get(inferred[c.name])):
            rec = {**cache[inferred[c.name]], "inferred_from": inferred[c.name]}
        records[c.name] = judge(c, rec) if rec is not None else {
            "name": c.name, "family": c.family, "need": registers_needed(c),
            "cap": register_cap(c), "verdict": "not compiled"}
    for c in flagged:  # compiled by an earlier sweep, or not
        records[c.name] = judge(c, cache[c.name]) if c.name in cache else {
            "name": c.name, "family": c.family, "need": registers_needed(c),
            "cap": register_cap(c), "verdict": "flagged, not compiled"}
    return {"records": records, "configs": by_name}


def summary(result: dict, args) -> dict:
    """Counts per family and verdict, every violation, and examples of the rest."""
    recs = list(result["records"].values())
    per_family: dict = {}
    for r in recs:
        f = per_family.setdefault(r["family"], Counter())
        f["kernels"] += 1
        f[r["verdict"]] += 1
        f["clean by a tighter sibling"] += "inferred_from" in r
    for fam, f in per_family.items():
        left = [r["cap"] - r["need"] for r in recs
                if r["family"] == fam and r["verdict"] == "not compiled"]
        f["every kernel compiled up to an estimated margin of"] = (
            min(left) - 1 if left else "all")
    def examples(verdict, n=40):
        return sorted((r for r in recs if r["verdict"] == verdict),
                      key=lambda r: (r["cap"] - r["need"], r["name"]))[:n]
    return {
        "what": "tune-space configs x layouts x epilogues the rules accept, compiled for "
                "sm_90 (sm_90a for wgmma); ok = 0 spill bytes and 0 stack; flagged = the "
                "estimate (gemmgen.model.registers.spill_risk) says it spills, so tune never "
                "picks it; VIOLATION = spills or has a stack frame and is not flagged",
        "command": " ".join(sys.argv), "nvcc": nvcc_version(), "epilogues": args.epilogue,
        "sample": args.sample, "seed": args.seed, "date": time.strftime("%Y-%m-%d"),
        "per_family": {k: dict(v) for k, v in sorted(per_family.items())},
        "violations": sorted((r for r in recs if r["verdict"] == "VIOLATION"),
                             key=lambda r: r["name"]),
        "false_alarm_examples": examples("false_alarm"),
        "nearest_the_cap_ok_examples": examples("ok"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", action="append", choices=list(FAMILIES))
    ap.add_argument("--epilogue", action="append")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "spill_sweep.jsonl")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", action="store_true",
                    help="compile nothing: report on what the cache holds")
    args = ap.parse_args()
    families = args.family or list(FAMILIES)
    args.epilogue = args.epilogue or ["rotate"]
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    if args.sample:
        configs = sample(families, args.sample, args.seed)
    else:
        configs = coverage(families, args.epilogue)
    result = run(configs, args.cache, args.jobs, args.batch, keep_flagged=bool(args.sample),
                 build=not args.report)
    report = summary(result, args)
    print(json.dumps(report["per_family"], indent=1))
    for r in report["violations"][:40]:
        print(f"VIOLATION {r['name']}: {r}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
