"""Core-state records as rows, and back: the one set of mappers both core backends (and backups, migration,
doctor) use. Light: no storage library is imported here or by what it imports.

A row of table T has the fields ``FIELDS[T]``, typed below (``AgentRow`` ... ``ConversationRow``;
``CoreRow`` is any of them). Rows hold times as microseconds since the epoch and metadata as JSON text; the
object-storage core keeps the same fields in its JSON objects, metadata as a JSON object (``with_metadata``).
A row read back is checked field by field; a malformed one is a ``StoreError`` that says so."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, cast, get_type_hints

from ..base.errors import LabelTakenError, StoreError, ValidationError
from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult, from_us, now, to_us

# table -> unique key. Row shapes (``FIELDS``, typed below) are the same in every core implementation (the LanceDB
# schemas an older tiermem kept them in), so backups, migration and tests read and write them alike.
CORE_TABLES: dict[str, str] = {
    "agents": "id",
    "blocks": "id",
    "attachments": "key",
    "block_history": "key",
    "requests": "key",
    "conversations": "key",
}
FIELDS: dict[str, tuple[str, ...]] = {
    "agents": ("id", "name", "system", "metadata", "created_us", "updated_us"),
    "blocks": ("id", "label", "value", "limit", "description", "read_only", "metadata", "version", "updated_us"),
    "attachments": ("key", "agent_id", "block_id", "created_us"),
    "block_history": (
        "key",
        "block_id",
        "version",
        "label",
        "value",
        "limit",
        "description",
        "read_only",
        "operation",
        "actor",
        "created_us",
    ),
    "requests": ("key", "agent_id", "tool", "args_sha256", "result", "created_us"),
    "conversations": (
        "key",
        "agent_id",
        "conversation_id",
        "start_seq",
        "summary_id",
        "turns",
        "sleeptime_seq",
        "updated_us",
    ),
}

ROW_HINT = "nothing was written from it"  # what a malformed row's error adds, unless the caller says otherwise
STORED_HINT = "restore it from a backup"  # ... for a stored object of the object-storage core


class AgentRow(TypedDict):
    id: str
    name: str
    system: str
    metadata: str
    created_us: int
    updated_us: int


class BlockRow(TypedDict):
    id: str
    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    metadata: str
    version: int
    updated_us: int


class AttachmentRow(TypedDict):
    key: str
    agent_id: str
    block_id: str
    created_us: int


class HistoryRow(TypedDict):
    key: str
    block_id: str
    version: int
    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    operation: str
    actor: str
    created_us: int


class RequestRow(TypedDict):
    key: str
    agent_id: str
    tool: str
    args_sha256: str
    result: str
    created_us: int


class ConversationRow(TypedDict):
    key: str
    agent_id: str
    conversation_id: str
    start_seq: int
    summary_id: str
    turns: int
    sleeptime_seq: int
    updated_us: int


CoreRow = AgentRow | BlockRow | AttachmentRow | HistoryRow | RequestRow | ConversationRow


_ROW_TYPES: dict[str, type] = {
    "agents": AgentRow,
    "blocks": BlockRow,
    "attachments": AttachmentRow,
    "block_history": HistoryRow,
    "requests": RequestRow,
    "conversations": ConversationRow,
}


def _typed(kind: type) -> dict[str, tuple[str, ...]]:
    return {t: tuple(f for f, k in get_type_hints(row).items() if k is kind) for t, row in _ROW_TYPES.items()}


INTEGER_FIELDS = _typed(int)  # table -> its fields holding whole numbers (versions, limits, counts, times)
BOOLEAN_FIELDS = _typed(bool)  # table -> its fields holding true or false


def mistyped(table: str, row: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first field of a row of ``table`` (from a backup) whose value is not of its type, with what it must be;
    None: every typed field is. A whole number is an integer (not a bool, a float or text: the readers would cut
    2.5 to 2 and store "7" as text); true or false a bool (or 0 or 1, as SQLite holds it: "no" would read as true)."""
    for f in INTEGER_FIELDS.get(table, ()):
        if f in row and (isinstance(row[f], bool) or not isinstance(row[f], int)):
            return f, "a whole number"
    for f in BOOLEAN_FIELDS.get(table, ()):
        if f in row and not (isinstance(row[f], bool) or (type(row[f]) is int and row[f] in (0, 1))):
            return f, "true or false"
    return None


