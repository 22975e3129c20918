"""``ObjectCache``: the objects of core state read through a cache of (ETag, parsed object), and changed only by
conditional PUTs on the ETag they were read with (``ObjectCore`` reads and changes through one).

Every read asks the store: a cached copy is re-validated with a conditional GET (a 304 costs no body and no
parse), so every replica sees every acknowledged write. A change is a read-modify-write that retries on 412.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..base.errors import StoreError
from .bucket import NOT_MODIFIED, Bucket

T = TypeVar("T")
CAS_ATTEMPTS = 100


class ObjectCache:
    """Cached, re-validated reads and conditional read-modify-writes of the objects under ``bucket``."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self._cache: dict[str, tuple[str, Any]] = {}  # path -> (ETag, parsed object)
        self._lock = threading.Lock()

    def read(self, path: str, parse: Callable[[bytes], T]) -> tuple[T, str] | None:
        """The object at ``path`` parsed, and its ETag; a cached copy is re-validated (one conditional GET)."""
        with self._lock:
            cached = self._cache.get(path)
        stored = self.bucket.get(path, cached[0] if cached else None)
        return self.settle(path, stored, cached, parse)

    def read_many(self, paths: Sequence[str], parse: Callable[[bytes], T]) -> dict[str, tuple[T, str]]:
        with self._lock:
            cached = {p: self._cache[p] for p in paths if p in self._cache}
        got = self.bucket.get_many(list(dict.fromkeys(paths)), {p: c[0] for p, c in cached.items()})
        out = {}
        for path, stored in got.items():
            found = self.settle(path, stored, cached.get(path), parse)
            if found is not None:
                out[path] = found
        return out

    def settle(
        self, path: str, stored: Any, cached: tuple[str, Any] | None, parse: Callable[[bytes], T]
    ) -> tuple[T, str] | None:
        if stored is None:
            self.forget(path)
            return None
        if stored is NOT_MODIFIED and cached is not None:
            return cached[1], cached[0]
        value = parse(stored.data)  # outside the lock: a head may fetch its base
        self.remember(path, stored.etag, value)
        return value, stored.etag

    def cached(self, path: str) -> tuple[str, Any] | None:
        """The (ETag, parsed object) kept for ``path``, unchecked (None if none)."""
        with self._lock:
            return self._cache.get(path)

    def remember(self, path: str, etag: str, value: object) -> None:
        with self._lock:
            self._cache[path] = (etag, value)

    def forget(self, path: str) -> None:
        with self._lock:
            self._cache.pop(path, None)

    def forget_all(self) -> None:
        with self._lock:
            self._cache.clear()

    def update(
        self, path: str, parse: Callable[[bytes], T], change: Callable[[T | None], T | None], dump: Callable[[T], bytes]
    ) -> T | None:
        """Read-modify-write ``path`` with conditional PUTs until it sticks; ``change`` gets the current value (None
        if absent) and returns the new one (None: leave it). Returns what is stored afterwards."""
        for _ in range(CAS_ATTEMPTS):
            found = self.read(path, parse)
            current = found[0] if found else None
            new = change(current)
            if new is None or new == current:
                return current
            data = dump(new)
            etag = self.bucket.replace(path, data, found[1]) if found else self.bucket.create(path, data)
            if etag is not None:
                self.remember(path, etag, new)
                return new
            self.forget(path)
            time.sleep(0.002)
        raise StoreError(
            f"{path} is being changed by other writers and {CAS_ATTEMPTS} attempts failed; nothing "
            "more was written. Try again."
        )
