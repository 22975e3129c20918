"""The model-facing surface through a real MCP client: protocol errors, argument errors, schemas, structured results."""

from __future__ import annotations

import json
import logging

import jsonschema
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from tiermem.base.config import Settings
from tiermem.server.app import resolve_tools
from tiermem.server.arguments import check_arguments, tool_list_cost
from tiermem.server.registry import BY_NAME
from tiermem.server.runtime import FILE_TOOLS

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio

# The budget the README states for the default preset (cl100k_base tokens); measured with `python -m bench tool_tokens`.
MODEL_TOKENS_BUDGET = 1400
LIST_TOKENS_BUDGET = 2800
CLAUDE_CODE_CHARS_BUDGET = 4800  # tool definitions as Claude Code sends them in every request
DATA_TOOLS = {
    "memory",
    "core_memory_view",
    "memory_history",
    "conversation_log",
    "conversation_search",
    "archival_memory_insert",
    "archival_memory_search",
    "archival_memory_delete",
    "archival_memory_list",
}


def _all(settings: Settings) -> Settings:
    return settings.model_copy(update={"tools": ["all"]})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_protocol_errors_are_invalid_params_without_tracebacks(
    settings: Settings, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with Client(serve_in_process(settings), cache=None, mode=mode) as c:  # type: ignore[arg-type]
        with pytest.raises(MCPError) as tool_err:
            await c.call_tool("nope", {})
        with pytest.raises(MCPError) as prompt_err:
            await c.get_prompt("nope")
        with pytest.raises(MCPError) as resource_err:
            await c.read_resource("memory://blocks/ghost")
        with pytest.raises(MCPError) as prompt_args_err:
            await c.get_prompt("memory_system", {"x": "1"})
        caps = c.server_capabilities
        assert caps.tools.list_changed is True and caps.prompts.list_changed is True  # the same in both eras
        assert caps.resources.list_changed is True
    assert tool_err.value.error.code == INVALID_PARAMS
    assert "Unknown tool: 'nope'. Tools on this server: memory_replace," in tool_err.value.error.message
    assert prompt_err.value.error.code == INVALID_PARAMS
    assert (
        prompt_err.value.error.message == "Unknown prompt: 'nope'. Prompts on this server: memory_system, memory_block."
    )
    assert resource_err.value.error.code == INVALID_PARAMS
    assert prompt_args_err.value.error.code == INVALID_PARAMS
    assert (
        prompt_args_err.value.error.message
        == "Prompt 'memory_system': unknown argument(s) ['x']; it takes no arguments."
    )
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == []


async def test_argument_errors_name_argument_type_and_example(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with Client(serve_in_process(_all(settings)), cache=None, mode="legacy") as c:
        await c.call_tool("memory_rethink", {"label": "human", "new memory": "x"})  # refused: unknown argument
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Likes tea"})
        assert not r.is_error
        cases = [
            (
                "memory_insert",
                {"label": "human", "new_string": "z", "insert_line": "two"},
                "memory_insert: `insert_line` must be a whole number, got the string 'two'. Example: {\"insert_line\": -1}.",
            ),
            (
                "memory_replace",
                {"label": "human", "old_string": "tea"},
                "memory_replace: the required argument `new_string` is missing; it takes a string. "
                'Example: {"new_string": "Likes green tea"}.',
            ),
            (
                "archival_memory_search",
                {"query": "x", "top_k": [5]},
                'archival_memory_search: `top_k` must be a whole number, got a list of 1 item. Example: {"top_k": 5}.',
            ),
            (
                "archival_memory_search",
                {"query": "x", "tag_match_mode": "some"},
                "archival_memory_search: `tag_match_mode` must be one of 'any' or 'all', got the string 'some'. "
                'Example: {"tag_match_mode": "any"}.',
            ),
            (
                "memory_replace",
                {"label": "human", "old_string": "tea", "new_string": "coffee", "bogus": 1},
                "memory_replace does not take the argument `bogus`. It accepts: label, old_string, new_string, "
                "idempotency_key (required: label, old_string, new_string).",
            ),
            (
                "memory_rethink",
                {"label": "human", "new memory": "x"},
                "memory_rethink does not take the argument `new memory`. It accepts: label, new_memory, idempotency_key "
                "(required: label, new_memory).",
            ),
            (
                "archival_memory_search",
                {"query": "x", "limit": 3, "k": 1},
                "archival_memory_search does not take the arguments `limit`, `k`. It accepts: query, tags, "
                "tag_match_mode, top_k, start_datetime, end_datetime, project (required: query).",
            ),
            (
                "memory_replace",
                {"label": "human", "old_string": "tea", "old_str": "Likes", "new_string": "x"},
                "memory_replace: `old_string` and `old_str` are two names for the same argument and their values "
                "differ. Send only `old_string`.",
            ),
            (  # both names as given, whichever comes first
                "memory_replace",
                {"label": "human", "old_string": "tea", "new_str": "Likes", "new_string": "x"},
                "memory_replace: `new_str` and `new_string` are two names for the same argument and their values "
                "differ. Send only `new_string`.",
            ),
            # a boolean is not a whole number (pydantic's lax mode would take true as 1)
            (
                "memory_insert",
                {"label": "human", "new_string": "x", "insert_line": True},
                'memory_insert: `insert_line` must be a whole number, got true. Example: {"insert_line": -1}.',
            ),
            (
                "memory",
                {"command": "insert", "path": "/memories/human", "insert_text": "x", "insert_line": False},
                'memory: `insert_line` must be a whole number, got false. Example: {"insert_line": -1}.',
            ),
            (
                "memory",
                {"command": "view", "path": "/memories/human", "view_range": [1, True]},
                'memory: `view_range[1]` must be a whole number, got true. Example: {"view_range": [1, 10]}.',
            ),
            (
                "archival_memory_search",
                {"query": "x", "top_k": True},
                'archival_memory_search: `top_k` must be a whole number, got true. Example: {"top_k": 5}.',
            ),
            (
                "open_files",
                {"file_requests": [{"file_name": "a.md", "offset": True}]},
                "open_files: `file_requests[0].offset` must be a whole number, got true. "
                'Example: {"file_requests": [{"file_name": "docs/README.md", "offset": 0, "length": 50}]}.',
            ),
            (  # a whole number that may be null (its default is not): the same check
                "grep_files",
                {"pattern": "x", "context_lines": True},
                'grep_files: `context_lines` must be a whole number, got true. Example: {"context_lines": 1}.',
            ),
            # a key an object argument does not take is refused too (pydantic would drop it without a word)
            (
                "conversation_log",
                {"messages": [{"role": "user", "content": "camel case id", "conversationId": "chat-42", "time": "1"}]},
                "conversation_log: `messages[0]` does not take the keys `conversationId`, `time`. It accepts: role, "
                "content, timestamp, conversation_id, project (required: role, content).",
            ),
            (
                "open_files",
                {"file_requests": [{"file_name": "a.md"}, {"file_name": "b.md", "bogus": 1}]},
                "open_files: `file_requests[1]` does not take the key `bogus`. It accepts: file_name, offset, length "
                "(required: file_name).",
            ),
            (  # the same list sent as JSON text (Claude Desktop's way; the SDK parses it before validating)
                "conversation_log",
                {"messages": json.dumps([{"role": "user", "content": "camel case id", "time": "2020-01-01"}])},
                "conversation_log: `messages[0]` does not take the key `time`. It accepts: role, content, timestamp, "
                "conversation_id, project (required: role, content).",
            ),
            (
                "open_files",
                {"file_requests": json.dumps([{"file_name": "a.md", "offset": True}])},
                "open_files: `file_requests[0].offset` must be a whole number, got true. "
                'Example: {"file_requests": [{"file_name": "docs/README.md", "offset": 0, "length": 50}]}.',
            ),
            (  # many objects with the same mistake: the first few, and how many more
                "conversation_log",
                {"messages": [{"role": "user", "content": "camel case id", "conversationId": "c"}] * 8},
                "\n".join(
                    f"conversation_log: `messages[{i}]` does not take the key `conversationId`. It accepts: role, "
                    "content, timestamp, conversation_id, project (required: role, content)."
                    for i in range(5)
                )
                + "\nconversation_log: and 3 more objects with keys they do not take.",
            ),
        ]
        for tool, args, expected in cases:
            r = await c.call_tool(tool, args)
            assert r.is_error and text_of(r) == expected, (tool, text_of(r))
        r = await c.call_tool("conversation_log", {"messages": [{"role": "admin", "content": "x"}]})
        assert r.is_error and text_of(r).startswith(
            "conversation_log: `messages[0].role` must be one of 'user', 'assistant', 'tool' or 'system', got the string 'admin'."
        )
        history = (await c.call_tool("memory_history", {"label": "human"})).structured_content
        assert [v["operation"] for v in history["versions"]] == ["memory_rethink", "create"]  # no refused call wrote
        found = (await c.call_tool("conversation_search", {"query": "camel case id"})).structured_content
        assert found is not None and found["results"] == []  # the refused turn was not stored

        # Letta's older names stay accepted (and the same value under both names is fine).
        r = await c.call_tool("memory_replace", {"label": "human", "old_str": "tea", "new_str": "green tea"})
        assert not r.is_error and text_of(r) == "Likes green tea"
        r = await c.call_tool("memory_insert", {"label": "human", "new_str": "Lives in Lyon", "insert_line": 0})
        assert text_of(r) == "Lives in Lyon\nLikes green tea"
        r = await c.call_tool(
            "memory_replace", {"label": "human", "old_string": "Lyon", "old_str": "Lyon", "new_string": "Paris"}
        )
        assert text_of(r) == "Lives in Paris\nLikes green tea"
        # a value in the wrong argument may be a secret: the model is shown what it sent, the log only its kind
        r = await c.call_tool("archival_memory_search", {"query": "x", "top_k": "hunter2-pin-4821"})
        assert "got the string 'hunter2-pin-4821'" in text_of(r)
        r = await c.call_tool("archival_memory_search", {"query": "x", "tag_match_mode": 4821})
        assert "got the number 4821" in text_of(r)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    refusals = [r.getMessage() for r in caplog.records if "refused its arguments" in r.getMessage()]
    assert "`insert_line` must be a whole number, got a string of 3 characters" in refusals[1]
    assert any("`top_k` must be a whole number, got a string of 16 characters" in m for m in refusals)
    assert any("`tag_match_mode` must be one of 'any' or 'all', got a number" in m for m in refusals)
    assert not [m for m in refusals if "hunter2" in m or "4821" in m or "'two'" in m]


def test_an_object_with_typed_additional_properties_takes_other_keys() -> None:
    """``additionalProperties`` with a schema (``dict[str, int]``, a model with typed extras) takes keys beyond the
    listed ones, each checked as that schema says; only an object whose schema leaves it out (or says false) refuses
    them."""
    counts = {
        "type": "object",
        "properties": {"total": {"type": "integer"}},
        "additionalProperties": {"type": "integer"},
    }
    closed = {"type": "object", "properties": {"total": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "object", "properties": {"counts": counts, "closed": closed}}
    assert check_arguments("t", schema, {"counts": {"total": 2, "tea": 1}}) == (
        {"counts": {"total": 2, "tea": 1}},
        None,
    )
    args = {"counts": {"total": 2, "tea": True}}
    assert check_arguments("t", schema, args) == (
        args,
        't: `counts.tea` must be a whole number, got true. Example: {"counts": {}}.',
    )
    args = {"closed": {"total": 2, "tea": 1}}
    assert check_arguments("t", schema, args) == (
        args,
        "t: `closed` does not take the key `tea`. It accepts: total (required: none).",
    )


async def test_published_schemas_are_tight(settings: Settings) -> None:
    async with Client(serve_in_process(_all(settings)), cache=None) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}

    def walk(node: object):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            yield node
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    for name, tool in tools.items():
        description = tool.description or ""
        assert description and description == description.strip(), name
        assert not [line for line in description.splitlines() if line.startswith(" ")], (name, description)
        for node in walk(tool.input_schema):
            assert not isinstance(node.get("title"), str), (name, node)
            assert {"type": "null"} not in node.get("anyOf", []), (name, node)
        assert (tool.output_schema is not None) == (name in DATA_TOOLS), name
        if tool.output_schema is not None:
            assert tool.output_schema["type"] == "object"
            jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    required = {name: set(t.input_schema.get("required", [])) for name, t in tools.items()}
    assert required["memory_replace"] == {"label", "old_string", "new_string"}
    assert required["memory_insert"] == {"label", "new_string"}
    assert required["memory"] == {"command"}
    assert "view" in tools["memory"].input_schema["properties"]["command"]["enum"]
    for alias in ("old_str", "new_str"):
        assert alias not in tools["memory_replace"].input_schema["properties"]
        assert f"`{alias}`" not in (tools["memory_replace"].description or "")


async def test_tool_list_fits_the_stated_budget(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["default"]})), cache=None) as c:
        tools = (await c.list_tools()).tools
    assert {t.name for t in tools} == set(resolve_tools(["default"])) - FILE_TOOLS  # shown with a folder attached
    cost = tool_list_cost(tools)
    assert cost["model_tokens"] <= MODEL_TOKENS_BUDGET, cost
    assert cost["list_tokens"] <= LIST_TOKENS_BUDGET, cost
    assert cost["claude_code_chars"] <= CLAUDE_CODE_CHARS_BUDGET, (
        cost
    )  # tests/test_claude_code.py checks a real request


