"""The search path at scale: legs that read only what ranking and a result need, probes that grow with the
table, and incremental upkeep of the vector index. Real LanceDB in a temporary directory; the hashing embedder (the model is irrelevant here)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tiermem.store.search as search_module
from tiermem.base.config import load_settings
from tiermem.base.records import Found
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Store
from tiermem.store.indexes import (
    REINDEX_MAX_ROWS,
    VECTOR_INDEX_MIN_ROWS,
    needs_retraining,
    trained_key,
    vector_partitions,
)
from tiermem.store.query import Filter, compile_filter
from tiermem.store.search import (
    EXACT_PROBE_ROWS,
    EXACT_REFINE,
    VECTOR_NPROBES,
    VECTOR_REFINE,
    _async_table,
    _leg,
    _loop,
    vector_nprobes,
    vector_refine,
)
from tiermem.store.search import (
    _legs as legs_together,
)


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    memory = open_memory(load_settings(data_dir=tmp_path / "d", embedding_model="hashing", optimize_every=0))
    memory.archive.embedder.wait(10)
    return memory


def _fill(memory: Memory, agent: str, n: int, start: int = 0) -> None:
    memory.archive.insert_many(
        agent,
        [
            (f"Note {i} about subject {i % 13} and place {i % 7}", [f"tag{i % 5}", "bulk"])
            for i in range(start, start + n)
        ],
    )


def test_legs_read_only_what_ranking_and_results_need(mem: Memory) -> None:
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 30)
    where = Filter(agent_id=agent)
    vec = mem.archive.embedder.embed(["subject 3 and place 2"])[0]
    vector = mem.archive.store.search.vector_search("passages", vec, where, 10)
    text = mem.archive.store.search.text_search("passages", "subject place", where, 10)
    assert vector and all(r.cosine is not None and r.bm25 is None for r in vector)
    assert text and all(r.bm25 is not None and r.cosine is None for r in text)
    assert all(r.tags and r.role is None and r.content.startswith("Note ") for r in [*vector, *text])  # typed, not rows
    hits = mem.archive.search(agent, "Note 12 about subject 12", top_k=3).hits
    assert hits[0].content == "Note 12 about subject 12 and place 5" and hits[0].tags == ("tag2", "bulk")
    mem.archive.log_messages(
        agent, [{"role": "assistant", "content": "the lighthouse keeper waved", "conversation_id": "c9"}]
    )
    msg = mem.archive.conversation_search(agent, "lighthouse keeper", limit=2).hits[0]
    assert (msg.role, msg.conversation_id) == ("assistant", "c9")


def _vector_index(mem: Memory) -> Any:
    (index,) = [i for i in mem.archive.store.conn.tables["passages"].list_indices() if i.columns == ["vector"]]
    return index


def test_vector_index_is_appended_to_then_retrained_as_the_table_grows(mem: Memory) -> None:
    """Upkeep appends new rows to the vector index, and trains it again once the table has 4x the rows it was
    trained on, with ~sqrt(rows) partitions; the meta table records the rows of each training."""
    store = mem.archive.store
    store.indexes.vector_index_min_rows = 300
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 320)
    store.indexes.optimize()
    built = _vector_index(mem)
    assert built.index_type == "IvfSq" and store.conn.meta()[trained_key("passages")] == "320"
    _fill(mem, agent, 10, start=320)
    assert store.indexes.index_health()["passages"]["vector_unindexed"] == 10
    store.indexes.optimize()
    health = store.indexes.index_health()["passages"]
    assert health["vector_indexed"] == 330 and health["vector_unindexed"] == 0
    assert store.conn.meta()[trained_key("passages")] == "320"  # appended to; not a new training run
    hits = mem.archive.search(agent, "Note 325 about subject 0 and place 3", top_k=1).hits
    assert hits[0].content.startswith("Note 325 ") and hits[0].vector_rank == 1
    _fill(mem, agent, 950, start=330)  # 1,280 rows: 4x the 320 it was trained on
    store.indexes.optimize()
    assert store.conn.meta()[trained_key("passages")] == "1280"
    assert store.conn.tables["passages"].index_stats(_vector_index(mem).name).num_indices == 1
    health = store.indexes.index_health()["passages"]
    assert health["vector_indexed"] == 1280 and health["vector_unindexed"] == 0
    hits = mem.archive.search(agent, "Note 1111 about subject 6 and place 5", top_k=1).hits
    assert hits[0].content.startswith("Note 1111 ") and hits[0].vector_rank == 1


def test_retraining_stops_at_its_size_limit() -> None:
    assert not needs_retraining(1_000, 3_999) and needs_retraining(1_000, 4_000)
    assert needs_retraining(25_000, REINDEX_MAX_ROWS) and not needs_retraining(25_000, REINDEX_MAX_ROWS + 1)
    assert not needs_retraining(1_000, 2_000, segments=4) and needs_retraining(1_000, 2_000, segments=5)
    assert not needs_retraining(20_001, 50_000, segments=16) and needs_retraining(20_001, 50_000, segments=17)
    assert not needs_retraining(30_000, REINDEX_MAX_ROWS + 1, segments=100)


def test_upkeep_keeps_a_small_index_in_at_most_four_segments(mem: Memory) -> None:
    """LanceDB's optimize appends each round of new rows to the vector index as one more segment, which every search
    then reads; on a table of up to 20k rows, upkeep trains the index again once it has more than four."""
    store = mem.archive.store
    store.indexes.vector_index_min_rows = 300
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 300)
    store.indexes.optimize()
    table, name = store.conn.tables["passages"], _vector_index(mem).name
    segments, trained = [], []
    for n in range(6):
        _fill(mem, agent, 10, start=300 + 10 * n)
        store.indexes.optimize()
        segments.append(table.index_stats(name).num_indices)
        trained.append(store.conn.meta()[trained_key("passages")])
    assert max(segments) <= 4 and segments[:3] == sorted(segments[:3])  # appended: a segment per upkeep, at most four
    retrained_at = trained.index(next(t for t in trained if t != "300"))  # then trained again, over every row
    assert segments[retrained_at] == 1 and trained[retrained_at] == str(310 + 10 * retrained_at)
    assert store.indexes.index_health()["passages"]["vector_indexed"] == 360
    hits = mem.archive.search(agent, "Note 335 about subject 10 and place 6", top_k=1).hits
    assert hits[0].content.startswith("Note 335 ") and hits[0].vector_rank == 1


def test_an_index_from_an_earlier_version_is_only_appended_to(mem: Memory) -> None:
    """An index with no training record in the meta table (built by an earlier tiermem) is never retrained."""
    store = mem.archive.store
    store.indexes.vector_index_min_rows = 300
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 300)
    store.indexes.optimize()
    store.conn.tables["meta"].delete(f"key = '{trained_key('passages')}'")
    for n in range(6):  # past 4x the rows, and past four segments
        _fill(mem, agent, 150, start=300 + 150 * n)
        store.indexes.optimize()
    assert trained_key("passages") not in store.conn.meta()  # never trained again
    assert store.conn.tables["passages"].index_stats(_vector_index(mem).name).num_indices > 4
    assert store.indexes.index_health()["passages"]["vector_indexed"] == 1200


def test_a_small_indexed_table_returns_what_the_exact_scan_returns(mem: Memory) -> None:
    """Past 1,000 rows the table has an index (an exact scan holds every vector in memory while it runs); up to
    EXACT_PROBE_ROWS a search probes every partition and re-ranks 10x the limit, and the vector leg returns the exact scan's rows (equal
    distances may come in another order)."""
    store = mem.archive.store
    assert store.indexes.vector_index_min_rows == VECTOR_INDEX_MIN_ROWS == 1_000
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 999)
    store.indexes.optimize()
    assert not [i for i in store.conn.tables["passages"].list_indices() if i.columns == ["vector"]]
    _fill(mem, agent, 3001, start=999)
    store.indexes.optimize()
    assert _vector_index(mem).index_type == "IvfSq"
    table = store.conn.tables["passages"]
    for query in [f"subject {i % 13} place {i % 7} note {37 * i}" for i in range(30)]:
        vec = mem.archive.embedder.embed([query])[0]
        leg = [
            (r.id, round(1.0 - (r.cosine or 0.0), 5))
            for r in store.search.vector_search("passages", vec, Filter(agent_id=agent), 10)
        ]
        exact = table.search(vec).distance_type("cosine").select(["id", "_distance"]).bypass_vector_index().limit(10)
        truth = [(r["id"], round(r["_distance"], 5)) for r in exact.to_list()]
        assert [d for _, d in leg] == [d for _, d in truth]  # the same distances at every rank (ties may swap ids)
        assert {i for i, d in leg if d < truth[-1][1]} == {i for i, d in truth if d < truth[-1][1]}


def test_probes_grow_with_the_table() -> None:
    """Every partition up to 20k rows; then 24 up to ~230k rows (~480 partitions), then one partition in 20: 50 of
    the 1,000 at 1M rows."""
    assert vector_nprobes(0) == VECTOR_NPROBES == 24 and vector_nprobes(1_200) == 1_200
    assert vector_nprobes(EXACT_PROBE_ROWS) == EXACT_PROBE_ROWS == 20_000
    assert vector_nprobes(EXACT_PROBE_ROWS + 1) == vector_nprobes(100_000) == 24
    assert vector_nprobes(1_000_000) == 50 and vector_nprobes(10_000_000) == 159
    # ~sqrt(rows) partitions, with at least 256 rows each (LanceDB's k-means sample per partition)
    assert [vector_partitions(n) for n in (100, 1_000, 20_000, 65_536, 100_000, 1_000_000)] == [
        1,
        3,
        78,
        256,
        316,
        1_000,
    ]
    assert (
        vector_refine(EXACT_PROBE_ROWS) == EXACT_REFINE == 10
        and vector_refine(EXACT_PROBE_ROWS + 1) == VECTOR_REFINE == 2
    )


def _legs(store: Store, agent: str, query: str, vec: list[float], *, shortcut: bool) -> tuple[list[Found], list[Found]]:
    store.search.sole_agent_shortcut = shortcut
    where = Filter(agent_id=agent)
    return store.search.vector_search("passages", vec, where, 10), store.search.text_search(
        "passages", query, where, 10
    )


def _rows(agent: str, vec: list[float], n: int, content: str) -> list[dict]:
    return [
        {
            "id": f"{agent}-{i}",
            "agent_id": agent,
            "group_id": f"{agent}-{i}",
            "chunk": 0,
            "content": content,
            "tags": ["x"],
            "text": content,
            "created_us": 1_700_000_000_000_000 + i,
            "vector": list(vec),
        }
        for i in range(n)
    ]


def _one_agent(mem: Memory, rows: int) -> tuple[Store, str, str, list[float]]:
    """The store, agent ``a`` holding ``rows`` passages (``_fill``), and a query that matches some with its vector."""
    a = mem.ensure_agent("a").id
    _fill(mem, a, rows)
    query = "Note 7 about subject 7 and place 0"
    return mem.archive.store, a, query, mem.archive.embedder.embed([query])[0]


def test_a_sole_agent_search_skips_the_filter_until_another_agent_writes(mem: Memory) -> None:
    """While one agent owns every row, its legs run without the agent filter and return exactly what the filtered
    legs return; once another connection (another process) writes a second agent's rows, which match the query
    better, every search filters again and each agent sees its own rows only."""
    store, a, query, vec = _one_agent(mem, 40)
    owners = store.search._legs_owners()
    used = owners.used
    fast = _legs(store, a, query, vec, shortcut=True)
    assert owners.used == used + 2  # both legs ran without the filter
    assert fast == _legs(store, a, query, vec, shortcut=False) and fast[0] and fast[1]
    assert _legs(store, a, query, vec, shortcut=True) == fast and owners.used == used + 4  # the proof is reused
    other = Store(store.uri, embedding_model=store.conn.embedding_model, embedding_dim=store.conn.embedding_dim)
    other.rows.add_rows("passages", _rows("b", vec, 12, query))  # the query's own vector and text: better matches
    t = store.conn.tables["passages"]
    for unfiltered in (
        t.search(query, query_type="fts", fts_columns="text").limit(10).to_list(),
        t.search(vec, vector_column_name="vector").distance_type("cosine").limit(10).to_list(),
    ):
        assert "b" in {r["agent_id"] for r in unfiltered}  # without the filter, b's rows would be found
    mine = _legs(store, a, query, vec, shortcut=True)
    assert owners.used == used + 4 and mine == _legs(store, a, query, vec, shortcut=False)
    assert all(r.id.startswith("passage") for leg in mine for r in leg) and mine[1] == fast[1]
    theirs = _legs(store, "b", query, vec, shortcut=True)
    assert theirs == _legs(store, "b", query, vec, shortcut=False)
    assert theirs[0] and theirs[1] and all(r.id.startswith("b-") for leg in theirs for r in leg)
    hits = mem.archive.search(a, query, top_k=5).hits
    assert hits and not any(h.id.startswith("b-") for h in hits)


def test_a_table_written_while_it_is_searched_is_filtered_at_once_until_it_holds_still(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search of a table whose version moved within the last SETTLED_SECONDS (a conversation logged while it is
    searched) filters at once, without counting a proof or running its legs twice; once the version has held that
    long, the agent is proved sole again and the filter is skipped. Every result equals the filtered legs'."""
    store, a, query, vec = _one_agent(mem, 30)
    owners = store.search._legs_owners()
    first = _legs(store, a, query, vec, shortcut=True)  # the first search of the table tries at once
    used, churning, fallbacks = owners.used, owners.churning, owners.fallbacks
    assert used >= 2 and first == _legs(store, a, query, vec, shortcut=False)
    monkeypatch.setattr(search_module, "SETTLED_SECONDS", 3600.0)  # no pause of the machine's makes it hold still
    for n in range(3):  # a write before each search: both legs filtered, the result still the agent's own
        _fill(mem, a, 1, start=100 + n)
        moved = _legs(store, a, query, vec, shortcut=True)
        churning += 2
        assert owners.churning == churning and owners.used == used and owners.fallbacks == fallbacks
        assert moved == _legs(store, a, query, vec, shortcut=False)
    monkeypatch.setattr(search_module, "SETTLED_SECONDS", 0.0)  # as if the version had held still since
    settled = _legs(store, a, query, vec, shortcut=True)
    assert owners.used == used + 2 and owners.churning == churning and owners.fallbacks == fallbacks
    assert settled == _legs(store, a, query, vec, shortcut=False)


