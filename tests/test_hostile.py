"""Hostile input through a real MCP client: every case gets a clear error and changes nothing."""

from __future__ import annotations

import json
import re

import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.domain.blocks import LINE_NUMBER_WARNING

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio
BIG = "x" * (10 * 1024 * 1024)

CASES: list[tuple[str, dict[str, object], str]] = [
    # labels
    ("memory_rethink", {"label": "nope", "new_memory": "x"}, "No memory block with label 'nope'. Blocks that exist"),
    ("memory_rethink", {"label": "../etc/passwd", "new_memory": "x"}, "No memory block with label '../etc/passwd'"),
    ("memory_rethink", {"label": "human'; DROP TABLE blocks; --", "new_memory": "x"}, "No memory block with label"),
    (
        "memory",
        {"command": "create", "path": "/memories/a//b"},
        "Invalid block label 'a//b': it has an empty path segment",
    ),
    (
        "memory",
        {"command": "create", "path": "/memories/a/../b"},
        "Invalid block label 'a/../b': '.' and '..' segments",
    ),
    ("memory", {"command": "create", "path": "/memories/bad\\label"}, "Invalid block label 'bad\\\\label'"),
    ("memory", {"command": "create", "path": "/memories/" + "x" * 251}, "Invalid block label"),
    ("memory", {"command": "create", "path": "/memories/.hidden"}, "Invalid block label"),
    ("memory", {"command": "create", "path": "/memories/notes/"}, "Invalid block label 'notes/': it has an empty path"),
    ("memory", {"command": "delete", "path": "/memories/human/"}, "Invalid block label 'human/'"),
    (
        "memory",
        {"command": "rename", "old_path": "/memories/human", "new_path": "/memories/human\u202etxt"},
        "Invalid block label 'human\\u202etxt': it contains the bidirectional control character U+202E",
    ),
    ("memory_apply_patch", {"label": "", "patch": "*** Add Block: a\u2066b\n+x"}, "control character U+2066"),
    ("memory", {"command": "create", "path": "../../x"}, "memory paths look like '/memories/<label>'"),
    ("memory", {"command": "explode", "path": "/memories/human"}, "command"),
    # payload sizes and text validity
    ("core_memory_append", {"label": "human", "content": BIG}, "the most one argument may carry is 100000"),
    ("archival_memory_insert", {"content": BIG}, "the most one argument may carry is 100000"),
    ("conversation_log", {"messages": [{"role": "user", "content": BIG}]}, "the most one argument may carry is 100000"),
    ("core_memory_append", {"label": "human", "content": "a\x00b"}, "contains a NUL character"),
    ("core_memory_append", {"label": "human", "content": "bad \ud800 surrogate"}, "not valid Unicode text"),
    ("archival_memory_insert", {"content": "lone \udfff"}, "not valid Unicode text"),
    ("archival_memory_insert", {"content": "   "}, "content is empty"),
    # only invisible characters (zero-width space, word joiner, byte-order mark, joiner) is empty too
    ("archival_memory_insert", {"content": "\u200b\u2060\ufeff \u200d"}, "content is empty"),
    (
        "conversation_log",
        {"messages": [{"role": "user", "content": "\u200b\ufeff"}]},
        "messages[0].content is empty",
    ),
    ("archival_memory_insert", {"content": "x", "tags": ["   "]}, "Invalid tag '   ': tags are 1-64 characters"),
    ("archival_memory_insert", {"content": "x", "tags": ["ok", "\u200b"]}, "Invalid tag '\\u200b'"),
    ("archival_memory_search", {"query": "\u200b\ufeff"}, "query is empty"),  # a search for nothing visible
    ("conversation_search", {"query": " \u2060 "}, "query is empty"),
    # numbers out of range and wrong types
    ("archival_memory_search", {"query": "x", "top_k": 0}, "top_k must be a whole number from 1 to 100"),
    ("archival_memory_search", {"query": "x", "top_k": -5}, "top_k must be a whole number from 1 to 100"),
    ("archival_memory_search", {"query": "x", "top_k": 10**12}, "top_k must be a whole number from 1 to 100"),
    ("conversation_search", {"query": "x", "limit": -1}, "limit must be a whole number from 1 to 100"),
    ("archival_memory_list", {"limit": 0}, "limit must be a whole number from 1 to 200"),
    ("archival_memory_list", {"offset": -1}, "offset must be a whole number >= 0"),
    ("memory_insert", {"label": "human", "new_string": "x", "insert_line": -2}, "Invalid `insert_line` parameter: -2"),
    ("memory_insert", {"label": "human", "new_string": "x", "insert_line": 10**15}, "Invalid `insert_line` parameter"),
    ("memory_history", {"label": "human", "limit": 0}, "limit must be a whole number >= 1"),
    ("memory_revert", {"label": "human", "version": -1}, "version must be a positive whole number"),
    ("archival_memory_search", {"query": "x", "top_k": "five"}, "top_k"),
    ("memory_insert", {"label": "human", "new_string": ["a"]}, "new_string"),
    ("archival_memory_insert", {"content": {"a": 1}}, "content"),
    ("archival_memory_insert", {"content": "x", "tags": "not-a-list"}, "tags"),
    ("conversation_log", {"messages": "hello"}, "messages"),
    ("conversation_log", {"messages": [{"role": "admin", "content": "x"}]}, "role"),
    # dates
    (
        "conversation_search",
        {"query": "x", "start_date": "yesterday"},
        "Invalid start_date format: yesterday. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)",
    ),
    (
        "conversation_search",
        {"query": "x", "end_date": "2024-02-30"},
        "end_date 2024-02-30 is not a date: February 2024 has 29 days.",
    ),
    ("conversation_search", {"query": "x", "start_date": "2024-01-01'; --"}, "Invalid start_date format"),
    (
        "archival_memory_search",
        {"query": "x", "start_datetime": "2025-01-02", "end_datetime": "2025-01-01"},
        "is after end_datetime",
    ),
    ("archival_memory_search", {"query": "x", "start_datetime": "13/01/2024"}, "Invalid start_datetime format"),
    # filter strings built to break out of where clauses
    ("archival_memory_delete", {"id": "x' OR 1=1 --"}, "Invalid passage id"),
    ("archival_memory_delete", {"id": "passage-\\'; DELETE"}, "Invalid passage id"),
    ("archival_memory_search", {"query": "x", "tags": ["ok", "nul\x00"]}, "Invalid tag"),
    ("conversation_search", {"query": "x", "roles": ["user' OR '1'='1"]}, "roles"),
    ("archival_memory_search", {"query": "x", "tag_match_mode": "any' OR 1=1"}, "tag_match_mode"),
    # line numbers, banner, patches
    (
        "memory_replace",
        {"label": "human", "old_string": "1→ Name: Ada", "new_string": "x"},
        "old_string contains a line number prefix",
    ),
    (
        "memory_replace",
        {"label": "human", "old_string": "Ada", "new_string": "2→ Bob"},
        "new_string contains a line number prefix",
    ),
    (
        "memory_replace",
        {"label": "human", "old_string": LINE_NUMBER_WARNING, "new_string": "x"},
        "old_string contains a line number warning",
    ),
    ("memory_insert", {"label": "human", "new_string": "  3→ x"}, "new_string contains a line number prefix"),
    ("memory_rethink", {"label": "human", "new_memory": "1→ everything"}, "new_memory contains a line number prefix"),
    ("memory_apply_patch", {"label": "human", "patch": " nothing here\n+x"}, "expected hunk context not found"),
    ("memory_apply_patch", {"label": "human", "patch": "-Likes tea\n+coffee"}, "hunk context matched multiple places"),
    ("memory_apply_patch", {"label": "human", "patch": ""}, "the patch is empty"),
    (
        "memory_replace",
        {"label": "human", "old_string": "tea", "new_string": "x"},
        "Multiple occurrences of old_string `tea` in lines [2, 3]",
    ),
    ("core_memory_append", {"label": "human", "content": "y" * 4990}, "Edit failed: Exceeds 5000 character limit"),
    ("memory_replace", {"label": "human", "old_string": "", "new_string": "x"}, "old_string is empty"),
]


async def snapshot(c: Client) -> dict[str, object]:
    blocks = {}
    for r in (await c.list_resources()).resources:
        if str(r.uri).startswith("memory://blocks/"):
            content = (await c.read_resource(str(r.uri))).contents[0]
            blocks[str(r.uri)] = (content.text, content.meta["version"])
    archival = json.loads((await c.read_resource("memory://archival")).contents[0].text)
    history = text_of(await c.call_tool("memory_history", {"label": "human", "limit": 100}))
    return {"blocks": blocks, "archival": archival, "history": history}


async def test_hostile_battery(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["all"]})), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea\nLikes tea"})
        await c.call_tool("archival_memory_insert", {"content": "seed fact", "tags": ["seed"]})
        await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": "seed message"}]})
        before = await snapshot(c)
        failures = []
        for tool, args, expected in CASES:
            result = await c.call_tool(tool, args)
            text = text_of(result)
            if not result.is_error or expected not in text:
                failures.append(
                    f"{tool}({re.sub(r'x{50,}', 'x…', str(args))[:120]}) -> error={result.is_error}: {text[:200]}"
                )
        assert failures == []
        assert await snapshot(c) == before