def test_the_default_set_has_one_way_to_edit_a_block() -> None:
    names = set(resolve_tools(["default"]))
    edits = {name for name in names if BY_NAME[name].block_args}  # tools that change a block
    assert edits == {"memory_replace", "memory_insert", "memory_rethink", "memory_revert"}  # Letta's, and undo
    assert not names & {"core_memory_append", "core_memory_replace", "memory", "memory_apply_patch"}
    every = set(resolve_tools(["all"]))  # Letta's other names stay one setting away
    from tiermem.base.config import load_settings
    from tiermem.server.app import published_tools

    letta = published_tools(load_settings(memory_tool_dialect="letta-code"))  # choosing the dialect publishes the tool
    assert set(letta) == names | {"memory", "memory_apply_patch"}
    assert {"core_memory_append", "core_memory_replace", "memory", "conversation_log", "core_memory_view"} <= every


async def test_structured_results_match_their_output_schemas(settings: Settings) -> None:
    async with Client(serve_in_process(_all(settings)), cache=None, mode="legacy") as c:  # JSON-RPC framing
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        calls = [
            ("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea"}),
            ("core_memory_view", {}),
            ("core_memory_view", {"line_numbers": True}),
            ("memory_history", {"label": "human", "limit": 5}),
            ("conversation_log", {"messages": [{"role": "user", "content": "I moved to Lyon"}]}),
            ("conversation_search", {"query": "Lyon"}),
            ("archival_memory_insert", {"content": "Ada drinks green tea", "tags": ["drinks"]}),
            ("archival_memory_search", {"query": "tea", "tags": ["drinks"]}),
            ("archival_memory_list", {"limit": 5}),
            ("memory", {"command": "view", "path": "/memories"}),
            ("memory", {"command": "view", "path": "/memories/human"}),
            ("memory", {"command": "create", "path": "/memories/project", "file_text": "Goal: ship"}),
            (
                "memory",
                {"command": "str_replace", "path": "/memories/project", "old_str": "ship", "new_str": "ship v1"},
            ),
            ("memory", {"command": "delete", "path": "/memories/project"}),
        ]
        results = {}
        for name, args in calls:
            r = await c.call_tool(name, args)
            assert not r.is_error, (name, text_of(r))
            if schemas[name] is None:
                assert r.structured_content is None, name
                continue
            jsonschema.validate(r.structured_content, schemas[name])
            results.setdefault(name, []).append(r)
        for name in (
            "memory_history",
            "conversation_log",
            "conversation_search",
            "archival_memory_insert",
            "archival_memory_search",
            "archival_memory_list",
        ):
            for r in results[name]:  # older clients read the same data as JSON text
                assert json.loads(text_of(r)) == r.structured_content, name
        view, numbered = results["core_memory_view"]
        assert text_of(view).startswith("<memory_blocks>") and "1→ Name: Ada" in text_of(numbered)
        human = next(b for b in view.structured_content["blocks"] if b["label"] == "human")
        assert human == {**human, "value": "Name: Ada\nLikes tea", "chars": 19, "limit": 5000, "read_only": False}
        hits = results["archival_memory_search"][0].structured_content
        assert hits["count"] == 1 and hits["results"][0]["content"] == "Ada drinks green tea"
        passage_id = hits["results"][0]["id"]
        r = await c.call_tool("archival_memory_delete", {"id": passage_id})
        jsonschema.validate(r.structured_content, schemas["archival_memory_delete"])
        assert r.structured_content == {"deleted": 1, "id": passage_id}

        # A retried write with the same idempotency key replays the first structured result, writing nothing.
        first = await c.call_tool("archival_memory_insert", {"content": "once", "idempotency_key": "k-1"})
        again = await c.call_tool("archival_memory_insert", {"content": "once", "idempotency_key": "k-1"})
        assert again.structured_content == first.structured_content and text_of(again) == text_of(first)
        made = await c.call_tool("memory", {"command": "create", "path": "/memories/x", "idempotency_key": "k-2"})
        remade = await c.call_tool("memory", {"command": "create", "path": "/memories/x", "idempotency_key": "k-2"})
        assert not remade.is_error and remade.structured_content == made.structured_content
        assert (await c.call_tool("archival_memory_list", {})).structured_content["total"] == 1


