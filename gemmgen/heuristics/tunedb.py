"""Tuning database: per GPU, dtype, layout and shape, every measured candidate and the winner."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import platformdirs

FINAL = ("ok", "compile_error", "spill", "launch_error", "wrong", "timeout", "unfit")
"""Statuses that count as measured: a resumed or extended run does not try these again.
``spill``: compiled, but ptxas reported spill traffic or a stack frame (local memory), so
the candidate is recorded with the reason and never timed."""


class TuneDBError(ValueError):
    """The tuning database file is not one gemmgen can read (not JSON, or not its layout);
    the message names the file and what to do."""


def default_path() -> Path:
    """$GEMMGEN_TUNE_DB, else ``tune.json`` in the user cache directory for "gemmgen" that
    platformdirs gives (``~/.cache/gemmgen`` on Linux, honouring $XDG_CACHE_HOME)."""
    if os.environ.get("GEMMGEN_TUNE_DB"):
        return Path(os.environ["GEMMGEN_TUNE_DB"])
    return platformdirs.user_cache_path("gemmgen") / "tune.json"


def load(path: Path) -> dict:
    """The database document at ``path``, checked: {"version": 1, "entries": {key: entry}}
    with every key ``gpu|dtype|layout|MxNxK`` and every entry holding a ``candidates``
    object. Raises ``TuneDBError`` naming the file otherwise."""
    fix = "fix it, delete it, or pass another --db"
    try:
        data = json.loads(path.read_text())
    except IsADirectoryError:
        raise TuneDBError(f"tuning database {path} is a directory; pass a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TuneDBError(f"cannot read tuning database {path}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    except json.JSONDecodeError as exc:
        raise TuneDBError(f"tuning database {path} is not valid JSON ({exc.msg}, line "
                          f"{exc.lineno}): {fix}") from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise TuneDBError(f"{path} is not a gemmgen tuning database (no \"entries\" object): "
                          f"{fix}")
    for k, e in entries.items():
        parts = k.split("|")
        shape = parts[3].split("x") if len(parts) in (4, 5) else []
        if (len(shape) != 3 or not all(s.isdigit() for s in shape) or not isinstance(e, dict)
                or not isinstance(e.get("candidates"), dict)):
            raise TuneDBError(f"{path}: entry {k!r} is not gpu|dtype|layout|MxNxK[|family] "
                              f"with a candidates object: {fix}")
    return data


def key(gpu: str, dtype: str, m: int, n: int, k: int, layout: str = "rrr",
        family: str | None = None) -> str:
    """``<gpu>|<dtype>|<layout>|<M>x<N>x<K>|<family>``; layout ``rrr`` = A, B, C row-major.
    Each family keeps its own entry (and winner) per shape; without ``family``, the 4-part key
    of databases written before families had entries of their own."""
    base = f"{gpu}|{dtype}|{layout}|{m}x{n}x{k}"
    return f"{base}|{family}" if family else base


def parse_key(k: str) -> tuple[str, str, str, tuple[int, int, int], str | None]:
    """(gpu, dtype, layout, (M, N, K), family or None) of a database key."""
    parts = k.split("|")
    shape = tuple(int(x) for x in parts[3].split("x"))
    return parts[0], parts[1], parts[2], shape, parts[4] if len(parts) > 4 else None


class TuneDB:
    """A JSON file of tuning entries. Each entry (one key) holds ``candidates`` (config name ->
    row: config, status, reason, tflops, time_ms, rel_error, registers, model), ``winner`` (a
    config name or None) and ``cublas_tflops``. Every change is written atomically at once, so
    an interrupted run loses at most the candidate in flight."""

    def __init__(self, path: str | os.PathLike | None = None):
        """Open the database at ``path`` (default ``default_path()``); a missing file is an
        empty database, created on the first ``save``. Raises ``TuneDBError`` when the file
        is a directory, unreadable, not JSON, or not a gemmgen tuning database."""
        self.path = Path(path) if path else default_path()
        self.data = {"version": 1, "entries": {}}
        if self.path.exists():
            self.data = load(self.path)

    @property
    def entries(self) -> dict:
        return self.data["entries"]

    def entry(self, k: str, **fields) -> dict:
        """The entry for key ``k``, created with ``fields`` when missing."""
        if k not in self.entries:
            self.entries[k] = {"candidates": {}, "winner": None, **fields}
        return self.entries[k]

    def measured(self, k: str) -> set[str]:
        """Names of the candidates of ``k`` that already have a final status."""
        cands = self.entries.get(k, {}).get("candidates", {})
        return {name for name, row in cands.items() if row.get("status") in FINAL}

    def record(self, k: str, name: str, row: dict) -> None:
        self.entry(k)["candidates"][name] = row
        self.choose_winner(k)
        self.save()

    def choose_winner(self, k: str) -> str | None:
        """The fastest candidate whose status is ok (verified before timing); None if none."""
        cands = self.entries[k]["candidates"]
        ok = [(row["tflops"], name) for name, row in cands.items() if row.get("status") == "ok"]
        self.entries[k]["winner"] = max(ok)[1] if ok else None
        return self.entries[k]["winner"]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tune.", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def lookup(self, gpu: str, dtype: str, m: int, n: int, k: int, layout: str = "rrr",
               families=None) -> tuple[dict | None, str | None]:
        """(winner's row, "exact" | "nearest") for this GPU, dtype and layout: the entry for the
        shape if it has a winner, else the tuned shape nearest in sum |log2(ratio)| over M, N,
        K; where several families were tuned at that shape, the fastest winner. ``families``
        (names) limits the families considered. (None, None) when nothing was tuned."""
        found: dict[float, list] = {}
        for key_, e in self.entries.items():
            g, d, lay, (em, en, ek), fam = parse_key(key_)
            fam = fam or e.get("family")
            if (g, d, lay) != (gpu, dtype, layout) or not e.get("winner"):
                continue
            if families is not None and fam not in families:
                continue
            dist = sum(abs(math.log2((a + 1) / (b + 1))) for a, b in ((m, em), (n, en), (k, ek)))
            found.setdefault(round(dist, 9), []).append(e["candidates"][e["winner"]])
        if not found:
            return None, None
        dist = min(found)
        best = max(found[dist], key=lambda row: row.get("tflops") or 0.0)
        return best, "exact" if dist == 0 else "nearest"
