"""The FP8 side of ``verify``, ``bench`` and ``tune`` (``--dtype e4m3|e5m2``, or fp8 presets):
the fp8 family's kernels need scales, so they are verified with ``gemmgen.tune.fp8_verify``
and timed beside ``torch._scaled_mm`` by the fp8 suite runner."""
from __future__ import annotations

import json

import click

from ..model.dtypes import FP8_DTYPES
from ..model.presets import PRESETS
from ..runtime.build import build_many
from ..tune import results
from ..tune.fp8_verify import CASES, sweep_fp8
from .main import write_text

FP8_PRESETS = [n for n, p in PRESETS.items() if p.config.family == "fp8"]
DTYPE_CHOICES = ["fp32", "tf32", "fp16", "bf16", *FP8_DTYPES]


def fp8_configs(presets, dtype: str | None) -> list:
    """(label, config) of the fp8 presets named (all when none), with A's dtype ``dtype``."""
    names = list(presets) or FP8_PRESETS
    out = []
    for name in names:
        cfg = PRESETS[name].config
        out.append((name, cfg.replace(dtype=dtype) if dtype else cfg))
    return out


def verify_fp8(targets, seed) -> tuple[list, int]:
    """Sweep fp8 kernels ((label, Kernel or BuildError)) over ``fp8_verify.CASES``; print the
    table; return (results, failures)."""
    outcomes, failed = [], 0
    for label, kernel in targets:
        if isinstance(kernel, Exception):
            click.echo(f"BUILD FAIL {label}: {kernel}", err=True)
            failed += 1
            continue
        outcomes += sweep_fp8(label, kernel, CASES, seed)
    click.echo(f"{'fp8 kernel':<24} {'scaling':>7} {'accumulation':>26} {'M x N x K':>16} "
               f"{'rel err':>9} {'bound':>8} result  path")
    for r in outcomes:
        click.echo(f"{r.kernel:<24} {r.scaling:>7} {r.accumulation:>26} "
                   f"{f'{r.m}x{r.n}x{r.k}':>16} {r.rel_error:>9.2e} {r.tol:>8.1e} "
                   f"{'pass' if r.passed else 'FAIL'}    {r.path}")
    failed += sum(1 for r in outcomes if not r.passed)
    return outcomes, failed


def verify_presets(presets, dtype, arch, seed) -> tuple[list, int]:
    """Build the fp8 presets (in parallel) and ``verify_fp8`` them."""
    pairs = fp8_configs(presets, dtype)
    built = build_many([c for _, c in pairs], arch)
    return verify_fp8(list(zip([n for n, _ in pairs], built)), seed)


def bench_fp8(presets, dtype: str | None, sizes, arch, seed, json_path) -> bool:
    """Time fp8 presets beside torch._scaled_mm at ``sizes`` (the fp8 suite's runner); print
    the table; write the results document to ``json_path``. True when every row passed."""
    from ..tune.bench import device_info
    from ..tune.suite_cases import Case
    from ..tune.suite_fp8 import run_fp8
    from ..tune.suite_run import RunEnv
    cases = []
    for name, cfg in fp8_configs(presets, dtype):
        for m, n, k in sizes:
            cases.append(Case(cfg.dtype, m, n, k, "rcr", preset=name, scaling=cfg.scaling,
                              accum="promoted" if cfg.promote else "fast"))
    info = device_info()
    rows = run_fp8(cases, RunEnv(info, seed, 0.1, arch))
    doc = results.finish({**info, "baseline": "torch._scaled_mm", "rows": rows})
    click.echo(f"{doc['gpu']}, CUDA {doc['cuda_version']}, baseline: torch._scaled_mm")
    click.echo(results.table(rows))
    for r in rows:
        if r.get("gbps"):
            click.echo(f"{r['kernel']:<24} {r['M']}x{r['N']}x{r['K']}: {r['gbps']:.0f} GB/s, "
                       f"{r['pct_copy']:.0f}% of the copy bandwidth ({r['copy_gbps']:.0f} GB/s)")
    if json_path:
        write_text(json_path, json.dumps(doc, indent=1) + "\n", "--json")
        click.echo(f"wrote {json_path}")
    return all(r["passed"] for r in rows)
