"""Tuning database: per GPU, dtype, layout and shape, every measured candidate and the winner."""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path

import platformdirs

from ..files import read_document
from ..model.families import config_from_dict
from . import dbfile

FINAL = ("ok", "compile_error", "spill", "launch_error", "wrong", "timeout", "unfit")
"""Statuses that count as measured: a resumed or extended run does not try these again.
``spill``: compiled, but ptxas reported spill traffic or a stack frame (local memory), so
the candidate is recorded with the reason and never timed."""


class TuneDBError(ValueError):
    """The tuning database file is not one gemmgen can read (not JSON, or not its layout);
    the message names the file and what to do."""


class TuneDBWarning(UserWarning):
    """An entry of a tuning database was left out (malformed); the message names the file,
    the entry and what is wrong with it."""


def default_path() -> Path:
    """$GEMMGEN_TUNE_DB, else ``tune.json`` in the user cache directory for "gemmgen" that
    platformdirs gives (``~/.cache/gemmgen`` on Linux, honouring $XDG_CACHE_HOME)."""
    if os.environ.get("GEMMGEN_TUNE_DB"):
        return Path(os.environ["GEMMGEN_TUNE_DB"])
    return platformdirs.user_cache_path("gemmgen") / "tune.json"


def read(path: Path) -> dict:
    """The document at ``path`` as stored, every entry in it, checked as a whole only:
    {"version": 1, "entries": {key: entry}}. Raises ``TuneDBError`` naming the file when it
    is a directory, unreadable, not JSON, or has no "entries" object."""
    fix = "fix it, delete it, or pass another --db"
    data = read_document(path, TuneDBError, "tuning database", fix)
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise TuneDBError(f"{path} is not a gemmgen tuning database (no \"entries\" object): "
                          f"{fix}")
    return data


def load(path: Path) -> dict:
    """The database document at ``path`` (``read``) with only the entries that ``problem``
    finds sound; each other entry is left out with one ``TuneDBWarning`` naming the file, the
    entry and what is wrong (once per process), so one bad entry never breaks the lookup of
    another shape. Raises ``TuneDBError`` as ``read`` does."""
    data = read(path)
    good = {}
    for k, e in data["entries"].items():
        why = problem(k, e)
        if why is None:
            good[k] = e
        elif (str(path), k, why) not in _WARNED:
            _WARNED.add((str(path), k, why))
            warnings.warn(f"tuning database {path}: entry {k!r} skipped: {why} (fix or delete "
                          f"it)", TuneDBWarning, stacklevel=3)
    return {**data, "entries": good}


_WARNED: set = set()
_EXTENT = re.compile(r"[1-9][0-9]*")


def problem(k, e, configs: bool = True) -> str | None:
    """What makes entry ``e`` under key ``k`` unusable, or None when it is sound: the key is
    ``gpu|dtype|layout|MxNxK[|family]`` with positive decimal extents, the entry an object
    whose ``candidates`` object holds an object per candidate, every candidate of status
    ``ok`` has a number of ``tflops``, and a ``winner`` is None or the name of an ok
    candidate whose ``swap`` is true or false and (``configs``) whose ``config`` is valid."""
    parts = k.split("|") if isinstance(k, str) else []
    if len(parts) not in (4, 5) or not all(parts[:3]):
        return "the key is not gpu|dtype|layout|MxNxK[|family]"
    extents = parts[3].split("x")
    if len(extents) != 3 or not all(_EXTENT.fullmatch(x) for x in extents):
        return f"the shape {parts[3]!r} is not three positive integers MxNxK"
    cands = e.get("candidates") if isinstance(e, dict) else None
    if not isinstance(cands, dict):
        return "it has no candidates object"
    for name, row in cands.items():
        if not isinstance(row, dict):
            return f"candidate {name!r} is not an object"
        if row.get("status") == "ok" and not _number(row.get("tflops")):
            return f"candidate {name!r} is ok without a number of tflops"
    if not isinstance(e.get("family"), (str, type(None))):
        return "its family is not a name"
    win = e.get("winner")
    if win is None:
        return None
    if not isinstance(win, str) or win not in cands or cands[win].get("status") != "ok":
        return f"the winner {win!r} is not an ok candidate of it"
    if not isinstance(cands[win].get("swap", False), bool):
        return "the winner's swap is not true or false"
    if configs:
        try:
            config_from_dict(cands[win].get("config"))
        except (ValueError, TypeError, KeyError) as exc:
            return f"the winner's config is invalid: {str(exc).splitlines()[0]}"
    return None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


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


MARGIN = 1.03
"""A measured candidate replaces an entry's default only when its TFLOP/s are at least this
multiple of the default's in the same run (a config timed twice in one run differs by up to
3%)."""


