"""``Bucket``: one object-store prefix (S3 and S3-compatible stores, GCS, Azure Blob, or process memory), through
obstore, the Python binding of the Rust ``object_store`` crate LanceDB itself uses: the same URIs and the same
``storage_options`` keys.

Every call is one request (``requests`` counts them by kind). Conditional writes are the point: ``create`` fails
if the object exists (``If-None-Match: *``), ``replace`` if it changed since it was read (``If-Match: <etag>``),
so of two writers racing on one object exactly one wins, with no lock and no listing. Library errors become
``StoreError`` here and nowhere else.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.errors import ConfigError, StoreError, TiermemError
from ..base.object_deadlines import RETRY_KEYS, retries, with_deadlines
from ..base.object_errors import DOCS, UNKNOWN_OUTCOME, explain, outcome_unknown, short

if TYPE_CHECKING:
    from obstore.store import ObjectStore

T = TypeVar("T")
log = logging.getLogger(__name__)
SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "memory")
_CLIENT_KEYS = {
    "allow_http",
    "allow_invalid_certificates",
    "connect_timeout",
    "default_content_type",
    "http1_only",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle",
    "http2_only",
    "pool_idle_timeout",
    "pool_max_idle_per_host",
    "proxy_url",
    "proxy_ca_certificate",
    "proxy_excludes",
    "randomize_addresses",
    "read_timeout",
    "timeout",
    "user_agent",
}
# LanceDB's own keys, which the ``object_store`` client refuses by name: its retries (obstore takes them as
# ``retry_config``: ``object_deadlines.retries``), what only its reader uses, and its own namespaces (``lance_*``:
# its request-rate throttle, ``lance_aimd_*``, and the like; ``headers.*``: headers its client sends)
_LANCE_ONLY_KEYS = {*RETRY_KEYS, "download_retry_count", "expires_at_millis"}
_LANCE_ONLY_PREFIXES = ("lance_", "headers.")
_REFUSED_KEY = re.compile(r"Configuration key: '([^']+)' is not valid for store '([^']+)'")
_BOOL_KEYS = {"allow_http", "allow_invalid_certificates", "http1_only", "http2_only", "randomize_addresses"}


@dataclass(frozen=True)
class Stored:
    """An object's bytes and the ETag they were read with (the precondition of the next ``replace``)."""

    data: bytes
    etag: str


@dataclass(frozen=True)
class Listed:
    path: str
    etag: str
    size: int
    modified: datetime


NOT_MODIFIED = Stored(b"", "")  # ``get`` with ``unless``: the object still has that ETag


def lance_only(key: str) -> bool:
    """Whether ``key`` of ``storage_options`` is one only LanceDB reads (the core state's client leaves it out)."""
    key = key.lower()
    return key in _LANCE_ONLY_KEYS or key.startswith(_LANCE_ONLY_PREFIXES)


def supports(uri: str) -> bool:
    """True if ``uri`` is an object-store URI a ``Bucket`` can open."""
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


