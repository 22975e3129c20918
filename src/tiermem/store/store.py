"""``Store``: the recall and archival store of one data directory (or object-store prefix), composed of parts that
share one ``Connection``: ``rows`` (messages and passages in and out), ``search`` (the two legs), ``indexes``
(upkeep, ``optimize``), ``reembed`` (the model swap). Callers name the part they use: ``store.rows.add_rows``,
``store.search.search_legs``, ``store.indexes.optimize``."""

from __future__ import annotations

from datetime import timedelta

from .boundary import library
from .connection import DEFAULT_INDEX_CACHE, DEFAULT_METADATA_CACHE, DEFAULT_SESSION_RENEW_WRITES, Connection, connect
from .indexes import VECTOR_INDEX_MIN_ROWS, Indexes
from .reembed import Reembed
from .schemas import table_names
from .search import Search
from .tables import Rows


class Store:
    """The parts over one connection, opened and checked (full-text indexes built if missing)."""

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
        self.conn = Connection(uri, embedding_model=embedding_model, embedding_dim=embedding_dim,
                               storage_options=storage_options, optimize_every=optimize_every,
                               metadata_cache_bytes=metadata_cache_bytes, index_cache_bytes=index_cache_bytes,
                               session_renew_writes=session_renew_writes, version_retention=version_retention)
        self.rows = Rows(self.conn)
        self.indexes = Indexes(self.conn, self.rows, vector_index_min_rows=vector_index_min_rows)
        self.search = Search(self.conn, self.indexes)
        self.reembed = Reembed(self.conn, self.rows)
        self.conn.upkeep = self.indexes.optimize_in_background
        self.indexes.ensure_search_indexes()

    @classmethod
    def for_reembed(cls, uri: str, *, storage_options: dict[str, str] | None = None) -> Store:
        """Open a store whatever embedding model it records (for ``tiermem reembed``)."""
        with library(uri, "the meta table"):
            db, _ = connect(uri, storage_options, DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE)
            meta_rows = db.open_table("meta").to_arrow().to_pylist() if "meta" in table_names(db) else []
        meta = {r["key"]: r["value"] for r in meta_rows}
        return cls(
            uri,
            embedding_model=meta.get("embedding_model", ""),
            embedding_dim=int(meta.get("embedding_dim", "384")),
            storage_options=storage_options,
        )
