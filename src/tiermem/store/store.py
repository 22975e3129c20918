"""``Store``: the recall and archival store of one data directory (or object-store prefix), composed of parts that
share one ``Connection``: ``rows`` (messages and passages in and out), ``search`` (the two legs), ``indexes``
(upkeep, ``optimize``), ``reembed`` (the model swap). Callers name the part they use: ``store.rows.add_rows``,
``store.search.search_legs``, ``store.indexes.optimize``."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from .boundary import library
from .connection import (
    DEFAULT_INDEX_CACHE,
    DEFAULT_METADATA_CACHE,
    Connection,
    ConnectionOptions,
    connect,
    is_remote,
)
from .indexes import VECTOR_INDEX_MIN_ROWS, Indexes
from .purge import Purge
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
        vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS,
        **options: Unpack[ConnectionOptions],
    ) -> None:
        """``options``: the connection's tuning (``ConnectionOptions``); ``vector_index_min_rows``: rows from which a
        table gets a vector index."""
        self.conn = Connection(uri, embedding_model=embedding_model, embedding_dim=embedding_dim, **options)
        self.rows = Rows(self.conn)
        self.purge = Purge(self.conn)
        self.indexes = Indexes(self.conn, self.rows, vector_index_min_rows=vector_index_min_rows, purge=self.purge)
        self.search = Search(self.conn, self.indexes)
        self.reembed = Reembed(self.conn, self.rows, self.indexes)
        self.conn.upkeep = self.indexes.optimize_in_background
        self.indexes.ensure_search_indexes()

    @property
    def uri(self) -> str:
        return self.conn.uri

    @staticmethod
    def recorded_meta(uri: str, storage_options: dict[str, str] | None = None) -> dict[str, str]:
        """The store's meta table (schema version, embedding model and dimension) without opening the store;
        empty for a store not made yet (a local directory that does not exist is not created)."""
        if not is_remote(uri) and not Path(uri.removeprefix("file://")).is_dir():
            return {}
        with library(uri, "the meta table"):
            db, _ = connect(uri, storage_options, DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE)
            meta_rows = db.open_table("meta").to_arrow().to_pylist() if "meta" in table_names(db) else []
        return {r["key"]: r["value"] for r in meta_rows}

    @classmethod
    def for_reembed(cls, uri: str, *, storage_options: dict[str, str] | None = None) -> Store:
        """Open a store whatever embedding model it records (for ``tiermem reembed``)."""
        meta = cls.recorded_meta(uri, storage_options)
        return cls(
            uri,
            embedding_model=meta.get("embedding_model", ""),
            embedding_dim=int(meta.get("embedding_dim", "384")),
            storage_options=storage_options,
            reembedding=True,
        )
