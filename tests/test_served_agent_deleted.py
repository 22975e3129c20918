"""A server whose agent another process deletes (``tiermem agents delete``): every call says the agent's name was
deleted and what to do, for reads and writes alike; once an agent of that name is made again the server uses it,
in the session open and in new ones, without a restart (``MemoryHandle.live_id``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory

from .conftest import serve_in_process, text_of

GONE = (
    "Agent 'proj', which this server serves, was deleted (by `tiermem agents delete` or another process), so nothing "
    "was read or written. Make it again with `tiermem agents create proj` (this server then uses it), or restart the "
    "server (it creates the agent with the default blocks)."
)


@pytest.mark.anyio
async def test_a_server_whose_agent_was_deleted_elsewhere_names_it_and_serves_the_one_made_again(
    tmp_path: Path,
) -> None:
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing", tools=["all"], agent="proj")
    other = open_memory(settings, start_embedder=False)  # another process: its deletion is not heard in the server's
    other.create_agent("proj")
    server = serve_in_process(settings)
    # sessions of their own (legacy): the instructions each connects with show it the blocks
    async with Client(server, cache=None, mode="legacy") as c:
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "v1"})
        assert not r.is_error, text_of(r)
        other.delete_agent(other.get_agent("proj").id)
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "after delete"})
        assert r.is_error and text_of(r) == GONE
        with pytest.raises(MCPError, match="Agent 'proj', which this server serves, was deleted"):
            await c.read_resource("memory://blocks/human")

        made = other.create_agent("proj").id
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "v2"})  # a block never shown to it
        assert r.is_error and "has not been shown to you whole by this server" in text_of(r), text_of(r)
        await c.call_tool("memory_open", {"label": "human"})
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "v2"})
        assert not r.is_error, text_of(r)
        assert other.block(made, "human").value == "v2"
        assert "v2" in "".join(
            getattr(x, "text", "") for x in (await c.read_resource("memory://blocks/human")).contents
        )
    async with Client(server, cache=None, mode="legacy") as c:  # a new session of the same server (as over HTTP)
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "v3"})
        assert not r.is_error and other.block(made, "human").value == "v3"
