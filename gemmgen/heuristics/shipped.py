"""Tuned tables shipped with gemmgen: per GPU, the winners of ``gemmgen tune`` over buckets of M
for the (N, K) of common layers, in the layouts of a training step (forward ``rcr``, dgrad
``rrr``, wgrad ``crr``), kept only where the winner beat the shape rules' own choice in the
same run. Each file (``gemmgen/heuristics/tables/<GPU>.json``) is a tuning database with a
``provenance`` object: GPU, CUDA, commit, date and how it was made. A table holds winners
only: an entry without one changes nothing and is left out (with a warning), and a table
without its provenance is not used at all. gemmgen ships no table today; one is added only
where its winners beat the rules.

``choose`` consults a user's tuning database first, then this table (an entry of the same N
and K, at the nearest bucket of M), then the shape rules.
"""
from __future__ import annotations

import re
import warnings
from functools import lru_cache
from pathlib import Path

from .tunedb import TuneDB, TuneDBError, TuneDBWarning, parse_key

TABLES = Path(__file__).with_name("tables")
MAX_M_RATIO = 8
"""A shipped entry serves problems of its N and K whose M is within this factor of its own
(the nearest bucket of M); other problems go to the shape rules."""
PROVENANCE = ("gpu", "cuda", "commit", "date")
"""What a shipped table's ``provenance`` object must name (each a non-empty string)."""


def table_path(gpu: str) -> Path:
    """Where the table of ``gpu`` ("NVIDIA H200") lives: tables/NVIDIA_H200.json."""
    return TABLES / (re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_") + ".json")


@lru_cache(maxsize=8)
def shipped(gpu: str) -> TuneDB | None:
    """The shipped table of ``gpu``: None when gemmgen has none for it, or it cannot be read,
    or its ``provenance`` lacks any of PROVENANCE (a ``TuneDBWarning`` says so). Entries
    without a winner, or malformed, are left out with one ``TuneDBWarning`` each."""
    path = table_path(gpu)
    if not path.is_file():
        return None
    try:
        table = TuneDB(path)
    except TuneDBError:
        return None
    prov = table.data.get("provenance")
    lacks = [f for f in PROVENANCE if not (isinstance(prov, dict) and isinstance(prov.get(f), str)
                                            and prov[f])]
    if lacks:
        warnings.warn(f"shipped table {path} not used: its provenance lacks {', '.join(lacks)}",
                      TuneDBWarning, stacklevel=2)
        return None
    for k in [k for k, e in table.entries.items() if not e.get("winner")]:
        warnings.warn(f"shipped table {path}: entry {k!r} skipped: it has no winner (a table "
                      f"holds only winners that beat the rules)", TuneDBWarning, stacklevel=2)
        del table.entries[k]
    return table


def lookup(gpu: str, dtype: str, m: int, n: int, k: int, layout: str,
           families=None) -> dict | None:
    """The shipped winner's row for a problem: among the entries of this GPU, dtype, layout,
    N and K (and ``families``), the one whose M is nearest (within MAX_M_RATIO); None when
    there is none."""
    table = shipped(gpu)
    if table is None:
        return None
    near = []
    for key_, e in table.entries.items():
        g, d, lay, (em, en, ek), fam = parse_key(key_)
        if (g, d, lay, en, ek) != (gpu, dtype, layout, n, k):
            continue
        if families is not None and (fam or e.get("family")) not in families:
            continue
        ratio = max(m, em) / max(min(m, em), 1)
        if ratio <= MAX_M_RATIO:
            near.append((ratio, em, e))
    if not near:
        return None
    _, _, e = min(near, key=lambda item: item[:2])
    return e["candidates"][e["winner"]]


def provenance(gpu: str) -> dict | None:
    """The provenance of ``gpu``'s shipped table: GPU, CUDA, commit, date, method."""
    db = shipped(gpu)
    return None if db is None else db.data.get("provenance")
