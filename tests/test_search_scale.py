"""The search path at scale: legs that read only what ranking needs, the fetch of the top k's shown columns by
row address (checked by id, with a fallback when the table moved under the search), and incremental upkeep of
the vector index. Real LanceDB in a temporary directory; the hashing embedder (the model is irrelevant here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.config import load_settings
from tiermem.factory import open_memory
from tiermem.memory import Memory
from tiermem.store.query import Filter
from tiermem.store.search import HIT_COLUMNS, LEG_COLUMNS


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    memory = open_memory(load_settings(data_dir=tmp_path / "d", embedding_model="hashing", optimize_every=0))
    memory.archive.embedder.wait(10)
    return memory


def _fill(memory: Memory, agent: str, n: int, start: int = 0) -> None:
    memory.archive.insert_many(
        agent, [(f"Note {i} about subject {i % 13} and place {i % 7}", [f"tag{i % 5}", "bulk"]) for i in range(start, start + n)])


def test_legs_read_only_ranking_columns_and_search_shows_the_rest(mem: Memory) -> None:
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 30)
    where = Filter(agent_id=agent)
    vec = mem.archive.embedder.embed(["subject 3 and place 2"])[0]
    for rows, score in ((mem.archive.store.vector_search("passages", vec, where, 10), "_distance"),
                        (mem.archive.store.text_search("passages", "subject place", where, 10), "_score")):
        assert rows and all(set(r) == {*LEG_COLUMNS, score, "_rowid"} for r in rows)
    hits = mem.archive.search(agent, "Note 12 about subject 12", top_k=3).hits
    assert hits[0].content == "Note 12 about subject 12 and place 5" and hits[0].tags == ("tag2", "bulk")
    mem.archive.log_messages(agent, [{"role": "assistant", "content": "the lighthouse keeper waved", "conversation_id": "c9"}])
    msg = mem.archive.conversation_search(agent, "lighthouse keeper", limit=2).hits[0]
    assert (msg.role, msg.conversation_id) == ("assistant", "c9")


def test_fetch_falls_back_to_ids_when_the_table_moved_under_the_search(mem: Memory) -> None:
    """Row addresses are only good for the version a leg read: after a delete and a compaction in between,
    the fetch still returns each surviving row's own columns (never another row's) and drops the deleted one."""
    agent = mem.ensure_agent("default").id
    for i in range(6):  # one fragment per insert, so compaction rewrites the addresses
        _fill(mem, agent, 5, start=5 * i)
    found = mem.archive.store.text_search("passages", "subject", Filter(agent_id=agent), 30)
    before = mem.archive.store.fetch_rows("passages", found)
    assert set(before) == {r["id"] for r in found} and all(set(v) == {"id", *HIT_COLUMNS["passages"]} for v in before.values())
    bogus = [{**found[1], "_rowid": found[2]["_rowid"]}]  # an address that holds another row
    assert mem.archive.store.fetch_rows("passages", bogus) == {found[1]["id"]: before[found[1]["id"]]}
    gone = found[0]["id"]
    mem.archive.delete(agent, gone)
    mem.archive.store.optimize()  # compaction: fragments merged, row addresses change
    after = mem.archive.store.fetch_rows("passages", found)
    assert gone not in after and set(after) == {r["id"] for r in found} - {gone}
    assert all(after[i] == before[i] for i in after)


def test_vector_index_is_updated_incrementally(mem: Memory) -> None:
    """Once built, the vector index is never rebuilt by upkeep: ``optimize`` appends new rows to it."""
    mem.archive.store.vector_index_min_rows = 300
    agent = mem.ensure_agent("default").id
    _fill(mem, agent, 320)
    mem.archive.store.optimize()
    (built,) = [i for i in mem.archive.store._tables["passages"].list_indices() if i.columns == ["vector"]]
    assert built.index_type == "IvfSq"
    _fill(mem, agent, 10, start=320)
    assert mem.archive.store.index_health()["passages"]["vector_unindexed"] == 10
    mem.archive.store.optimize()
    health = mem.archive.store.index_health()["passages"]
    assert health["vector_indexed"] == 330 and health["vector_unindexed"] == 0
    (after,) = [i for i in mem.archive.store._tables["passages"].list_indices() if i.columns == ["vector"]]
    assert after.created_at == built.created_at  # the same index, appended to; not a new training run
    hits = mem.archive.search(agent, "Note 325 about subject 0 and place 3", top_k=1).hits
    assert hits[0].content.startswith("Note 325 ") and hits[0].vector_rank == 1
