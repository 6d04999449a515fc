"""``gemmgen.grouped_gemm``: many products in one persistent launch (mixture-of-experts), chosen
by ``gemmgen.heuristics.grouped``, built once per process and launched from a plan per operand
signature: the first call checks everything (``operands.groups``) and builds the recipe with
``Ref``s for A, B, C and the offsets; a later call with the same signature (shapes, strides,
dtypes, device; not the addresses, not the offsets' values) only patches and launches. Nothing
is copied to the host, so a call on a captured stream becomes part of a CUDA graph.
"""
from __future__ import annotations

from ..heuristics import grouped_db
from ..heuristics.grouped import GroupedChoice, choose, row_counts
from ..model.families import config_from_dict
from . import driver
from .build import build
from .device import device_identity, operands_device, sm_count
from .launch import allocator
from .operands import OperandError, describe
from .operands.groups import GroupedArgs, check_grouped
from .plans import Plan, plan_of, signature
from .recipe import Ref

_PLANS: dict[tuple, object] = {}
_KERNELS: dict[tuple, tuple] = {}
PLAN_CACHE = 4096


def _choice(args: GroupedArgs, expected_m, config, device: int) -> GroupedChoice:
    """The configuration for checked arguments: ``config`` as given (checked against the
    problem), else the dispatch heuristic's (``gemmgen.heuristics.grouped.choose``). The
    offsets live on the GPU, so for the rows of ``offs`` it weighs the tiles on tokens routed
    independently and uniformly (a seeded multinomial draw: row_counts "random"), whose
    groups are never all multiples of the tile; a masked batch's groups are ``expected_m``
    rows each, as the caller says."""
    if config is not None:
        want = (args.grouping, args.layout, args.dtype, args.out)
        have = tuple(getattr(config, f, None) for f in ("grouping", "layout", "dtype", "out"))
        if getattr(config, "family", "") != "grouped" or want != have:
            raise OperandError(f"config: {getattr(config, 'name', config)} computes (grouping, "
                               f"layout, dtype, out) = {have}; these operands need {want}")
        return GroupedChoice(config, "given", ["the configuration passed as config="])
    gpu, cc = device_identity(device)
    if cc != 90:
        raise OperandError(f"grouped_gemm runs on sm_90 (H100/H200); this device is sm_{cc}")
    rows = args.rows if args.mode == "offs" else args.groups * (expected_m or args.rows)
    tuned = grouped_db.winner(_tuned(), gpu, args.dtype, args.out, args.grouping, args.layout,
                              args.groups, rows, args.n, args.k)
    if tuned is not None:
        return GroupedChoice(config_from_dict(tuned[0]), "tuned",
                             [(f"tuned on this problem ({tuned[1]} rows per group), "
                               f"{grouped_db.default_path()}")])
    counts = row_counts("random", rows, args.groups) if args.mode == "offs" else None
    return choose(args.dtype, args.grouping, args.layout, args.out, args.groups, rows, args.n,
                  args.k, counts, sm_count(device))


_TUNED: list = []


def _tuned() -> dict:
    """The grouped tuning file's entries, read once per process (none when unreadable)."""
    if not _TUNED:
        try:
            _TUNED.append(grouped_db.load())
        except Exception:  # noqa: BLE001 - an unreadable file only loses the tuned choice
            _TUNED.append({})
    return _TUNED[0]


def plan_grouped(A, B, offs=None, out=None, counts=None, out_dtype=None, expected_m=None,
                 config=None, scale_a=None, scale_b=None) -> Plan:
    """The plan of one operand signature: every check, the choice and build of the kernel,
    and its recipe with the operands' addresses as ``Ref``s. Raises as ``grouped_gemm``."""
    args = check_grouped(A, B, offs, out, counts, out_dtype, scale_a, scale_b)
    device = operands_device({"A": A, "B": B, "offs": offs, "counts": counts, "out": out,
                              "scale_a": scale_a, "scale_b": scale_b})
    choice = _choice(args, expected_m, config, device)
    key = (choice.config.name, *device_identity(device))
    if key not in _KERNELS:
        with driver.on_device(device):
            _KERNELS[key] = build(choice.config)
    kernel = _KERNELS[key]
    new_out = allocator(A, args.out_shape, args.out, False)
    c = args.c or describe(new_out(), "out", args.out)
    scale_ptrs = tuple(s[0] for s in args.scales)
    refs = [Ref(i, p) for i, p in enumerate((args.a.ptr, args.b.ptr, c.ptr, args.index_ptr,
                                             *scale_ptrs))]
    stride_c = c.batch_stride if c.batch and c.batch > 1 else 0
    problem = args.problem(refs[0], refs[1], refs[2], refs[3] if args.index_ptr else 0,
                           c.lds["r"], stride_c, *refs[4:6])
    with driver.on_device(device):
        recipe = kernel.launches(problem, device)
    index = offs if offs is not None else counts
    return plan_of(kernel, recipe, (A, B, out, index, scale_a, scale_b), new_out, choice, device)


