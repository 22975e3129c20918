"""The operations callers use instead of reaching into the store: an agent's rows taken whole, a conversation's
messages, rows of no agent or without vectors, raw rows for backup (real LanceDB, hashing embedder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.base.errors import ValidationError
from tiermem.domain.memory import Memory
from tiermem.store import Store

from .conftest import memory_over


@pytest.fixture
def mem(tmp_path: Path) -> Memory:
    return memory_over(Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0))


def test_an_agents_rows_whole_and_deleting_them(mem: Memory) -> None:
    a, b = mem.ensure_agent("a").id, mem.ensure_agent("b").id
    archive = mem.archive
    archive.insert(a, "tea at five", ["x"])
    archive.insert(a, "the quote's tag", ["y", "it's"])
    archive.insert(b, "b's own passage", ["x"])
    logged = archive.log_messages(a, [{"role": "user", "content": "one", "conversation_id": "side"},
                                      {"role": "user", "content": "two"}, {"role": "assistant", "content": "three"}])
    archive.log_messages(b, [{"role": "user", "content": "b speaks"}])

    assert [p.content for p in archive.passages_of(a)] == ["tea at five", "the quote's tag"]
    assert [p.content for p in archive.passages_of(a, tags_any=["it's"])] == ["the quote's tag"]
    assert archive.passages_of(a, tags_any=[]) == []
    assert [m.content for m in archive.messages_of(a)] == ["two", "three", "one"]  # the default conversation first
    assert [m.content for m in archive.messages_since(a, "default", logged[2].seq)] == ["three"]
    assert archive.message(logged[0].id) == logged[0] and archive.message("message-none") is None
    assert archive.stray_rows([a]) == {"messages": 1, "passages": 1}
    assert archive.stray_rows([]) == {"messages": 4, "passages": 3}
    assert archive.missing_vectors() == {"messages": 0, "passages": 0}

    mem.delete_agent(b)
    assert archive.stray_rows([a]) == {"messages": 0, "passages": 0}
    assert len(archive.messages_of(a)) == 3 and len(archive.passages_of(a)) == 2  # the other agent's rows stay
    assert archive.delete_agent_data(a) == 5 and archive.stray_rows([]) == {"messages": 0, "passages": 0}


def test_raw_rows_are_only_those_of_recall_and_archival(mem: Memory) -> None:
    agent = mem.ensure_agent("a").id
    mem.archive.insert(agent, "kept", [])
    row = mem.archive.all_rows("passages")[0]
    assert row["content"] == "kept" and "vector" in mem.archive.schema_fields("passages")
    assert mem.archive.merge_rows("passages", "id", [row]) == 0  # already stored: a restore is re-runnable
    for call in (lambda: mem.archive.all_rows("blocks"), lambda: mem.archive.schema_fields("agents"),
                 lambda: mem.archive.merge_rows("meta", "key", [{"key": "schema_version", "value": "9"}])):
        with pytest.raises(ValidationError, match="not a table of recall or archival memory"):
            call()
    assert mem.archive.store.conn.meta()["schema_version"] == "1"  # nothing was written
