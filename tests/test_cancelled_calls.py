"""A tool call the client cancels (or times out) after its write started: the write runs to its end in its worker
thread, so what follows a write must happen all the same: its result kept under its idempotency key, its
subscribers told. A real in-process MCP client on the real server; the write is held in its worker thread (a
listener of the memory's commits) until the server has applied the client's cancel."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from tiermem.base.config import Settings
from tiermem.domain.memory import Change

from .conftest import serve_in_process, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore", category=MCPDeprecationWarning)]


@contextmanager
def held_commit(server: Any) -> Iterator[tuple[threading.Event, threading.Event]]:
    """(committed, release): the next commit's worker thread sets ``committed`` and waits for ``release``."""
    memory, _ = server.runtime.handle.get()
    committed, release = threading.Event(), threading.Event()

    def hold(change: Change) -> None:
        if not committed.is_set():
            committed.set()
            release.wait(60)

    memory.subscribe(hold)
    try:
        yield committed, release
    finally:
        release.set()
        memory.unsubscribe(hold)


async def cancelled_while_committing(c: Client, server: Any, name: str, args: dict[str, Any]) -> None:
    """Call ``name``; once its write is committed (its worker thread held there), cancel the call and wait until the
    server has applied the cancel (a request sent after it is answered after it), then let the worker thread go on."""
    with held_commit(server) as (committed, release):
        done = anyio.Event()

        async def call(scope: anyio.CancelScope) -> None:
            with scope:
                await c.call_tool(name, args)
            done.set()

        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, scope)
            await anyio.to_thread.run_sync(committed.wait, 60)
            scope.cancel()  # the client sends notifications/cancelled
            await done.wait()
            await c.list_tools()  # the server reads the cancel before this request
            release.set()


async def test_a_cancelled_keyed_write_keeps_its_key(settings: Settings) -> None:
    """The retry of a keyed write cancelled mid-commit (a client's timeout) gets the first result, writing nothing."""
    server = serve_in_process(settings)
    async with Client(server, cache=None, mode="legacy") as c:
        await c.call_tool("memory_open", {"label": "human"})  # the memory is open
        args = {"label": "human", "content": "Has a dog called Rex.", "idempotency_key": "k-timeout"}
        await cancelled_while_committing(c, server, "core_memory_append", args)
        retried = await c.call_tool("core_memory_append", args)  # waits for the first call's key to be free
        assert not retried.is_error and text_of(retried).count("Rex") == 1
        view = text_of(await c.call_tool("memory_open", {"label": "human"}))
        assert view.count("Has a dog called Rex.") == 1, view


def uris_into(got: list[str]) -> Callable[[Any], Any]:
    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method == "notifications/resources/updated":
            got.append(str(root.params.uri))
        elif method == "notifications/resources/list_changed":
            got.append("list_changed")

    return on_message


async def test_a_cancelled_edit_is_announced(settings: Settings) -> None:
    """A cancelled edit that committed reaches the subscribers of its block and of core memory, and a cancelled block
    creation the client's resource list."""
    got: list[str] = []
    server = serve_in_process(settings)
    async with Client(server, cache=None, mode="legacy", message_handler=uris_into(got)) as c:
        await c.subscribe_resource("memory://blocks/human")
        await c.subscribe_resource("memory://core")
        await c.call_tool("memory_open", {"label": "human"})
        got.clear()
        await cancelled_while_committing(c, server, "memory_insert", {"label": "human", "new_string": "cancelled"})
        with anyio.fail_after(30):  # bounded wait for the cancelled call's end; no timing is asserted
            while not {"memory://blocks/human", "memory://core"} <= set(got):
                await anyio.sleep(0.01)
        got.clear()
        create = {"command": "create", "path": "/memories/notes", "file_text": "x"}
        await cancelled_while_committing(c, server, "memory", create)
        with anyio.fail_after(30):
            while "list_changed" not in got:
                await anyio.sleep(0.01)
