"""Running a benchmark suite: the run's settings, the rows (measured or failed), grouping cases
by problem, and the results document with its header (suite, GPU, CUDA, commit, date,
baseline, timing method). The kinds' runners are in ``suite_kinds``, ``suite_torch``,
``suite_fp8`` and ``suite_moe``; ``suite_runs.run_cases`` calls them, and the rows they
make are built by ``suite_rows``.

Every case becomes one row: a case that fails to build, launch or verify is recorded with
``passed`` false (and ``error`` saying why), never dropped. Only a run stopped by its time
limit leaves cases out; the header then says ``complete: false`` and how many.
"""
from __future__ import annotations

from .baseline import CUBLAS_NAME, CUBLAS_TEXT, TORCH_TEXT, resolve
from .results import finish
from .suite_cases import Case
from .suite_rows import (RunEnv, case_fields, failed_row, out_dtype, problem_groups, suite_row,
                         why)

__all__ = ["BASELINES", "RunEnv", "case_fields", "document", "failed_row", "merge", "out_dtype",
           "problem_groups", "row_id", "suite_row", "why"]
"""The rows' helpers (``suite_rows``) are re-exported for the runners' callers."""

BASELINES = {
    "torch_ops": ("F.linear / torch.matmul", TORCH_TEXT),
    "cublas": (CUBLAS_NAME, CUBLAS_TEXT),
    "unavailable": ("none", "none: neither PyTorch with CUDA nor CuPy is installed"),
    "none": ("epilogue none", ("gemmgen.gemm's choice for the same problem with epilogue "
                               "'none', on the same buffers in the same run")),
    "grouped_mm": ("torch._grouped_mm", (
        "torch._grouped_mm(A, W.transpose(1, 2), offs) on the same tensors in the same run; "
        "each row also has a loop of torch.matmul over the groups (loop_tflops, pct_loop), "
        "the group bounds known on the host")),
    "torch": ("F.linear", ("torch.nn.functional.linear(x, W) (cuBLAS/cuBLASLt through "
                           "PyTorch) on the same tensors in the same run, in the same mode")),
    "scaled_mm": ("torch._scaled_mm", (
        "torch._scaled_mm (cuBLASLt) on the same FP8 tensors and scales in the same run, the "
        "same scaling (tensor; row-wise (M, 1) x (1, N); blockwise a (M, K/128) M-major and b "
        "(K/128, N/128)) and use_fast_accum = (accum == fast), bf16 out")),
}
"""Baseline -> (short label for plots, the header's text). A kernel kind's "torch" runs as
"torch_ops" (or "cublas", "unavailable": ``baseline.resolve``)."""

KERNEL_METHOD = (
    "CUDA events, one pair around each launch (host enqueue time included where it exceeds the "
    "kernel's), after a warm-up of up to 20 launches; median and p20/p80 of 5 to 200 launches "
    "filling about {budget} s; inputs rotated over up to 16 buffer sets spanning 3x L2, "
    "standard-normal data drawn on the GPU; eager launches (no CUDA graph); the kernel as "
    "gemmgen.gemm would launch it (swapped operands where its choice says so) on device "
    "pointers, without gemm's Python dispatch")
TORCH_METHOD = (
    "per call, on PyTorch's current stream, inputs rotated over up to 16 (x, W) sets spanning "
    "3x L2, standard-normal data. eager: CUDA events around a loop of calls (host work "
    "included), per-call average, median and p20/p80 of 7 loops; graph: a loop of calls "
    "captured in one CUDA graph (warmed up on a side stream first), replays timed with "
    "events, per-call average of 7 replays; host: time.perf_counter around single calls, no "
    "synchronization inside a batch of 16 (synchronized between batches), median of up to "
    "400 calls; for host rows TFLOP/s is 2MNK over host seconds per call (the ceiling the "
    "host alone sets). Measurements fill about {budget} s each")
