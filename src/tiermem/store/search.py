"""The two search legs over a searchable table, nearest vectors (cosine) and full-text (BM25), and the fetch of
the fused top k's remaining columns.

The legs read only what ranking needs: the id, the content (the ranker's text features), the creation time
(its date feature), the leg's score, and LanceDB's row address (``_rowid``). The few columns a result shows
besides those (a passage's tags; a message's role and conversation) are read afterwards for the top k alone,
by row address, in one ``take`` (``fetch_rows``): reading every column for every candidate of both legs (up
to 80 rows for a top-5 search) cost more than the legs' searches themselves (bench/search_profile.py).

Each leg and the fetch is one query on LanceDB's async API, handed to LanceDB's event loop once. LanceDB's
synchronous query builder makes five hand-offs per query (schema twice, the plan, the batches twice; ~0.7 ms
each on the shared 2-core machine under load, BENCHMARKS.md "Search at scale"); the query itself is the same.
``start_text_search`` returns at once, so the keyword leg runs while the caller embeds the query and runs the
vector leg, without a thread of ours waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from .boundary import library, reads
from .indexes import Indexes, vector_partitions
from .query import Filter, compile_filter

# ANN knobs, measured in bench/search_profile.py (``python -m bench scale --profile DIR --sweep``; BENCHMARKS.md,
# "Search at scale"). nprobes for the IVF-SQ index tiermem builds (~sqrt(rows) partitions, ``vector_partitions``):
# at least VECTOR_NPROBES, and one in VECTOR_PROBE_SHARE of the partitions on larger tables (``vector_nprobes``):
# with refine 2, recall@10 against exact search 0.990 at 100k (316 partitions, 24 probes) and 0.987-0.997 at 1M
# (1,000 partitions, 48-64 probes; 24 probes gave 0.898 there). ef serves the IVF-HNSW-SQ index of stores built
# by earlier versions; refine 2 re-ranks 2 x limit candidates by their full vectors (SQ distances alone lose
# ~0.02-0.04 recall).
VECTOR_NPROBES, VECTOR_PROBE_SHARE, VECTOR_EF, VECTOR_REFINE = 24, 20, 128, 2

LEG_COLUMNS = ("id", "content", "created_us")  # what the ranker reads of every candidate
HIT_COLUMNS = {"messages": ("role", "conversation_id"), "passages": ("tags",)}  # read for the top k only


def _loop() -> asyncio.AbstractEventLoop:
    """LanceDB's own event loop (the thread its synchronous API hands every call to)."""
    from lancedb.background_loop import LOOP

    loop: asyncio.AbstractEventLoop = LOOP.loop
    return loop


def _async_table(table: Any) -> Any:
    """The ``AsyncTable`` under a synchronous LanceDB table (the same handle: its version, caches and reads).

    LanceDB keeps it as ``_table``; lancedb is pinned (pyproject.toml) and ``tests/test_search_scale.py`` fails
    if it moves, rather than searches silently taking the slow path.
    """
    from lancedb.table import AsyncTable

    inner = getattr(table, "_table", None)
    if not isinstance(inner, AsyncTable):
        raise TypeError(f"LanceDB table {table!r} has no AsyncTable inside; this lancedb version is not supported")
    return inner


async def _arrow(query: Any) -> Any:
    return await query.to_arrow()


class Pending:
    """A query under way on LanceDB's event loop; ``result()`` waits for its rows (library errors translated)."""

    def __init__(self, uri: str, what: str, work: Coroutine[Any, Any, Any]) -> None:
        self._uri, self._what = uri, what
        self._future: Future[Any] = asyncio.run_coroutine_threadsafe(work, _loop())

    def result(self) -> list[dict[str, Any]]:
        with library(self._uri, self._what):
            rows: list[dict[str, Any]] = self._future.result().to_pylist()
        return rows


def vector_nprobes(rows: int) -> int:
    """IVF partitions a vector search probes in a table of ``rows`` rows: VECTOR_NPROBES, or one partition in
    VECTOR_PROBE_SHARE of those ``vector_partitions`` gives a table that size, whichever is more."""
    return max(VECTOR_NPROBES, -(-vector_partitions(rows) // VECTOR_PROBE_SHARE))


class Search(Indexes):
    def _start(self, what: str, query: Any) -> Pending:
        with library(self.uri, what):  # a bad query (a column the table lacks) fails here, before it is sent
            return Pending(self.uri, what, _arrow(query))

    def vector_search(self, table: str, vector: Sequence[float], where: Filter | None, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` rows nearest ``vector``: ``LEG_COLUMNS``, ``_distance`` (cosine) and ``_rowid``."""
        return self.start_vector_search(table, vector, where, limit).result()

    def start_vector_search(self, table: str, vector: Sequence[float], where: Filter | None, limit: int) -> Pending:
        """``vector_search`` under way: its rows are ``.result()``."""
        with library(self.uri, "vector search results"):
            work = _nearest(_async_table(self._tables[table]), list(vector), compile_filter(where), limit)
            return Pending(self.uri, "vector search results", work)

    def text_search(self, table: str, query: str, where: Filter | None, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` best BM25 matches of ``query``: ``LEG_COLUMNS``, ``_score`` and ``_rowid``."""
        return self.start_text_search(table, query, where, limit).result()

    @reads("full-text search results")
    def start_text_search(self, table: str, query: str, where: Filter | None, limit: int) -> Pending:
        """``text_search`` under way (it returns at once): its rows are ``.result()``."""
        if not self._has_fts(table):  # built when the store opened; only a lost race at open leaves it missing
            self.ensure_fts(table)
        q = _async_table(self._tables[table]).query().nearest_to_text(query, columns="text")
        q = q.select([*LEG_COLUMNS, "_score"]).with_row_id()
        return self._start("full-text search results", _filtered(q, where, limit))

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
            taken = _async_table(t).take_row_ids(list(wanted)).select(columns).with_row_id()
            for row in self._start("search results", taken).result():
                if wanted.get(row.pop("_rowid", None)) == row["id"]:
                    out[row["id"]] = row
        missing = [str(r["id"]) for r in found if str(r["id"]) not in out]
        if missing:
            text = compile_filter(Filter(ids=tuple(dict.fromkeys(missing))))
            for row in t.search().where(text).select(columns).limit(len(missing)).to_list():
                out[row["id"]] = row
        return out


async def _nearest(table: Any, vector: list[float], where: str | None, limit: int) -> Any:
    """The vector leg's query, probing as many partitions as the table's size asks (its row count is table
    metadata, read on LanceDB's loop: no hand-off of its own)."""
    rows = await table.count_rows()
    q = table.query().nearest_to(vector).column("vector").distance_type("cosine")
    # Never ship vectors back (converting them costs more than the search); naming the score column keeps Lance
    # from warning on every query. The ANN knobs are ignored while the table has no vector index.
    q = q.select([*LEG_COLUMNS, "_distance"]).with_row_id()
    q = q.nprobes(vector_nprobes(rows)).ef(VECTOR_EF).refine_factor(VECTOR_REFINE)
    if where:
        q = q.where(where)
    return await q.limit(limit).to_arrow()


def _filtered(q: Any, where: Filter | None, limit: int) -> Any:
    """Filter before ranking (the async API's default: prefilter), then the ``limit`` best rows."""
    text = compile_filter(where)
    if text:
        q = q.where(text)
    return q.limit(limit)
