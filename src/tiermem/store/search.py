"""The two search legs over a searchable table: nearest vectors (cosine) and full-text (BM25).

Each leg reads only what a search needs of its candidates: the id, the content (the ranker's text features),
the creation time (its date feature), the few columns a result shows (a passage's tags; a message's role and
conversation, and its place in the log: the ranker's neighbour features; whether a message is the agent loop's own
plumbing, computed from its payload in the store) and the leg's score; never the vector, the keyword text or the
payload. Reading the shown columns in the legs costs nothing measurable beside the content, and saves a third query
for the fused top k (``python -m bench scale --profile DIR``).

Each leg is one query on LanceDB's async API, run on LanceDB's event loop: LanceDB's synchronous query builder
makes five hand-offs to that loop per query (schema twice, the plan, the batches twice; each a GIL round trip
with the loop's thread: ~0.06 ms when both are idle, ~1 ms under load on the shared 2-core machine), and its async
``to_arrow`` still reads the schema first (``_arrow`` skips that). A search hands both legs and the read of the marks of rows without vectors to the
loop at once (``search_legs``: one hand-off per search); ``start_text_search`` returns at once, for the caller
that needs the keyword leg's rows before it can run the vector leg (the first search of an agent: ``archive``).

The agent filter is applied before ranking (LanceDB's prefilter over the ``agent_id`` bitmap index), which
evaluates it over every row of the table, every search (1-2.5 ms per leg at 1M rows). When a table holds
one agent's rows only, that filter keeps every row; ``_Owners`` proves it per table version, and legs for the
sole agent then run without it, exactly as safe: see ``_legs`` (not while the table is being written:
``_Owners.settled``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from ..base.records import Found
from .boundary import library, reads
from .connection import Connection
from .indexes import Indexes, vector_partitions
from .query import Filter, compile_filter
from .tables import marks_in

# ANN knobs, measured in bench/search_profile.py (``python -m bench scale --profile DIR --sweep``). nprobes for the IVF-SQ index tiermem builds (~sqrt(rows) partitions, ``vector_partitions``):
# at least VECTOR_NPROBES, and one in VECTOR_PROBE_SHARE of the partitions on larger tables (``vector_nprobes``):
# with refine 2, recall@10 against exact search 0.991 at 100k (316 partitions, 24 probes) and 0.988 at 1M
# (1,000 partitions, 50 probes; 24 probes gave 0.911 there, 64 gave 0.996). ef serves an IVF-HNSW-SQ index (stores
# indexed by tiermem before IVF-SQ keep theirs); refine 2 re-ranks 2 x limit candidates by their full vectors (SQ distances alone lose
# ~0.02-0.04 recall). Up to EXACT_PROBE_ROWS rows every partition is probed (LanceDB clamps nprobes to the index's
# partitions) and EXACT_REFINE x limit candidates are re-ranked: the index is built at 1,000 rows
# (``indexes.VECTOR_INDEX_MIN_ROWS``) to spare searches the exact scan's memory, and this returns what the exact scan
# would (the same top 10 for 60 of 60 questions at 4,000 rows with the hashing embedder, whose near-ties defeat
# refine 2 in 31 of them; recall@10 1.000 at 2k, 5k and 10k rows with the model, ``python -m bench small_index``).
VECTOR_NPROBES, VECTOR_PROBE_SHARE, VECTOR_EF, VECTOR_REFINE = 24, 20, 128, 2
EXACT_PROBE_ROWS, EXACT_REFINE = 20_000, 10

LEG_COLUMNS = ("id", "content", "created_us")  # what the ranker reads of every candidate
HIT_COLUMNS = {
    "messages": ("role", "conversation_id", "seq", "plumbing"),
    "passages": ("tags",),
    "file_chunks": ("tags",),
}  # shown, or ranked (seq), or what leaves a row out of the results (whether a message is the agent loop's plumbing,
# decided when it was written: ``query.is_plumbing``, ``ranking.said``; never its payload)
MAX_OWNER_AGENTS = 1024  # agents remembered per table as sharing it with others (bounded)
ROW_COUNT_SECONDS = 1.0  # how old a row count may be to set the probes of a leg that has not read the version
SETTLED_SECONDS = 1.0  # how long a table's version must hold before its legs try to skip the agent filter


def vector_nprobes(rows: int) -> int:
    """IVF partitions a vector search probes in a table of ``rows`` rows: all of them up to EXACT_PROBE_ROWS rows
    (``rows`` is at least the partition count); beyond, VECTOR_NPROBES, or one partition in VECTOR_PROBE_SHARE of
    those ``vector_partitions`` gives a table that size, whichever is more."""
    if rows <= EXACT_PROBE_ROWS:
        return max(rows, VECTOR_NPROBES)
    return max(VECTOR_NPROBES, -(-vector_partitions(rows) // VECTOR_PROBE_SHARE))


def vector_refine(rows: int) -> int:
    """How many times the limit a vector search re-ranks by full vectors in a table of ``rows`` rows."""
    return EXACT_REFINE if rows <= EXACT_PROBE_ROWS else VECTOR_REFINE


def _columns(table: str, score: str) -> list[str]:
    """What a leg over ``table`` selects of each row, its ``score`` too."""
    return [*LEG_COLUMNS, *HIT_COLUMNS[table], score]


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


def found_in(data: Any) -> list[Found]:
    """A leg's Arrow rows as ``Found``, best first (the score column says which leg: ``_distance`` or ``_score``)."""
    out = []
    for r in data.to_pylist():
        distance, bm25 = r.get("_distance"), r.get("_score")
        tags = r.get("tags")
        out.append(
            Found(
                id=r["id"],
                content=r["content"],
                created_us=r["created_us"],
                role=r.get("role"),
                conversation_id=r.get("conversation_id"),
                tags=tuple(tags) if tags else (),
                cosine=None if distance is None else 1.0 - float(distance),
                bm25=None if bm25 is None else float(bm25),
                seq=r.get("seq"),
                plumbing=bool(r.get("plumbing")),
            )
        )
    return out


