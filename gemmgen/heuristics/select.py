"""Which kernel runs a problem: the tuning database's winner for the shape, else for the nearest
tuned shape, else the default preset of the fastest family that runs on the GPU and can take
the layout (wgmma on sm_90 for fp16/bf16/tf32, mma on older GPUs or where wgmma cannot read
the layout, SIMT for fp32). A default wgmma preset is then fitted to the shape
(``gemmgen.heuristics.shapes``).

Nothing here needs a GPU: ``decide`` takes the GPU's name and compute capability as arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model.families import config_from_dict, families_for
from ..model.presets import PRESETS
from . import shipped
from .shapes import keeps_sides, shaped
from .tunedb import TuneDB, parse_key

MATHS = ("native", "3xtf32")
"""``gemm(math=...)``: the dtype's own products, or 3xTF32 on float32 data."""


@dataclass
class Choice:
    """What ``gemm`` runs for one problem: the kernel ``config``, ``how`` it was found
    ("exact", "nearest", "default" or "default, shaped"), ``swap`` (the kernel computes
    C^T = B^T A^T: its M is the caller's N) and the ``reasons``, one line each."""

    config: object
    how: str
    swap: bool = False
    reasons: list = field(default_factory=list)


def choose(db: TuneDB | None, gpu: str, dtype: str, m: int, n: int, k: int,
           cc: int | None = None, layout: str = "rrr", epilogue: str = "none",
           table: bool = True, out: str | None = None):
    """(config, how) for one problem: how is "exact" or "nearest" (a winner of the tuning
    database ``db``; nearest only within ``tunedb.MAX_RATIO`` of the problem in each of M, N
    and K, and never from an entry the database left out as malformed), "table" (a winner
    of the table shipped for ``gpu``: same N and K, the nearest bucket of M) or "default" (a
    family's preset), the config already in ``layout`` with ``epilogue``; ", swapped" ends
    ``how`` when the entry computes C^T = B^T A^T (its config laid out for that; never with a
    bias, which runs along N).
    Families are tried fastest first among those that run on compute capability ``cc``; one
    whose rules reject the layout (tf32 wgmma reads no row-major B) is passed over.
    The database is passed over for a shape whose entry records that the default stands
    (``default_stands``: no measured candidate beat it by the tuner's margin); ``table=False``
    passes over the shipped table too (the shape rules' own choice).
    Raises ``ValueError`` for a dtype no family takes there."""
    fams = families_for(dtype, cc)
    names = None if cc is None else [f.name for f in fams]
    if db is not None and default_stands(db, gpu, dtype, m, n, k, layout, names):
        db = None
    row, how = db.lookup(gpu, dtype, m, n, k, layout, names) if db is not None else (None, None)
    if row is None and db is not None and layout != "rrr" and not default_stands(
            db, gpu, dtype, m, n, k, "rrr", names):
        row, how = db.lookup(gpu, dtype, m, n, k, "rrr", names)  # re-laid out below
    if row is None and table:
        row = shipped.lookup(gpu, dtype, m, n, k, layout, names)
        how = "table" if row is not None else None
    candidates = []
    if row is not None and not (row.get("swap") and keeps_sides(epilogue)):
        candidates.append((config_from_dict(row["config"]), how, bool(row.get("swap"))))
    if not fams:
        raise ValueError(f"no kernel family takes dtype {dtype!r}"
                         + (f" on sm_{cc}" if cc is not None else ""))
    candidates += [(PRESETS[f.defaults[dtype]].config, "default", False) for f in fams]
    for cfg, how_, swap in candidates:
        if cc is not None and cfg.family not in {f.name for f in fams}:
            continue  # tuned on another kind of GPU
        # a swapped entry is laid out for C^T = B^T A^T already
        trial = cfg.replace(layout=cfg.layout if swap else layout, epilogue=epilogue,
                            **({"out": out} if out else {}), check=False)
        problems = trial._type_problems()  # e.g. an unknown epilogue name
        if problems:
            raise ValueError("; ".join(problems))
        if out and out != cfg.out:
            trial = writing(trial, out)
        if not trial.violations():
            return trial, how_ + (", swapped" if swap else "")
    raise ValueError(f"no {dtype} kernel takes layout {layout!r} with epilogue {epilogue!r}")