def _racing(mem: Memory) -> tuple[Store, str, Any, Any]:
    """A store holding agent ``a``'s 20 passages, ``a``'s id, and the passages table's async handle on a second
    connection (the other writer) and on the store's own."""
    store = mem.archive.store
    a = mem.ensure_agent("a").id
    _fill(mem, a, 20)
    other = Store(store.uri, embedding_model=store.conn.embedding_model, embedding_dim=store.conn.embedding_dim)
    return store, a, _async_table(other.conn.tables["passages"]), _async_table(store.conn.tables["passages"])


def test_a_write_during_an_unfiltered_leg_sends_it_back_to_the_filter(mem: Memory) -> None:
    """The table's version is read again after an unfiltered leg: a write that lands while it runs (here another
    connection adds a second agent's rows in between) makes the leg run again with the filter."""
    store, a, theirs, mine = _racing(mem)
    calls: list[bool] = []

    async def build(version: int | None) -> Any:
        if not calls:  # the first (unfiltered) attempt: another agent's better matches land first
            await theirs.add(_rows("b", [1.0] * store.conn.embedding_dim, 5, "Note 3 about subject 3"))
        calls.append(True)
        return mine.query().nearest_to_text("Note 3 about subject 3", columns="text").select(["id", "agent_id"])

    owners = store.search._legs_owners()
    used, fallbacks = owners.used, owners.fallbacks
    where = compile_filter(Filter(agent_id=a))
    rows = asyncio.run_coroutine_threadsafe(_leg(mine, build, where, 10, owners, "passages", a), _loop()).result()
    assert len(calls) == 2 and owners.fallbacks == fallbacks + 1 and owners.used == used
    assert rows.num_rows == 10 and set(rows.column("agent_id").to_pylist()) == {a}
    unfiltered = (
        store.conn.tables["passages"].search("Note 3 about subject 3", query_type="fts", fts_columns="text").limit(10)
    )
    assert "b" in {r["agent_id"] for r in unfiltered.to_list()}  # the first attempt's rows would have held b's


