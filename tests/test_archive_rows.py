"""The operations callers use instead of reaching into the store: an agent's rows taken whole, a conversation's
messages, rows of no agent or without vectors, raw rows for backup (real LanceDB, hashing embedder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.base.errors import ValidationError
from tiermem.domain.memory import Memory
from tiermem.store import SCHEMA_VERSION, Store

from .conftest import memory_over


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    return memory_over(Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0))


def test_an_agents_rows_whole_and_deleting_them(mem: Memory) -> None:
    a, b = mem.ensure_agent("a").id, mem.ensure_agent("b").id
    archive = mem.archive
    rows = archive.rows
    archive.insert(a, "tea at five", ["x"])
    archive.insert(a, "the quote's tag", ["y", "it's"])
    archive.insert(b, "b's own passage", ["x"])
    logged = archive.log_messages(
        a,
        [
            {"role": "user", "content": "one", "conversation_id": "side"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "three"},
        ],
    )
    archive.log_messages(b, [{"role": "user", "content": "b speaks"}])

    assert [p.content for p in rows.passages_of(a)] == ["tea at five", "the quote's tag"]
    assert [p.content for p in rows.passages_of(a, tags_any=["it's"])] == ["the quote's tag"]
    assert rows.passages_of(a, tags_any=[]) == []
    assert [m.content for m in rows.messages_of(a)] == ["two", "three", "one"]  # the default conversation first
    assert [m.content for m in rows.messages_since(a, "default", logged[2].seq)] == ["three"]
    assert rows.message(logged[0].id) == logged[0] and rows.message("message-none") is None
    assert rows.stray_rows([a]) == {"messages": 1, "passages": 1}
    assert rows.stray_rows([]) == {"messages": 4, "passages": 3}
    assert archive.vectors.missing() == {"messages": 0, "passages": 0, "file_chunks": 0}

    mem.delete_agent(b)
    assert rows.stray_rows([a]) == {"messages": 0, "passages": 0}
    assert len(rows.messages_of(a)) == 3 and len(rows.passages_of(a)) == 2  # the other agent's rows stay
    assert rows.delete_agent_data(a) == 5 and rows.stray_rows([]) == {"messages": 0, "passages": 0}


def test_raw_rows_are_only_those_of_recall_and_archival(mem: Memory) -> None:
    agent = mem.ensure_agent("a").id
    mem.archive.insert(agent, "kept", [])
    rows = mem.archive.rows
    row = rows.backup_rows("passages", vectors=False)[0]
    assert row["content"] == "kept" and row["vector"] is None and "vector" in rows.fields("passages")
    assert rows.restore_rows("passages", "id", [row], model=mem.archive.vectors.model) == 0  # a restore is re-runnable
    for call in (
        lambda: rows.backup_rows("blocks", vectors=True),
        lambda: rows.fields("agents"),
        lambda: rows.restore_rows("meta", "key", [{"key": "schema_version", "value": "9"}], model=None),
    ):
        with pytest.raises(ValidationError, match="not a table of recall or archival memory"):
            call()
    assert mem.archive.store.conn.meta()["schema_version"] == str(SCHEMA_VERSION)  # nothing was written


def test_backed_up_vectors_are_kept_only_for_the_same_model(mem: Memory) -> None:
    """A backup keeps vectors rounded; a restore keeps them only when they come from this store's model."""
    agent = mem.ensure_agent("a").id
    mem.archive.insert(agent, "tea at five", [])
    rows = mem.archive.rows
    (row,) = rows.backup_rows("passages", vectors=True)
    assert len(row["vector"]) == 384 and all(round(x, 7) == x for x in row["vector"])
    mem.archive.rows.delete_agent_data(agent)
    assert rows.restore_rows("passages", "id", [row], model=("another-model", 384)) == 1
    assert mem.archive.vectors.missing()["passages"] == 1  # another model's vector: embedded again later
    mem.archive.rows.delete_agent_data(agent)
    assert (
        rows.restore_rows("passages", "id", [{**row, "vector": row["vector"][:10]}], model=mem.archive.vectors.model)
        == 1
    )
    assert mem.archive.vectors.missing()["passages"] == 1  # the wrong length: dropped too
    mem.archive.rows.delete_agent_data(agent)
    assert rows.restore_rows("passages", "id", [row], model=mem.archive.vectors.model) == 1
    assert mem.archive.vectors.missing()["passages"] == 0
