"""The two search legs over a searchable table, nearest vectors (cosine) and full-text (BM25), and the fetch of
the fused top k's remaining columns.

The legs read only what ranking needs: the id, the content (the ranker's text features), the creation time
(its date feature), the leg's score, and LanceDB's row address (``_rowid``). The few columns a result shows
besides those (a passage's tags; a message's role and conversation) are read afterwards for the top k alone,
by row address, in one ``take`` (``fetch_rows``): reading every column for every candidate of both legs (up
to 80 rows for a top-5 search) cost more than the legs' searches themselves (bench/search_profile.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .boundary import reads
from .indexes import Indexes
from .query import Filter, compile_filter

# ANN knobs, measured in bench/search_profile.py (``python -m bench scale --profile DIR --sweep``; BENCHMARKS.md,
# "Scale"): nprobes for the IVF-SQ index tiermem builds (~sqrt(rows) partitions; with refine 2, recall@10
# against exact search 0.990 at 100k and 0.982 at 1M, where 16 probes gave 0.948 and 32 cost ~20% more time);
# ef for the IVF-HNSW-SQ index of stores built by earlier versions; refine 2 re-ranks 2 x limit candidates by
# their full vectors (SQ distances alone lose ~0.02-0.04 recall).
VECTOR_NPROBES, VECTOR_EF, VECTOR_REFINE = 24, 128, 2

LEG_COLUMNS = ("id", "content", "created_us")  # what the ranker reads of every candidate
HIT_COLUMNS = {"messages": ("role", "conversation_id"), "passages": ("tags",)}  # read for the top k only


class Search(Indexes):
    @reads("vector search results")
    def vector_search(self, table: str, vector: Sequence[float], where: Filter | None, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` rows nearest ``vector``: ``LEG_COLUMNS``, ``_distance`` (cosine) and ``_rowid``."""
        q = self._tables[table].search(list(vector), vector_column_name="vector").distance_type("cosine")
        # Never ship vectors back (converting them costs more than the search); naming the score column
        # keeps Lance from warning on every query.
        q = q.select([*LEG_COLUMNS, "_distance"]).with_row_id(True)
        # ANN knobs (ignored while the table has no vector index).
        q = q.nprobes(VECTOR_NPROBES).ef(VECTOR_EF).refine_factor(VECTOR_REFINE)
        return _run(q, where, limit)

    @reads("full-text search results")
    def text_search(self, table: str, query: str, where: Filter | None, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` best BM25 matches of ``query``: ``LEG_COLUMNS``, ``_score`` and ``_rowid``."""
        if not self._has_fts(table):  # built when the store opened; only a lost race at open leaves it missing
            self.ensure_fts(table)
        q = self._tables[table].search(query, query_type="fts", fts_columns="text")
        q = q.select([*LEG_COLUMNS, "_score"]).with_row_id(True)
        return _run(q, where, limit)

    @reads("search results")
    def fetch_rows(self, table: str, found: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """``HIT_COLUMNS`` (and the id) of rows the legs returned, by id.

        One ``take`` by the legs' row addresses; an address is only good for the table version the leg read,
        so each row taken is checked against the id the leg saw, and rows a concurrent compaction, update or
        delete moved are looked up by id instead (a deleted row is simply not returned).
        """
        columns = ["id", *HIT_COLUMNS[table]]
        t = self._tables[table]
        wanted = {int(r["_rowid"]): str(r["id"]) for r in found if r.get("_rowid") is not None}
        out: dict[str, dict[str, Any]] = {}
        if wanted:
            for row in t.take_row_ids(list(wanted)).select(columns).with_row_id().to_list():
                if wanted.get(row.pop("_rowid", None)) == row["id"]:
                    out[row["id"]] = row
        missing = [str(r["id"]) for r in found if str(r["id"]) not in out]
        if missing:
            text = compile_filter(Filter(ids=tuple(dict.fromkeys(missing))))
            for row in t.search().where(text).select(columns).limit(len(missing)).to_list():
                out[row["id"]] = row
        return out


def _run(q: Any, where: Filter | None, limit: int) -> list[dict[str, Any]]:
    """Filter before ranking (``prefilter``), then the ``limit`` best rows."""
    text = compile_filter(where)
    if text:
        q = q.where(text, prefilter=True)
    rows: list[dict[str, Any]] = q.limit(limit).to_list()
    return rows
