"""``Store``: all tables of one data directory (or object-store prefix), opened and checked.

The store never assumes a local path: ``uri`` may be a directory or an object-store URI
(``s3://bucket/prefix``) with ``storage_options``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from ..errors import SchemaError, StoreError
from ..records import new_id, now
from .boundary import library
from .core_tables import CoreTables
from .indexes import VECTOR_INDEX_MIN_ROWS
from .loading import import_lancedb
from .reembed import Reembed
from .schemas import REEMBED_SUFFIX, SCHEMA_VERSION, SEARCHABLE, migrate, table_names, table_schemas
from .search import Search

lancedb = import_lancedb()  # the package's only import of lancedb at module level: see loading.py
log = logging.getLogger(__name__)

DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE = 8 << 20, 512 << 20
DEFAULT_SESSION_RENEW_WRITES = 200


def _connect(uri: str, storage_options: dict[str, str] | None, metadata_cache: int, index_cache: int) -> tuple[Any, Any]:
    """A connection whose caches are bounded, and its session. LanceDB's own defaults are GiBs, and its metadata
    cache keeps a manifest per table version: with a version per write, a long-running server grew ~100-200 KB per
    write without levelling off (issue #13; bench/load.py). Every read checks out the newest version, so
    other processes' writes are seen."""
    session = lancedb.Session(index_cache_size_bytes=index_cache, metadata_cache_size_bytes=metadata_cache)
    db = lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=storage_options, session=session)
    return db, session


