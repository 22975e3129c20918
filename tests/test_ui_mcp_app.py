"""The block view as an MCP App, through a real in-process MCP client (the SDK's Apps extension)."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.server.app import build_server
from tiermem.server.runtime import MemoryHandle
from tiermem.ui.mcp_app import BLOCKS_URI, blocks_app

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio


def app_server(settings: Settings):  # type: ignore[no-untyped-def]
    from tiermem.domain.factory import open_memory

    def factory():  # type: ignore[no-untyped-def]
        m = open_memory(settings)
        return m, m.ensure_agent(settings.agent).id

    return build_server(MemoryHandle(factory), settings, extensions=[blocks_app()])


async def test_block_view_is_an_mcp_app(settings: Settings) -> None:
    async with Client(app_server(settings), cache=None) as c:
        assert "io.modelcontextprotocol/ui" in (c.server_capabilities.extensions or {})
        tools = {t.name: t for t in (await c.list_tools()).tools}
        view = tools["memory_blocks_view"]
        assert view.meta == {"ui": {"resourceUri": BLOCKS_URI}} and view.annotations.read_only_hint is True
        listed = {str(r.uri): r for r in (await c.list_resources()).resources}
        assert listed[BLOCKS_URI].mime_type == "text/html;profile=mcp-app"
        html = (await c.read_resource(BLOCKS_URI)).contents[0]
        assert html.mime_type == "text/html;profile=mcp-app" and "ui/initialize" in html.text
        assert "http://" not in html.text and "https://" not in html.text  # self-contained: nothing to fetch

        await c.call_tool("core_memory_append", {"label": "human", "content": "Prefers tea"})
        result = await c.call_tool("memory_blocks_view", {})
        assert not result.is_error
        data = result.structured_content
        human = next(b for b in data["blocks"] if b["label"] == "human")
        assert data["agent"] == "default" and human["value"] == "\nPrefers tea" and human["chars"] == 12
        assert human["limit"] == 5000 and human["read_only"] is False
        assert json.loads(text_of(result)) == data  # hosts without MCP Apps get the same data as text


async def test_block_view_is_opt_in(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        assert "memory_blocks_view" not in {t.name for t in (await c.list_tools()).tools}