class Pending:
    """A leg under way on LanceDB's event loop; ``result()`` waits for what it found (library errors translated)."""

    def __init__(self, uri: str, what: str, work: Coroutine[Any, Any, Any]) -> None:
        self._uri, self._what = uri, what
        self._future: Future[Any] = asyncio.run_coroutine_threadsafe(work, _loop())

    def result(self) -> list[Found]:
        with library(self._uri, self._what):
            return found_in(self._future.result())


class _Owners:
    """What the legs know of each table, per table version. Touched on LanceDB's loop thread only.

    Whether one agent owns every row: two counts (every row; the agent's rows, over the bitmap index) between two
    reads of the table's version, holding for that version only if it did not move meanwhile. An agent found
    sharing a table is remembered as such (its searches filter, always correct) until the process restarts.
    And the table's row count, which sets how many partitions the vector leg probes: counted once per version when
    the leg has read the version anyway, else re-counted at most every ROW_COUNT_SECONDS (a tuning knob, not a
    filter: a count a second old changes no result's correctness).
    """

    def __init__(self) -> None:
        self.proved: dict[str, tuple[Any, int, str]] = {}  # table -> (its handle, version, the agent owning every row)
        self.shared: dict[str, OrderedDict[str, None]] = {}  # table -> agents seen sharing it
        self.counted: dict[str, tuple[Any, int | None, int, float]] = {}  # table -> (handle, version, rows, when)
        self.seen: dict[str, tuple[int, float]] = {}  # table -> (the version its searches last saw, since when)
        self.used = self.fallbacks = 0  # legs run without the agent filter; those rerun with it (the table moved)
        self.churning = 0  # legs filtered at once: the table had moved within SETTLED_SECONDS

    def settled(self, name: str, version: int) -> bool:
        """Whether the table's searches have seen it at ``version`` for SETTLED_SECONDS (a table not searched before
        counts as settled). A table written while it is searched (a conversation logged during its recalls) is
        filtered at once: a proof would be counted again for each version, and its legs would often run twice (a
        write landing while they run), which under HTTP load costs more than the filter saves. A heuristic only: what
        makes an unfiltered leg safe is ``sole`` and the version read after it."""
        last, now = self.seen.get(name), time.monotonic()
        if last is None or last[0] != version:
            self.seen[name] = (version, now if last is not None else -math.inf)
            return last is None
        return now - last[1] >= SETTLED_SECONDS

    def sharing(self, name: str, agent: str) -> bool:
        """Whether ``agent`` was seen sharing the table (its legs filter without trying for a proof)."""
        return agent in self.shared.get(name, ())

    async def sole(self, name: str, table: Any, agent: str, clause: str, version: int) -> bool:
        """Whether ``agent`` owns every row of ``table`` at ``version`` (False: not proved)."""
        shared = self.shared.setdefault(name, OrderedDict())
        if agent in shared:
            return False
        known = self.proved.get(name)
        if known is not None and known[0] is table and known[1:] == (version, agent):  # a re-embedded table is new
            return True
        total, mine = int(await table.count_rows()), int(await table.count_rows(clause))
        if int(await table.version()) != version:
            return False  # the table moved while counting: no proof this time
        self.counted[name] = (table, version, total, time.monotonic())
        if total != mine:
            shared[agent] = None
            while len(shared) > MAX_OWNER_AGENTS:
                shared.popitem(last=False)
            return False
        self.proved[name] = (table, version, agent)
        return True

    async def rows(self, name: str, table: Any, version: int | None) -> int:
        """The row count of ``table`` at ``version`` (None: not read; a count under ROW_COUNT_SECONDS old serves)."""
        known = self.counted.get(name)
        if known is not None and known[0] is table:
            fresh = known[1] == version if version is not None else time.monotonic() - known[3] < ROW_COUNT_SECONDS
            if fresh:
                return int(known[2])
        rows = int(await table.count_rows())
        self.counted[name] = (table, version, rows, time.monotonic())
        return rows


