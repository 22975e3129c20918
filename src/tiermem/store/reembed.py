"""``Reembed``: a searchable table rewritten with new vectors under a temporary name, then swapped in; a swap a
crash interrupted is finished when the store next opens (``connection.finish_swap``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .boundary import library
from .connection import Connection, finish_swap
from .schemas import REEMBED_SUFFIX, SEARCHABLE, table_schemas
from .tables import Rows


class Reembed:
    """The re-embedding swap over one ``Connection`` (marks of rows without vectors settled through its ``Rows``)."""

    def __init__(self, conn: Connection, rows: Rows) -> None:
        self.conn, self.rows = conn, rows

    def replace_vectors(self, table: str, rows: list[dict[str, Any]], model: str, dim: int) -> None:
        """Write ``rows`` (with new vectors) as ``table``; a crash midway is finished on next open."""
        schema = table_schemas(dim)[table]
        tmp = f"{table}{REEMBED_SUFFIX}"
        with library(self.conn.uri, f"the re-embedded {table} table", writing=True):
            data = pa.Table.from_pylist(rows, schema=schema)
            self.conn.db.create_table(tmp, data=data, schema=schema, mode="overwrite")
            finish_swap(self.conn.db, self.conn.uri, table)
            self.conn.tables[table] = self.conn.db.open_table(table)

    def finish_reembed(self, model: str, dim: int) -> None:
        """Record the new model in the meta table once every searchable table was swapped."""
        self.conn.set_meta("embedding_model", model)
        self.conn.set_meta("embedding_dim", str(dim))
        for table in SEARCHABLE:
            self.rows.settle_unembedded(table)
        self.conn.embedding_model, self.conn.embedding_dim = model, dim