def writing(cfg, out: str):
    """``cfg`` writing C as ``out`` (an fp32 C of fp16 inputs, say): the same kernel, with as
    many pipeline stages as still fit shared memory beside the wider C it stages (down to 2).
    Checked with ``violations()``; the config with the most stages that passes, else the
    config with ``out`` as it is (its violations say why)."""
    wide = cfg.replace(out=out, check=False)
    stages = getattr(cfg, "stages", None)
    if stages is None or not wide.violations():
        return wide
    return next((t for t in (wide.replace(stages=s, check=False) for s in range(stages, 1, -1))
                 if not t.violations()), wide)


def default_stands(db: TuneDB, gpu: str, dtype: str, m: int, n: int, k: int, layout: str,
                   families=None) -> bool:
    """Whether ``db`` holds an entry for exactly this GPU, dtype, layout and shape (of one of
    ``families``, names) that records that the default stands: ``gemm`` then runs what it
    would run without the database."""
    for key_, e in db.entries.items():
        g, d, lay, shape, fam = parse_key(key_)
        if ((g, d, lay, shape) == (gpu, dtype, layout, (m, n, k)) and e.get("default_stands")
                and (families is None or (fam or e.get("family")) in families)):
            return True
    return False


def math_dtype(dtype: str, math_: str) -> str:
    """The dtype a ``math_`` choice runs on float32 data of ``dtype``: tf32 for "3xtf32",
    ``dtype`` itself for "native". Raises ``ValueError`` for an unknown ``math_`` or 3xTF32 on
    data that is not float32."""
    if math_ not in MATHS:
        raise ValueError(f"unknown math {math_!r}; known: {', '.join(MATHS)}")
    if math_ == "native":
        return dtype
    if dtype not in ("tf32", "fp32"):
        raise ValueError(f"math='3xtf32' takes float32 data; got dtype {dtype!r}")
    return "tf32"


def tight_lds(layout: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """lda, ldb, ldc of contiguous M x K, K x N and M x N matrices laid out as ``layout``."""
    return ((k if layout[0] == "r" else m), (n if layout[1] == "r" else k),
            (n if layout[2] == "r" else m))


def decide(db: TuneDB | None, gpu: str, dtype: str, m: int, n: int, k: int,
           cc: int | None = None, layout: str = "rrr", epilogue: str = "none",
           c_aligned: bool = True, math_: str = "native", batch: int = 1,
           table: bool = True, out: str | None = None) -> Choice:
    """The ``Choice`` for one problem: ``choose``'s kernel (a tuned winner is taken as it
    is), then, for a default wgmma preset, the shape rules of
    ``gemmgen.heuristics.shapes``.
    ``c_aligned``: C's address and leading dimension are multiples of 16 bytes (else a TMA
    store cannot take it). ``out``: C's dtype where it is not the inputs' own (an fp32 C of
    fp16 inputs). ``math_="3xtf32"`` (dtype tf32) takes preset wgmma_3xtf32 where
    wgmma runs, else the SIMT fp32 kernel (IEEE float32 is at least as accurate).
    ``table=False``: the shipped table is passed over (as ``choose``). Raises ``ValueError``
    as ``choose`` does, or for an unknown ``math_``."""
    math_dtype(dtype, math_)  # the checks
    if math_ == "3xtf32":
        if "wgmma" in {f.name for f in families_for("tf32", cc)}:
            cfg = PRESETS["wgmma_3xtf32"].config.replace(layout=layout, epilogue=epilogue)
            why = ["3xTF32: float32 operands split into tf32 big + small parts, three tensor-"
                   "core products per element, FP32-level accuracy (preset wgmma_3xtf32)"]
            if not c_aligned:
                why.append("C is not 16-byte aligned: direct stores (the preset's own)")
            return Choice(cfg, "default", False, why)
        dtype = "fp32"
    cfg, how = choose(db, gpu, dtype, m, n, k, cc, layout, epilogue, table, out)
    swap = how.endswith(", swapped")
    how = how.removesuffix(", swapped")
    reasons = [f"{cfg.family} family, " + {"exact": "tuned for this shape",
                                           "nearest": "tuned for the nearest shape",
                                           "table": "the table shipped for this GPU",
                                           "default": "its default preset"}[how]]
    if cfg.family != "wgmma" or how != "default":
        if cfg.family == "wgmma" and not c_aligned and cfg.store == "tma":
            cfg = cfg.replace(store="direct")
            reasons.append("C is not 16-byte aligned: direct stores instead of the TMA store")
        if swap:
            reasons.append("operands swapped (C^T = B^T A^T), as the table measured fastest")
        return Choice(cfg, how, swap, reasons)
    return Choice(*shaped(cfg, m, n, k, layout, epilogue, c_aligned, batch, reasons))
