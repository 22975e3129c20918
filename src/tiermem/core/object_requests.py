"""``Requests``: the idempotency records of core state on object storage, one object each under its agent's
folder (``requests/<agent id>/<sha256 of key>.json``), and those a tiermem before that layout kept at the top of
``requests/`` (``old_request_path``).

A miss also looks at the old place, but only while records are there, as seen by one listing at most every
``OLD_REQUESTS_SECONDS``: opening a store moves them under their agents and starts with "none", so a miss costs
one GET. A replica of the older version still running beside upgraded ones (a rolling upgrade) writes its
records at the old place; they are found at most that long after its first one.
"""

from __future__ import annotations

import math
import time

from ..base.errors import StoreBusyError
from ..base.records import StoredResult
from . import object_rows
from .bucket import Bucket, Stored
from .object_layout import REQUESTS, dumps, loads, old_request_path, request_path
from .rows import result_from_row, result_row

OLD_REQUESTS_SECONDS = 60.0
_TRIES = 5  # looks at a record a claim raced with before it is busy


class Requests:
    """The idempotency records under ``bucket``; ``old_requests_seconds``: how long a look at the old place holds."""

    def __init__(self, bucket: Bucket, old_requests_seconds: float = OLD_REQUESTS_SECONDS) -> None:
        self.bucket = bucket
        self.old_requests_seconds = old_requests_seconds
        self._old = (False, -math.inf)  # (any records at the top of requests/, when looked): not looked yet

    def get(self, key: str) -> StoredResult | None:
        """The record under the agent's folder; on a miss, where an older tiermem put it while any are there."""
        stored = self.bucket.get(request_path(key))
        if stored is None and self._old_kept():
            stored = self.bucket.get(old_request_path(key))
        return _record(stored)

    def claim(self, claim: StoredResult, replacing: StoredResult | None = None) -> StoredResult | None:
        """Create ``claim`` if no record is stored (``If-None-Match``), or replace ``replacing`` if it is still the
        record (``If-Match`` its ETag): None; else the record stored. A record that changed between the look and the
        PUT is looked at again (a few times: then it is busy)."""
        path, data = request_path(claim.key), dumps(result_row(claim))
        for _ in range(_TRIES):
            stored = self.bucket.get(path)
            if stored is None:
                old = self.bucket.get(old_request_path(claim.key)) if self._old_kept() else None
                if old is not None:  # a record an older tiermem kept at the old place stands
                    return _parsed(old)
                if self.bucket.create(path, data) is not None:
                    return None
                continue
            record = _parsed(stored)
            if replacing is None or record.result != replacing.result:
                return record
            if self.bucket.replace(path, data, stored.etag) is not None:
                return None
        raise StoreBusyError(
            f"The idempotency record {path} kept changing while it was claimed; nothing was written. Try again."
        )

    def put(self, result: StoredResult, claim: StoredResult | None = None) -> None:
        """``result`` in place of ``claim`` while that is the record (``If-Match``), or where there is none."""
        path, data = request_path(result.key), dumps(result_row(result))
        if claim is not None:
            stored = self.bucket.get(path)
            if stored is not None and _parsed(stored).result == claim.result:
                self.bucket.replace(path, data, stored.etag)  # None: taken over meanwhile; that record stands
                return
        self.bucket.create(path, data)

    def drop(self, claim: StoredResult) -> None:
        """Delete ``claim`` while it is the record. (A look, then a delete: a claim taken over in between, which needs
        it to be older than a stale claim's age, would be deleted too; its taker then finishes where there is none.)"""
        path = request_path(claim.key)
        record = _record(self.bucket.get(path))
        if record is not None and record.result == claim.result:
            self.bucket.delete(path)

    def move_old(self) -> int:
        """Move the records of the old layout under their agents (``object_rows.move_old_requests``)."""
        moved = object_rows.move_old_requests(self.bucket)
        self.none_old()
        return moved

    def none_old(self) -> None:
        """Record that the top of ``requests/`` holds no record now (moved, or a new store)."""
        self._old = (False, time.monotonic())

    def _old_kept(self) -> bool:
        seen, at = self._old
        if time.monotonic() - at < self.old_requests_seconds:
            return seen
        seen = bool(self.bucket.list_here(REQUESTS))
        self._old = (seen, time.monotonic())
        return seen


def _parsed(stored: Stored) -> StoredResult:
    return result_from_row(loads(stored.data, "idempotency record"))


def _record(stored: Stored | None) -> StoredResult | None:
    return _parsed(stored) if stored is not None else None
