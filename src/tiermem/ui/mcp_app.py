"""The inspector's block view as an MCP App (the SDK's ``io.modelcontextprotocol/ui`` extension).

``tiermem serve --mcp-apps`` adds the tool ``memory_blocks_view``, bound to the resource
``ui://tiermem/blocks.html`` (one self-contained HTML document, ``static/blocks_app.html``). A host that
renders MCP Apps shows the agent's core blocks inline (usage against the limit, read-only, version);
any other host gets the same data as JSON text. The view is read-only: editing stays in the inspector
and the memory tools.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from mcp.server.apps import Apps, ResourceCsp
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

from ..server.runtime import runtime_of

BLOCKS_URI = "ui://tiermem/blocks.html"


async def memory_blocks_view(ctx: Context[Any, Any]) -> dict[str, Any]:
    """Show your core memory blocks to the user as a table: label, characters used against the limit,
    read-only flag, version and value.

    Hosts that render MCP Apps display it inline; others receive the same data as JSON. Use it when the
    user asks what you remember about them; to read memory yourself, read memory://core instead.
    """

    def view(memory: Any, agent_id: str) -> dict[str, Any]:
        agent = memory.core.get_agent(agent_id)
        return {
            "agent": agent.name,
            "blocks": [
                {
                    "label": b.label,
                    "description": b.description,
                    "value": b.value,
                    "chars": len(b.value),
                    "limit": b.limit,
                    "read_only": b.read_only,
                    "version": b.version,
                    "updated_at": b.updated_at.isoformat(),
                }
                for b in memory.blocks(agent_id)
            ],
        }

    return await runtime_of(ctx).call(ctx, view)


def blocks_app() -> Apps:
    """The MCP Apps extension with the block view (pass it to ``build_server(..., extensions=[...])``)."""
    apps = Apps()
    apps.tool(
        resource_uri=BLOCKS_URI,
        name="memory_blocks_view",
        title="Show memory blocks",
        annotations=ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )(memory_blocks_view)
    html = resources.files(__package__).joinpath("static", "blocks_app.html").read_text(encoding="utf-8")
    apps.add_html_resource(
        BLOCKS_URI,
        html,
        name="memory_blocks_view",
        title="tiermem: core memory blocks",
        description="The agent's core memory blocks with usage against their limits (an MCP App view).",
        csp=ResourceCsp(connect_domains=[], resource_domains=[]),
        prefers_border=True,
    )
    return apps
