"""The real Claude Code (npm) driving tiermem, offline: what reaches the model, and what lands in the store.

One throwaway HOME and a few ``claude -p`` runs serve every assertion (each run costs a couple of seconds).
Skipped, with the reason, when Node.js or the Claude Code package is missing (``python tests/install_hosts.py``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiermem.server import resolve_tools

from .claude_code import ClaudeCode, claude_code, definition_chars, tool_definitions
from .conftest import PYTHON, ROOT

HUMAN = "Name: Ada Lovelace. Prefers tea over coffee. Works on analytical engines."


def tiermem(cc: ClaudeCode, *args: str) -> str:
    """A tiermem command in the throwaway HOME's environment (none of the user's config or data)."""
    done = subprocess.run([PYTHON, "-m", "tiermem", *args], capture_output=True, text=True, cwd=ROOT, env=cc.env(),
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClaudeCode]:
    exe, why = claude_code()
    if exe is None:
        pytest.skip(why)
    with ClaudeCode(exe, tmp_path_factory.mktemp("claude-code")) as host:
        yield host


@pytest.fixture(scope="module")
def first_session(cc: ClaudeCode) -> dict[str, object]:
    data = cc.home / "memory"
    common = ["--data-dir", str(data), "--embedding-model", "hashing"]
    tiermem(cc, "agents", "create", "default", *common)
    tiermem(cc, "blocks", "set", "human", HUMAN, *common)
    config = cc.mcp_config(*common)
    before = len(cc.fake.requests)
    result = cc.run("Hello, who am I?", "--mcp-config", str(config), "--strict-mcp-config")
    return {"result": result, "requests": cc.fake.requests[before:]}


def test_first_request_carries_the_pinned_blocks(cc: ClaudeCode, first_session: dict[str, object]) -> None:
    result, requests = first_session["result"], first_session["requests"]
    assert isinstance(result, dict) and not result["is_error"], result
    assert isinstance(requests, list) and requests
    system = cc.system_text(requests[0])
    assert "# MCP Server Instructions" in system and "## tiermem" in system
    assert HUMAN in system and "<persona>" in system  # the blocks, from the first token
    assert "[truncated]" not in system  # within Claude Code's 2,048 characters
    assert cc.catcher.seen == []  # nothing tried to leave the machine


def test_the_default_tools_are_lean_as_claude_code_sends_them(first_session: dict[str, object]) -> None:
    requests = first_session["requests"]
    assert isinstance(requests, list)
    tools = tool_definitions(requests[0])
    assert {t["name"] for t in tools} == {f"mcp__tiermem__{n}" for n in resolve_tools(["default"])}
    assert definition_chars(tools) <= 4800  # issue 29's budget; `python -m bench tool_tokens` reports the figure
