"""Core-state records as rows of ``protocol.FIELDS`` (the shape backups, migration and ``all_rows`` use), and back.

Rows hold metadata as JSON text and times as microseconds since the epoch; a row read back is checked field by
field, and a malformed one is a ``StoreError`` that says so (nothing is written from it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..base.errors import StoreError
from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult, from_us, now, to_us


def agent_row(a: Agent) -> dict[str, Any]:
    return {"id": a.id, "name": a.name, "system": a.system, "metadata": json.dumps(a.metadata, sort_keys=True),
            "created_us": to_us(a.created_at), "updated_us": to_us(a.updated_at)}


def block_row(b: Block) -> dict[str, Any]:
    return {"id": b.id, "label": b.label, "value": b.value, "limit": b.limit, "description": b.description,
            "read_only": b.read_only, "metadata": json.dumps(b.metadata, sort_keys=True), "version": b.version,
            "updated_us": to_us(b.updated_at)}


def version_row(v: BlockVersion) -> dict[str, Any]:
    return {"key": f"{v.block_id}:{v.version}", "block_id": v.block_id, "version": v.version, "label": v.label,
            "value": v.value, "limit": v.limit, "description": v.description, "read_only": v.read_only,
            "operation": v.operation, "actor": v.actor, "created_us": to_us(v.created_at)}


def _metadata(raw: object) -> dict[str, str]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, Mapping):
        raise ValueError(f"metadata must be a JSON object, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def agent_from_row(r: Mapping[str, Any]) -> Agent:
    try:
        return Agent(id=str(r["id"]), name=str(r["name"]), system=str(r["system"] or ""),
                     created_at=from_us(int(r["created_us"])), updated_at=from_us(int(r["updated_us"])),
                     metadata=_metadata(r.get("metadata") or "{}"))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"An agent row is malformed ({exc!r}); nothing was written from it.") from exc


def block_from_row(r: Mapping[str, Any]) -> Block:
    try:
        return Block(id=str(r["id"]), label=str(r["label"]), value=str(r["value"]), limit=int(r["limit"]),
                     description=str(r["description"] or ""), read_only=bool(r["read_only"]), version=int(r["version"]),
                     updated_at=from_us(int(r["updated_us"])), metadata=_metadata(r.get("metadata") or "{}"))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A block row is malformed ({exc!r}); nothing was written from it.") from exc


def version_from_row(r: Mapping[str, Any]) -> BlockVersion:
    try:
        return BlockVersion(block_id=str(r["block_id"]), version=int(r["version"]), label=str(r["label"]),
                            value=str(r["value"]), limit=int(r["limit"]), description=str(r["description"] or ""),
                            read_only=bool(r["read_only"]), operation=str(r["operation"]), actor=str(r["actor"]),
                            created_at=from_us(int(r["created_us"])))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A block history row is malformed ({exc!r}); nothing was written from it.") from exc


def window_row(w: ContextWindow) -> dict[str, Any]:
    """A conversation's agent-loop state as a ``conversations`` row, stamped with the time it is written."""
    return {"key": f"{w.agent_id}:{w.conversation_id}", "agent_id": w.agent_id, "conversation_id": w.conversation_id,
            "start_seq": w.start_seq, "summary_id": w.summary_id, "turns": w.turns, "sleeptime_seq": w.sleeptime_seq,
            "updated_us": to_us(now())}


def window_from_row(r: Mapping[str, Any]) -> ContextWindow:
    try:
        return ContextWindow(agent_id=str(r["agent_id"]), conversation_id=str(r["conversation_id"]),
                             start_seq=int(r["start_seq"]), summary_id=str(r["summary_id"] or ""),
                             turns=int(r["turns"]), sleeptime_seq=int(r["sleeptime_seq"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A conversation-state row is malformed ({exc!r}); nothing was written from it.") from exc


def result_row(r: StoredResult) -> dict[str, Any]:
    return {"key": r.key, "agent_id": r.agent_id, "tool": r.tool, "args_sha256": r.args_sha256, "result": r.result,
            "created_us": to_us(r.created_at)}


def result_from_row(r: Mapping[str, Any]) -> StoredResult:
    try:
        return StoredResult(key=str(r["key"]), agent_id=str(r["agent_id"]), tool=str(r["tool"]),
                            args_sha256=str(r["args_sha256"]), result=str(r["result"]),
                            created_at=from_us(int(r["created_us"] or 0)))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"An idempotency record is malformed ({exc!r}); nothing was written from it.") from exc