class Search:
    """The search legs over one ``Connection`` (a missing full-text index is built through its ``Indexes``)."""

    # None: skip the agent filter for a sole agent on a local data directory only (on object storage each version
    # read is a request); True / False: always try / never (the bench and the tests compare the two).
    sole_agent_shortcut: bool | None = None

    def __init__(self, conn: Connection, indexes: Indexes) -> None:
        self.conn, self.indexes = conn, indexes
        self._owners: _Owners | None = None
        conn.on_renewal.append(self._forget_owners)

    def _forget_owners(self) -> None:
        """What the legs proved of the old session's table handles (re-proved on the new ones)."""
        self._owners = None

    def _legs_owners(self) -> _Owners:
        if self._owners is None:
            self._owners = _Owners()
        return self._owners

    def vector_search(self, table: str, vector: Sequence[float], where: Filter | None, limit: int) -> list[Found]:
        """The ``limit`` rows nearest ``vector`` (``LEG_COLUMNS``, the table's ``HIT_COLUMNS``, ``cosine``)."""
        with library(self.conn.uri, "vector search results"):
            work = self._leg_work(table, self._vector_query(table, vector), where, limit)
        return Pending(self.conn.uri, "vector search results", work).result()

    def text_search(self, table: str, query: str, where: Filter | None, limit: int) -> list[Found]:
        """The ``limit`` best BM25 matches of ``query`` (``LEG_COLUMNS``, the table's ``HIT_COLUMNS``, ``bm25``)."""
        return self.start_text_search(table, query, where, limit).result()

    @reads("full-text search results")
    def start_text_search(self, table: str, query: str, where: Filter | None, limit: int) -> Pending:
        """``text_search`` under way (it returns at once): its rows are ``.result()``."""
        work = self._leg_work(table, self._text_query(table, query), where, limit)
        return Pending(self.conn.uri, "full-text search results", work)

    @reads("search results")
    def search_legs(
        self, table: str, query: str, vector: Sequence[float], where: Filter | None, limit: int
    ) -> tuple[list[Found], list[Found], dict[str, str]]:
        """``vector_search``, ``text_search`` and ``Rows.unembedded_marks(table)``, run together in one hand-off to
        LanceDB's loop (each hand-off is a GIL round trip with that thread)."""
        builds = [self._vector_query(table, vector), self._text_query(table, query)]
        at, text, sole = self._scope(table, where)
        known = self._legs_owners()

        async def together() -> tuple[list[Any], list[dict[str, Any]]]:
            legs = _legs(at, builds, text, limit, known, table, sole)
            found: tuple[list[Any], list[dict[str, Any]]] = await asyncio.gather(legs, self._snapshot_on_loop("meta"))
            return found

        (vector_rows, text_rows), meta = asyncio.run_coroutine_threadsafe(together(), _loop()).result()
        self.conn.searched(table, legs=2)
        return found_in(vector_rows), found_in(text_rows), marks_in(meta, table)

    def _vector_query(self, table: str, vector: Sequence[float]) -> Callable[[int | None], Coroutine[Any, Any, Any]]:
        at, vec, known = _async_table(self.conn.tables[table]), list(vector), self._legs_owners()

        async def build(version: int | None) -> Any:
            rows = await known.rows(table, at, version)  # how many partitions to probe
            q = at.query().nearest_to(vec).column("vector").distance_type("cosine")
            # Never ship vectors back (converting them costs more than the search); naming the score column keeps
            # Lance from warning on every query. The ANN knobs are ignored while the table has no vector index.
            q = q.select(_columns(table, "_distance"))
            return q.nprobes(vector_nprobes(rows)).ef(VECTOR_EF).refine_factor(vector_refine(rows))

        return build

    def _text_query(self, table: str, query: str) -> Callable[[int | None], Coroutine[Any, Any, Any]]:
        if not self.indexes.has_fts(table):  # built when the store opened; only a lost race at open leaves it missing
            self.indexes.ensure_fts(table)
        at = _async_table(self.conn.tables[table])

        # A double quote makes a phrase query, which an index without positions (ours: ``ensure_fts``) refuses once
        # rows are indexed; the words are searched as words instead.
        words = query.replace('"', " ")

        async def build(version: int | None) -> Any:
            q = at.query().nearest_to_text(words, columns="text")
            return q.select(_columns(table, "_score"))

        return build

    async def _snapshot_on_loop(self, table: str) -> list[dict[str, Any]]:
        """``Connection.snapshot`` (the same cache: re-read only when the table's version moved) as a coroutine on
        LanceDB's loop, inside a search's hand-off. Library errors reach whoever waits for it, who translates them."""
        at = _async_table(self.conn.tables[table])
        version = int(await at.version())  # checks out the latest version: sees other processes' writes
        cached = self.conn.snapshot_at(table, version)
        if cached is not None:
            return cached
        return self.conn.keep_snapshot(table, version, (await at.to_arrow()).to_pylist())

    def _leg_work(
        self, table: str, build: Callable[[int | None], Coroutine[Any, Any, Any]], where: Filter | None, limit: int
    ) -> Coroutine[Any, Any, Any]:
        """The coroutine of one leg (``_leg``); a filter that cannot be written fails here, before anything is sent."""
        at, text, sole = self._scope(table, where)
        self.conn.searched(table, legs=1)
        return _leg(at, build, text, limit, self._legs_owners(), table, sole)

    def _scope(self, table: str, where: Filter | None) -> tuple[Any, str | None, str | None]:
        """The async table, the filter's text, and the agent it names alone if the filter may be skipped (``_legs``)."""
        text = compile_filter(where)
        agent_only = where is not None and where.agent_id is not None and replace(where, agent_id=None).is_empty()
        shortcut = "://" not in self.conn.uri if self.sole_agent_shortcut is None else self.sole_agent_shortcut
        sole = str(where.agent_id) if where is not None and agent_only and shortcut else None
        return _async_table(self.conn.tables[table]), text, sole


