"""Change notifications across processes: a subscriber hears of another process's edit, however soon it comes.

Three real server processes on one data directory: A serves streamable HTTP (a 2026-07-28 client listens on it,
and the memory inspector's live view long-polls it), B serves stdio (a legacy client subscribes with
``resources/subscribe``), C serves stdio and edits. A and B run with ``watch_seconds = 30``: on a local data
directory the watch follows SQLite's change counter, not that timer, so the 15 s bound holds only when it does.
Waits are bounded, never timed asserts; ``python -m bench notify`` measures the latency.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.domain.memory import Memory

from .test_transports import AUTH, HTTP_TOKEN, free_port, http_target, serving, stdio_params

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]
HUMAN = "memory://blocks/human"


@pytest.fixture
def http_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    with serving(
        tmp_path,
        "http",
        port,
        "--data-dir",
        str(tmp_path / "data"),
        TIERMEM_HTTP_TOKEN=HTTP_TOKEN,
        TIERMEM_WATCH_SECONDS="30",
    ):
        yield port


async def test_edit_100ms_after_subscribing_reaches_http_and_stdio_subscribers(
    tmp_path: Path, http_server: int
) -> None:
    legacy_heard: list[str] = []

    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            legacy_heard.append(str(root.params.uri))

    async with (
        Client(stdio_params(tmp_path), cache=None) as editor,
        Client(
            stdio_params(tmp_path, TIERMEM_WATCH_SECONDS="30"), cache=None, mode="legacy", message_handler=on_message
        ) as legacy,
        Client(http_target(f"http://127.0.0.1:{http_server}/mcp"), cache=None) as modern,
    ):
        assert not (await editor.call_tool("core_memory_append", {"label": "human", "content": "first"})).is_error
        for round_ in range(2):  # the second round: after the first subscriptions ended and the watch went idle
            legacy_heard.clear()
            await legacy.subscribe_resource(HUMAN)
            async with modern.listen(resource_subscriptions=[HUMAN]) as sub:
                await anyio.sleep(0.1)
                r = await editor.call_tool("core_memory_append", {"label": "human", "content": f"round {round_}"})
                assert not r.is_error
                with anyio.fail_after(15):  # bounded wait: the watch of each server sees the other process's commit
                    async for event in sub:
                        if getattr(event, "uri", "") == HUMAN:
                            break
                    while HUMAN not in legacy_heard:
                        await anyio.sleep(0.02)
            await legacy.unsubscribe_resource(HUMAN)
            await anyio.sleep(0.3)
        value = (await modern.read_resource(HUMAN)).contents[0].text
        assert "round 1" in value

        # The inspector's live view: a long poll answers when another process edits a block.
        ui = f"http://127.0.0.1:{http_server}/ui/api"
        async with httpx2.AsyncClient(headers=AUTH, timeout=60) as web:
            since = (await web.get(f"{ui}/agent", params={"agent": "default"})).json()["signature"]
            changed: list[bool] = []

            async def long_poll() -> None:
                r = await web.get(f"{ui}/changes", params={"agent": "default", "since": since, "wait": "25"})
                changed.append(r.json()["changed"])

            with anyio.fail_after(15):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_poll)
                    await anyio.sleep(0.3)
                    assert not (
                        await editor.call_tool("core_memory_append", {"label": "human", "content": "ui"})
                    ).is_error
            assert changed == [True]


@pytest.mark.parametrize("backend", ["sqlite", "object"])
def test_change_token_moves_with_another_connections_commit(tmp_path: Path, backend: str) -> None:
    """The core-state contract the watch relies on (``CoreStore.change_token``), on every backend: two connections
    to one store (two SQLite connections to one file; two ``ObjectCore`` on one object store)."""
    from tiermem.base.config import BlockSpec
    from tiermem.core.bucket import Bucket
    from tiermem.core.migrate import open_core
    from tiermem.core.objects import ObjectCore
    from tiermem.domain.blocks import Rethink
    from tiermem.store import Store

    from .conftest import memory_over

    store = Store(str(tmp_path / "data" / "db"), embedding_model="hashing-384", embedding_dim=384)
    bucket = Bucket("memory://watch")  # one in-process object store, two cores (each with its own cache) over it

    def core():  # type: ignore[no-untyped-def]
        return open_core(store, "sqlite", tmp_path / "data") if backend == "sqlite" else ObjectCore.open(bucket)

    watcher, writer = memory_over(store, core=core()), memory_over(store, core=core())
    agent = writer.ensure_agent("default").id
    writer.create_block(agent, BlockSpec(label="human"))
    token = watcher.change_token()
    assert watcher.change_token() == token  # nothing committed: unchanged
    writer.edit(agent, "human", Rethink("Name: Ada"), actor="human")
    assert watcher.change_token() != token
    assert watcher.watch_cheap is (backend == "sqlite")


def test_a_notifier_queues_only_its_agents_changes_and_leaves_with_its_server(memory: Memory) -> None:
    """A multi-user server stops an idle agent's server: its notifier must not stay subscribed to the shared memory,
    collecting every agent's changes for ever (and none of another agent's piles up while it lives)."""
    import gc

    from tiermem.domain.blocks import Append
    from tiermem.server.notifier import Notifier

    a, b = memory.ensure_agent("a").id, memory.ensure_agent("b").id
    before = len(memory._listeners)
    mine = Notifier()
    mine.bind(memory, a)
    memory.edit(b, "human", Append("b's change"))
    assert not mine._pending  # b's edit is not queued for a's server
    memory.edit(a, "human", Append("a's change"))
    assert [c.agent_ids for c in mine._pending] == [(a,)]
    assert len(memory._listeners) == before + 1
    del mine
    gc.collect()
    memory.edit(b, "human", Append("after the server stopped"))  # the orphaned listener leaves at the next change
    assert len(memory._listeners) == before


async def test_a_server_whose_client_listed_the_tools_leaves_when_it_stops(settings: Settings) -> None:
    """A client that lists the tools starts the watch (to tell it when the file tools appear or go); once its
    connection closes, the watch ends and nothing holds the stopped server's notifier: no thread, no listener on the
    shared memory, no queue of its agent's changes growing for ever (a multi-user server stops idle tenants' servers)."""
    import gc
    import threading
    import weakref

    from tiermem.domain.blocks import Append

    from .conftest import serve_in_process

    def watches() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "tiermem-watch"}

    settings = settings.model_copy(update={"watch_seconds": 0.2})
    server = serve_in_process(settings)
    others = watches()  # other tests' servers'
    async with Client(server, cache=None, mode="legacy") as c:
        await c.list_tools()
        assert not (await c.call_tool("memory_insert", {"label": "human", "new_string": "seen"})).is_error
        (watch,) = watches() - others
        memory, agent = server.runtime.handle.get()
        before = len(memory._listeners)
    notifier = weakref.ref(server.runtime.notifier)
    del server, c
    with anyio.fail_after(15):  # bounded wait for the watch's current tick to end
        while watch.is_alive():
            await anyio.sleep(0.02)
    gc.collect()
    assert notifier() is None
    memory.edit(agent, "human", Append("after the server stopped"))  # the orphaned listener leaves at the next change
    assert len(memory._listeners) == before - 1


def test_the_watches_of_a_multi_user_servers_tenants_share_one_poll(tmp_path: Path) -> None:
    """Tenants' servers share one memory: on object storage, where a look at the change token is three listings,
    their watches share one look instead of one each (100 users listing the tools cost ~20 listings a second)."""
    from tiermem.core.bucket import Bucket
    from tiermem.core.objects import ObjectCore
    from tiermem.server.notifier import Notifier
    from tiermem.server.runtime import MemoryHandle
    from tiermem.store import Store

    from .conftest import memory_over

    store = Store(str(tmp_path / "data" / "db"), embedding_model="hashing-384", embedding_dim=384)
    bucket = Bucket("memory://tenants")
    memory = memory_over(store, core=ObjectCore.open(bucket))
    notifiers = []
    for name in ("ada", "bob", "cy"):
        agent = memory.ensure_agent(name).id
        handle = MemoryHandle(lambda agent=agent: (memory, agent), agent=name)
        handle.get()
        notifiers.append(Notifier(handle, watch_seconds=2.0))
    before = bucket.requests["LIST"]
    memory.change_token()
    one_look = bucket.requests["LIST"] - before
    assert one_look > 0  # a listing of the agents (of their lists of blocks and the block heads: none here)
    before = bucket.requests["LIST"]
    for notifier in notifiers:  # one tick each of the watch a client that listed the tools keeps running
        notifier._nudge.set()  # its sleep ends at once
        assert notifier._watch_tools()
    assert bucket.requests["LIST"] - before == one_look


async def test_an_own_edit_is_not_announced_again_at_another_processs_edit(settings: Settings) -> None:
    """The watch's baseline takes this server's own edits: another process's edit of one block announces that block,
    not also the block this server edited before it (which its subscribers were told of already)."""
    from tiermem.domain.blocks import Rethink
    from tiermem.domain.factory import open_memory

    from .conftest import serve_in_process

    got: list[str] = []

    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            got.append(str(root.params.uri))

    settings = settings.model_copy(update={"watch_seconds": 0.2})
    server = serve_in_process(settings)
    async with Client(server, cache=None, mode="legacy", message_handler=on_message) as c:
        for uri in (HUMAN, "memory://blocks/persona", "memory://core"):
            await c.subscribe_resource(uri)
        assert not (await c.call_tool("memory_insert", {"label": "human", "new_string": "own edit"})).is_error
        assert HUMAN in got  # told before the call's answer
        got.clear()
        other = open_memory(settings)  # another process (`tiermem blocks set persona ...`)
        other.edit(other.ensure_agent("default").id, "persona", Rethink("remote edit"), actor="human")
        with anyio.fail_after(15):  # bounded wait for the watch; memory://core is published last
            while "memory://core" not in got:
                await anyio.sleep(0.02)
        assert got == ["memory://blocks/persona", "memory://core"], got


async def test_a_watch_that_fails_logs_once_and_follows_the_agent_made_again(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process deletes the served agent: the watch's failing reads are logged once, not at every tick; once
    an agent of that name is made again, the watch follows it (another process's edit of it is heard)."""
    import logging

    from tiermem.domain.blocks import Rethink
    from tiermem.domain.factory import open_memory

    from .conftest import serve_in_process

    got: list[str] = []
    settings = settings.model_copy(update={"agent": "work", "watch_seconds": 0.2})
    other = open_memory(settings)  # another process (`tiermem agents delete work`, `tiermem agents create work`)
    other.ensure_agent("work")
    failed = "watch: could not read the blocks"
    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=_updated_into(got)) as c:
        await c.subscribe_resource(HUMAN)
        with caplog.at_level(logging.WARNING, logger="tiermem.server.notifier"):
            other.delete_agent(other.ensure_agent("work").id)
            with anyio.fail_after(15):
                while not any(failed in r.getMessage() for r in caplog.records):
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # the watch keeps failing meanwhile (a tick every 0.2 s)
            again = other.create_agent("work").id  # under a new id, as `tiermem agents create` makes it
            other.edit(again, "human", Rethink("made again"), actor="human")
            with anyio.fail_after(15):
                while HUMAN not in got:
                    await anyio.sleep(0.05)
    assert sum(failed in r.getMessage() for r in caplog.records) == 1, [r.getMessage() for r in caplog.records]


