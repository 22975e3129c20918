"""Path-shaped block labels (Letta's MemFS), pinned and detached blocks, completions and client logging,
through a real in-process MCP client on the real server."""

from __future__ import annotations

import gc
import threading
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import INVALID_PARAMS, PromptReference, ResourceTemplateReference

from tiermem.base.config import Settings
from tiermem.server.app import BLOCK_URI

from .conftest import serve_in_process, text_of

# logging/setLevel and resources/subscribe are deprecated at 2026-07-28 but are what pre-2026 clients use
pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore", category=MCPDeprecationWarning)]


async def call(c: Client, name: str, **args):  # type: ignore[no-untyped-def]
    return await c.call_tool(name, args)


async def test_path_labels_are_blocks_resources_and_edit_targets(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["all"]})), cache=None) as c:
        r = await call(
            c,
            "memory",
            command="create",
            path="/memories/system/human/family",
            file_text="Mum: Ada",
            description="Family",
        )
        assert not r.is_error, text_of(r)
        uri = "memory://blocks/system/human/family"
        assert uri in {str(x.uri) for x in (await c.list_resources()).resources}
        assert (await c.read_resource(uri)).contents[0].text == "Mum: Ada"
        # every edit tool reaches it by its label; a leading '/' is the same label
        assert (
            text_of(await call(c, "core_memory_append", label="system/human/family", content="Dad: Bob"))
            == "Mum: Ada\nDad: Bob"
        )
        assert text_of(
            await call(c, "memory_replace", label="/system/human/family", old_string="Bob", new_string="Rob")
        ).endswith("Rob")
        assert text_of(
            await call(c, "memory_insert", label="system/human/family", new_string="Sis: Cy", insert_line=0)
        ).startswith("Sis")
        r = await call(c, "memory_apply_patch", label="system/human/family", patch=" Sis: Cy\n-Mum: Ada\n+Mum: Ada L.")
        assert "Mum: Ada L." in text_of(r)
        assert (
            text_of(await call(c, "memory_rethink", label="system/human/family", new_memory="Mum: Ada")) == "Mum: Ada"
        )
        r = await call(
            c, "memory", command="str_replace", path="/memories/system/human/family", old_str="Ada", new_str="Eve"
        )
        assert text_of(r) == "Mum: Eve"
        assert (await c.read_resource(uri)).contents[0].text == "Mum: Eve"
        r = await call(
            c, "memory", command="rename", old_path="/memories/system/human/family", new_path="/memories/system/family"
        )
        assert (
            not r.is_error and (await c.read_resource("memory://blocks/system/family")).contents[0].text == "Mum: Eve"
        )
        r = await call(
            c, "memory", command="rename", old_path="/memories/system/family", new_path="/memories/system/human/family"
        )
        assert not r.is_error, text_of(r)
        view = text_of(await call(c, "core_memory_view"))
        assert (
            "<system/human/family>\n<description>\nFamily\n" in view
            and "Mum: Eve\n</value>\n</system/human/family>" in view
        )
        # bad labels: a clear error, nothing created
        before = {str(x.uri) for x in (await c.list_resources()).resources}
        for path, problem in [
            ("/memories/a//b", "empty path segment"),
            ("/memories/a/../b", "'..' segments"),
            ("/memories/notes/.x", "a hidden file"),
            ("/memories/" + "a/" * 520 + "b", "at most 1024"),
        ]:
            r = await call(c, "memory", command="create", path=path, file_text="x")
            assert r.is_error and "Invalid block label" in text_of(r) and problem in text_of(r), text_of(r)
        assert {str(x.uri) for x in (await c.list_resources()).resources} == before


def uris_into(got: list[str]) -> Any:
    """A client message handler appending each notified resource URI to ``got``."""

    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        uri = getattr(getattr(getattr(message, "root", message), "params", None), "uri", None)
        if uri is not None:
            got.append(str(uri))

    return on_message


async def test_subscribed_path_block_is_notified(settings: Settings) -> None:
    got: list[str] = []

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=uris_into(got)) as c:
        await call(c, "memory", command="create", path="/memories/notes/projects", file_text="tiermem")
        await c.subscribe_resource("memory://blocks/notes/projects")
        await call(c, "core_memory_append", label="notes/projects", content="more")
        with anyio.fail_after(10):
            while "memory://blocks/notes/projects" not in got:
                await anyio.sleep(0.01)


