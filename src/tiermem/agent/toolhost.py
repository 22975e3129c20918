"""The agent's tools are the MCP server's own tools, called in process.

``ServerTools`` lists the tools the server publishes (minus the ones that make no sense for
the agent itself) and calls them through ``MCPServer.call_tool``, so the agent gets exactly
the results and error texts an external MCP client would get.
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

from ..server.registry import NOT_FOR_AGENT
from ..server.sightings import agent_calls
from .llm import JSON, ToolSpec

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer


class ToolHost(Protocol):
    async def specs(self) -> list[ToolSpec]: ...

    async def call(self, name: str, arguments: JSON) -> tuple[str, bool]:
        """(result text, is_error)."""
        ...


class ServerTools:
    def __init__(
        self, server: MCPServer[Any], ctx: Context[Any, Any] | None = None, *, only: Collection[str] | None = None
    ) -> None:
        self._server = server
        self._ctx = ctx
        self._only = set(only) if only is not None else None

    def _wanted(self, name: str) -> bool:
        return name in self._only if self._only is not None else name not in NOT_FOR_AGENT

    async def specs(self) -> list[ToolSpec]:
        out = []
        for tool in await self._server.list_tools():
            if not self._wanted(tool.name):
                continue
            schema: JSON = copy.deepcopy(tool.input_schema)
            schema.get("properties", {}).pop("idempotency_key", None)  # the loop never retries a call
            if "required" in schema:
                schema["required"] = [r for r in schema["required"] if r != "idempotency_key"]
            out.append(ToolSpec(tool.name, tool.description or "", schema))
        return out

    async def call(self, name: str, arguments: JSON) -> tuple[str, bool]:
        if not self._wanted(name):
            return await self._unknown(name), True
        try:
            with agent_calls():  # the loop's model's call, not the client's (what it has seen: sightings.py)
                result = await self._server.call_tool(name, arguments, self._ctx)
        except ToolError as exc:  # arguments that fail validation
            return str(exc), True
        except MCPError:  # an unknown tool is a protocol error for MCP clients; for the model, a failed call
            # (MCP's own text lists every tool the server has, some of which the agent is not given)
            return await self._unknown(name), True
        text = "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []) or [])
        return text, bool(getattr(result, "is_error", False))

    async def _unknown(self, name: str) -> str:
        offered = ", ".join(s.name for s in await self.specs())
        return f"There is no tool named {name!r}; use one of the tools you were given: {offered}."
