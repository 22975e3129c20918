"""The one set of core row mappers (core/rows.py): typed rows that match the row shapes, checked on the way in."""

from __future__ import annotations

from typing import get_type_hints

import pytest

from tiermem.base.errors import StoreError
from tiermem.base.records import Agent, now
from tiermem.core import rows
from tiermem.core.object_layout import agent_json, agent_of, loads


def test_each_typed_row_has_exactly_the_fields_of_its_table() -> None:
    types = {
        "agents": rows.AgentRow,
        "blocks": rows.BlockRow,
        "attachments": rows.AttachmentRow,
        "block_history": rows.HistoryRow,
        "requests": rows.RequestRow,
        "conversations": rows.ConversationRow,
    }
    assert set(types) == set(rows.FIELDS) == set(rows.CORE_TABLES)
    for table, row_type in types.items():
        assert tuple(get_type_hints(row_type)) == rows.FIELDS[table], table


def test_rows_are_checked_on_the_way_in() -> None:
    row = rows.attachment_row("agent-1", "block-1", 5)
    assert rows.rows_of("attachments", [{**row, "extra": 1}]) == [row]  # other fields dropped
    with pytest.raises(StoreError, match="A row of attachments lacks block_id, created_us; nothing was written"):
        rows.rows_of("attachments", [{"key": "a:b", "agent_id": "a"}])
    older = rows.rows_of(
        "requests", [{"key": "k", "agent_id": "a", "tool": "t", "result": "r", "created_us": 0}], older=True
    )
    assert older == [{"key": "k", "agent_id": "a", "tool": "t", "args_sha256": None, "result": "r", "created_us": 0}]


def test_the_object_core_keeps_an_agent_as_its_row_with_metadata_as_an_object() -> None:
    t = now()
    agent = Agent(id="agent-1", name="a", system="be brief", created_at=t, updated_at=t, metadata={"k": "v"})
    stored = loads(agent_json(agent), "agent")
    assert stored == {**rows.agent_row(agent), "metadata": {"k": "v"}}
    assert agent_of(agent_json(agent)) == agent == rows.agent_from_row(rows.agent_row(agent))
    with pytest.raises(StoreError, match=r"An agent row is malformed .*; restore it from a backup\."):
        agent_of(b'{"id": "agent-1"}')
