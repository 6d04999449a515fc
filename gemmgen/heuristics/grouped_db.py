"""Tuning results of grouped problems: a JSON file of entries keyed by GPU, dtypes, grouping,
layout, group count, rows, N, K and the rows' distribution, each with every measured
candidate and the winner. ``gemmgen tune --groups`` writes it; the dispatch of
``grouped_gemm`` reads it (``winner``): a problem's tuned winner on the uniform distribution
(what the host assumes without the offsets), else on any tuned distribution.

The file: $GEMMGEN_GROUPED_DB, else ``grouped_tune.json`` beside the tuning database.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..files import read_document
from . import dbfile
from .tunedb import TuneDBError, default_path as tune_db_path


def default_path() -> Path:
    if os.environ.get("GEMMGEN_GROUPED_DB"):
        return Path(os.environ["GEMMGEN_GROUPED_DB"])
    return tune_db_path().with_name("grouped_tune.json")


def key(gpu: str, dtype: str, out: str, grouping: str, layout: str, groups: int, rows: int,
        n: int, k: int, dist: str) -> str:
    """``gpu|dtype>out|grouping|layout|G=groups|rowsxNxK|dist``."""
    return f"{gpu}|{dtype}>{out}|{grouping}|{layout}|G={groups}|{rows}x{n}x{k}|{dist}"


def load(path: Path | None = None) -> dict:
    """{key: entry} of the file (empty when it does not exist). Raises ``TuneDBError`` naming
    the file when it is not a grouped tuning file."""
    path = Path(path or default_path())
    if not path.exists():
        return {}
    data = read_document(path, TuneDBError, "grouped tuning file",
                         "delete it or set $GEMMGEN_GROUPED_DB")
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("candidates"), dict)
            for e in entries.values()):
        raise TuneDBError(f"{path} is not a gemmgen grouped tuning file: delete it or set "
                          f"$GEMMGEN_GROUPED_DB")
    return entries


def store(entry_key: str, entry: dict, path: Path | None = None) -> Path:
    """Add or replace one entry in the file as it is now, under the lock file beside it
    (other processes' entries stay), written atomically: the file keeps its mode, and a
    symlink stays a link to the file written. Its path. Raises ``TuneDBError`` as ``load``
    does, ``OSError`` when it cannot be written."""
    path = Path(path or default_path())
    with dbfile.locked(path):
        entries = load(path)
        entries[entry_key] = entry
        dbfile.write_json(path, {"version": 1, "entries": entries})
    return path


def winner(entries: dict, gpu: str, dtype: str, out: str, grouping: str, layout: str,
           groups: int, rows: int, n: int, k: int) -> tuple[dict, str] | None:
    """(the winner's config as a dict, its distribution) tuned for this problem, from the
    first settled entry: the uniform distribution's, else any other's. None when nothing was
    tuned for it, or when that entry says the dispatch's own choice stands
    (``default_stands``: no candidate beat it by the tuner's margin)."""
    for dist in ["uniform"] + sorted({e.get("dist", "") for e in entries.values()}):
        e = entries.get(key(gpu, dtype, out, grouping, layout, groups, rows, n, k, dist))
        if e and e.get("default_stands"):
            return None
        if e and e.get("winner") in e["candidates"]:
            return e["candidates"][e["winner"]]["config"], dist
    return None
