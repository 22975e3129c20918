"""Rows of the searchable tables (dicts as LanceDB returns them) -> records (the frozen dataclasses of records.py)."""

from __future__ import annotations

from typing import Any

from ..records import Message, Passage, from_us


def message_from_row(r: dict[str, Any]) -> Message:
    return Message(
        id=r["id"],
        agent_id=r["agent_id"],
        conversation_id=r["conversation_id"],
        seq=r["seq"],
        role=r["role"],
        content=r["content"],
        created_at=from_us(r["created_us"]),
        payload=r["payload"],
    )


def passage_from_row(r: dict[str, Any]) -> Passage:
    return Passage(
        id=r["id"],
        agent_id=r["agent_id"],
        content=r["content"],
        tags=tuple(r["tags"] or ()),
        created_at=from_us(r["created_us"]),
        group_id=r["group_id"],
        chunk=r["chunk"],
    )