def test_both_legs_and_the_marks_in_one_hand_off_equal_the_separate_reads(mem: Memory) -> None:
    """``search_legs`` returns what ``vector_search``, ``text_search`` and ``unembedded_marks`` return, and its marks
    are never stale: they are re-read whenever the meta table's version moves, here by another connection's write."""
    store, a, query, vec = _one_agent(mem, 40)
    where = Filter(agent_id=a)
    owners = store.search._legs_owners()
    for shortcut in (True, False):
        store.search.sole_agent_shortcut = shortcut
        used = owners.used
        vector_rows, text_rows, marks = store.search.search_legs("passages", query, vec, where, 10)
        assert owners.used == used + (2 if shortcut else 0)  # both legs ran without the filter, or both with it
        assert vector_rows == store.search.vector_search("passages", vec, where, 10) and len(vector_rows) == 10
        assert text_rows == store.search.text_search("passages", query, where, 10) and text_rows
        assert marks == store.rows.unembedded_marks("passages") == {}
    other = Store(store.uri, embedding_model=store.conn.embedding_model, embedding_dim=store.conn.embedding_dim)
    other.rows.mark_unembedded("passages")  # another process announces rows stored without vectors
    marks = store.search.search_legs("passages", query, vec, where, 10)[2]
    assert list(marks) == [f"unembedded:passages:{other.conn.writer}"] and marks == store.rows.unembedded_marks(
        "passages"
    )
    other.rows._clear_marks(marks)
    assert store.search.search_legs("passages", query, vec, where, 10)[2] == {}