FP8_METHOD = (
    "per call on one stream: a loop of calls (inputs rotated over up to 16 sets spanning 3x L2, "
    "wide-range normal data quantized per the scaling by PyTorch ops) captured in one CUDA "
    "graph for each of gemmgen (gemm's choice, or the preset) and torch._scaled_mm, replays "
    "timed with events, per-call average, median and p20/p80 of 7 replays filling about "
    "{budget} s; TFLOP/s = 2MNK/t; GB/s = (A + B + D + scales bytes)/t; copy_gbps: a 1 GiB "
    "device copy (read + write bytes) in the same run. rel_error and cublas_rel_error: ||D - "
    "ref|| / ||ref|| over up to 256 sampled rows (all when M <= 256) against float64 on the "
    "dequantized inputs; passed: rel_error <= gemmgen.tune.fp8_verify.fp8_tolerance")
MOE_METHOD = (
    "per call on PyTorch's current stream: CUDA events around each call after two warm-ups, "
    "median and p20/p80 of 3 to 50 calls filling about {budget} s; A (routed rows x K) and the "
    "experts' [G, N, K] weights standard-normal in bf16 on the GPU, passed as W.transpose(1, 2) "
    "(K-contiguous B, as a model's forward does); the rows per group from the routing "
    "(gemmgen.heuristics.grouped.row_counts: uniform, skew<p>); TFLOP/s = 2 x rows x N x K / "
    "seconds. gemmgen.grouped_gemm as dispatched (one launch, offsets on the device)")
ERROR_METHOD = ("rel_error: ||C - ref||_F / ||ref||_F against a float64 product of the same "
                "(rounded) inputs, computed on the GPU, C poisoned with NaN first (for the "
                "torch kind, the output block the caching allocator hands out is NaN-filled "
                "first); passed: rel_error <= gemmgen.tune.verify.tolerance(K, dtypes)")


def document(suite, info: dict, rows: list, selection: dict, complete: bool = True,
             not_run: int = 0, baseline: str | None = None) -> dict:
    """The results document: the header (suite, suite_file, gpu, cuda_version, cuda_driver,
    git_commit, date, baseline, method, selection, ...) and the rows. ``info`` is
    ``bench.device_info()``'s; ``selection`` the run's --only/--quick/--max-rows;
    ``baseline`` the run's (a key of ``BASELINES``; None: ``baseline.resolve`` of the
    suite's)."""
    done = finish({**info, "rows": rows})
    key = baseline or resolve(suite.kind, suite.baseline)
    method = {"torch": TORCH_METHOD, "fp8": FP8_METHOD, "moe": MOE_METHOD}.get(
        suite.kind, KERNEL_METHOD).format(
        budget=suite.budget_s)
    run = {k: done[k] for k in ("date", "git_commit")}
    return {"suite": suite.name, "suite_file": suite.suite_file,
            "description": suite.description, "kind": suite.kind,
            **{k: done[k] for k in ("gpu", "cuda_version", "cuda_driver", "git_commit", "date")},
            "sms": info.get("sms"), "l2_bytes": info.get("l2_bytes"),
            "baseline": BASELINES[key][1], "baseline_label": BASELINES[key][0],
            "method": f"{method}. {ERROR_METHOD}", "plot": suite.plot, "selection": selection,
            "complete": complete, "not_run": not_run,
            "runs": [{**run, "selection": selection, "rows": len(rows)}], "rows": rows}


def row_id(r: dict) -> tuple:
    """What makes a row one measurement of a suite (for merging partial runs)."""
    return (r["kernel"], r.get("dtype"), r["M"], r["N"], r["K"], r.get("layout"),
            r.get("epilogue"), r.get("mode"), r.get("math"), r.get("batch"), r.get("scaling"),
            r.get("accum"), r.get("groups"), r.get("routing"))


def merge(old: dict, new: dict) -> dict:
    """``new`` with ``old``'s rows that ``new`` did not measure again (earlier partial runs
    of the suite, e.g. other --only filters), and both runs' entries in ``runs``."""
    fresh = {row_id(r) for r in new["rows"]}
    rows = [r for r in old.get("rows", []) if row_id(r) not in fresh] + new["rows"]
    return {**new, "runs": old.get("runs", []) + new["runs"], "rows": rows}
