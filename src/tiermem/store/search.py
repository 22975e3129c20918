"""The two search legs over a searchable table: nearest vectors (cosine) and full-text (BM25)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .boundary import reads
from .indexes import Indexes
from .schemas import RESULT_COLUMNS

VECTOR_NPROBES, VECTOR_EF, VECTOR_REFINE = 32, 128, 2


class Search(Indexes):
    @reads("vector search results")
    def vector_search(self, table: str, vector: Sequence[float], where: str | None, limit: int) -> list[dict[str, Any]]:
        q = self._tables[table].search(list(vector), vector_column_name="vector").distance_type("cosine")
        # Never ship vectors back (converting them costs more than the search); naming the score column
        # keeps Lance from warning on every query.
        q = q.select([*RESULT_COLUMNS[table], "_distance"])
        # ANN knobs (ignored while the table has no vector index): measured in bench/scale.py.
        q = q.nprobes(VECTOR_NPROBES).ef(VECTOR_EF).refine_factor(VECTOR_REFINE)
        if where:
            q = q.where(where, prefilter=True)
        rows: list[dict[str, Any]] = q.limit(limit).to_list()
        return rows

    @reads("full-text search results")
    def text_search(self, table: str, query: str, where: str | None, limit: int) -> list[dict[str, Any]]:
        if not self._has_fts(table):  # built when the store opened; only a lost race at open leaves it missing
            self.ensure_fts(table)
        q = self._tables[table].search(query, query_type="fts", fts_columns="text").select([*RESULT_COLUMNS[table], "_score"])
        if where:
            q = q.where(where, prefilter=True)
        rows: list[dict[str, Any]] = q.limit(limit).to_list()
        return rows
