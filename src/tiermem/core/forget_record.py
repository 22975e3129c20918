"""The forget record in each core backend: the keys of what ``tiermem forget`` removed, so that restoring a backup
made before the forget leaves it out (``domain/forget_record.py`` makes the keys: digests of a row's kind, id and
time made, never its text).

- SQLite: the table ``forgotten`` (``key`` primary key, ``forgot_us``) in ``core.sqlite3``, made by the first forget
  that records anything. The core's schema version is not raised for it: an older tiermem opens the file as before
  (and ignores the record).
- Object storage: one object per forget, ``core/forgotten/<uuid>.json`` = ``{"keys": [...], "forgot_us": ...}``
  (created once, never replaced but to take keys out: a restore with ``--include-forgotten``). Never merged: every
  restore reads them all (one LIST, one GET each, twice: before it writes and after, for a forget run meanwhile), so
  the cost of a restore grows with the number of forgets.

A key is a 64-character digest, or (a forget's edit of a system prompt) a digest, ``@`` and the forget's time.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection

from ..base.errors import StoreError
from ..base.records import new_id, now, to_us
from .bucket import Bucket
from .object_layout import ROOT

TABLE = "forgotten"
_DDL = f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, forgot_us INTEGER NOT NULL)"
PREFIX = f"{ROOT}/forgotten/"


# -- SQLite (called inside the core's transactions) -------------------------------------------------------------


def sqlite_record(conn: sqlite3.Connection, keys: Collection[str]) -> int:
    """Add ``keys`` (those already there stay as they are); returns how many were new."""
    conn.execute(_DDL)
    before, at = conn.total_changes, to_us(now())
    conn.executemany(f"INSERT OR IGNORE INTO {TABLE} (key, forgot_us) VALUES (?, ?)", [(k, at) for k in keys])
    return conn.total_changes - before


def sqlite_keys(conn: sqlite3.Connection) -> set[str]:
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone():
        return set()  # nothing was ever recorded
    return {str(r[0]) for r in conn.execute(f"SELECT key FROM {TABLE}")}


def sqlite_remove(conn: sqlite3.Connection, keys: Collection[str]) -> int:
    conn.execute(_DDL)
    before = conn.total_changes
    conn.executemany(f"DELETE FROM {TABLE} WHERE key = ?", [(k,) for k in keys])
    return conn.total_changes - before


# -- object storage ---------------------------------------------------------------------------------------------


def object_record(bucket: Bucket, keys: Collection[str]) -> int:
    """One new object holding ``keys``; returns how many."""
    if not keys:
        return 0
    data = json.dumps({"keys": sorted(set(keys)), "forgot_us": to_us(now())}).encode()
    bucket.create(f"{PREFIX}{new_id('forget')}.json", data)
    return len(set(keys))


def object_keys(bucket: Bucket) -> set[str]:
    found: set[str] = set()
    for item in bucket.list(PREFIX):
        stored = bucket.get(item.path)
        if stored is not None:
            found.update(_keys(item.path, stored.data))
    return found


def object_remove(bucket: Bucket, keys: Collection[str], tries: int = 5) -> int:
    """Take ``keys`` out of every object holding any (an object left with none is deleted): each rewritten only if
    unchanged since read (``If-Match``), read again otherwise."""
    gone, removed = set(keys), 0
    for item in bucket.list(PREFIX):
        for _ in range(tries):
            stored = bucket.get(item.path)
            if stored is None:
                break
            held = _keys(item.path, stored.data)
            kept = [k for k in held if k not in gone]
            if len(kept) == len(held):
                break
            if not kept:
                bucket.delete(item.path)
            elif (
                bucket.replace(item.path, json.dumps({**json.loads(stored.data), "keys": kept}).encode(), stored.etag)
                is None
            ):
                continue  # changed meanwhile: read again
            removed += len(held) - len(kept)
            break
        else:
            raise StoreError(f"The forget record {item.path} kept changing; run the import again.")
    return removed


def _keys(path: str, data: bytes) -> list[str]:
    try:
        value = json.loads(data)
        keys = value["keys"]
        if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
            return keys
    except (ValueError, KeyError, TypeError):
        pass
    raise StoreError(
        f'The forget record {path} is damaged (not {{"keys": [...]}}); delete it, then forget again what it named.'
    )
