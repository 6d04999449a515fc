"""Tuned tables shipped with gemmgen: per GPU, the winners of ``gemmgen tune`` over buckets of M
for the (N, K) of common layers, in the layouts of a training step (forward ``rcr``, dgrad
``rrr``, wgrad ``crr``), kept only where the winner beat the shape rules' own choice in the
same run. Each file (``gemmgen/heuristics/tables/<GPU>.json``) is a tuning database with a
``provenance`` object: GPU, CUDA, commit, date and how it was made.

``choose`` consults a user's tuning database first, then this table, then the shape rules.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from .tunedb import TuneDB, TuneDBError

TABLES = Path(__file__).with_name("tables")
MAX_DISTANCE = 1.0
"""How far (sum of |log2| ratios over M, N and K) a shipped entry may be from the problem and
still be used: one factor of 2 in one extent. Farther problems go to the shape rules."""


def table_path(gpu: str) -> Path:
    """Where the table of ``gpu`` ("NVIDIA H200") lives: tables/NVIDIA_H200.json."""
    return TABLES / (re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_") + ".json")


@lru_cache(maxsize=8)
def shipped(gpu: str) -> TuneDB | None:
    """The shipped table of ``gpu`` (None when gemmgen has none for it, or it cannot be read)."""
    path = table_path(gpu)
    if not path.is_file():
        return None
    try:
        return TuneDB(path)
    except TuneDBError:
        return None


def provenance(gpu: str) -> dict | None:
    """The provenance of ``gpu``'s shipped table: GPU, CUDA, commit, date, method."""
    db = shipped(gpu)
    return None if db is None else db.data.get("provenance")
