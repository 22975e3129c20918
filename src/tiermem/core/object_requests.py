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

from ..base.records import StoredResult
from . import object_rows
from .bucket import Bucket
from .object_layout import REQUESTS, dumps, loads, old_request_path, request_path
from .rows import result_from_row, result_row

OLD_REQUESTS_SECONDS = 60.0


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
        return result_from_row(loads(stored.data, "idempotency record")) if stored is not None else None

    def put(self, result: StoredResult) -> None:
        self.bucket.create(request_path(result.key), dumps(result_row(result)))

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