def settle(entry: dict, margin: float = MARGIN) -> str | None:
    """Choose ``entry``'s winner: the one rule for every place that sets it (recording,
    merging on save, the tuner). With a default (the candidate named by ``entry["default"]``,
    what gemm runs without the database): the fastest verified candidate where it is at least
    ``margin`` times as fast as the default, else None with ``default_stands`` true; records
    ``default_tflops``, ``default_time_ms`` and ``margin``. Without a ``default`` field, or
    where the default was not measured ok: the fastest verified candidate. Ties go to the larger name.
    A ``head_to_head`` record (the tuner's rematch of that candidate and the default, timed in
    turn: ``tune.search``) that names this candidate and default and shows it less than
    ``margin`` times as fast overrules the single timings: the default stands. Returns the
    winner."""
    ok = {name: r for name, r in entry["candidates"].items()
          if r.get("status") == "ok" and r.get("tflops")}
    best = max(ok, key=lambda name: (ok[name]["tflops"], name)) if ok else None
    if "default" not in entry:  # an entry of a tuner that had no default (older, FP8)
        entry["winner"] = best
        return best
    base = ok.get(entry["default"] or "")
    entry["margin"] = margin
    entry["default_tflops"] = base["tflops"] if base else None
    entry["default_time_ms"] = base.get("time_ms") if base else None
    if base is None:
        entry["winner"], entry["default_stands"] = best, False
    elif (best != entry["default"] and ok[best]["tflops"] >= margin * base["tflops"]
          and not _lost_head_to_head(entry, best, margin)):
        entry["winner"], entry["default_stands"] = best, False
    else:
        entry["winner"], entry["default_stands"] = None, True
    return entry["winner"]


def _lost_head_to_head(entry: dict, best: str, margin: float) -> bool:
    """Whether ``entry``'s ``head_to_head`` ({"default", "winner", "default_ms", "winner_ms",
    ...}) is about ``best`` against the entry's default and found ``best`` less than ``margin``
    times as fast; False where there is none or it is about other candidates."""
    h2h = entry.get("head_to_head")
    if not isinstance(h2h, dict) or (h2h.get("winner"), h2h.get("default")) != (
            best, entry.get("default")):
        return False
    ours, theirs = h2h.get("winner_ms"), h2h.get("default_ms")
    if not (_number(ours) and _number(theirs)) or ours <= 0:
        return True  # a rematch without figures confirms nothing
    return theirs < margin * ours


MAX_RATIO = 2.0
"""Nearest-shape limit: a tuned shape serves a problem only when each of M, N and K is within
this factor of the tuned one's (compared as (x + 1) / (y + 1)); farther problems get no tuned
winner and go to the shipped table or the shape rules."""


