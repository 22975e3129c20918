"""MCP tool adapters for recall memory (conversation log) and archival memory: module-level, like ``tools``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from ..domain.memory import Memory
from .runtime import runtime_of
from .tools import structured

if TYPE_CHECKING:
    from ..domain.archive import SearchResult


class LogMessage(BaseModel):
    role: Literal["user", "assistant", "tool", "system"]
    content: str
    timestamp: str | None = Field(default=None, description="ISO 8601; defaults to now")
    conversation_id: str | None = Field(default=None, description="groups turns of one conversation")
    project: str | None = Field(
        default=None, description="the project (repository path) the turn belongs to; omitted: shared by every project"
    )


class Ranking(BaseModel):
    score: float
    vector_rank: int | None
    fts_rank: int | None


class RecallHit(BaseModel):
    id: str | None = None  # only with memory_links published (``Runtime.turn_ids``)
    timestamp: str
    time_ago: str
    role: str
    content: str
    relevance: float
    ranking: Ranking


class ArchivalHit(BaseModel):
    id: str
    timestamp: str
    content: str
    tags: list[str]
    relevance: float
    ranking: Ranking


class RecallResults(BaseModel):
    results: list[RecallHit]
    count: int
    search_mode: Literal["hybrid", "fts"]
    notes: list[str] | None = None


class ArchivalResults(BaseModel):
    results: list[ArchivalHit]
    count: int
    search_mode: Literal["hybrid", "fts"]
    notes: list[str] | None = None


class Stored(BaseModel):
    stored: int
    ids: list[str]
    note: str | None = None


class Inserted(BaseModel):
    ids: list[str]
    chunks: int
    note: str | None = None


class Deleted(BaseModel):
    deleted: int
    id: str


class PassageView(BaseModel):
    id: str
    timestamp: str
    content: str
    tags: list[str]


class Page(BaseModel):
    passages: list[PassageView]
    total: int
    offset: int
    next_offset: int | None


def _results(result: SearchResult, kind: Literal["recall", "archival"], *, turn_ids: bool = False) -> CallToolResult:
    """Letta's result shapes (LETTA_SEMANTICS.md); a recall hit carries its id too when ``turn_ids``."""
    items: list[dict[str, Any]] = []
    for h in result.hits:
        item: dict[str, Any] = {"id": h.id} if kind == "recall" and turn_ids else {}
        item["timestamp"] = h.created_at.isoformat(timespec="seconds")
        if kind == "recall":
            from ..domain.archive import time_ago

            item.update(time_ago=time_ago(h.created_at), role=h.role, content=h.content)
        else:
            item.update(id=h.id, content=h.content, tags=list(h.tags))
        item["relevance"] = round(h.relevance, 4)
        item["ranking"] = {"score": round(h.score, 6), "vector_rank": h.vector_rank, "fts_rank": h.fts_rank}
        items.append(item)
    out: dict[str, Any] = {"results": items, "count": len(items), "search_mode": result.mode}
    if result.notes:
        out["notes"] = result.notes
    return structured(out)


async def conversation_log(messages: list[LogMessage], ctx: Context[Any, Any]) -> Annotated[CallToolResult, Stored]:
    """Record conversation turns in recall memory so they can be searched later.

    Hosts own their conversations: call this with the turns worth remembering (role
    user/assistant/tool/system, content, optional ISO timestamp and conversation_id).
    Returns the stored message ids.
    """
    payload = [m.model_dump() for m in messages]
    written = await runtime_of(ctx).call(ctx, Memory.conversation_log, payload)
    stored, note = written.stored, written.note
    return structured({"stored": len(stored), "ids": [s.id for s in stored], **({"note": note} if note else {})})


async def conversation_search(
    query: str,
    ctx: Context[Any, Any],
    roles: list[Literal["user", "assistant", "tool", "system"]] | None = None,
    limit: int = 5,
    start_date: str | None = None,
    end_date: str | None = None,
    project: str | None = None,
) -> Annotated[CallToolResult, RecallResults]:
    """Search past conversation messages (recall memory) by meaning and keywords.

    Filters: roles (user/assistant/system/tool; default: user and assistant), start_date/end_date as ISO 8601 or
    YYYY-MM-DD (inclusive; a date-only end_date covers the whole day), project.
    Results: timestamp, time_ago, role, content, relevance (0-1, comparable across searches),
    ranking {score, vector_rank, fts_rank}.
    """
    result = await runtime_of(ctx).call(
        ctx,
        Memory.conversation_search,
        query,
        roles=roles,
        limit=limit,
        start_date=start_date,
        end_date=end_date,
        project=project,
    )
    return _results(result, "recall", turn_ids=runtime_of(ctx).turn_ids)


async def archival_memory_insert(
    content: str, ctx: Context[Any, Any], tags: list[str] | None = None, project: str | None = None
) -> Annotated[CallToolResult, Inserted]:
    """Save a self-contained fact or document to archival (long-term) memory.

    Write it so it makes sense on its own later (who, what, when). Optional tags help
    filter searches; project (a repository path) keeps it to that project, else it is shared.
    Long text is split into overlapping chunks. Returns the new id(s).
    """
    written = await runtime_of(ctx).call(ctx, Memory.archival_insert, content, tags, project)
    ids, note = written.stored, written.note
    return structured({"ids": ids, "chunks": len(ids), **({"note": note} if note else {})})


async def archival_memory_search(
    query: str,
    ctx: Context[Any, Any],
    tags: list[str] | None = None,
    tag_match_mode: Literal["any", "all"] = "any",
    top_k: int = 5,
    start_datetime: str | None = None,
    end_datetime: str | None = None,
    project: str | None = None,
) -> Annotated[CallToolResult, ArchivalResults]:
    """Search archival memory by meaning and keywords.

    Optional filters (applied before ranking, so top_k results come back whenever that many
    match): tags with tag_match_mode any|all, start_datetime/end_datetime (ISO 8601, inclusive),
    project.
    Results: id, timestamp, content, tags, relevance (0-1, comparable across searches),
    ranking {score, vector_rank, fts_rank}.
    """
    result = await runtime_of(ctx).call(
        ctx,
        Memory.archival_search,
        query,
        tags=tags,
        tag_match_mode=tag_match_mode,
        top_k=top_k,
        start_datetime=start_datetime,
        end_datetime=end_datetime,
        project=project,
    )
    return _results(result, "archival")


async def archival_memory_delete(id: str, ctx: Context[Any, Any]) -> Annotated[CallToolResult, Deleted]:
    """Delete an archival passage by id (ids come from archival_memory_search or _list).

    Use it to remove facts that are wrong or outdated. The first chunk's id deletes every chunk.
    """
    removed = await runtime_of(ctx).call(ctx, Memory.archival_delete, id)
    return structured({"deleted": removed, "id": id})


async def archival_memory_list(
    ctx: Context[Any, Any], offset: int = 0, limit: int = 20, tags: list[str] | None = None
) -> Annotated[CallToolResult, Page]:
    """List archival passages page by page, oldest first (offset, limit; optional tags filter).

    Use it to review, correct or prune long-term memory.
    """
    page, total = await runtime_of(ctx).call(ctx, Memory.archival_list, offset=offset, limit=limit, tags=tags)
    items = [
        {
            "id": p.id,
            "timestamp": p.created_at.isoformat(timespec="seconds"),
            "content": p.content,
            "tags": list(p.tags),
        }
        for p in page
    ]
    next_offset = offset + len(items) if offset + len(items) < total else None
    return structured({"passages": items, "total": total, "offset": offset, "next_offset": next_offset})
