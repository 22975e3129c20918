"""Core memory in the server's instructions: rendered per client within its budget, current on every discover."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.base.records import Block
from tiermem.domain import briefing
from tiermem.domain.blocks import render_core_memory
from tiermem.server.app import resolve_tools
from tiermem.server.registry import label_editors

from .conftest import PYTHON, ROOT, serve_in_process
from .test_transports import server_env

pytestmark = pytest.mark.anyio
DEFAULT_TOOLS = resolve_tools(["default"])

EDITORS = label_editors("anthropic")


def block(label: str, value: str, *, pinned: bool = True, description: str = "") -> Block:
    return Block(
        id=f"block-{label}",
        label=label,
        value=value,
        limit=5000,
        description=description or f"About {label}.",
        read_only=False,
        version=1,
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
        metadata={} if pinned else {"pinned": "false"},
    )


def test_small_core_memory_is_whole_in_letta_layout() -> None:
    blocks = [block("persona", "I am Sam."), block("human", "Name: Ada"), block("notes/trips", "Rome", pinned=False)]
    text = briefing.instructions(blocks, DEFAULT_TOOLS, 2048, editors=EDITORS)
    assert render_core_memory(blocks) in text  # pinned in full; the detached one by label and description
    assert "Rome" not in text and "notes/trips" in text and "About notes/trips." in text


def test_claude_code_budget_summarises_overflow_and_says_where_to_read_it() -> None:
    long_human = " ".join(f"fact{i} about Ada." for i in range(300))  # ~5,000 characters
    blocks = [
        block("persona", "I am Sam, a careful assistant."),
        block("human", long_human),
        block("projects", "tiermem " * 50),
        block("notes/trips", "Rome", pinned=False),
    ]
    budget = briefing.budget_for("claude-code", 20_000)
    assert budget == 2048
    text = briefing.instructions(blocks, DEFAULT_TOOLS, budget, editors=EDITORS)
    assert len(text) <= 2048
    assert "I am Sam, a careful assistant." in text  # what fits is whole
    assert (
        "fact0 about Ada." in text and "more characters not shown]" in text
    )  # the rest of human: said, not cut silently
    assert "- projects (400 chars)" in text and "- notes/trips (4 chars, detached)" in text
    assert "memory_open(label)" in text and "memory://core" in text
    # Other hosts pass instructions whole: the same memory is there in full.
    whole = briefing.instructions(
        blocks, DEFAULT_TOOLS, briefing.budget_for("codex-mcp-client", 20_000), editors=EDITORS
    )
    assert long_human in whole and "more characters not shown" not in whole


@pytest.mark.parametrize("budget", [400, 700, 1000, 2048])
def test_every_budget_holds_with_many_blocks(budget: int) -> None:
    blocks = [block(f"b{i:03d}", "x" * 300, pinned=i % 2 == 0, description="d" * 200) for i in range(120)]
    text = briefing.instructions(blocks, DEFAULT_TOOLS, budget, editors=EDITORS)
    assert len(text) <= budget
    assert text.startswith("You have a persistent memory")


def test_guidance_names_only_the_tools_published() -> None:
    minimal = resolve_tools(["minimal"])
    text = briefing.instructions([block("human", "Ada")], minimal, 2048, editors=EDITORS)
    for name in minimal:
        if name in (
            "memory_insert",
            "memory_replace",
            "memory_rethink",
            "conversation_search",
            "archival_memory_search",
            "archival_memory_insert",
        ):
            assert name in text
    for absent in ("conversation_log", "core_memory_append", "memory_system", "prompt"):
        assert absent not in text  # never a prompt (only users run prompts in Claude Code), never an unpublished tool
    only_edits = briefing.instructions([block("human", "Ada")], ["memory_insert"], 2048, editors=EDITORS)
    assert "conversation_search" not in only_edits and "memory_open" not in only_edits
    assert "memory://core" in briefing.where_to_read(["memory_insert"])


async def test_initialize_carries_core_memory_for_each_client(settings: Settings, tmp_path: Path) -> None:
    """A raw stdio handshake: Claude Code (clientInfo.name "claude-code") gets at most 2,048 characters."""
    big = "Ada likes " + ", ".join(f"thing {i}" for i in range(600))
    settings_file = tmp_path / "big.toml"
    settings_file.write_text(
        'embedding_model = "hashing"\n[[default_blocks]]\nlabel = "persona"\nvalue = "I am Sam."\n'
        f'[[default_blocks]]\nlabel = "human"\nvalue = {json.dumps(big)}\nlimit = 20000\n'
    )
    replies = {}
    for client in ("claude-code", "some-editor"):
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": client, "version": "1"},
            },
        }
        proc = subprocess.run(
            [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data"), "--config", str(settings_file)],
            input=json.dumps(hello) + "\n",
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=server_env(tmp_path),
            timeout=60,
        )
        replies[client] = json.loads(proc.stdout.splitlines()[0])["result"]["instructions"]
    assert len(replies["claude-code"]) <= 2048 and "I am Sam." in replies["claude-code"]
    assert "Ada likes thing 0" in replies["claude-code"] and "more characters not shown" in replies["claude-code"]
    assert big in replies["some-editor"]


async def test_discover_is_current_and_never_cached(settings: Settings) -> None:
    """Protocol 2026-07-28: each server/discover renders core memory as it is now, marked stale at once."""
    async with Client(serve_in_process(settings), cache=None) as c:
        assert "<human>" in (c.instructions or "")
        await c.call_tool("memory_insert", {"label": "human", "new_string": "Name: Ada Lovelace"})
        version = c.session.discover_result.supported_versions[-1]  # type: ignore[union-attr]
        again = await c.session.send_discover(version)
    assert "Name: Ada Lovelace" in again["instructions"]
    assert again["ttlMs"] == 0 and again["cacheScope"] == "private"


async def test_legacy_initialize_is_current_too(settings: Settings) -> None:
    server = serve_in_process(settings)
    async with Client(server, mode="legacy") as c:
        await c.call_tool("memory_insert", {"label": "human", "new_string": "Name: Ada"})
    async with Client(server, mode="legacy") as c:  # a second host connecting later sees the edit
        assert "Name: Ada" in (c.instructions or "")
        assert "<persona>" in (c.instructions or "")


def test_guidance_follows_the_memory_tool_dialect() -> None:
    anthropic = briefing.guidance(["memory_insert", "memory", "memory_apply_patch"], editors=EDITORS)
    assert "memory_insert or memory_apply_patch (label = the block's name" in anthropic
    assert "the memory tool (each block is the file /memories/<label>)" in anthropic
    assert label_editors("anthropic") == (
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "core_memory_append",
        "core_memory_replace",
        "memory_apply_patch",
    )  # memory_revert is no editor
    letta = briefing.guidance(
        ["memory_insert", "memory", "memory_apply_patch"], editors=label_editors("letta-code"), dialect="letta-code"
    )
    assert "edit a block with memory_insert (label" in letta  # Letta Code's patch tool takes a file, not a label
    assert "the memory and memory_apply_patch tools (each block is a file of your memory directory)" in letta
