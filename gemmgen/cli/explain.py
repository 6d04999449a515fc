"""``gemmgen explain``: which kernel ``gemmgen.gemm`` (or ``grouped_gemm``) runs for a problem,
and why, without a GPU. It reads the tuning database gemm reads (``--db``, else
$GEMMGEN_TUNE_DB, else the user's) and says which one."""
from __future__ import annotations

import click

from ..heuristics import grouped_db
from ..heuristics.explain import explain as explain_text
from ..heuristics.grouped import explain_grouped
from ..heuristics.select import tight_lds
from ..heuristics.tunedb import TuneDBError
from ..model.config import EPILOGUES, LAYOUTS
from ..model.dtypes import FP8_DTYPES
from ..tune.suite_cases import SCALINGS
from .fp8 import DTYPE_CHOICES
from .main import main
from .tune import (
    EXTENT,
    _group_options,
    _open_db,
    check_grouped,
    check_scoped,
    refuse_grouped_db,
)


@main.command()
@click.argument("m", type=EXTENT)
@click.argument("n", type=EXTENT)
@click.argument("k", type=EXTENT)
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="fp16",
              show_default=True, help="A and B dtype (e4m3, e5m2: the fp8 family)")
@click.option("--scaling", type=click.Choice(SCALINGS), default="tensor", show_default=True,
              help="FP8 only: tensor, row or block scales")
@click.option("--fast-accum", is_flag=True, help="FP8 only: fast accumulation")
@click.option("--math", "math_", type=click.Choice(["native", "3xtf32"]), default="native",
              show_default=True, help="3xtf32: FP32-accurate products on tf32 tensor cores")
@click.option("--layout", type=click.Choice(LAYOUTS), default=None,
              help="A, B, C: r (row-major) or c (column-major) [default: rrr; FP8: rcr]")
@click.option("--epilogue", type=click.Choice(EPILOGUES), default="none", show_default=True)
@click.option("--lda", type=EXTENT, help="A's leading dimension (default: tight)")
@click.option("--ldb", type=EXTENT, help="B's leading dimension (default: tight)")
@click.option("--ldc", type=EXTENT, help="C's leading dimension (default: tight)")
@click.option("--batch", type=click.IntRange(1, 65535), default=1, show_default=True)
@click.option("--cc", type=click.IntRange(50, 200), default=90, show_default=True,
              help="compute capability of the GPU to explain for (90: H100/H200)")
@click.option("--gpu", default="NVIDIA H200", show_default=True,
              help="GPU name the tuning database is keyed by")
@click.option("--db", type=click.Path(exists=True, dir_okay=False),
              help="tuning database [default: the one gemmgen.gemm reads: $GEMMGEN_TUNE_DB, "
                   "else tune.json in the user cache directory]")
@_group_options("a grouped problem (gemmgen.grouped_gemm) of this many groups: M is the rows "
                "of all groups (--grouping m) or, with --grouping k, K is")
@click.pass_context
def explain(ctx, m, n, k, dtype, scaling, fast_accum, math_, layout, epilogue, lda, ldb, ldc,
            batch, cc, gpu, db, groups, grouping, dist) -> None:
    """Say which kernel gemmgen.gemm runs for an M x N x K problem, and why: family, tile,
    waves, split-K, swapped operands, stores, and the path of operands TMA cannot read
    (repack or fallback, with the cost model's estimates), from the tuning database gemm
    reads (named in the output). With --groups, the grouped kernel gemmgen.grouped_gemm
    runs, its schedule on the --dist distribution and every tile's predicted time. Needs no
    GPU."""
    check_scoped(ctx, dtype, groups)
    if groups is not None:
        _explain_grouped(ctx, m, n, k, dtype, layout, groups, grouping, dist, gpu, db)
        return
    layout = layout or ("rcr" if dtype in FP8_DTYPES else "rrr")
    lds = _leading_dims(layout, m, n, k, (lda, ldb, ldc))
    if math_ == "3xtf32" and dtype not in ("fp32", "tf32"):
        raise click.BadParameter("3xtf32 takes float32 data: --dtype fp32 or tf32",
                                 param_hint="--math")
    tdb = _open_db(db)
    try:
        if dtype in FP8_DTYPES:
            from ..heuristics.fp8 import explain_fp8
            # FP8: A row-major and B column-major (layout rc?) are K-major, others repacked
            text = explain_fp8(m, n, k, scaling, fast_accum, dtype, a_k_major=layout[0] == "r",
                               b_k_major=layout[1] == "c", db=tdb, gpu=gpu)
        else:
            text = explain_text(dtype, m, n, k, layout, epilogue, lds, math_, cc, gpu, tdb,
                                batch)
    except ValueError as exc:
        if dtype in FP8_DTYPES and fast_accum:  # block scaling needs promoted accumulation
            raise click.BadParameter(str(exc), param_hint="--fast-accum") from None
        raise click.UsageError(str(exc)) from None  # no kernel for these arguments
    click.echo(text)
    click.echo(f"database: {tdb.path}" + ("" if tdb.path.exists()
                                          else " (no file: nothing tuned)"))


def _leading_dims(layout: str, m: int, n: int, k: int, given: tuple) -> tuple:
    """lda, ldb, ldc: each given one, else tight; BadParameter naming the option when one is
    smaller than its matrix's contiguous extent (K or M for A, N or K for B, N or M for C)."""
    tight = tight_lds(layout, m, n, k)
    lds = tuple(g or t for g, t in zip(given, tight))
    for name, ld, need, letter in zip(("--lda", "--ldb", "--ldc"), lds, tight, layout):
        if ld < need:
            raise click.BadParameter(f"{ld} is below the {need} elements of a "
                                     f"{'row' if letter == 'r' else 'column'}", param_hint=name)
    return lds


def _explain_grouped(ctx, m, n, k, dtype, layout, groups, grouping, dist, gpu, db) -> None:
    """``explain --groups``: the grouped kernel for M rows (or K, K-grouped) over ``groups``,
    from the grouped tuning file grouped_gemm reads (named in the output)."""
    check_grouped(dtype, dist)
    refuse_grouped_db(db)
    given = ctx.get_parameter_source("layout") is click.core.ParameterSource.COMMANDLINE
    path = grouped_db.default_path()
    try:
        tuned = grouped_db.load(path)
    except TuneDBError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        click.echo(explain_grouped(dtype, groups, m, n, k, dist, grouping,
                                   layout if given else None, tuned=tuned, gpu=gpu))
    except ValueError as exc:  # no grouped kernel for these arguments
        raise click.UsageError(str(exc)) from None
    click.echo(f"grouped tuning file: {path}" + ("" if path.exists()
                                                 else " (no file: nothing tuned)"))
