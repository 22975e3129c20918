"""The forget record in each core backend: the keys of what ``tiermem forget`` removed, so that restoring a backup
made before the forget leaves it out (``domain/forget_record.py`` makes the keys: digests of a row's kind, id and
time made, never its text).

- SQLite: the table ``forgotten`` (``key`` primary key, ``forgot_us``) in ``core.sqlite3``, made by the first forget
  that records anything. The core's schema version is not raised for it: an older tiermem opens the file as before
  (and ignores the record).
- Object storage: one object per forget, ``core/forgotten/<uuid>.json`` = ``{"keys": [...], "forgot_us": ...}``
  (created once, never replaced but to take keys out: a restore with ``--include-forgotten``). A forget that leaves
  ``MERGE_AT`` objects or more merges them into one, under the lease ``FORGOTTEN_LEASE`` (skipped when another holds
  it; a merge that fails is said on stderr, never the forget's failure: the next forget merges): the merged object is
  created first, then the ones it holds are deleted, so the union of the objects listed always holds every key,
  whatever runs meanwhile (two merges at once each write what they read). A reader (``object_keys``: a restore, twice)
  lists and reads them; an object gone between the listing and its read (merged meanwhile) sends it to list again, for
  the merged object. So a restore reads 1 LIST and at most ``MERGE_AT - 1`` GETs, whatever the number of forgets (more
  only after merges skipped or failed, until the next forget merges). Taking keys out (``object_remove``) holds the
  same lease (waiting for it), so a merge never writes back keys taken out meanwhile: a merge whose lease ran out
  (renewals that did not get through) checks, once its merged object is written, that the lease still names it; if
  not, or if the lease cannot be read (keys may have been taken out since it read them), it deletes its merged object,
  not the ones it read. A
  remover that takes the lease after that check lists the merged object and takes the keys out of it too; a remover
  whose own lease ran out takes it again and takes the keys out again from a new listing.

A key is a 64-character digest, or (a forget's edit of a system prompt) a digest, ``@`` and the forget's time.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Collection

from ..base.errors import StoreError
from ..base.records import new_id, now, to_us
from .bucket import Bucket, Listed
from .lease import Lease
from .object_layout import ROOT

log = logging.getLogger(__name__)

TABLE = "forgotten"
_DDL = f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, forgot_us INTEGER NOT NULL)"
PREFIX = f"{ROOT}/forgotten/"
MERGE_AT = 8  # objects of the record a forget leaves before it merges them into one
FORGOTTEN_LEASE = f"{ROOT}/leases/forgotten.json"  # held while the record's objects are merged or keys taken out
FORGOTTEN_SECONDS = 30.0  # longer than reading, writing and deleting a few objects takes
_READS = 5  # listings a reader makes when objects keep going (merged) between its listing and its reads


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
    """One new object holding ``keys``, then the record's objects merged into one if there are ``MERGE_AT`` or
    more; returns how many keys."""
    if not keys:
        return 0
    data = json.dumps({"keys": sorted(set(keys)), "forgot_us": to_us(now())}).encode()
    bucket.create(f"{PREFIX}{new_id('forget')}.json", data)
    try:  # upkeep, never the forget's failure (refused, it would leave its keys naming rows still here)
        if len(bucket.list(PREFIX)) >= MERGE_AT:
            lease = Lease(bucket, FORGOTTEN_LEASE, FORGOTTEN_SECONDS)
            with lease.held() as mine:
                if mine:  # else another merges or takes keys out: the next forget merges
                    merge(bucket, lease)
    except StoreError as exc:  # what was merged is whole at every step (merged object first): the next forget merges
        log.warning("could not merge the forget record's objects (the next forget tries again): %s", exc)
    return len(set(keys))


def merge(bucket: Bucket, lease: Lease | None = None) -> int:
    """Merge every object of the record into one new object: created first, then the objects it holds deleted (so
    no key is ever absent from the record's listing). Returns how many objects were merged in. Called under
    ``FORGOTTEN_LEASE`` (``lease``); two merges at once (a lease run out) still lose nothing: each writes what it
    read. A merge that no longer holds ``lease`` once its object is written deletes that object instead (keys may
    have been taken out since it read them: ``object_remove``), and returns 0."""
    read: list[str] = []
    found: set[str] = set()
    forgot = 0
    for item in bucket.list(PREFIX):
        stored = bucket.get(item.path)
        if stored is None:
            continue  # merged or emptied meanwhile: its keys are in another object
        found.update(_keys(item.path, stored.data))
        forgot = max(forgot, _forgot_us(stored.data))
        read.append(item.path)
    if len(read) < 2:
        return 0
    data = json.dumps({"keys": sorted(found), "forgot_us": forgot, "merged": len(read)}).encode()
    merged = f"{PREFIX}{new_id('forget')}.json"
    bucket.create(merged, data)
    if lease is not None and not _still_held(bucket, lease, merged):  # taken over: keys may be taken out since
        bucket.delete(merged)
        log.warning("the forget record's merge lost its lease while it ran; left to the next forget")
        return 0
    for path in read:
        bucket.delete(path)
    return len(read)


def _still_held(bucket: Bucket, lease: Lease, merged: str) -> bool:
    """Whether ``lease`` still names this merge; when the lease cannot be read (the store that did not answer its
    renewals may not answer this either), ``merged`` is deleted before the error is raised: not known to be held,
    it may hold keys taken out since they were read."""
    try:
        return lease.still_held()
    except StoreError:
        bucket.delete(merged)
        raise


def object_keys(bucket: Bucket) -> set[str]:
    """Every key of the record: the union of its objects. An object gone between the listing and its read was
    merged (the merged object written before it went) or emptied: the record is listed again for what is new."""
    found: set[str] = set()
    done: set[str] = set()
    for _ in range(_READS):
        listed = [item for item in bucket.list(PREFIX) if item.path not in done]
        vanished = False
        for item in listed:
            stored = bucket.get(item.path)
            done.add(item.path)
            if stored is None:
                vanished = True
            else:
                found.update(_keys(item.path, stored.data))
        if not vanished:
            return found
    raise StoreError(
        f"The forget record ({bucket.uri}/{PREFIX}) kept changing while it was read (merged by other processes); "
        "nothing was written. Run the import again."
    )


def object_remove(bucket: Bucket, keys: Collection[str], tries: int = 5) -> int:
    """Take ``keys`` out of every object holding any (an object left with none is deleted): each rewritten only if
    unchanged since read (``If-Match``), read again otherwise; under ``FORGOTTEN_LEASE`` (no merge meanwhile). When
    the lease ran out meanwhile (a merge may have taken it and written back a key read before it went), taken again
    and done again from a new listing. Returns how many keys were taken out of objects."""
    lease, removed = Lease(bucket, FORGOTTEN_LEASE, FORGOTTEN_SECONDS), 0
    for _ in range(tries):
        with lease.waiting(FORGOTTEN_SECONDS * 1.5, doing="merging the forget record's objects"):
            removed += _remove(bucket, set(keys), bucket.list(PREFIX), tries)
            if lease.still_held():
                return removed
        log.warning("the lease %s ran out while keys were taken out of the forget record: again", FORGOTTEN_LEASE)
    raise StoreError(
        f"The lease of the forget record ({bucket.uri}/{FORGOTTEN_LEASE}) kept running out while keys were taken out "
        "of it (the store did not answer its renewals); run the import again."
    )


def _remove(bucket: Bucket, gone: set[str], listed: list[Listed], tries: int) -> int:
    removed = 0
    for item in listed:
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


def _forgot_us(data: bytes) -> int:
    value = json.loads(data)
    at = value.get("forgot_us") if isinstance(value, dict) else None
    return at if isinstance(at, int) and not isinstance(at, bool) else 0


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