def as_read(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` of ``table`` with its typed fields as the mappers read them (``int(...)``, ``bool(...)``: a time a
    restore before ``mistyped`` stored as text, "7", reads as 7): what a backup writes, so that ``mistyped`` passes
    the rows a store holds and works with. A value the mappers could not read either is left as it is."""
    out = dict(row)
    for f in INTEGER_FIELDS.get(table, ()):
        value: Any = out.get(f)
        if f in out and (isinstance(value, bool) or not isinstance(value, int)):
            try:
                out[f] = int(value)
            except (TypeError, ValueError, OverflowError):
                pass  # unreadable here too: the restore names it
    for f in BOOLEAN_FIELDS.get(table, ()):
        if f in out:
            out[f] = bool(out[f])
    return out


def rows_of(table: str, raw: Iterable[Mapping[str, Any]], *, older: bool = False) -> list[CoreRow]:
    """``raw`` (read from a table or a backup) as rows of ``table``: each with exactly the fields ``FIELDS[table]``
    (others dropped). A row that lacks one is a ``StoreError`` naming it, unless ``older`` (rows of an older
    tiermem's LanceDB tables, which did not keep every field: ``requests`` had no ``args_sha256``): then None."""
    fields = FIELDS[table]
    out = []
    for r in raw:
        lacking = [f for f in fields if f not in r]
        if older:
            r = {**{f: None for f in lacking}, **r}
        elif lacking:
            raise StoreError(f"A row of {table} lacks {', '.join(lacking)}; nothing was written from it.")
        out.append({f: r[f] for f in fields})
    return cast("list[CoreRow]", out)  # the fields of ``table``'s row type, checked above


def with_metadata(row: AgentRow | BlockRow, metadata: Mapping[str, str]) -> dict[str, Any]:
    """The row with its metadata as a JSON object instead of JSON text (how the object-storage core keeps it)."""
    return {**row, "metadata": dict(metadata)}


def _malformed(what: str, exc: Exception, hint: str) -> StoreError:
    return StoreError(f"{what} is malformed ({exc!r}); {hint}.")


def agent_row(a: Agent) -> AgentRow:
    return {
        "id": a.id,
        "name": a.name,
        "system": a.system,
        "metadata": json.dumps(a.metadata, sort_keys=True),
        "created_us": to_us(a.created_at),
        "updated_us": to_us(a.updated_at),
    }


def block_row(b: Block) -> BlockRow:
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


def version_row(v: BlockVersion) -> HistoryRow:
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


def attachment_row(agent_id: str, block_id: str, created_us: int) -> AttachmentRow:
    return {"key": f"{agent_id}:{block_id}", "agent_id": agent_id, "block_id": block_id, "created_us": created_us}


def _metadata(raw: object) -> dict[str, str]:
    value = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(value, Mapping):
        raise ValueError(f"metadata must be a JSON object, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def agent_from_row(r: Mapping[str, Any], hint: str = ROW_HINT) -> Agent:
    try:
        return Agent(
            id=str(r["id"]),
            name=str(r["name"]),
            system=str(r["system"] or ""),
            created_at=from_us(int(r["created_us"])),
            updated_at=from_us(int(r["updated_us"])),
            metadata=_metadata(r.get("metadata") or "{}"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("An agent row", exc, hint) from exc


def block_from_row(r: Mapping[str, Any], hint: str = ROW_HINT) -> Block:
    try:
        return Block(
            id=str(r["id"]),
            label=str(r["label"]),
            value=str(r["value"]),
            limit=int(r["limit"]),
            description=str(r["description"] or ""),
            read_only=bool(r["read_only"]),
            version=int(r["version"]),
            updated_at=from_us(int(r["updated_us"])),
            metadata=_metadata(r.get("metadata") or "{}"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("A block row", exc, hint) from exc


def version_from_row(r: Mapping[str, Any]) -> BlockVersion:
    try:
        return BlockVersion(
            block_id=str(r["block_id"]),
            version=int(r["version"]),
            label=str(r["label"]),
            value=str(r["value"]),
            limit=int(r["limit"]),
            description=str(r["description"] or ""),
            read_only=bool(r["read_only"]),
            operation=str(r["operation"]),
            actor=str(r["actor"]),
            created_at=from_us(int(r["created_us"])),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A block history row is malformed ({exc!r}); nothing was written from it.") from exc


def window_row(w: ContextWindow) -> ConversationRow:
    """A conversation's agent-loop state as a ``conversations`` row, stamped with the time it is written."""
    return {
        "key": f"{w.agent_id}:{w.conversation_id}",
        "agent_id": w.agent_id,
        "conversation_id": w.conversation_id,
        "start_seq": w.start_seq,
        "summary_id": w.summary_id,
        "turns": w.turns,
        "sleeptime_seq": w.sleeptime_seq,
        "updated_us": to_us(now()),
    }


def window_from_row(r: Mapping[str, Any]) -> ContextWindow:
    try:
        return ContextWindow(
            agent_id=str(r["agent_id"]),
            conversation_id=str(r["conversation_id"]),
            start_seq=int(r["start_seq"]),
            summary_id=str(r["summary_id"] or ""),
            turns=int(r["turns"]),
            sleeptime_seq=int(r["sleeptime_seq"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A conversation-state row is malformed ({exc!r}); nothing was written from it.") from exc


def result_row(r: StoredResult) -> RequestRow:
    return {
        "key": r.key,
        "agent_id": r.agent_id,
        "tool": r.tool,
        "args_sha256": r.args_sha256,
        "result": r.result,
        "created_us": to_us(r.created_at),
    }


def result_from_row(r: Mapping[str, Any]) -> StoredResult:
    try:
        return StoredResult(
            key=str(r["key"]),
            agent_id=str(r["agent_id"]),
            tool=str(r["tool"]),
            args_sha256=str(r["args_sha256"]),
            result=str(r["result"]),
            created_at=from_us(int(r["created_us"] or 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"An idempotency record is malformed ({exc!r}); nothing was written from it.") from exc


def name_taken(name: str) -> ValidationError:
    """The refusal of a second agent named ``name`` (``CoreStore.insert_agent``, both backends)."""
    return ValidationError(f"An agent named {name!r} already exists; choose another name.")


def label_taken(label: str) -> LabelTakenError:
    """The refusal of a block label another block of the agent has (``CoreStore.create_block``, ``commit_edit`` and
    ``attach``, both backends); ``Memory`` words it for the tool or command that asked."""
    return LabelTakenError(f"A block labelled {label!r} already exists; choose another label.", label=label)