async def test_a_server_tells_of_its_edits_of_its_agent_made_again(settings: Settings) -> None:
    """The served agent deleted and made again by another process: the server serves the new one (by name), and its
    subscribers are told of its edits of it as of the first one (no watch here: the server's own changes only)."""
    from tiermem.domain.factory import open_memory

    from .conftest import serve_in_process

    got: list[str] = []
    settings = settings.model_copy(update={"agent": "work", "watch_seconds": 0})
    other = open_memory(settings)
    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=_updated_into(got)) as c:
        await c.subscribe_resource(HUMAN)
        assert not (await c.call_tool("memory_insert", {"label": "human", "new_string": "first agent"})).is_error
        assert got == [HUMAN]  # told before the call's answer
        other.delete_agent(other.ensure_agent("work").id)
        other.create_agent("work")  # under a new id, as `tiermem agents create` makes it
        got.clear()
        assert not (await c.call_tool("memory_insert", {"label": "human", "new_string": "made again"})).is_error
        assert got == [HUMAN]


def _updated_into(got: list[str]):  # type: ignore[no-untyped-def]
    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            got.append(str(root.params.uri))

    return on_message


def test_a_publish_cancelled_on_the_event_loop_does_not_kill_the_watch_thread() -> None:
    """The watch thread hands each change to the event loop; a server that is stopping cancels that publish there,
    and the thread gets the loop's CancelledError (not an Exception): it goes on (the next tick sees the loop gone)
    instead of dying with an unhandled exception."""
    import asyncio
    from types import SimpleNamespace

    import anyio.lowlevel
    import anyio.to_thread

    from tiermem.server.notifier import Notifier

    async def main() -> bool:
        async def publish() -> None:
            raise asyncio.CancelledError

        watch = SimpleNamespace(_loop=anyio.lowlevel.current_token(), _stopped=lambda: False)
        result: bool = await anyio.to_thread.run_sync(Notifier._publish_from_watch, watch, publish)
        return result

    assert anyio.run(main) is True
