"""The MCP surface through a real in-process MCP client: tools, errors, resources, prompts, notifications."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.base.errors import ConfigError
from tiermem.domain.blocks import LINE_NUMBER_WARNING
from tiermem.server.app import PRESETS, TOOL_GROUPS, resolve_tools
from tiermem.server.runtime import FILE_TOOLS

from .conftest import PYTHON, serve_in_process, text_of

pytestmark = pytest.mark.anyio


async def call(client: Client, name: str, **args):  # type: ignore[no-untyped-def]
    return await client.call_tool(name, args)


async def test_default_tools_and_annotations(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["default"]})), cache=None) as c:
        default = {t.name for t in (await c.list_tools()).tools}
        assert default == set(resolve_tools(["default"])) - FILE_TOOLS and "memory_apply_patch" not in default
    async with Client(serve_in_process(settings), cache=None) as c:  # every tool
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "agent_chat" not in tools
        assert tools["archival_memory_search"].annotations.read_only_hint is True
        assert tools["core_memory_view"].annotations.read_only_hint is True
        assert tools["memory_replace"].annotations.read_only_hint is False
        assert tools["memory_replace"].annotations.destructive_hint is False  # versioned: memory_revert undoes it
        assert tools["core_memory_append"].annotations.destructive_hint is False
        assert tools["archival_memory_delete"].annotations.destructive_hint is True
        schema = tools["memory_replace"].input_schema
        assert "old_str" not in schema["properties"]  # an accepted alias, not advertised
        assert set(schema["required"]) == {"label", "old_string", "new_string"}
        assert "verbatim" in (tools["memory_replace"].description or "")


async def test_minimal_preset(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tiermem.base.config import load_settings

    s = load_settings(data_dir=tmp_path / "d", embedding_model="hashing", tools="minimal")
    async with Client(serve_in_process(s), cache=None) as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert names == {
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "memory_open",
        "conversation_search",
        "archival_memory_insert",
        "archival_memory_search",
    }


def test_resolve_tools_rejects_unknown() -> None:
    with pytest.raises(ConfigError, match="^Invalid settings: tools: 'nope' is no tool, group or preset"):
        resolve_tools(["nope"])
    assert resolve_tools(["patch", "memory_history"]) == ["memory_apply_patch", "memory_history"]
    assert set(PRESETS) == {"default", "minimal", "all"} and "agent" in TOOL_GROUPS


def test_serve_refuses_an_empty_tools_setting(tmp_path: Path) -> None:
    """``TIERMEM_TOOLS=`` (an unset variable in a host's config) stops the server, like an unknown name, before the
    data directory is made; it does not publish no tools."""
    env = {**os.environ, "TIERMEM_TOOLS": "", "HOME": str(tmp_path)}
    out = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert out.returncode == 1 and "Invalid settings: tools (TIERMEM_TOOLS): it is empty" in out.stderr
    assert not (tmp_path / "data").exists()


async def test_core_tools_success_paths(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["all"]})), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        assert text_of(await call(c, "memory_rethink", label="human", new_memory="Name: Ada")) == "Name: Ada"
        assert (
            text_of(await call(c, "core_memory_append", label="human", content="Likes tea")) == "Name: Ada\nLikes tea"
        )
        r = await call(c, "core_memory_replace", label="human", old_content="tea", new_content="coffee")
        assert text_of(r) == "Name: Ada\nLikes coffee"
        r = await call(c, "memory_replace", label="human", old_string="Ada", new_string="Ada Lovelace")
        assert text_of(r) == "Name: Ada Lovelace\nLikes coffee"
        r = await call(c, "memory_replace", label="human", old_str="coffee", new_str="green tea")  # aliases
        assert text_of(r) == "Name: Ada Lovelace\nLikes green tea"
        r = await call(c, "memory_insert", label="human", new_string="Lives in London", insert_line=1)
        assert text_of(r) == "Name: Ada Lovelace\nLives in London\nLikes green tea"
        r = await call(
            c, "memory_apply_patch", label="human", patch=" Lives in London\n-Likes green tea\n+Likes mint tea"
        )
        assert text_of(r) == "Name: Ada Lovelace\nLives in London\nLikes mint tea"
        view = text_of(await call(c, "core_memory_view", line_numbers=True))
        assert "1→ Name: Ada Lovelace" in view and "<memory_metadata>" in view
        hist = json.loads(text_of(await call(c, "memory_history", label="human", limit=3)))["versions"]
        assert [h["operation"] for h in hist] == ["memory_apply_patch", "memory_insert", "memory_replace"]
        r = await call(c, "memory_revert", label="human", version=2)
        assert text_of(r) == "Name: Ada"


async def test_core_tool_errors_change_nothing(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["all"]})), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await call(c, "memory_rethink", label="human", new_memory="x x\ny")
        cases = [
            (
                "memory_replace",
                dict(label="human", old_string="x", new_string="z"),
                "No replacement was performed. Multiple occurrences of old_string `x` in lines [1]. Please ensure it is unique.",
            ),
            (
                "memory_replace",
                dict(label="human", old_string="q", new_string="z"),
                "No replacement was performed, old_string `q` did not appear verbatim in memory block with label `human`.",
            ),
            (
                "memory_replace",
                dict(label="human", old_string="1→ x x", new_string="z"),
                "old_string contains a line number prefix, which is not allowed. Do not include line numbers when calling "
                "memory tools (line numbers are for display purposes only).",
            ),
            (
                "memory_replace",
                dict(label="human", old_string=LINE_NUMBER_WARNING, new_string="z"),
                "old_string contains a line number warning, which is not allowed. Do not include line number information "
                "when calling memory tools (line numbers are for display purposes only).",
            ),
            (
                "memory_insert",
                dict(label="human", new_string="z", insert_line=7),
                "Invalid `insert_line` parameter: 7. It should be within the range of lines of the memory block: [0, 2], "
                "or -1 to append to the end of the memory block.",
            ),
            (
                "core_memory_append",
                dict(label="human", content="y" * 5000),
                "Edit failed: Exceeds 5000 character limit (requested 5006)",
            ),
            (
                "core_memory_replace",
                dict(label="human", old_content="nope", new_content="z"),
                "Old content 'nope' not found in memory block 'human'",
            ),
            (
                "memory_apply_patch",
                dict(label="human", patch=" nothing\n+z"),
                "Failed to apply patch: expected hunk context not found in the memory block.",
            ),
            (
                "memory_rethink",
                dict(label="nope", new_memory="z"),
                "No memory block with label 'nope'. Blocks that exist: 'persona', 'human'.",
            ),
            ("memory_revert", dict(label="human", version=42), "Block 'human' has no version 42"),
            (
                "memory_replace",
                dict(label="human", new_string="z"),
                "memory_replace: the required argument `old_string` is missing; it takes a string. "
                'Example: {"old_string": "Likes tea"}.',
            ),
        ]
        for tool, args, expected in cases:
            r = await call(c, tool, **args)
            assert r.is_error, (tool, args)
            assert text_of(r).startswith(expected), (tool, text_of(r))
        r = await call(c, "memory_insert", label="human", new_string="z", insert_line="two")
        assert r.is_error and "insert_line" in text_of(r)
        hist = json.loads(text_of(await call(c, "memory_history", label="human", limit=10)))["versions"]
        assert len(hist) == 2 and hist[0]["value"] == "x x\ny"  # nothing written by the failures


async def test_edit_errors_name_the_arguments_the_tool_took(settings: Settings) -> None:
    """An empty text to replace, a NUL, a text over max_content_chars, line numbers copied from a view, a missing
    new_str: each refused with an error naming the argument as the calling tool spells it, and nothing written."""
    small = settings.model_copy(update={"tools": ["all"], "max_content_chars": 50})
    async with Client(serve_in_process(small), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await call(c, "memory_rethink", label="human", new_memory="Likes tea")
        await call(c, "memory", command="create", path="/memories/empty", file_text="")
        big = "y" * 51
        cases = [
            (
                "memory_replace",
                dict(label="human", old_string="", new_string="x"),
                "No replacement was performed: "
                "old_string is empty, and it must be the exact text to replace. To add text, use memory_insert; "
                "to rewrite the whole block, use memory_rethink.",
            ),
            (
                "memory_replace",
                dict(label="empty", old_string="", new_string="x"),
                "No replacement was performed: old_string is empty",
            ),
            (
                "core_memory_replace",
                dict(label="human", old_content="", new_content="x"),
                "old_content is empty: "
                "core_memory_replace needs the exact text to replace. To add text, use core_memory_append; "
                "to rewrite the whole block, use memory_rethink.",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="", new_str="x"),
                "No replacement was performed: old_str is empty, and it must be the exact text to replace. "
                "To add text, use the insert command.",
            ),
            ("memory_insert", dict(label="human", new_string="a\x00b"), "new_string contains a NUL character"),
            (
                "memory_replace",
                dict(label="human", old_string="tea", new_string="x\x00"),
                "new_string contains a NUL character",
            ),
            (
                "core_memory_replace",
                dict(label="human", old_content="a\x00", new_content="x"),
                "old_content contains a NUL character",
            ),
            ("memory_rethink", dict(label="human", new_memory=big), "new_memory has 51 characters"),
            (
                "memory",
                dict(command="insert", path="/memories/human", insert_text="a\x00b"),
                "insert_text contains a NUL character",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="tea", new_str=big),
                "new_str has 51 characters",
            ),
            (
                "memory",
                dict(command="create", path="/memories/n", file_text="a\x00b"),
                "file_text contains a NUL character",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="coffee", new_str="x"),
                "No replacement was performed, old_str `coffee` did not appear verbatim in memory block with label "
                "`human`.",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="1→ Likes", new_str="x"),
                "old_str contains a line number prefix, which is not allowed.",
            ),
            # the memory tool's view numbers its lines "     1\t...": copied into an edit, they are refused too
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="     1\tLikes tea", new_str="x"),
                "old_str contains a line number prefix, which is not allowed. Do not include line numbers when "
                "calling memory tools (line numbers are for display purposes only).",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="tea", new_str="    12\tx"),
                "new_str contains a line number prefix",
            ),
            (
                "memory",
                dict(command="insert", path="/memories/human", insert_text="     3\tcopied from view"),
                "insert_text contains a line number prefix",
            ),
            (
                "memory",
                dict(command="str_replace", path="/memories/human", old_str="tea"),
                "memory str_replace needs `new_str`",
            ),
            # create's file_text is an edit argument too: either view's numbers are refused, nothing created
            (
                "memory",
                dict(command="create", path="/memories/n", file_text="3→ Likes tea"),
                "file_text contains a line number prefix, which is not allowed. Do not include line numbers when "
                "calling memory tools (line numbers are for display purposes only).",
            ),
            (
                "memory",
                dict(command="create", path="/memories/n", file_text="     1\tLikes tea"),
                "file_text contains a line number prefix",
            ),
        ]
        for tool, args, expected in cases:
            r = await call(c, tool, **args)
            assert r.is_error and text_of(r).startswith(expected), (tool, args, text_of(r))
        view = text_of(await call(c, "memory", command="view", path="/memories/human"))
        assert view.endswith("\n     1\tLikes tea")  # the prefix the guard refuses is the one view shows
        hist = json.loads(text_of(await call(c, "memory_history", label="human", limit=10)))["versions"]
        assert len(hist) == 2 and hist[0]["value"] == "Likes tea"  # nothing written by the failures
        assert "memory://blocks/n" not in {str(x.uri) for x in (await c.list_resources()).resources}
        # a tab-separated line is not a view prefix; new_str "" still deletes
        r = await call(c, "memory", command="insert", path="/memories/human", insert_text="2024\tsales")
        assert text_of(r) == "Likes tea\n2024\tsales", text_of(r)
        r = await call(c, "memory", command="str_replace", path="/memories/human", old_str="\n2024\tsales", new_str="")
        assert text_of(r) == "Likes tea", text_of(r)


async def test_conversation_log_refuses_empty_turns_and_stores_nothing(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        for empty in ("", "  \n\t", "\u200b\ufeff", "\u200d \u2060"):
            msgs = [{"role": "user", "content": "I moved to Lyon"}, {"role": "assistant", "content": empty}]
            r = await call(c, "conversation_log", messages=msgs)
            assert r.is_error and text_of(r).startswith(
                "messages[1].content is empty: an empty turn holds nothing to remember, and nothing was stored. "
                "Leave that turn out, or send its text."
            ), text_of(r)
        archival = json.loads((await c.read_resource("memory://archival")).contents[0].text)
        assert archival["messages"] == 0  # the valid turn beside it was not written either
        # a joiner inside an emoji sequence is text like any: only a turn of nothing visible is empty
        turns = [
            {"role": "user", "content": "I moved to Lyon"},
            {"role": "assistant", "content": "\U0001f469\u200d\U0001f4bb"},
        ]
        r = await call(c, "conversation_log", messages=turns)
        assert not r.is_error and r.structured_content["stored"] == 2
        r = await call(c, "archival_memory_insert", content="\U0001f469\u200d\U0001f4bb", tags=["\u200bdev"])
        assert not r.is_error, text_of(r)


async def test_memory_command_tool(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        r = await call(
            c, "memory", command="create", path="/memories/project", file_text="Goal: ship", description="Project notes"
        )
        assert not r.is_error and "Created memory block 'project'" in text_of(r)
        r = await call(c, "memory", command="str_replace", path="/memories/project", old_str="ship", new_str="ship 1")
        assert text_of(r) == "Goal: ship 1"
        # Letta's own memory tool (letta/functions/function_sets/base.py) names them old_string/new_string: aliases
        r = await call(c, "memory", command="str_replace", path="/memories/project", old_string="1", new_string="v1")
        assert text_of(r) == "Goal: ship v1"
        r = await call(c, "memory", command="str_replace", path="/memories/project", old_string="v", old_str="w")
        assert r.is_error and "two names for the same argument" in text_of(r)
        r = await call(c, "memory", command="insert", path="/memories/project", insert_line=0, insert_text="# Project")
        assert text_of(r) == "# Project\nGoal: ship v1"
        r = await call(c, "memory", command="rename", old_path="/memories/project", new_path="/memories/work")
        assert "Renamed" in text_of(r)
        r = await call(c, "memory", command="rename", path="/memories/work", description="Work notes")
        assert not r.is_error
        block = await c.read_resource("memory://blocks/work")
        assert block.contents[0].text == "# Project\nGoal: ship v1"
        assert block.contents[0].meta["description"] == "Work notes"
        r = await call(c, "memory", command="create", path="/memories/work")
        assert r.is_error and "already exists" in text_of(r)
        r = await call(c, "memory", command="create", path="/etc/passwd")
        assert r.is_error and "/memories/<label>" in text_of(r)
        r = await call(c, "memory", command="delete", path="/memories/work")
        assert "Deleted" in text_of(r)
        r = await call(c, "memory", command="str_replace", path="/memories/work", old_str="a", new_str="b")
        assert r.is_error and "No memory block with label 'work'" in text_of(r)


async def test_the_archival_resource_names_only_a_published_tool(settings: Settings) -> None:
    """memory://archival's description tells the model how to go through the passages with a tool it has: the
    default tools have no archival_memory_list."""
    for tools, named in ((["default"], "archival_memory_search"), (["all"], "archival_memory_list")):
        async with Client(serve_in_process(settings.model_copy(update={"tools": tools})), cache=None) as c:
            published = {t.name for t in (await c.list_tools()).tools}
            [archival] = [r for r in (await c.list_resources()).resources if str(r.uri) == "memory://archival"]
        described = set(re.findall(r"\b(?:archival|conversation|memory)_\w+", archival.description or ""))
        assert described == {named} and named in published, (tools, archival.description)


async def test_resources_and_prompt(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        assert "<persona>" in (c.instructions or "")  # core memory is in the instructions (tests/test_instructions.py)
        uris = {str(r.uri): r for r in (await c.list_resources()).resources}
        assert {"memory://core", "memory://blocks/persona", "memory://blocks/human", "memory://archival"} <= set(uris)
        assert uris["memory://blocks/human"].meta["limit"] == 5000
        templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
        assert "memory://blocks/{label}" in templates
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await call(c, "memory_rethink", label="human", new_memory="Name: Ada")
        human = (await c.read_resource("memory://blocks/human")).contents[0]
        assert human.text == "Name: Ada"
        assert human.meta == {**human.meta, "limit": 5000, "chars": 9, "read_only": False, "version": 2}
        core = (await c.read_resource("memory://core")).contents[0].text
        assert core.startswith(
            "<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:\n\n<persona>"
        )
        assert "<human>\n<description>\nThe human block: Stores key details" in core
        assert (
            "<value>\nName: Ada\n</value>\n</human>\n\n</memory_blocks>\n\n<memory_metadata>\n- AGENT_ID: agent-"
            in core
        )
        with pytest.raises(Exception, match="No memory block with label 'ghost'"):
            await c.read_resource("memory://blocks/ghost")
        prompt = await c.get_prompt("memory_system")
        text = prompt.messages[0].content.text
        assert "tiered, self-editing memory" in text and "<memory_blocks>" in text and "Name: Ada" in text


async def test_listen_notifications_modern(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.list_tools()
        async with c.listen(
            resource_subscriptions=["memory://blocks/human", "memory://core"], resources_list_changed=True
        ) as sub:
            await call(c, "core_memory_append", label="human", content="Likes tea")
            await call(c, "memory", command="create", path="/memories/extra", file_text="x")
            seen = []
            with anyio.fail_after(10):
                async for event in sub:
                    seen.append(type(event).__name__ + ":" + str(getattr(event, "uri", "")))
                    if "ResourcesListChanged:" in seen:
                        break
        assert "ResourceUpdated:memory://blocks/human" in seen
        assert "ResourceUpdated:memory://core" in seen


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")  # the legacy flow is the point here
async def test_legacy_subscribe_notifications(settings: Settings) -> None:
    received: list[str] = []

    async def handler(message) -> None:  # type: ignore[no-untyped-def]
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method:
            params = getattr(root, "params", None)
            received.append(f"{method} {getattr(params, 'uri', '') or ''}".strip())

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=handler) as c:
        caps = c.server_capabilities.resources
        assert caps.subscribe is True and caps.list_changed is True
        await c.subscribe_resource("memory://blocks/human")
        await call(c, "core_memory_append", label="human", content="Likes tea")
        await call(c, "memory", command="create", path="/memories/extra", file_text="x")
        with anyio.fail_after(5):
            while "notifications/resources/list_changed" not in received:
                await anyio.sleep(0.02)
        await c.unsubscribe_resource("memory://blocks/human")
        await call(c, "core_memory_append", label="human", content="again")
        await call(c, "memory", command="delete", path="/memories/extra")
        with anyio.fail_after(5):
            while received.count("notifications/resources/list_changed") < 2:  # creating and deleting both announce
                await anyio.sleep(0.02)
    assert received.count("notifications/resources/updated memory://blocks/human") == 1, received


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_subscriptions_are_released_when_the_client_disconnects(settings: Settings) -> None:
    server = serve_in_process(settings)
    notifier = server.runtime.notifier
    for n in range(3):  # clients that subscribe and leave without unsubscribing
        async with Client(server, cache=None, mode="legacy") as c:
            await c.subscribe_resource("memory://blocks/human")
            await c.subscribe_resource(f"memory://blocks/later-{n}")
            assert notifier.subscriptions() == 2
        assert notifier.subscriptions() == 0 and notifier._subscribers == {}
    async with Client(server, cache=None, mode="legacy") as c:  # and the next client is still notified
        await c.subscribe_resource("memory://blocks/human")
        await call(c, "core_memory_append", label="human", content="Likes tea")
        assert notifier.subscriptions() == 1


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_subscriptions_are_released_over_http(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tiermem.base.config import load_settings
    from tiermem.server.app import build_http_app

    from .test_transports import free_port, in_thread

    port = free_port()
    settings = load_settings(
        data_dir=tmp_path / "data", embedding_model="hashing", transport="http", port=port, tools=["all"]
    )
    server = serve_in_process(settings)
    async with in_thread(build_http_app(server, settings, []), port) as url:
        notifier = server.runtime.notifier
        sessions = server.session_manager._server_instances  # the SDK's map of live streamable-HTTP sessions
        for _ in range(2):  # streamable-HTTP sessions that subscribe and end without unsubscribing
            async with Client(url, cache=None, mode="legacy") as c:
                await c.subscribe_resource("memory://blocks/human")
                await c.call_tool("core_memory_append", {"label": "human", "content": "x"})
                assert notifier.subscriptions() == 1 and len(sessions) == 1
            with anyio.fail_after(10):  # the session's end reaches the server just after the client returns
                while notifier.subscriptions() or sessions:
                    await anyio.sleep(0.05)
        assert (
            notifier._subscribers == {} and notifier._cleanup == set()
        )  # a server under reconnecting clients keeps nothing


async def test_idempotency_keys(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "idempotency_key" in tools["core_memory_append"].input_schema["properties"]
        assert "idempotency_key" not in tools["archival_memory_search"].input_schema["properties"]
        first = await call(c, "core_memory_append", label="human", content="once", idempotency_key="k-1")
        again = await call(c, "core_memory_append", label="human", content="once", idempotency_key="k-1")
        assert text_of(first) == text_of(again) == "\nonce"
        assert text_of(await call(c, "core_memory_view")).count("once") == 1
        ins1 = await call(c, "archival_memory_insert", content="fact", idempotency_key="k-2")
        ins2 = await call(c, "archival_memory_insert", content="fact", idempotency_key="k-2")
        assert text_of(ins1) == text_of(ins2)
        listed = json.loads(text_of(await call(c, "archival_memory_list")))
        assert listed["total"] == 1
        reuse = await call(c, "core_memory_append", label="human", content="other", idempotency_key="k-1")
        assert reuse.is_error and "different arguments" in text_of(reuse)
        reuse = await call(c, "archival_memory_insert", content="other fact", idempotency_key="k-2")
        assert text_of(reuse) == (
            "idempotency_key 'k-2' was already used for an archival_memory_insert call with different arguments; "
            "use a new key for a new request."
        )
        failed = await call(c, "memory_replace", label="human", old_string="zzz", new_string="y", idempotency_key="k-3")
        assert failed.is_error  # failures are not remembered: a corrected retry may reuse the key
        ok = await call(
            c, "memory_replace", label="human", old_string="once", new_string="twice", idempotency_key="k-3"
        )
        assert not ok.is_error and text_of(ok) == "\ntwice"
