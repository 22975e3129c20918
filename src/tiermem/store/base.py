"""What every part of the ``Store`` shares: its state, the meta table, whole-table and filtered reads,
cached snapshots of the small tables, row counts, and the write counter that schedules upkeep."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from ..errors import ValidationError
from .boundary import library, reads, writes
from .query import Filter, compile_filter
from .schemas import table_names


class StoreBase:
    """The state of one open store; the parts (``core_tables``, ``tables``, ``search``, ``indexes``, ``reembed``)
    are mixins over it, and ``connection.Store`` opens it."""

    uri: str
    vector_index_min_rows: int
    embedding_model: str
    embedding_dim: int
    optimize_every: int
    _writes: int
    _lock: threading.Lock
    _snapshots: dict[str, tuple[int, list[dict[str, Any]]]]
    _fts_ready: set[str]
    _optimizing: threading.Lock
    _writer: str
    _db: Any
    _tables: dict[str, Any]
    _since_renewal: int  # writes since the LanceDB session was last renewed (connection.Store.renew_session)
    version_retention: timedelta  # how long an optimize keeps superseded table versions

    def optimize(self, *, background: bool = False) -> dict[str, str]:
        """Compact and bring indexes up to date (``indexes.Indexes``)."""
        raise NotImplementedError

    def renew_session_if_due(self) -> bool:
        """Reopen the tables on a new LanceDB session when enough writes were made (``connection.Store``)."""
        raise NotImplementedError

    # -- the meta table ------------------------------------------------------

    @reads("settings")
    def meta(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self._tables["meta"].to_arrow().to_pylist()}

    @writes("settings")
    def set_meta(self, key: str, value: str) -> None:
        t = self._tables["meta"]
        t.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([{"key": key, "value": value}])

    # -- small helpers -----------------------------------------------------

    def _rows(self, table: str, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        with library(self.uri, f"the {table} table"):
            q = self._tables[table].search()
            if where:
                q = q.where(where)
            rows: list[dict[str, Any]] = q.limit(limit).to_list()  # limit None: every matching row
        return rows

    def _snapshot(self, table: str) -> list[dict[str, Any]]:
        """Every row of a small table, re-read only when its version moved (any process's write)."""
        t = self._tables[table]
        with library(self.uri, f"the {table} table"):
            version = int(t.version)  # checks out the latest version: sees other processes' writes
            cached = self._snapshots.get(table)
            if cached is not None and cached[0] == version:
                return cached[1]
            rows: list[dict[str, Any]] = t.to_arrow().to_pylist()
        self._snapshots[table] = (version, rows)
        return rows

    def _wrote(self, n: int = 1) -> None:
        with self._lock:
            self._writes += n
            self._since_renewal += n
            due = self.optimize_every > 0 and self._writes >= self.optimize_every
            if due:
                self._writes = 0
        if due:
            threading.Thread(target=self.optimize, kwargs={"background": True}, name="tiermem-optimize", daemon=True).start()

    @reads("row counts")
    def count(self, table: str, where: Filter | None = None) -> int:
        t = self._tables[table]
        text = compile_filter(where)
        return int(t.count_rows(text) if text else t.count_rows())

    @writes("a deletion")
    def delete(self, table: str, where: Filter) -> int:
        """Delete the rows of ``where`` (never every row: an empty filter is refused); returns how many."""
        text = compile_filter(where)
        if not text:
            raise ValidationError("delete needs a filter that names the rows; an empty one would delete every row")
        t = self._tables[table]
        before = t.count_rows(text)
        if before:
            t.delete(text)
            self._wrote()
        return int(before)

    @reads("a table version")
    def version(self, table: str) -> int:
        return int(self._tables[table].version)

    @reads("table versions")
    def table_versions(self) -> dict[str, int]:
        return {name: int(t.version) for name, t in self._tables.items()}

    @reads("a table's schema")
    def schema_fields(self, table: str) -> list[str]:
        return [f.name for f in self._tables[table].schema]

    def _table_names(self) -> list[str]:
        return table_names(self._db)
