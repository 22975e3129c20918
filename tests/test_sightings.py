"""What a client's model has seen of the blocks (``server/sightings.py``), through real MCP clients of an in-process
server over the real store, with another handle on the same store as another process: a commit that shows the
client nothing of another writer's edit does not count as seen, its own edit on top of what it saw does; resources
it reads count; a view answered late never takes the record back; stateless HTTP requests are one client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp import Client

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.domain import blocks as b
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


async def test_memory_core_shows_a_detached_block_by_its_name_alone(settings: Settings) -> None:
    """``memory://core`` lists a detached block (``pinned = false``) without its value: reading it does not make an
    edit of that block seen, so a rethink from the client's older view is still refused."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    spec = BlockSpec(label="notes", value="Plan: ship", description="notes", metadata={"pinned": "false"})
    other.create_block(agent, spec)
    async with Client(server, cache=None) as c:
        await ok(c, "memory_open", label="notes")
        other.edit(agent, "notes", b.Append("Secret step."))
        read = await c.read_resource("memory://core")
        assert "Secret step." not in read.contents[0].text  # type: ignore[union-attr]
        r = await c.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)


async def test_core_memory_view_shows_a_detached_block_by_its_name_alone(settings: Settings) -> None:
    """``core_memory_view`` renders a detached block (``pinned = false``) by its name alone: calling it does not make
    an edit of that block seen, so a rethink from the client's older view is still refused."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    spec = BlockSpec(label="notes", value="Plan: ship", description="notes", metadata={"pinned": "false"})
    other.create_block(agent, spec)
    async with Client(server, cache=None) as c:
        await ok(c, "memory_open", label="notes")
        other.edit(agent, "notes", b.Append("Secret step."))
        assert "Secret step." not in await ok(c, "core_memory_view")
        r = await c.call_tool("memory_rethink", {"label": "notes", "new_memory": "Plan: ship it"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert "Secret step." in other.block(agent, "notes").value


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_blocks_the_instructions_show_whole_are_seen_at_connect(mode: Any, settings: Settings) -> None:
    """The instructions (the ``initialize`` answer's, or ``server/discover``'s) show the pinned blocks whole: the
    client's model has seen them, so a rethink right after connecting goes through, and one after another process's
    edit since is refused for it; a detached block, which they name alone, is not seen."""
    server = serve_in_process(settings)
    other, agent = serve_in_process(settings).runtime.handle.get()
    other.create_block(agent, BlockSpec(label="notes", value="Plan: ship", metadata={"pinned": "false"}))
    async with Client(server, cache=None, mode=mode) as c:
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