async def test_block_uris_are_percent_encoded_and_read_back(settings: Settings) -> None:
    """A listed block URI parses as a URI naming its own block: a space, '?', '#', '%' or a non-ASCII letter in the
    label is percent-encoded (a '/' is kept), and reading the listed URI returns that block."""
    labels = {"ca fé/ü?#x": "weird", "ca fé/ü": "other", "100% sure": "pct", "a%20b": "literal", "a b": "spaced"}
    got: list[str] = []

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=uris_into(got)) as c:
        for label, text in labels.items():
            r = await call(c, "memory", command="create", path="/memories/" + label, file_text=text)
            assert not r.is_error, text_of(r)
        await call(c, "memory", command="create", path="/memories/system/human", file_text="sys")
        listed = {r.name: str(r.uri) for r in (await c.list_resources()).resources if r.name is not None}
        assert listed["system/human"] == "memory://blocks/system/human"
        assert listed["ca fé/ü?#x"] == "memory://blocks/ca%20f%C3%A9/%C3%BC%3F%23x"
        for label, text in labels.items():
            parts = urlsplit(listed[label])
            assert (parts.query, parts.fragment) == ("", ""), listed[label]
            assert unquote(parts.path) == "/" + label
            assert (await c.read_resource(listed[label])).contents[0].text == text, label
        # a client that puts the label in unencoded still reads it (when the text is no other block's URI)
        assert (await c.read_resource("memory://blocks/100% sure")).contents[0].text == "pct"
        # notifications carry the listed URI; a subscriber to the unencoded spelling hears under its own URI
        await c.subscribe_resource(listed["a b"])
        await c.subscribe_resource("memory://blocks/a b")
        await call(c, "core_memory_append", label="a b", content="more")
        with anyio.fail_after(10):
            while not {"memory://blocks/a%20b", "memory://blocks/a b"} <= set(got):
                await anyio.sleep(0.01)
    async with Client(serve_in_process(settings), cache=None) as modern:  # subscriptions/listen (2026-07-28)
        async with modern.listen(resource_subscriptions=["memory://blocks/a%20b"]) as sub:
            await call(modern, "core_memory_append", label="a b", content="again")
            with anyio.fail_after(10):
                async for event in sub:
                    if getattr(event, "uri", "") == "memory://blocks/a%20b":
                        break


async def test_a_block_uri_whose_escapes_are_not_utf8_names_the_label(settings: Settings) -> None:
    """``%FF`` decodes to no text: the read is -32602 naming the label as written (it was an internal error quoting
    Python's codec), and a subscription to such a URI does not stop another's notification."""
    got: list[str] = []
    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=uris_into(got)) as c:
        for uri in ("memory://blocks/%FF", "memory://blocks/hu%FFman"):
            with pytest.raises(MCPError) as exc:
                await c.read_resource(uri)
            label = uri.removeprefix("memory://blocks/")
            assert exc.value.error.code == INVALID_PARAMS, exc.value.error
            assert f"No memory block with label {label!r}" in exc.value.error.message
            assert "codec" not in exc.value.error.message
        await c.subscribe_resource("memory://blocks/%FF")
        await c.subscribe_resource("memory://blocks/human")
        await call(c, "core_memory_append", label="human", content="more")
        with anyio.fail_after(10):
            while "memory://blocks/human" not in got:
                await anyio.sleep(0.01)
        assert "memory://blocks/%FF" not in got