def grouped_gemm(A, B, offs=None, out=None, *, counts=None, expected_m: int | None = None,
                 out_dtype=None, config=None, stream=None, scale_a=None, scale_b=None):
    """Grouped GEMM for mixture-of-experts in one launch, with ``torch._grouped_mm``'s
    conventions (PyTorch CUDA tensors or CuPy arrays, fp16 or bf16; the offsets int32 on the
    device):

    - A [T, K], B [G, K, N], ``offs`` [G] (cumulative row ends): C[offs[g-1]:offs[g]] =
      A[offs[g-1]:offs[g]] @ B[g] -> [T, N]; rows past offs[G-1] are written as zeros.
    - A [G, M, K], B [G, K, N]: C[g] = A[g] @ B[g] -> [G, M, N]; with ``counts`` [G] only the
      first counts[g] rows of each group are computed and written (masked layout, for
      CUDA-graph decode; ``expected_m`` hints the typical count for the kernel's choice).
    - A [M, T] (column-major, e.g. ``X.t()``), B [T, N], ``offs`` [G] over T: C[g] =
      A[:, offs[g-1]:offs[g]] @ B[offs[g-1]:offs[g]] -> [G, M, N] (the weight gradient); an
      empty group gives zeros.

    FP8 (``torch.float8_e4m3fn``/``float8_e5m2`` A and B, M-grouped, B K-major) takes
    DeepSeek-V3's block scales, float32 on the device: ``scale_a`` [T, ceil(K/128)] (A 3-D:
    [G, M, ceil(K/128)]), one per row and 128 elements of K, and ``scale_b`` [G, ceil(N/128),
    ceil(K/128)], one per 128 x 128 block of each expert's [N, K] weight; any strides (the
    MN-major [ceil(K/128), T] layout of DeepGEMM's A scales as a transposed view; a large call
    first copies A's M-major scales into K-contiguous rows in a per-stream workspace, where the
    kernel loads four K blocks' scales of a row at once). C =
    (A * scale_a) @ (B * scale_b) per group, accumulated in fp32 and promoted every 128
    elements of K with the scales applied (DeepGEMM's m-grouped FP8 kernels); C is bf16 unless
    ``out_dtype`` says fp16 or fp32.

    B's matrices may be K- or N-contiguous ([G, N, K] weights passed as ``W.transpose(1, 2)``
    need no copy). ``out`` (row-major, the result's shape) is written in place, else a new
    array like A is returned; ``out_dtype`` is the input dtype (default; bf16 for FP8) or
    fp32. ``config``
    forces a grouped-family configuration. ``stream``: None (the legacy default stream), a
    PyTorch or CuPy stream or a raw handle; the call allocates nothing but the output (and the
    stream's workspace for a large FP8 call's copied scales, kept per stream: a larger call
    outside graph capture replaces it after synchronizing that stream) and otherwise never
    synchronizes, so it can be captured in a CUDA graph (warm up once first: the first call
    of a signature may compile). Offsets that decrease or exceed T are clamped on the
    device (the groups they describe are then empty or shorter), never read out of bounds.

    Raises ``OperandError`` naming the argument (kind, dtype, rank, shape, layout, a stride or
    address TMA cannot read, offsets of the wrong dtype or length), ``BuildError`` when the
    kernel does not compile, ``DriverError`` without a GPU.
    """
    index = offs if offs is not None else counts
    key = _plan_key(A, B, offs, counts, out, scale_a, scale_b, out_dtype, expected_m, config)
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        plan = plan_grouped(A, B, offs, out, counts, out_dtype, expected_m, config, scale_a,
                            scale_b)
        if key is not None:
            if len(_PLANS) >= PLAN_CACHE:
                _PLANS.clear()
            _PLANS[key] = plan
    return plan.run(A, B, out, index, scale_a, scale_b, stream=stream)


def _plan_key(A, B, offs, counts, out, scale_a, scale_b, out_dtype, expected_m, config):
    """The key of ``grouped_gemm``'s plan for these arguments: the operands' signatures (not
    their addresses or the offsets' values) and the options; None when an operand has no
    signature (it is checked again on every call)."""
    sigs = tuple(signature(x) for x in (A, B, offs, counts, out, scale_a, scale_b))
    return None if None in sigs else (*sigs, str(out_dtype), expected_m, config)


def chosen_grouped(A, B, offs=None, counts=None, out_dtype=None, expected_m=None,
                   scale_a=None, scale_b=None):
    """The ``Plan`` ``grouped_gemm`` keeps for these operands (out=None, config=None), or
    None."""
    key = _plan_key(A, B, offs, counts, None, scale_a, scale_b, out_dtype, expected_m, None)
    return _PLANS.get(key) if key is not None else None

