"""Rows (dicts as LanceDB returns them) <-> records (the frozen dataclasses of records.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..records import Agent, Block, BlockVersion, Message, Passage, from_us, to_us


def agent_from_row(r: dict[str, Any]) -> Agent:
    return Agent(
        id=r["id"],
        name=r["name"],
        system=r["system"],
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
        metadata=json.loads(r["metadata"] or "{}"),
    )


def agent_to_row(a: Agent) -> dict[str, Any]:
    return {
        "id": a.id,
        "name": a.name,
        "system": a.system,
        "metadata": json.dumps(a.metadata, sort_keys=True),
        "created_us": to_us(a.created_at),
        "updated_us": to_us(a.updated_at),
    }


def block_from_row(r: dict[str, Any]) -> Block:
    return Block(
        id=r["id"],
        label=r["label"],
        value=r["value"],
        limit=r["limit"],
        description=r["description"],
        read_only=r["read_only"],
        version=r["version"],
        updated_at=from_us(r["updated_us"]),
        metadata=json.loads(r["metadata"] or "{}"),
    )


def block_to_row(b: Block) -> dict[str, Any]:
    return {
        "id": b.id,
        "label": b.label,
        "value": b.value,
        "limit": b.limit,
        "description": b.description,
        "read_only": b.read_only,
        "metadata": json.dumps(b.metadata, sort_keys=True),
        "version": b.version,
        "updated_us": to_us(b.updated_at),
    }


def version_from_row(r: dict[str, Any]) -> BlockVersion:
    return BlockVersion(
        block_id=r["block_id"],
        version=r["version"],
        label=r["label"],
        value=r["value"],
        limit=r["limit"],
        description=r["description"],
        read_only=r["read_only"],
        operation=r["operation"],
        actor=r["actor"],
        created_at=from_us(r["created_us"]),
    )


def version_to_row(v: BlockVersion) -> dict[str, Any]:
    return {
        "key": f"{v.block_id}:{v.version}",
        "block_id": v.block_id,
        "version": v.version,
        "label": v.label,
        "value": v.value,
        "limit": v.limit,
        "description": v.description,
        "read_only": v.read_only,
        "operation": v.operation,
        "actor": v.actor,
        "created_us": to_us(v.created_at),
    }


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


def newest_by(rows: Iterable[dict[str, Any]], key: str = "id") -> list[dict[str, Any]]:
    """One row per ``key``: the one with the highest ``version`` (ties: the first seen), in first-seen order.

    Concurrent first starts may each insert a block (LanceDB's insert-only merge does not conflict), and one of
    those inserts can land after edits began. Every reader must then agree on the newest row, so a conditional
    update (``version = N``) only ever targets it and the stale copy is never edited or shown.
    """
    best: dict[Any, dict[str, Any]] = {}
    for r in rows:
        seen = best.get(r[key])
        if seen is None or int(r["version"]) > int(seen["version"]):
            best[r[key]] = r
    return list(best.values())


def first_by(rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Drop duplicate rows (same key) that a concurrent first start may have written."""
    seen: set[Any] = set()
    out = []
    for r in rows:
        if r[key] not in seen:
            seen.add(r[key])
            out.append(r)
    return out