def test_a_row_another_process_stored_without_a_vector_is_found_by_meaning_in_the_next_search(mem: Memory) -> None:
    """Once an agent's searches take the one-hand-off path (its speakers known, the model loaded), a row stored
    without a vector by another connection is still embedded by the next search and found by its vector there."""
    store = mem.archive.store
    a = mem.ensure_agent("a").id
    _fill(mem, a, 30)
    assert mem.archive.search(a, "Note 3 about subject 3", top_k=3).hits  # the agent's speakers are now known
    other = Store(store.uri, embedding_model=store.conn.embedding_model, embedding_dim=store.conn.embedding_dim)
    content = "Lighthouse keeper logbook entry about the northern storm"
    other.rows.add_rows(
        "passages",
        [
            {
                "id": "late-1",
                "agent_id": a,
                "group_id": "late-1",
                "chunk": 0,
                "content": content,
                "tags": [],
                "text": content,
                "created_us": 1_800_000_000_000_000,
                "vector": None,
            }
        ],
    )
    assert store.rows.unembedded_marks("passages")
    result = mem.archive.search(a, content, top_k=3)
    assert result.mode == "hybrid" and result.hits[0].id == "late-1" and result.hits[0].vector_rank == 1
    assert not result.notes and store.rows.count("passages", Filter(missing_vector=True)) == 0