async def test_memory_view_directory_and_file(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea\nLives in Lyon"})
        await c.call_tool(
            "memory",
            {
                "command": "create",
                "path": "/memories/project",
                "file_text": "Goal: ship",
                "description": "Project notes",
            },
        )
        listing = await c.call_tool("memory", {"command": "view", "path": "/memories"})
        lines = text_of(listing).splitlines()
        assert lines[0] == "Here are the files in /memories (one per memory block; size in characters of its limit):"
        assert "33/5000\t/memories/human\tThe human block:" in text_of(listing)
        assert "10/5000\t/memories/project\tProject notes" in lines
        entries = {e["path"]: e for e in listing.structured_content["entries"]}
        assert set(entries) == {"/memories/human", "/memories/persona", "/memories/project"}
        assert entries["/memories/project"] == {
            "path": "/memories/project",
            "kind": "file",
            "chars": 10,
            "limit": 5000,
            "read_only": False,
            "description": "Project notes",
        }
        assert text_of(await c.call_tool("memory", {"command": "view", "path": "/memories/"})) == text_of(listing)

        shown = await c.call_tool("memory", {"command": "view", "path": "/memories/human"})
        assert text_of(shown) == (
            "Here's the content of /memories/human with line numbers:\n"
            "     1\tName: Ada\n     2\tLikes tea\n     3\tLives in Lyon"
        )
        assert shown.structured_content == {
            "command": "view",
            "path": "/memories/human",
            "kind": "file",
            "content": "Name: Ada\nLikes tea\nLives in Lyon",
        }
        part = await c.call_tool("memory", {"command": "view", "path": "/memories/human", "view_range": [2, -1]})
        assert text_of(part).endswith(":\n     2\tLikes tea\n     3\tLives in Lyon")

        errors = [
            ({"command": "view"}, "memory view needs `path`, for example path='/memories/human'."),
            (
                {"command": "view", "path": "/memories/ghost"},
                "The path /memories/ghost does not exist. Files in /memories: /memories/persona, /memories/human, "
                "/memories/project. View /memories to list them.",
            ),
            ({"command": "view", "path": "/etc/passwd"}, "Invalid path '/etc/passwd': memory paths look like"),
            (
                {"command": "view", "path": "/memories/human", "view_range": [3, 9]},
                "Invalid view_range [3, 9]: /memories/human has 3 lines; use 1 <= start <= end <= 3",
            ),
            ({"command": "view", "path": "/memories/human", "view_range": [1]}, "view_range must be two line numbers"),
            ({"command": "view", "path": "/memories", "view_range": [1, 2]}, "/memories is a directory"),
        ]
        for args, expected in errors:
            r = await c.call_tool("memory", args)
            assert r.is_error and text_of(r).startswith(expected), (args, text_of(r))


def test_searching_writes_no_index(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Search tools are annotated read-only: the full-text indexes exist once the store is open, so a search writes nothing."""
    from tiermem.store import SEARCHABLE, Filter, Store

    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    before = {t: store.conn.tables[t].version for t in SEARCHABLE}
    assert all(store.indexes.has_fts(t) for t in SEARCHABLE)
    for table in SEARCHABLE:
        assert store.search.text_search(table, "tea", Filter(agent_id="a"), 5) == []
    reopened = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    assert {t: reopened.conn.tables[t].version for t in SEARCHABLE} == before


async def test_the_agent_loop_sees_the_same_contract(settings: Settings) -> None:
    """The built-in loop calls the same tools in process: aliases work, unknown tools and arguments are failed calls."""
    from tiermem.agent.toolhost import ServerTools

    host = ServerTools(serve_in_process(settings.model_copy(update={"tools": ["default"]})))
    specs = {s.name: s for s in await host.specs()}
    assert "old_str" not in specs["memory_replace"].input_schema["properties"]
    assert await host.call("memory_rethink", {"label": "human", "new_memory": "Likes tea"}) == ("Likes tea", False)
    assert await host.call("memory_replace", {"label": "human", "old_str": "tea", "new_str": "coffee"}) == (
        "Likes coffee",
        False,
    )
    text, failed = await host.call("memory_apply_patch", {"label": "human", "patch": "+x"})  # not published by default
    assert failed and text.startswith(
        "There is no tool named 'memory_apply_patch'; use one of the tools you were given: "
    )
    text, failed = await host.call("no_such_tool", {})  # unknown to the server too: only the agent's tools are named
    offered = text.split("you were given: ", 1)[1].rstrip(".").split(", ")
    assert failed and offered == [s.name for s in await host.specs()]
    assert "conversation_log" not in text and "core_memory_view" not in text and "agent_chat" not in text
    text, failed = await host.call("memory_rethink", {"label": "human", "new_memory": "x", "heartbeat": True})
    assert failed and text.startswith("memory_rethink does not take the argument `heartbeat`.")