async def _leg(
    table: Any,
    build: Callable[[int | None], Coroutine[Any, Any, Any]],
    where: str | None,
    limit: int,
    known: _Owners,
    name: str,
    sole: str | None,
) -> Any:
    """One leg: ``_legs`` with one query."""
    return (await _legs(table, [build], where, limit, known, name, sole))[0]


async def _legs(
    table: Any,
    builds: Sequence[Callable[[int | None], Coroutine[Any, Any, Any]]],
    where: str | None,
    limit: int,
    known: _Owners,
    name: str,
    sole: str | None,
) -> list[Any]:
    """Legs over one table, run together: each ``build``'s query, filtered by ``where`` before ranking (the async
    API's prefilter), best ``limit``.

    With ``sole``, an agent the filter names alone, a table whose rows all belong to that agent at the version the
    search starts from is searched without the filter: the same rows, so the same result. The table's version is
    read again after the queries; if it moved (a write from any process meanwhile, which may have added another
    agent's rows), the legs are run again with the filter. So an unfiltered result is only returned when it was
    read from a version proved to hold the agent's rows alone (versions only grow: equal before and after, no
    write landed between). The legs of one search share the two version reads. A table whose version moved within
    the last SETTLED_SECONDS is filtered without trying (``_Owners.settled``).
    """
    version = None
    if sole is not None and where and not known.sharing(name, sole):
        version = int(await table.version())  # checks out the newest version: other processes' writes are seen
        if not known.settled(name, version):
            known.churning += len(builds)
            version = None  # the row count a second old serves the probes (``_Owners.rows``)
        elif await known.sole(name, table, sole, where, version):
            queries = [await build(version) for build in builds]
            rows = await asyncio.gather(*(_arrow(q.limit(limit)) for q in queries))
            if int(await table.version()) == version:
                known.used += len(builds)
                return list(rows)
            known.fallbacks += len(builds)
    queries = [await build(version) for build in builds]
    return list(await asyncio.gather(*(_arrow((q.where(where) if where else q).limit(limit)) for q in queries)))


async def _arrow(query: Any) -> Any:
    """The query's rows as an Arrow table: ``AsyncQuery.to_arrow`` without its first step, a read of the table's
    schema (one more round trip to LanceDB's runtime, and a check of the newest version) that only serves blob
    columns, which these tables do not have; the vector query's copy of its result goes too. ~0.3 ms less per
    leg, the same rows (``python -m bench scale --profile DIR --orders``). LanceDB keeps the native query as ``_inner``;
    lancedb is pinned, and every search fails loudly (tests/test_search_scale.py) if that moves."""
    import pyarrow as pa

    stream = await query._inner.execute()
    return pa.Table.from_batches([batch async for batch in stream], stream.schema)