def test_a_write_during_legs_run_together_sends_both_back_to_the_filter(mem: Memory) -> None:
    """Legs run together share one version read before and one after: a write that lands while either runs (here
    another connection adds a second agent's rows during the first) makes both run again with the filter."""
    store, a, theirs, mine = _racing(mem)
    calls: list[str] = []

    async def vector(version: int | None) -> Any:
        if not calls:  # the first (unfiltered) attempt: another agent's better matches land first
            await theirs.add(_rows("b", [1.0] * store.conn.embedding_dim, 5, "Note 3 about subject 3"))
        calls.append("vector")
        return mine.query().nearest_to([1.0] * store.conn.embedding_dim).column("vector").select(["id", "agent_id"])

    async def text(version: int | None) -> Any:
        calls.append("text")
        return mine.query().nearest_to_text("Note 3 about subject 3", columns="text").select(["id", "agent_id"])

    owners = store.search._legs_owners()
    used, fallbacks = owners.used, owners.fallbacks
    where = compile_filter(Filter(agent_id=a))
    work = legs_together(mine, [vector, text], where, 10, owners, "passages", a)
    legs = asyncio.run_coroutine_threadsafe(work, _loop()).result()
    assert calls == ["vector", "text", "vector", "text"] and owners.fallbacks == fallbacks + 2 and owners.used == used
    assert [leg.num_rows for leg in legs] == [10, 10]
    assert all(set(leg.column("agent_id").to_pylist()) == {a} for leg in legs)
