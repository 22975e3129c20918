"""The timeline as MCP resources (``domain/timeline.py``), JSON:

- ``memory://timeline``: the last 12 months of the agent's memory, each with its counts per kind (recall, archival,
  files, blocks) and the terms that rise in it;
- ``memory://timeline/{period}``: ``month``, ``week`` or ``day``: the last 12 months, 12 ISO weeks or 31 days the same
  way; a period's key (``2024-05``, ``2024-W19``, ``2024-05-08``): what that period holds (up to 100 items, oldest
  first) and its rising terms.

The domain is imported when a resource is read, never before (the handshake loads no storage).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from ..base.errors import NotFoundError, TiermemError, ValidationError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .runtime import Runtime

TIMELINE_URI = "memory://timeline"
PERIOD_URI = "memory://timeline/{period}"
LAST = {"month": 12, "week": 12, "day": 31}  # periods each unit's overview shows
TERMS = 5  # rising terms per period in an overview
ITEMS = 100  # items a period's resource lists


def register_timeline(server: MCPServer, runtime: Runtime) -> None:
    @server.resource(
        TIMELINE_URI,
        name="timeline",
        title="Memory timeline",
        description="The last 12 months of your memory: counts of conversation turns, archival passages, file "
        "changes and block versions per month, and the terms that rise in each. memory://timeline/week (or day) "
        "counts by week; memory://timeline/2024-05 lists what one period holds.",
        mime_type="application/json",
    )
    async def overview() -> str:
        return await _overview(runtime, "month")

    @server.resource(
        PERIOD_URI,
        name="timeline_period",
        title="Memory timeline: one period",
        description="month, week or day: the last periods of that length with counts per kind and rising terms; "
        "a period (2024-05, 2024-W19, 2024-05-08): what it holds and the terms that rise in it.",
        mime_type="application/json",
    )
    async def one(period: str) -> str:
        if period in LAST:
            return await _overview(runtime, period)
        from ..domain import timeline

        view = await _read(runtime, timeline.period, period, limit=ITEMS)
        return json.dumps(view, ensure_ascii=False)


async def _overview(runtime: Runtime, by: str) -> str:
    from ..domain import timeline

    found = await _read(runtime, timeline.timeline, by=by, terms=TERMS, last=LAST[by])
    return json.dumps(found, ensure_ascii=False)


async def _read(runtime: Runtime, op: Any, /, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``op(memory, agent_id, ...)`` in a worker thread, as a JSON object; our errors become resource errors with
    their message: a period that is not one (the caller's mistake) -32602, as an unknown block label is; a store
    that cannot be read -32603."""
    try:
        found = await runtime.call(None, op, *args, **kwargs)
    except (ValidationError, NotFoundError) as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except TiermemError as exc:
        raise ResourceError(str(exc)) from exc
    out: dict[str, Any] = found.as_dict()
    return out