async def test_detached_blocks_render_as_a_tree_and_open_on_demand(settings: Settings) -> None:
    server = serve_in_process(settings)
    async with Client(server, cache=None) as c:
        for path, text, about in [
            ("notes/projects", "tiermem: MCP memory", "Projects  in\nprogress"),
            ("notes/books/reading", "Dune", "Books being read"),
            ("corrections/ezra-mistakes", "x", ""),
        ]:
            assert not (
                await call(c, "memory", command="create", path="/memories/" + path, file_text=text, description=about)
            ).is_error
        await server.runtime.call(
            None,
            lambda m, a: [
                m.update_block(a, label, pinned=False)
                for label in ("notes/projects", "notes/books/reading", "corrections/ezra-mistakes")
            ],
        )
        view = text_of(await call(c, "core_memory_view"))
        blocks, directory = view.split("</memory_blocks>")
        assert "<human>" in blocks and "tiermem: MCP memory" not in view and "<notes/projects>" not in view
        tree = directory.split("<memory_directory>\n")[1].split("\n</memory_directory>")[0].split("\n")[2:]
        assert tree == [
            "- corrections/",
            "  - ezra-mistakes (corrections/ezra-mistakes; 1 chars)",
            "- notes/",
            "  - books/",
            "    - reading (notes/books/reading; 4 chars): Books being read",
            "  - projects (notes/projects; 19 chars): Projects in progress",
        ]
        opened = text_of(await call(c, "memory_open", label="notes/projects"))
        assert (
            opened.startswith("<notes/projects>\n<description>\nProjects  in\nprogress\n")
            and "tiermem: MCP memory" in opened
        )
        # edits reach detached blocks; the resource (and memory://core) follow
        await call(c, "core_memory_append", label="notes/projects", content="and more")
        assert (await c.read_resource("memory://blocks/notes/projects")).contents[0].text.endswith("and more")
        core = (await c.read_resource("memory://core")).contents[0].text
        assert "- projects (notes/projects; 28 chars)" in core
        r = await call(c, "memory_open", label="notes/nope")
        assert r.is_error and "No memory block with label 'notes/nope'" in text_of(r)
        # pinning it again puts it back in full
        await server.runtime.call(None, lambda m, a: m.update_block(a, "notes/projects", pinned=True))
        assert "<notes/projects>" in text_of(await call(c, "core_memory_view"))


async def test_completions_for_block_labels(settings: Settings) -> None:
    server = serve_in_process(settings)
    async with Client(server, cache=None) as c:
        assert c.server_capabilities.completions is not None
        for path in ("system/human/family", "system/persona/voice", "notes/projects"):
            await call(c, "memory", command="create", path="/memories/" + path, file_text="x")
        template = ResourceTemplateReference(type="ref/resource", uri=BLOCK_URI)
        r = await c.complete(template, {"name": "label", "value": "system/"})
        assert r.completion.values == ["system/human/family", "system/persona/voice"] and r.completion.total == 2
        r = await c.complete(template, {"name": "label", "value": "/sys"})
        assert r.completion.values == ["system/human/family", "system/persona/voice"]
        r = await c.complete(template, {"name": "label", "value": "pro"})  # a later segment matches too
        assert r.completion.values == ["notes/projects"]
        r = await c.complete(template, {"name": "label", "value": ""})
        assert r.completion.values == sorted(
            ["human", "persona", "system/human/family", "system/persona/voice", "notes/projects"]
        )
        prompt = PromptReference(type="ref/prompt", name="memory_block")
        r = await c.complete(prompt, {"name": "label", "value": "h"})
        assert r.completion.values == ["human", "system/human/family"]
        got = await c.get_prompt("memory_block", {"label": "notes/projects"})
        assert "<notes/projects>" in got.messages[0].content.text
        # A template argument without completions: none. What the server does not have: -32602, saying what it has.
        period = ResourceTemplateReference(type="ref/resource", uri="memory://timeline/{period}")
        assert (await c.complete(period, {"name": "period", "value": "2"})).completion.values == []
        wrong = [
            (PromptReference(type="ref/prompt", name="nope"), "label", "No prompt 'nope'", "memory_block"),
            (PromptReference(type="ref/prompt", name="memory_system"), "label", "has no argument", "no arguments"),
            (prompt, "lable", "has no argument 'lable'", "it takes label"),
            (
                ResourceTemplateReference(type="ref/resource", uri="memory://x/{y}"),
                "y",
                "No resource template",
                BLOCK_URI,
            ),
            (template, "name", "has no argument 'name'", "it takes label"),
        ]
        for ref, argument, problem, hint in wrong:
            with pytest.raises(MCPError) as refused:
                await c.complete(ref, {"name": argument, "value": ""})
            assert refused.value.error.code == INVALID_PARAMS
            assert problem in refused.value.error.message and hint in refused.value.error.message


async def test_completions_and_logging_declared_to_legacy_clients(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None, mode="legacy") as c:
        caps = c.server_capabilities
        assert caps.completions is not None and caps.logging is not None
        assert (await c.set_logging_level("debug")) is not None
        template = ResourceTemplateReference(type="ref/resource", uri=BLOCK_URI)
        assert (await c.complete(template, {"name": "label", "value": "hu"})).completion.values == ["human"]