class Bucket:
    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Open the prefix ``uri`` (``s3://bucket/prefix`` etc.); ``storage_options`` as LanceDB takes them."""
        self.uri = uri.rstrip("/")
        self.requests: Counter[str] = Counter()
        self._pool: ThreadPoolExecutor | None = None
        try:
            import obstore
            from obstore import exceptions
            from obstore.store import from_url
        except ImportError as exc:
            raise StoreError(
                "Object storage needs the obstore package (pip install obstore); it installs with "
                f"tiermem: reinstall it. ({exc})"
            ) from exc
        self._ob, self._exc = obstore, exceptions
        try:
            if self.uri.startswith("memory://"):  # this Bucket's own, for as long as it lives
                self._store: ObjectStore = from_url("memory:///")
            else:
                options = with_deadlines(self.uri, storage_options) or {}
                config = {k: v for k, v in options.items() if k not in _CLIENT_KEYS and not lance_only(k)}
                client: dict[str, Any] = {
                    k: (str(v).lower() in ("1", "true", "yes") if k in _BOOL_KEYS else v)
                    for k, v in options.items()
                    if k in _CLIENT_KEYS
                }
                self._store = from_url(
                    self.uri,
                    config=config or None,  # type: ignore[arg-type]
                    client_options=client or None,  # type: ignore[arg-type]
                    retry_config=retries(options) or None,  # type: ignore[arg-type]
                )
        except TiermemError:
            raise  # a setting refused by name (``retries``)
        except BaseException as exc:  # noqa: BLE001  a bad option can panic inside the binding (pyo3 PanicException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            refused = _REFUSED_KEY.search(str(exc))
            if refused is not None:
                raise ConfigError(
                    f"storage_options.{refused[1]} is not a setting of the object store ({refused[2]}) nor of "
                    f"LanceDB: correct its name or remove it (the keys: {DOCS}). Nothing was opened."
                ) from exc
            raise StoreError(
                f"Cannot open the object store {uri!r}: {short(str(exc))}. Check the uri and storage_options "
                f"(endpoint, region, credentials): see {DOCS}."
            ) from exc

    # -- requests ------------------------------------------------------------------------------

    def _call(self, kind: str, path: str, fn: Callable[[], T]) -> T:
        self.requests[kind] += 1
        try:
            return fn()
        except (
            self._exc.NotFoundError,
            FileNotFoundError,
            self._exc.AlreadyExistsError,
            self._exc.PreconditionError,
            self._exc.NotModifiedError,
        ):
            raise  # answers, not failures: the callers below turn them into results
        except Exception as exc:  # the library's errors: network, permissions, a misbehaving store
            log.debug("%s of %s/%s failed: %s", kind, self.uri, path, exc)  # the whole dump, for the log only
            reason = explain(self.uri, str(exc))
            if reason is not None:
                outcome = UNKNOWN_OUTCOME if outcome_unknown(str(exc)) else "Nothing was written by this call."
                raise StoreError(f"The object store failed at {self.uri}/{path} ({kind}): {reason}. {outcome}") from exc
            raise StoreError(
                f"The object store failed at {self.uri}/{path} ({kind}): {short(str(exc))}. Nothing was written by "
                f"this call; check the store's endpoint and credentials ({DOCS}), then try again."
            ) from exc

    def get(self, path: str, unless: str | None = None) -> Stored | None:
        """The object at ``path``; None if there is none; ``NOT_MODIFIED`` if its ETag is still ``unless``."""

        def fetch() -> Stored:
            r = self._ob.get(self._store, path, options={"if_none_match": unless} if unless else None)
            return Stored(bytes(r.bytes()), str(r.meta["e_tag"]))

        try:
            return self._call("GET", path, fetch)
        except (self._exc.NotFoundError, FileNotFoundError):
            return None
        except self._exc.NotModifiedError:
            return NOT_MODIFIED

    def get_many(self, paths: Sequence[str], unless: Mapping[str, str]) -> dict[str, Stored | None]:
        """``get`` of several objects at once (in parallel)."""
        if len(paths) <= 1:
            return {p: self.get(p, unless.get(p)) for p in paths}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(8, thread_name_prefix="tiermem-bucket")
        return dict(zip(paths, self._pool.map(lambda p: self.get(p, unless.get(p)), paths), strict=True))

    def create(self, path: str, data: bytes) -> str | None:
        """Write ``path`` only if no object is there; its ETag, or None if one was."""
        try:
            return self._call("PUT", path, lambda: str(self._ob.put(self._store, path, data, mode="create")["e_tag"]))
        except self._exc.AlreadyExistsError:
            return None

    def replace(self, path: str, data: bytes, etag: str) -> str | None:
        """Overwrite ``path`` only if its ETag is still ``etag``; the new ETag, or None if it changed (or is gone)."""
        try:
            return self._call(
                "PUT", path, lambda: str(self._ob.put(self._store, path, data, mode={"e_tag": etag})["e_tag"])
            )
        except (self._exc.PreconditionError, self._exc.NotFoundError, FileNotFoundError):
            return None

    def put(self, path: str, data: bytes) -> str:
        """Write ``path`` whatever is there (objects only one writer owns)."""
        return self._call("PUT", path, lambda: str(self._ob.put(self._store, path, data)["e_tag"]))

    def delete(self, path: str) -> None:
        try:
            self._call("DELETE", path, lambda: self._ob.delete(self._store, path))
        except (self._exc.NotFoundError, FileNotFoundError):
            pass

    def list_here(self, prefix: str) -> list[Listed]:
        """The objects directly under the folder ``prefix`` (not in its sub-folders)."""

        def collect() -> list[Listed]:
            found = self._ob.list_with_delimiter(self._store, prefix.rstrip("/"))
            return [
                Listed(str(m["path"]), str(m["e_tag"] or ""), int(m["size"]), m["last_modified"])
                for m in found["objects"]
            ]

        return self._call("LIST", prefix, collect)

    def list(self, prefix: str) -> list[Listed]:
        """Every object under ``prefix`` (one request per 1,000 objects)."""

        def collect() -> list[Listed]:
            out: list[Listed] = []
            for page in self._ob.list(self._store, prefix=prefix):
                self.requests["LIST"] += 1
                out.extend(
                    Listed(str(m["path"]), str(m["e_tag"] or ""), int(m["size"]), m["last_modified"]) for m in page
                )
            return out

        self.requests["LIST"] -= 1  # counted per page inside
        return self._call("LIST", prefix, collect)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
