"""MCP tool adapter for links between memories (group ``links``: not in the default tool list; ``tools = ["default",
"links"]`` or ``"all"`` offers it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult

from ..base.errors import ValidationError
from .runtime import runtime_of
from .tools import structured

if TYPE_CHECKING:
    from ..domain.memory import Memory


def links_op(
    memory: Memory, agent_id: str, action: str, id: str, other: str | None, note: str, offset: int = 0
) -> dict[str, Any]:
    """``show``: the memory and its links from ``offset``, as many as fit the search's token budget
    (``search_token_budget``; ``Neighbourhood.page`` says how many were left out); ``add`` / ``remove``: a link made
    on purpose between two of the agent's memories (recall turns or archival passages)."""
    if action == "show":
        return memory.neighbourhood(agent_id, id).page(memory.archive.token_budget, offset).as_dict()
    if not other:
        raise ValidationError(f"memory_links {action} needs other: the id of the memory to link {id} with.")
    if action == "add":
        memory.link(agent_id, id, other, note)
        return {"linked": [id, other], "note": note}
    if not memory.unlink(agent_id, id, other):
        raise ValidationError(f"{id} and {other} are not linked on purpose; memory_links show {id} lists its links.")
    return {"unlinked": [id, other]}


async def memory_links(
    action: Literal["show", "add", "remove"],
    id: str,
    ctx: Context[Any, Any],
    other: str | None = None,
    note: str = "",
    offset: int = 0,
) -> CallToolResult:
    """Links between memories: recall turns and archival passages, by the ids that
    conversation_search, archival_memory_search and _list results (or conversation_log and
    archival_memory_insert) give.

    show: the memory and what it links to (the turns beside it in its conversation, links made on
    purpose), as many as fit the search token budget; a note says how many more and the `offset`
    that shows the next. add / remove: link it with `other` on purpose (optional note: why they
    belong together); memory_links show then lists each with the other (searches do not follow links).
    """
    return structured(await runtime_of(ctx).call(ctx, links_op, action, id, other, note, offset))
