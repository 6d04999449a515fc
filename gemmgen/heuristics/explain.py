"""``explain``: the kernel ``gemmgen.gemm`` would run for one problem and why, without a GPU."""
from __future__ import annotations

from ..model.dtypes import ELEM_BYTES, stored_as
from . import cost
from .select import decide, tight_lds
from .tunedb import TuneDB


def explain(dtype: str, m: int, n: int, k: int, layout: str = "rrr", epilogue: str = "none",
            lds: tuple | None = None, math_: str = "native", cc: int = 90,
            gpu: str = "NVIDIA H200", db: TuneDB | str | None = None, batch: int = 1) -> str:
    """Text: the kernel ``gemm`` would run for this problem on a GPU of compute capability
    ``cc`` and why: family, tile, waves, split, swap, store, and the path of operands TMA
    cannot read (``lds``: lda, ldb, ldc; default tight, i.e. K, N and N for rrr). ``db``: an
    open tuning database, or its path (None: none, only the shipped table and the rules).
    Raises ``TuneDBError`` when ``db`` is not a tuning database gemmgen can read,
    ``ValueError`` as ``decide`` does."""
    item = ELEM_BYTES[dtype]
    lda, ldb, ldc = lds or tight_lds(layout, m, n, k)
    c_ok = ldc * ELEM_BYTES[stored_as(dtype)] % 16 == 0
    tdb = db if isinstance(db, TuneDB) or db is None else TuneDB(db)
    ch = decide(tdb, gpu, dtype, m, n, k, cc, layout, epilogue, c_ok, math_, batch)
    cfg = ch.config
    swapped = f" (run swapped as M={n} N={m})" if ch.swap else ""
    lines = [f"{m}x{n}x{k} {dtype} layout {layout} epilogue {epilogue}"
             f"{f' batch {batch}' if batch > 1 else ''} on sm_{cc}:",
             f"  problem M={m} N={n} K={k}{swapped}",
             f"  kernel  {cfg.name}", f"  how     {ch.how}",
             f"  config  {cfg.brief()}"]
    lines += [f"  - {r}" for r in ch.reasons]
    if cfg.family == "wgmma" and getattr(cfg, "math", "native") != "3xtf32":
        km, kn = (n, m) if ch.swap else (m, n)
        bad = [name for name, ld in (("A", lda), ("B", ldb)) if ld * item % 16]
        if bad:
            packs = {name: (*cost.stored_shape(name, layout, m, n, k), 1) for name in bad}
            est = cost.unaligned(km, kn, k, batch, dtype, packs)
            lines.append(f"  - {' and '.join(bad)}: rows not a multiple of 16 bytes, which TMA "
                         f"needs; predicted: " + "; ".join(str(e) for e in est)
                         + f" -> {est[0].path}")
        else:
            lines.append("  - A and B rows are multiples of 16 bytes: TMA reads them as they are")
    flops = 2.0 * m * n * k * batch
    rate = cost.RATE.get((cfg.family, cfg.dtype))
    if rate:
        three = getattr(cfg, "math", "") == "3xtf32"
        lines.append(f"  compute at the family's sustained {rate / 1e12:.0f} TFLOP/s"
                     f"{' (three products per element)' if three else ''}: "
                     f"{flops * (3 if three else 1) / rate * 1e6:.1f} us"
                     + ("" if flops >= 1e9 else " (small problems are bound by launch and "
                                                "memory, not by this)"))
    return "\n".join(lines)
