"""What a client's model has seen of the blocks (``server/sightings.py``), through real MCP clients of an in-process
server over the real store, with another handle on the same store as another process: a commit that shows the
client nothing of another writer's edit does not count as seen, its own edit on top of what it saw does; resources
it reads count; a view answered late never takes the record back; stateless HTTP requests are one client."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from mcp import Client

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.base.records import from_us, to_us
from tiermem.domain import blocks as b
from tiermem.domain import memory as memory_module
from tiermem.domain.memory import Memory
from tiermem.server.sightings import Sightings

from .conftest import serve_in_process, text_of
from .test_transports import free_port, in_thread

pytestmark = pytest.mark.anyio


def lc_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Letta Code's dialect of the memory tools, every other tool too (as ``test_letta_memory_tool``)."""
    monkeypatch.setenv("TIERMEM_MEMORY_TOOL_DIALECT", "letta-code")
    return load_settings(data_dir=tmp_path / "data", embedding_model="hashing", sync=tmp_path / "mem", tools=["all"])


async def ok(c: Client, tool: str, **args: Any) -> str:
    r = await c.call_tool(tool, args)
    assert not r.is_error, text_of(r)
    return text_of(r)


# the client's commits whose answers do not show the block's value, each on the block ``notes/a``
LABEL = "notes/a"
PATCH = f"*** Begin Patch\n*** Update Block: {LABEL}\n@@\n+Has a cat.\n*** End Patch"
Commit = Callable[[Client], Awaitable[str]]
SILENT: dict[str, Commit] = {
    "memory tool: describe": lambda c: ok(
        c, "memory", command="rename", path=f"/memories/{LABEL}", description="About the user"
    ),
    "memory_apply_patch: several blocks": lambda c: ok(c, "memory_apply_patch", label="", patch=PATCH),
}
LETTA_CODE: dict[str, Commit] = {
    "Letta Code memory: str_replace": lambda c: ok(
        c, "memory", command="str_replace", reason="r", file_path=f"{LABEL}.md", old_string="Ada", new_string="Ida"
    ),
    "Letta Code memory: insert": lambda c: ok(
        c, "memory", command="insert", reason="r", file_path=f"{LABEL}.md", insert_line=1, insert_text="Has a dog."
    ),
}
COMMITS = {**SILENT, **LETTA_CODE}


def served(name: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Memory, str]:
    """The server for the commit ``name``, another process's handle on its store, and the agent's id; the block
    ``LABEL`` created by that other process (the client has not seen it)."""
    s = lc_settings(tmp_path, monkeypatch) if name in LETTA_CODE else settings
    server = serve_in_process(s)
    other, agent = serve_in_process(s).runtime.handle.get()
    other.create_block(agent, BlockSpec(label=LABEL, value="Name: Ada", description="notes"))
    return server, other, agent