async def test_a_closed_connection_is_not_kept_alive_by_its_log_level(settings: Settings) -> None:
    from mcp.server.connection import Connection

    def connections() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, Connection))

    server = serve_in_process(settings)
    before = connections()
    for level in ("debug", "error", "info"):
        async with Client(server, cache=None, mode="legacy") as c:
            await c.set_logging_level(level)
    assert connections() == before


def _gated_server(settings: Settings):  # type: ignore[no-untyped-def]
    """The real server whose store opens only when ``gate`` is set: a call made before that waits for it."""
    from tiermem.cli.main import open_memory
    from tiermem.server.app import build_server
    from tiermem.server.runtime import MemoryHandle

    gate = threading.Event()

    def factory():  # type: ignore[no-untyped-def]
        if not gate.wait(60):
            raise RuntimeError("the test never opened the gate")
        m = open_memory(settings)
        return m, m.ensure_agent(settings.agent).id

    return build_server(MemoryHandle(factory), settings), gate


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_long_work_in_a_request_is_logged_to_the_client(settings: Settings, mode: str) -> None:
    server, gate = _gated_server(settings)
    received: list[tuple[str, str]] = []

    async def on_log(params) -> None:  # type: ignore[no-untyped-def]
        received.append((params.level, str(params.data)))
        if "waiting for the memory store" in str(params.data):
            gate.set()  # the client has heard the server is busy: let the opening finish

    opt_in = {"log_level": "info"} if mode != "legacy" else {}
    async with Client(server, cache=None, mode=mode, logging_callback=on_log, **opt_in) as c:
        if mode == "legacy":
            await c.set_logging_level("info")
        with anyio.fail_after(60):
            r = await call(c, "core_memory_view")
        assert not r.is_error and "<human>" in text_of(r)
    assert received[0] == ("info", "waiting for the memory store and the embedding model to open")
    assert received[1][0] == "info" and received[1][1].startswith("memory store open after")


async def test_a_wait_for_the_archive_is_logged_when_it_starts_and_ends(settings: Settings) -> None:
    """The first archival search waits for the archive (the store and the embedding model) still opening: its client
    is told when the wait starts and when it ends, as for the memory store."""
    from tiermem.base.background import Opening
    from tiermem.cli.main import open_memory
    from tiermem.cli.serving import _tell_archive_wait
    from tiermem.domain.memory import Memory
    from tiermem.server.app import build_server
    from tiermem.server.runtime import MemoryHandle

    gate = threading.Event()

    def factory():  # type: ignore[no-untyped-def]
        whole = open_memory(settings)

        def archive():  # type: ignore[no-untyped-def]
            if not gate.wait(60):
                raise RuntimeError("the test never opened the gate")
            return whole.archive

        gated = Opening(archive, thread_name="tiermem-open-archive", on_wait=_tell_archive_wait)
        memory = Memory(gated, core=whole.core, default_blocks=settings.default_blocks)
        return memory, memory.ensure_agent(settings.agent).id

    received: list[tuple[str, str]] = []

    async def on_log(params) -> None:  # type: ignore[no-untyped-def]
        received.append((params.level, str(params.data)))
        if "waiting for the recall/archival store" in str(params.data):
            gate.set()  # the client has heard the server is busy: let the opening finish

    server = build_server(MemoryHandle(factory), settings)
    async with Client(server, cache=None, mode="legacy", logging_callback=on_log) as c:
        await c.set_logging_level("info")
        assert not (await call(c, "memory_open", label="human")).is_error  # core memory needs no archive
        with anyio.fail_after(60):
            r = await call(c, "archival_memory_search", query="tea")
        assert not r.is_error, text_of(r)
    waits = [m for m in received if "recall/archival" in m[1]]
    assert waits[0] == ("info", "waiting for the recall/archival store and the embedding model to open"), received
    assert waits[1][0] == "info" and waits[1][1].startswith("recall/archival store and embedding model open after")
    assert len(waits) == 2, received


def test_client_levels_filter_by_severity() -> None:
    from tiermem.server.clientlog import DEFAULT_LEVEL, ClientLevels, _Sink

    levels = ClientLevels()
    session, other = SimpleNamespace(state={}), SimpleNamespace(state={})  # as connections: their scratch state
    assert levels.get(session) == DEFAULT_LEVEL == "warning"
    levels.set(session, "error")
    assert levels.get(session) == "error" and levels.get(other) == "warning"
    sink = _Sink(session, levels.get(session), None, 0)
    assert [lv for lv in ("debug", "info", "warning", "error", "critical") if sink.wants(lv)] == ["error", "critical"]
