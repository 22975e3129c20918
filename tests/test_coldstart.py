"""Answer first, load later: the stdio server answers the handshake and tools/list without the heavy libraries.

The server runs under ``tests/harness/without_heavy.py``, which makes lancedb, pyarrow, onnxruntime,
numpy, fastembed and pandas impossible to import. Whatever it answers there, it answered without them;
opening the memory store (which needs them) fails in the background and a tool call reports that clearly.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tiermem.config import Settings
from tiermem.errors import SchemaError, StoreError
from tiermem.memory import Memory
from tiermem.runtime import MemoryHandle

from .conftest import PYTHON, ROOT, serve_in_process, text_of
from .test_transports import server_env


HEAVY = ("lancedb", "pyarrow", "onnxruntime", "numpy", "fastembed", "pandas")
HARNESS = Path(__file__).parent / "harness" / "without_heavy.py"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "extra"),
    [("legacy", ()), ("auto", ()), ("legacy", ("--agent-loop",))],
    ids=["handshake", "modern", "agent-loop"],
)
async def test_initialize_and_tools_list_need_no_heavy_library(
    tmp_path: Path, mode: str, extra: tuple[str, ...]
) -> None:
    params = StdioServerParameters(
        command=PYTHON,
        args=[str(HARNESS), ",".join(HEAVY), "serve", "--data-dir", str(tmp_path / "data"), *extra],
        env=server_env(tmp_path, TIERMEM_LLM_PROVIDER="sampling"),
        cwd=str(ROOT),
    )
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"memory_replace", "core_memory_view", "archival_memory_search"} <= names
            # Block tools need only the core state (SQLite): they answer although the archive cannot open.
            edit = await client.call_tool("memory_insert", {"label": "human", "new_string": "Likes rain"})
            block = await client.read_resource("memory://blocks/human")
            result = await client.call_tool("archival_memory_search", {"query": "rain"})
    stderr = log.read_text()
    assert not edit.is_error and "Likes rain" in text_of(edit), text_of(edit)
    assert "Likes rain" in block.contents[0].text
    # Opening the archive needed the refused libraries: the call that needs it says so instead of hanging.
    assert result.is_error, text_of(result)
    assert "could not open its memory store" in text_of(result)
    refused = [line for line in stderr.splitlines() if line.startswith("refused import")]
    assert refused, stderr  # the block was in force: the opener did ask for them
    # Only the archive's background opener asked for them; the code that answered requests never did.
    assert all(line.endswith("in thread tiermem-open-archive") for line in refused), stderr


@pytest.mark.anyio
async def test_opening_starts_once_the_handshake_is_answered(settings: Settings) -> None:
    """The lifespan opens the store after the first answer; nothing opens it while nobody has asked."""
    server = serve_in_process(settings)
    handle = server.runtime.handle
    assert not handle.started
    async with Client(server, mode="legacy") as client:  # initialize, then notifications/initialized
        await client.list_tools()
        assert handle.started
        result = await client.call_tool("memory_insert", {"label": "human", "new_string": "Likes rain"})
        assert not result.is_error, text_of(result)


@pytest.mark.anyio
async def test_a_tool_is_a_plain_function(settings: Settings) -> None:
    """A tool can be imported and called on its own; without a request it finds the runtime on the server."""
    from mcp.server.mcpserver import Context
    from mcp.server.subscriptions import InMemorySubscriptionBus

    from tiermem.tools import core_memory_view, memory_insert

    server = serve_in_process(settings)
    ctx = Context(mcp_server=server, subscriptions=InMemorySubscriptionBus())  # what MCPServer.call_tool makes
    assert (await memory_insert("human", "Name: Ada", ctx)).endswith("Name: Ada")
    view = await core_memory_view(ctx)
    assert "Name: Ada" in view.content[0].text and view.structured_content["blocks"][1]["value"].endswith("Name: Ada")


def test_a_call_waits_for_the_opening_a_bounded_time() -> None:
    release = threading.Event()

    def slow() -> tuple[Memory, str]:
        release.wait()
        raise OSError("disk gone")

    handle = MemoryHandle(slow, timeout=0.05)
    with pytest.raises(StoreError, match="still opening its memory store"):
        handle.get()
    release.set()
    with pytest.raises(StoreError, match=r"could not open its memory store \(OSError: disk gone\)"):
        handle.get()


def test_our_own_opening_errors_pass_through_unchanged() -> None:
    def refuse() -> tuple[Memory, str]:
        raise SchemaError("The data directory was written by another embedding model; run `tiermem reembed`.")

    with pytest.raises(SchemaError, match="run `tiermem reembed`"):
        MemoryHandle(refuse).get()
