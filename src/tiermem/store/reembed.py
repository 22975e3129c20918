"""The re-embed swap: a searchable table rewritten with new vectors under a temporary name, then swapped in;
a swap a crash interrupted is finished when the store next opens."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .boundary import library, reads
from .schemas import REEMBED_SUFFIX, SEARCHABLE, table_schemas
from .tables import LogTables


class Reembed(LogTables):
    # -- re-embedding ---------------------------------------------------------

    @reads("rows")
    def all_rows(self, table: str) -> list[dict[str, Any]]:
        rows = self._rows(table)
        for r in rows:
            r.pop("_distance", None)
        return rows

    def replace_vectors(self, table: str, rows: list[dict[str, Any]], model: str, dim: int) -> None:
        """Write ``rows`` (with new vectors) as ``table``; a crash midway is finished on next open."""
        schema = table_schemas(dim)[table]
        tmp = f"{table}{REEMBED_SUFFIX}"
        with library(self.uri, f"the re-embedded {table} table", writing=True):
            data = pa.Table.from_pylist(rows, schema=schema)
            self._db.create_table(tmp, data=data, schema=schema, mode="overwrite")
            self._finish_swap(table)
            self._tables[table] = self._db.open_table(table)

    def _finish_swap(self, table: str) -> None:
        tmp = f"{table}{REEMBED_SUFFIX}"
        with library(self.uri, f"the re-embedded {table} table", writing=True):
            copy = self._db.open_table(tmp).to_arrow()
            if table in self._table_names():
                self._db.drop_table(table)
            self._db.create_table(table, data=copy, schema=copy.schema)
            self._db.drop_table(tmp)

    def finish_reembed(self, model: str, dim: int) -> None:
        self.set_meta("embedding_model", model)
        self.set_meta("embedding_dim", str(dim))
        for table in SEARCHABLE:
            self.settle_unembedded(table)
        self.embedding_model, self.embedding_dim = model, dim