class TuneDB:
    """A JSON file of tuning entries. Each entry (one key) holds ``candidates`` (config name ->
    row: config, status, reason, tflops, time_ms, rel_error, registers, model), ``winner`` (a
    config name or None) and ``cublas_tflops``. Every change is written at once, atomically
    and under a lock file beside the database (``<file>.lock``), merged into what is on disk
    then: processes tuning into one file keep each other's results."""

    def __init__(self, path: str | os.PathLike | None = None):
        """Open the database at ``path`` (default ``default_path()``); a missing file is an
        empty database, created on the first ``save``. Malformed entries are left out with one
        ``TuneDBWarning`` each (``load``). Raises ``TuneDBError`` when the file is a directory,
        unreadable, not JSON, or not a gemmgen tuning database."""
        self.path = Path(path) if path else default_path()
        self.data = {"version": 1, "entries": {}}
        if self.path.exists():
            self.data = load(self.path)
        self._synced = self._snapshot()
        self._removed: set[str] = set()

    @property
    def entries(self) -> dict:
        return self.data["entries"]

    def entry(self, k: str, **fields) -> dict:
        """The entry for key ``k``, created with ``fields`` when missing."""
        if k not in self.entries:
            self.entries[k] = {"candidates": {}, "winner": None, **fields}
        return self.entries[k]

    def remove(self, k: str) -> None:
        """Drop entry ``k``; the next ``save`` drops it from the file too."""
        self.entries.pop(k, None)
        self._removed.add(k)

    def measured(self, k: str) -> set[str]:
        """Names of the candidates of ``k`` that already have a final status."""
        cands = self.entries.get(k, {}).get("candidates", {})
        return {name for name, row in cands.items() if row.get("status") in FINAL}

    def record(self, k: str, name: str, row: dict) -> None:
        """Add (or replace) candidate ``name`` of entry ``k``, choose the winner and ``save``
        (raising what ``save`` raises)."""
        self.entry(k)["candidates"][name] = row
        self.choose_winner(k)
        self.save()

    def choose_winner(self, k: str) -> str | None:
        """Settle entry ``k``'s winner by ``settle`` (the tuner's margin over its default, where
        the entry names one); returns it."""
        return settle(self.entries[k])

    def save(self) -> None:
        """Write what this process changed since it opened or last saved the database into the
        file as it is now, under its lock: entries changed here replace or merge with those on
        disk (candidates added on either side are kept; one removed here stays removed; where
        the other side added candidates, the winner is chosen again), entries ``remove``d here
        go, and entries changed elsewhere stay, malformed ones included. The file keeps its
        mode, and a symlink stays a link to the file written. Raises ``TuneDBError`` when
        the file became unreadable, ``OSError`` when it cannot be written, and
        ``dbfile.LockTimeout`` (an ``OSError``) when another process holds the lock for
        ``dbfile.LOCK_TIMEOUT_S``."""
        with dbfile.locked(self.path):
            real = dbfile.target(self.path)
            disk = read(real) if real.exists() else {"version": 1, "entries": {}}
            dbfile.write_json(real, self._merged(disk))
        self._synced = self._snapshot()
        self._removed.clear()

    def _snapshot(self) -> dict:
        """Each entry and each other top-level field as JSON text: what the file held."""
        snap = {("entry", k): _dump(e) for k, e in self.entries.items()}
        snap.update({("field", f): _dump(v) for f, v in self.data.items() if f != "entries"})
        return snap

    def _merged(self, disk: dict) -> dict:
        """``disk`` with this process's changes since the last sync merged in (the entries
        merged in place here too)."""
        doc, entries = dict(disk), dict(disk["entries"])
        for k in self._removed - set(self.entries):
            entries.pop(k, None)
        for f, v in self.data.items():
            if f != "entries" and _dump(v) != self._synced.get(("field", f)):
                doc[f] = v
        for k, ours in self.entries.items():
            base = self._synced.get(("entry", k))
            if base == _dump(ours):
                continue  # unchanged here: what is on disk stands
            theirs = entries.get(k)
            if (theirs is not None and _dump(theirs) != base
                    and problem(k, theirs, configs=False) is None):
                _merge_entry(ours, json.loads(base) if base else {"candidates": {}}, theirs)
            entries[k] = ours
        doc["entries"] = entries
        return doc

    def lookup(self, gpu: str, dtype: str, m: int, n: int, k: int, layout: str = "rrr",
               families=None) -> tuple[dict | None, str | None]:
        """(winner's row, "exact" | "nearest") for this GPU, dtype and layout: the entry for the
        shape if it has a winner, else the tuned shape nearest in sum |log2(ratio)| over M, N,
        K among those within MAX_RATIO of the problem in each of M, N and K; where several
        families were tuned at that shape, the fastest winner. ``families`` (names) limits the
        families considered. (None, None) when nothing within the limit was tuned."""
        found: dict[float, list] = {}
        limit = math.log2(MAX_RATIO) + 1e-9
        for key_, e in self.entries.items():
            g, d, lay, (em, en, ek), fam = parse_key(key_)
            fam = fam or e.get("family")
            if (g, d, lay) != (gpu, dtype, layout) or not e.get("winner"):
                continue
            if families is not None and fam not in families:
                continue
            logs = [abs(math.log2((a + 1) / (b + 1))) for a, b in ((m, em), (n, en), (k, ek))]
            if max(logs) > limit:
                continue
            found.setdefault(round(sum(logs), 9), []).append(e["candidates"][e["winner"]])
        if not found:
            return None, None
        dist = min(found)
        best = max(found[dist], key=lambda row: row.get("tflops") or 0.0)
        return best, "exact" if dist == 0 else "nearest"


def _dump(value) -> str:
    return json.dumps(value, sort_keys=True)


def _merge_entry(ours: dict, base: dict, theirs: dict) -> None:
    """Three-way merge of one entry into ``ours``: ``base`` is what this process last read or
    wrote, ``theirs`` what is on disk now. A candidate or field changed only there is taken
    from there, one changed here stays, one removed here stays removed; when candidates came
    from there, the winner is settled again (``settle``)."""
    mine, old = ours["candidates"], base.get("candidates", {})
    came = False
    for name, row in theirs["candidates"].items():
        if name in old and (name not in mine or mine[name] != old[name]):
            continue  # removed or changed here
        if name not in old and name in mine:
            continue  # added on both sides: this process's row stands
        if row != mine.get(name):
            mine[name], came = row, True
    for f, v in theirs.items():
        if f not in ("candidates", "winner") and ours.get(f) == base.get(f):
            ours[f] = v
    if came:
        settle(ours)
    elif ours.get("winner") == base.get("winner") and theirs.get("winner") in mine:
        ours["winner"] = theirs["winner"]