@pytest.mark.parametrize("name", COMMITS)
async def test_a_commit_that_shows_nothing_does_not_make_another_writers_edit_seen(
    name: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client opened the block; another process appended to it; the client's edit through a tool whose answer
    does not show the value commits the next version: the append is still unseen, so a rethink is refused."""
    server, other, agent = served(name, settings, tmp_path, monkeypatch)
    async with Client(server, cache=None) as c:
        await ok(c, "memory_open", label=LABEL)
        other.edit(agent, LABEL, b.Append("Likes tea."))
        await COMMITS[name](c)
        r = await c.call_tool("memory_rethink", {"label": LABEL, "new_memory": "Name: Ada Lovelace"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert "Likes tea." in other.block(agent, LABEL).value


@pytest.mark.parametrize("name", COMMITS)
async def test_the_clients_own_commit_on_what_it_saw_counts_as_seen(
    name: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client opened the block and edited it through a tool whose answer does not show the value: its own edit
    of what it saw, so the rethink written after it goes through."""
    server, _, _ = served(name, settings, tmp_path, monkeypatch)
    async with Client(server, cache=None) as c:
        await ok(c, "memory_open", label=LABEL)
        await COMMITS[name](c)
        assert await ok(c, "memory_rethink", label=LABEL, new_memory="Name: Ada Lovelace") == "Name: Ada Lovelace"


@pytest.mark.parametrize("uri", ["memory://blocks/human", "memory://core"])
async def test_a_block_read_as_a_resource_counts_as_seen(uri: str, tmp_path: Path) -> None:
    """A server with no view tool (``tools = ["letta"]``): the refusal names the resource to read, and reading it
    (the block's or the whole core memory) shows the block whole, so the rethink written after it goes through."""
    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing", tools=["letta"])
    server = serve_in_process(s)
    other, agent = serve_in_process(s).runtime.handle.get()
    async with Client(server, cache=None) as c:
        await ok(c, "memory_insert", label="human", new_string="Name: Ada")  # its answer shows the value
        other.edit(agent, "human", b.Append("Likes tea."))
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada Lovelace"})
        assert r.is_error and "memory://blocks/human" in text_of(r), text_of(r)
        read = await c.read_resource(uri)
        assert "Likes tea." in read.contents[0].text  # type: ignore[union-attr]
        await ok(c, "memory_rethink", label="human", new_memory="Name: Ada Lovelace\nLikes tea.")


async def test_a_view_answered_late_does_not_take_the_record_back(memory: Memory) -> None:
    """Parallel calls of one client: a view reads version N while an edit commits N+1, and the view's answer is
    recorded last. The record keeps N+1 (the next rethink is not refused for a version the client already saw);
    a view that began after the record was written and shows a lower version (a backup restored with ``--replace``
    rolled the block back) is recorded."""
    agent = memory.ensure_agent("default").id
    block = memory.block(agent, "human")
    sightings = Sightings()
    ctx = SimpleNamespace(request_context=SimpleNamespace(session=Connection()))  # one client's requests
    sightings.saw(ctx, [block], sightings.mark())
    viewing = sightings.mark()  # the view starts: it reads version N
    newer = memory.edit(agent, "human", b.Append("Likes tea."))
    sightings.saw(ctx, [newer], sightings.mark())  # the parallel edit's answer shows version N+1
    sightings.saw(ctx, [block], viewing)  # the view's answer, recorded last
    assert sightings.of(ctx) == {block.id: (newer.version, newer.updated_at)}
    rolled_back = replace(newer, version=block.version)  # as a rollback leaves it, read by a later view
    sightings.saw(ctx, [rolled_back], sightings.mark())
    assert sightings.of(ctx) == {block.id: (block.version, newer.updated_at)}


class Connection:
    """A client's connection, as the SDK's requests carry it (the calls of one client)."""


@asynccontextmanager
async def stateless_http(settings: Settings) -> AsyncIterator[str]:
    """``settings``' server over stateless streamable HTTP (``http_stateless``) in this process: its URL."""
    from tiermem.server.app import build_http_app

    port = free_port()
    s = load_settings(
        data_dir=settings.data_dir,
        embedding_model="hashing",
        tools=["all"],
        transport="http",
        port=port,
        http_stateless=True,
    )
    async with in_thread(build_http_app(serve_in_process(s), s, []), port) as url:
        yield url


async def test_stateless_http_requests_are_one_client(settings: Settings) -> None:
    """Stateless HTTP gives each POST a connection of its own: its requests count as one client, as the sessionless
    protocol's do, so a rethink over another process's edit made since the view is refused there too."""
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with stateless_http(settings) as url, Client(url, cache=None, mode="legacy") as c:
        await ok(c, "memory_open", label="human")
        other.edit(agent, "human", b.Append("Likes tea."))
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        await ok(c, "memory_open", label="human")
        await ok(c, "memory_rethink", label="human", new_memory="Name: Ada\nLikes tea.")


async def test_the_memory_tool_shows_a_block_whole_only_without_a_range(settings: Settings) -> None:
    """The ``memory`` tool's view of some lines of a file does not show the block whole: a rethink after it is still
    refused; its str_replace answers with the whole new value, which counts as seen."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        await ok(c, "memory_insert", label="human", new_string="Name: Ada")
        other.edit(agent, "human", b.Append("Likes tea."))
        shown = await ok(c, "memory", command="view", path="/memories/human", view_range=[1, 1])
        assert "Likes tea." not in shown
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada Lovelace"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        other.edit(agent, "human", b.Append("Has a cat."))
        shown = await ok(c, "memory", command="str_replace", path="/memories/human", old_str="Ada", new_str="Ida")
        assert "Likes tea." in shown and "Has a cat." in shown
        await ok(c, "memory_rethink", label="human", new_memory="Name: Ida\nLikes tea.\nHas a cat.")


async def _view_of_core(c: Client, view: str) -> str:
    if view == "memory://core":
        read = await c.read_resource("memory://core")
        return read.contents[0].text  # type: ignore[union-attr]
    return await ok(c, "core_memory_view")


@pytest.mark.parametrize("view", ["memory://core", "core_memory_view"])
async def test_a_view_of_core_memory_shows_a_detached_block_by_its_name_alone(settings: Settings, view: str) -> None:
    """``memory://core`` and ``core_memory_view`` show a detached block (``pinned = false``) by its name alone:
    reading either does not make an edit of that block seen, so a rethink from the client's older view is still
    refused."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    spec = BlockSpec(label="notes", value="Plan: ship", description="notes", metadata={"pinned": "false"})
    other.create_block(agent, spec)
    async with Client(server, cache=None) as c:
        await ok(c, "memory_open", label="notes")
        other.edit(agent, "notes", b.Append("Secret step."))
        assert "Secret step." not in await _view_of_core(c, view)
        r = await c.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert "Secret step." in other.block(agent, "notes").value


async def test_the_blocks_the_instructions_show_whole_are_seen_at_connect(settings: Settings) -> None:
    """The instructions (the ``initialize`` answer's, on a protocol with a connection per client) show the pinned
    blocks whole: the client's model has seen them, so a rethink right after connecting goes through, and one after
    another process's edit since is refused for it; a detached block, which they name alone, is not seen."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    other.create_block(agent, BlockSpec(label="notes", value="Plan: ship", metadata={"pinned": "false"}))
    async with Client(server, cache=None, mode="legacy") as c:
        assert "<human>" in (c.instructions or "") and "Plan: ship" not in (c.instructions or "")
        await ok(c, "memory_rethink", label="human", new_memory="Name: Ada")
        other.edit(agent, "persona", b.Append("Speaks French."))
        r = await c.call_tool("memory_rethink", {"label": "persona", "new_memory": "I am terse."})
        assert r.is_error and "changed since you last viewed it (version 1 -> 2)" in text_of(r), text_of(r)
        r = await c.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it"})
        assert r.is_error and "has not been shown to you whole by this server" in text_of(r), text_of(r)
    assert other.block(agent, "notes").value == "Plan: ship"
    assert "Speaks French." in other.block(agent, "persona").value


async def test_a_block_the_clients_call_created_is_seen(settings: Settings) -> None:
    """A block the client's own call created holds the value its model wrote: a rethink of it goes through."""
    server = serve_in_process(settings)
    async with Client(server, cache=None) as c:
        await ok(c, "memory", command="create", path="/memories/plans", file_text="Ship v1")
        assert await ok(c, "memory_rethink", label="plans", new_memory="Ship v2") == "Ship v2"


async def test_a_block_made_again_under_its_id_is_not_the_one_seen(settings: Settings) -> None:
    """The default agent's blocks have ids made from its name: deleted and made again, ``human`` has the id it had,
    and numbers its versions from 1 again. The client saw version 2 of the old block; another writer brings the new
    one to version 2 with another value: the rethink is refused, not written over a value the model never saw."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        await ok(c, "memory_insert", label="human", new_string="Name: Ada")  # version 2, shown
        seen = other.block(agent, "human")
        other.delete_agent(agent)
        again = other.ensure_agent("default").id
        other.edit(again, "human", b.Append("Name: Bob"))
        made = other.block(again, "human")
        assert (again, made.id, made.version) == (agent, seen.id, seen.version)  # the same id, the same number
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada Lovelace"})
        assert r.is_error and "changed since you last viewed it (deleted and made again)" in text_of(r), text_of(r)
        assert other.block(agent, "human").value.endswith("Name: Bob")
        await ok(c, "memory_open", label="human")
        await ok(c, "memory_rethink", label="human", new_memory="Name: Bob")


async def test_a_replica_that_did_not_serve_the_view_refuses_the_rethink_and_shows_the_block(
    settings: Settings,
) -> None:
    """Two stateless HTTP servers on one store (replicas behind a balancer), each request of the client served by
    either: the replica that served the view knows the client saw the block, the other does not and refuses the
    rethink, showing the block as it is now, which counts as seen there: the rethink written from it goes through on
    either replica (a view and a rethink alternating between two replicas would otherwise never meet)."""
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with (
        stateless_http(settings) as a,
        stateless_http(settings) as b_url,
        Client(a, cache=None, mode="legacy") as on_a,
        Client(b_url, cache=None, mode="legacy") as on_b,
    ):
        other.create_block(agent, BlockSpec(label="notes", value="Plan: ship"))  # after both handshakes
        await ok(on_a, "memory_open", label="notes")
        r = await on_b.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it"})
        assert r.is_error and text_of(r).startswith(
            "No rewrite was performed: memory block with label `notes` has not been shown to you whole by this "
            "server (a view served by another server process does not count)"
        ), text_of(r)
        assert "memory_open with label `notes`" in text_of(r)
        assert "The block as it is now (version 1), shown whole:\n<notes>" in text_of(r)
        assert "\nPlan: ship\n" in text_of(r)
        await ok(on_b, "memory_rethink", label="notes", new_memory="Plan: ship it")
        r = await on_a.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it now"})
        assert r.is_error and "changed since you last viewed it (version 1 -> 2)" in text_of(r), text_of(r)
        assert "The block as it is now (version 2)" in text_of(r) and "\nPlan: ship it\n" in text_of(r)
        await ok(on_a, "memory_rethink", label="notes", new_memory="Plan: ship it now")
    assert other.block(agent, "notes").value == "Plan: ship it now"


@pytest.mark.parametrize("prompt", ["memory_block", "memory_system"])
async def test_a_block_a_prompt_shows_whole_is_seen(prompt: str, settings: Settings) -> None:
    """The prompts that show a block whole (``memory_block``, ``memory_system``'s core memory) are given to the
    model: the block they show counts as seen, so a rethink after one goes through."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        other.create_block(agent, BlockSpec(label="notes", value="Plan: ship"))  # after the handshake
        got = await c.get_prompt(prompt, {"label": "notes"} if prompt == "memory_block" else {})
        assert "Plan: ship" in "".join(getattr(m.content, "text", "") for m in got.messages)
        await ok(c, "memory_rethink", label="notes", new_memory="Plan: ship it")


async def test_a_block_the_instructions_show_in_part_is_not_seen(settings: Settings) -> None:
    """Claude Code cuts instructions at 2,048 characters: a long pinned block is shown there in part, so it is not
    seen (a rethink of it is refused until the model views it); the short one before it is."""
    from mcp.types import Implementation

    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    first, second = [x.label for x in other.blocks(agent)]
    other.edit(agent, second, b.Rethink("I keep notes. " * 200))
    async with Client(
        server, cache=None, mode="legacy", client_info=Implementation(name="claude-code", version="2")
    ) as c:
        assert "more characters not shown" in (c.instructions or "")
        r = await c.call_tool("memory_rethink", {"label": second, "new_memory": "I keep notes."})
        assert r.is_error and "has not been shown to you whole by this server" in text_of(r), text_of(r)
        await ok(c, "memory_rethink", label=first, new_memory="Name: Ada")
        await ok(c, "memory_open", label=second)
        await ok(c, "memory_rethink", label=second, new_memory="I keep notes.")


async def test_a_version_is_known_by_its_number_and_commit_time_on_each_store(memory: Memory) -> None:
    """On each core store, the version an edit's answer shows is the version a later read finds (its commit time read
    back exactly, so a rethink from it goes through), and a block deleted and made again under its id at the same
    number is another version: the rethink is refused."""
    from tiermem.base.errors import ConflictError

    agent = memory.ensure_agent("default").id
    shown = memory.edit(agent, "human", b.Append("Name: Ada"))
    seen = {shown.id: (shown.version, shown.updated_at)}
    memory.edit(agent, "human", b.Rethink("Name: Ada Lovelace"), seen=seen)  # from version 2: goes through
    seen = {shown.id: (shown.version + 1, memory.block(agent, "human").updated_at)}
    memory.delete_agent(agent)
    again = memory.ensure_agent("default").id
    memory.edit(again, "human", b.Append("Name: Bob"))
    memory.edit(again, "human", b.Append("Likes tea."))
    made = memory.block(again, "human")
    assert (made.id, made.version) == (shown.id, shown.version + 1)
    with pytest.raises(ConflictError, match=r"changed since you last viewed it \(deleted and made again\)"):
        memory.edit(again, "human", b.Rethink("Name: Ada"), seen=seen)
    with pytest.raises(ConflictError, match="has not been shown to you whole by this server"):
        memory.edit(again, "human", b.Rethink("Name: Ada"), seen={})
    assert memory.block(again, "human").value.endswith("Likes tea.")


async def test_a_block_made_again_between_a_commits_read_and_its_write_fails_the_compare_and_set(
    memory: Memory, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each core store: a rethink written from version 2 of ``human`` reads it (version 2, as seen); before its
    commit lands, another writer deletes the block, makes it again under its id and brings it to version 2 with
    another value. The store's compare-and-set knows a version by its number and commit time, so the commit does not
    land on the other block (as though it were the one read: its parent misreported), and the rethink is refused
    on the re-read, the other writer's value kept."""
    from tiermem.base.errors import ConflictError

    from .conftest import memory_over

    agent = memory.ensure_agent("default").id
    shown = memory.edit(agent, "human", b.Append("Name: Ada"))
    seen = {shown.id: (shown.version, shown.updated_at)}
    other = memory_over(
        memory.archive.store, core=memory.core, default_blocks=settings.default_blocks
    )  # another writer
    commit = memory.core.commit_edit
    landed: list[tuple[int, int]] = []

    def interleaved(previous: Any, block: Any, version: Any) -> Any:
        if not landed:  # between the rethink's read and its write: delete, make again, edit (once)
            landed.append((previous.version, to_us(previous.updated_at)))
            other.delete_agent(agent)
            assert other.ensure_agent("default").id == agent
            other.edit(agent, "human", b.Append("Name: Bob"))
            made = other.block(agent, "human")
            assert (made.id, made.version) == (shown.id, shown.version)  # the same id, the same number
        return commit(previous, block, version)

    monkeypatch.setattr(memory.core, "commit_edit", interleaved)
    changes: list[Any] = []
    monkeypatch.setattr(memory, "_emit", changes.append)
    with pytest.raises(ConflictError, match=r"changed since you last viewed it \(deleted and made again\)"):
        memory.edit(agent, "human", b.Rethink("Name: Ada Lovelace"), seen=seen)
    assert landed == [(shown.version, to_us(shown.updated_at))]  # the commit was tried from the version seen
    assert changes == []  # no update reported (with the old block's version as its parent)
    assert memory.block(agent, "human").value.endswith("Name: Bob")
    assert [v.version for v in memory.history(agent, "human")] == [2, 1]


async def test_a_sessionless_clients_connect_is_not_seen_by_the_others(settings: Settings) -> None:
    """From protocol 2026-07-28 every client of the server is one record: the instructions ``server/discover`` gives
    one client do not count as seen (another client connecting would make a stale rethink of the first one's pass).
    A rethink right after connecting is refused once, showing the block, and the one written from that goes through."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None, mode="auto") as x:
        assert "<persona>" in (x.instructions or "")
        other.edit(agent, "persona", b.Append("Speaks French."))  # after x's model was shown persona version 1
        async with Client(server, cache=None, mode="auto") as y:  # another client connects: shown version 2
            assert "Speaks French." in (y.instructions or "")
        r = await x.call_tool("memory_rethink", {"label": "persona", "new_memory": "I am terse."})
        assert r.is_error and "has not been shown to you whole by this server" in text_of(r), text_of(r)
        assert "Speaks French." in text_of(r) and "Speaks French." in other.block(agent, "persona").value
        await ok(x, "memory_rethink", label="persona", new_memory="I am terse. I speak French.")


@pytest.mark.parametrize("commit", ["describe", "several blocks"])
async def test_an_own_commit_over_a_block_made_again_does_not_make_it_seen(commit: str, settings: Settings) -> None:
    """The client saw version 2 of ``human``; the block is deleted and made again under its id, and another writer
    brings the new one to version 2 with a value the model never saw. The client's own edit whose answer does not
    show the value commits version 3 on top of that other version 2: it is not on top of what the client saw (the
    number alone matches), so the rethink after it is refused instead of dropping the other writer's value."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        await ok(c, "memory_insert", label="human", new_string="Name: Ada")  # version 2 of the old block, shown
        seen = other.block(agent, "human")
        other.delete_agent(agent)
        again = other.ensure_agent("default").id
        other.edit(again, "human", b.Append("Name: Bob"))  # the new block's version 2: never shown to the client
        made = other.block(again, "human")
        assert (made.id, made.version) == (seen.id, seen.version)
        if commit == "describe":
            await ok(c, "memory", command="rename", path="/memories/human", description="About the user")
        else:
            patch = "*** Begin Patch\n*** Update Block: human\n@@\n+Has a cat.\n*** End Patch"
            await ok(c, "memory_apply_patch", label="", patch=patch)
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada Lovelace"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert "Name: Bob" in other.block(again, "human").value


async def test_a_read_only_blocks_rethink_is_refused_for_that_first(settings: Settings) -> None:
    """A rethink of a read-only block the client was not shown is refused for being read-only, not first for being
    unseen (the model would view it, write the rethink again and only then learn it could not be done); the same
    for a block changed since the client's view, and for a value over the block's limit."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        other.create_block(agent, BlockSpec(label="rules", value="Be kind.", read_only=True))  # after the handshake
        r = await c.call_tool("memory_rethink", {"label": "rules", "new_memory": "Be terse."})
        assert r.is_error and "read-only" in text_of(r) and "not been shown" not in text_of(r), text_of(r)
        await ok(c, "memory_open", label="rules")
        other.update_block(agent, "rules", value="Be kind. Be brief.")
        r = await c.call_tool("memory_rethink", {"label": "rules", "new_memory": "Be terse."})
        assert r.is_error and "read-only" in text_of(r) and "changed since" not in text_of(r), text_of(r)
        other.create_block(agent, BlockSpec(label="short", value="Hi", limit=10))
        r = await c.call_tool("memory_rethink", {"label": "short", "new_memory": "x" * 11})
        assert r.is_error and "Exceeds 10 character limit" in text_of(r), text_of(r)
    assert other.block(agent, "rules").value == "Be kind. Be brief."


def _sessionless() -> Any:
    """A request's context on the sessionless protocol (2026-07-28): the server's one client there."""
    return SimpleNamespace(request_context=SimpleNamespace(session=SimpleNamespace(protocol_version="2026-07-28")))


async def test_a_deleted_block_leaves_the_sessionless_record(settings: Settings) -> None:
    """The sessionless record is every client's, for as long as the server runs: a block deleted through the server
    leaves it (its sighting would otherwise stay for good)."""
    server = serve_in_process(settings)
    async with Client(server, cache=None, mode="auto") as c:
        await ok(c, "memory", command="create", path="/memories/plans", file_text="Ship v1")
        await ok(c, "memory_open", label="plans")
        memory, agent = server.runtime.handle.get()
        block_id = memory.block(agent, "plans").id
        assert block_id in (server.runtime.sightings.of(_sessionless()) or {})
        await ok(c, "memory", command="delete", path="/memories/plans")
        assert block_id not in (server.runtime.sightings.of(_sessionless()) or {})


def test_a_record_keeps_the_blocks_written_last(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record holds at most ``MAX_SIGHTINGS`` blocks: past that, the one written longest ago goes (its next rethink
    is refused once, showing the block), a block seen again counting as written then."""
    from tiermem.server import sightings as sightings_module

    monkeypatch.setattr(sightings_module, "MAX_SIGHTINGS", 2)
    agent = memory.ensure_agent("default").id
    block = memory.block(agent, "human")
    a, b_, c = (replace(block, id=name) for name in ("a", "b", "c"))
    sightings = Sightings()
    for shown in (a, b_, a, c):
        sightings.saw(_sessionless(), [shown], sightings.mark())
    assert set(sightings.of(_sessionless()) or {}) == {"a", "c"}


def _old_to_us(t: datetime) -> int:
    """``to_us`` as it was, through a float: some times after 2038 came back a microsecond off."""
    return int(t.timestamp() * 1_000_000)


def _moved_times() -> Callable[[], datetime]:
    """A clock in 2040 whose every time a float's microseconds move (``_old_to_us``)."""
    start, ticks = datetime(2040, 8, 5, 7, 54, 52, 194421, tzinfo=UTC), itertools.count()

    def clock() -> datetime:
        while True:
            t = start + timedelta(seconds=next(ticks), microseconds=1)
            if datetime.fromtimestamp(_old_to_us(t) / 1_000_000, tz=UTC) != t:
                return t

    return clock


def test_a_time_after_2038_reads_back_exactly() -> None:
    """Times are kept as microseconds since the epoch (``to_us``, ``from_us``), exactly: a commit time read back is
    the one written, which is how a version the model saw is known."""
    t = _moved_times()()
    assert _old_to_us(t) != to_us(t) and from_us(to_us(t)) == t
    assert (
        to_us(t.replace(tzinfo=None)) == to_us(t) == (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    )
    assert from_us(np.int64(to_us(t))) == t  # as a table's row may hold it


def test_a_commit_time_after_2038_is_the_one_the_store_gives_back(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On each core store, read without its cache (another process's view), a block's commit time in 2040 is the
    one its commit made, so a rethink from the version an edit's answer showed goes through."""
    from tiermem.core.objects import ObjectCore
    from tiermem.core.sqlite import SqliteCore

    monkeypatch.setattr(memory_module, "now", _moved_times())
    agent = memory.ensure_agent("default").id
    shown = memory.edit(agent, "human", b.Append("Name: Ada"))
    core = memory.core
    fresh = SqliteCore(core.path) if isinstance(core, SqliteCore) else ObjectCore(cast(ObjectCore, core).bucket)
    stored = fresh.get_block(shown.id)
    assert stored is not None and (stored.version, stored.updated_at) == (shown.version, shown.updated_at)
    memory.edit(agent, "human", b.Rethink("Name: Ada Lovelace"), seen={shown.id: (shown.version, shown.updated_at)})


async def test_an_own_create_after_2038_is_seen_after_the_cache_is_read_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block the client's call created in 2040 is seen at the commit time the commit made; after another process's
    edit the server reads the store again, and the block's commit time there is that one: the rethink goes through."""
    monkeypatch.setattr(memory_module, "now", _moved_times())
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    async with Client(server, cache=None) as c:
        await ok(c, "memory", command="create", path="/memories/plans", file_text="Ship v1")
        other.edit(agent, "human", b.Append("Likes tea."))  # another process writes: the server's cache is read again
        assert await ok(c, "memory_rethink", label="plans", new_memory="Ship v2") == "Ship v2"