class Store(CoreTables, Reembed, Search):
    """All tables of one data directory (or object-store prefix)."""

    def __init__(
        self,
        uri: str,
        *,
        embedding_model: str,
        embedding_dim: int,
        storage_options: dict[str, str] | None = None,
        optimize_every: int = 200,
        vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS,
        metadata_cache_bytes: int = DEFAULT_METADATA_CACHE,
        index_cache_bytes: int = DEFAULT_INDEX_CACHE,
        session_renew_writes: int = DEFAULT_SESSION_RENEW_WRITES,
        version_retention: timedelta | None = None,
    ) -> None:
        """``version_retention``: how long an optimize keeps the versions it supersedes (None: 10 minutes for a
        local directory, 1 minute on object storage, where every operation lists the kept versions)."""
        self.uri = uri
        self.version_retention = version_retention if version_retention is not None else (
            timedelta(minutes=1) if "://" in uri and not uri.startswith("file://") else timedelta(minutes=10))
        self.session_renew_writes = session_renew_writes
        self._since_renewal = 0
        self.renewals = 0
        self._connection = (storage_options, metadata_cache_bytes, index_cache_bytes)
        self.vector_index_min_rows = vector_index_min_rows
        self.embedding_model = embedding_model
        self.embedding_dim = embedding_dim
        self.optimize_every = optimize_every
        self._writes = 0
        self._lock = threading.Lock()
        self._snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._fts_ready: set[str] = set()
        self._optimizing = threading.Lock()
        self._writer = new_id("writer")  # names this process's marks of rows stored without vectors
        try:
            self._db, self._session = _connect(uri, storage_options, metadata_cache_bytes, index_cache_bytes)
            self._tables = self._open_tables()
        except (SchemaError, StoreError):
            raise
        except (OSError, RuntimeError, ValueError) as exc:
            raise StoreError(
                f"Could not open the data directory {uri!r}: {exc}. Check that it exists, is writable, "
                "and is not a file; or choose another with --data-dir / TIERMEM_DATA_DIR."
            ) from exc
        self._check_meta()
        self._ensure_search_indexes()

    @classmethod
    def for_reembed(cls, uri: str, *, storage_options: dict[str, str] | None = None) -> Store:
        """Open a store whatever embedding model it records (for ``tiermem reembed``)."""
        with library(uri, "the meta table"):
            db, _ = _connect(uri, storage_options, DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE)
            meta_rows = db.open_table("meta").to_arrow().to_pylist() if "meta" in table_names(db) else []
        meta = {r["key"]: r["value"] for r in meta_rows}
        return cls(
            uri,
            embedding_model=meta.get("embedding_model", ""),
            embedding_dim=int(meta.get("embedding_dim", "384")),
            storage_options=storage_options,
        )

    # -- renewing the connection ----------------------------------------------

    def renew_session(self) -> None:
        """Reopen every table on a new connection with a new, empty LanceDB session; the old one is dropped.

        LanceDB's index cache keeps the entries of superseded table and index versions (a version per write),
        bounded only by ``index_cache_bytes``, and its Python API cannot evict them: under HTTP load the session
        grew ~1.4 MB a minute (BENCHMARKS.md, "Under HTTP load"). A new session starts empty; the old one is freed
        once the last call still using its tables returns. Calls under way keep the tables they hold, which read
        the newest version as every table here does (``read_consistency_interval=0``), so every call sees every
        committed write whichever connection it runs on.
        """
        storage_options, metadata_cache, index_cache = self._connection
        with library(self.uri, "the tables (reopening them on a new connection)"):
            db, session = _connect(self.uri, storage_options, metadata_cache, index_cache)
            tables = {name: db.open_table(name) for name in self._tables}
        with self._lock:
            self._db, self._session, self._tables = db, session, tables
            self._owners = None  # what the search legs proved of the old handles (re-proved on the new ones)
            self._since_renewal = 0
            self.renewals += 1
        log.debug("renewed the LanceDB session (%d tables reopened)", len(tables))

    def cache_bytes(self) -> int:
        """What LanceDB's caches of the current session hold (its metadata and index caches), in bytes."""
        return int(self._session.size_bytes)

    def renew_session_if_due(self) -> bool:
        """``renew_session`` once ``session_renew_writes`` writes were made since the last (0: never); True if it did.

        Called at the end of a background optimize: the indexes it updated are reloaded by the next search anyway.
        """
        if self.session_renew_writes <= 0 or self._since_renewal < self.session_renew_writes:
            return False
        self.renew_session()
        return True

    # -- opening ------------------------------------------------------------

    def _open_tables(self) -> dict[str, Any]:
        schemas = table_schemas(self.embedding_dim)
        existing = set(self._table_names())
        for name in SEARCHABLE:
            if f"{name}{REEMBED_SUFFIX}" in existing:  # a reembed was interrupted after writing its copy
                self._finish_swap(name)
                existing = set(self._table_names())
        return {name: self._open_or_create(name, schema, name in existing) for name, schema in schemas.items()}

    def _open_or_create(self, name: str, schema: Any, listed: bool) -> Any:
        """Open a table, creating it if missing. Several processes may create a new store at once: a table
        another process is creating can be listed before its first version is committed ("not found"), or
        be created between our listing and our create; either is retried for up to ~5 s."""
        for attempt in range(40):
            try:
                if listed:
                    return self._db.open_table(name)
                return self._db.create_table(name, schema=schema, exist_ok=True)
            except (OSError, RuntimeError, ValueError) as exc:
                if attempt == 39:
                    raise
                log.debug("table %s is being created by another process (%s); retrying", name, exc)
                time.sleep(min(0.25, 0.01 * (attempt + 1)))
                listed = name in set(self._table_names()) and attempt % 2 == 0  # alternate open and create
        raise AssertionError("unreachable")

    def _ensure_search_indexes(self) -> None:
        """Build the full-text indexes when the store opens, so that searching (a read-only tool) never writes.

        Several processes may open a new store at once; one that loses the race leaves it to the other, and
        ``text_search`` builds a missing index only in that case.
        """
        for table in SEARCHABLE:
            try:
                self.ensure_fts(table)
            except StoreError as exc:
                log.warning("full-text index of %s not built at open (another process may be building it): %s",
                            table, exc)

    def _check_meta(self) -> None:
        meta = self.meta()
        wanted = {
            "schema_version": str(SCHEMA_VERSION),
            "embedding_model": self.embedding_model,
            "embedding_dim": str(self.embedding_dim),
        }
        if not meta:
            rows = [{"key": k, "value": v} for k, v in wanted.items()]
            rows.append({"key": "created_at", "value": now().isoformat()})
            self._tables["meta"].merge_insert("key").when_not_matched_insert_all().execute(rows)
            meta = self.meta()
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"The data directory {self.uri!r} was written by a newer tiermem (schema version {version}; "
                f"this one reads version {SCHEMA_VERSION}). Upgrade tiermem, or use another --data-dir."
            )
        if version < SCHEMA_VERSION:
            migrate(self.uri, version)
        if meta.get("embedding_model") != self.embedding_model or meta.get("embedding_dim") != str(self.embedding_dim):
            raise SchemaError(
                f"The data directory {self.uri!r} holds vectors of embedding model "
                f"{meta.get('embedding_model')!r} (dim {meta.get('embedding_dim')}), but this server is configured for "
                f"{self.embedding_model!r} (dim {self.embedding_dim}). Configure the same model "
                "(embedding_model / TIERMEM_EMBEDDING_MODEL), or run `tiermem reembed` to rebuild all vectors with the new one."
            )
