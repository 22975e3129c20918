"""One memory across hosts, proven with the real hosts (npm, pinned; skipped with the reason when one is missing).

One user (one HOME, one project directory: memories are recalled within their project), one data directory,
`tiermem setup` run for Codex CLI, Claude Code and Gemini CLI. In a Codex
session the user states a fact, and Codex's model edits a block (its only tool call). Then a Claude Code session and
a Gemini CLI session each ask about the fact: the fact reaches both prompts' context through the prompt hooks (no
model calls a tool to find it), and the block edit is in both sessions' core memory from the start. All models are
fakes on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .claude_code import ClaudeCode, claude_code
from .fake_models import FakeModel, Turn
from .test_setup_hosts import Host, codex_config, gemini_config, hook_context, one_turn, tiermem

STATED = "Remember this: my cat is called Miso, a grey tabby who sleeps on the piano."
ASKED = "What is my cat called?"
EDITED = "Name: Ada Lovelace. Prefers green tea. Works on analytical engines."


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    exe, why = claude_code()
    if exe is None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("one-memory")
    with ClaudeCode(exe, root) as cc:  # its HOME is everyone's
        codex, gemini = Host("codex", root / "codex"), Host("gemini", root / "gemini")
        for host in (codex, gemini):  # one user in one project: memories are recalled within their project
            host.home, host.work = cc.home, cc.workdir
            host.data = cc.home / "memory"
        codex.prepare_memory(fact=False)  # the fact comes from the Codex session alone
        data = str(codex.data)
        script = [Turn(calls=[("mcp__tiermem__memory_rethink", {"label": "human", "new_memory": EDITED})])]
        with (
            FakeModel("responses", [*script, Turn(text="Noted: Miso.")]) as codex_model,
            FakeModel("gemini", [Turn(text="Your cat is Miso.")]) as gemini_model,
        ):
            codex_config(codex, codex_model)
            gemini_config(gemini, gemini_model)
            for name in ("codex", "gemini", "claude-code"):
                tiermem(codex.env(), "setup", name, "--data-dir", data)
            stated = one_turn(codex, codex_model, STATED)
            assert stated.returncode == 0, stated.stderr[-3000:]
            before = len(cc.fake.requests)
            claude = cc.run(ASKED)
            assert not claude["is_error"], claude
            asked = one_turn(gemini, gemini_model, ASKED)
            assert asked.returncode == 0, asked.stderr[-3000:]
            yield {
                "cc": cc,
                "codex": codex,
                "codex_turns": codex_model.turns,
                "claude_first": cc.fake.requests[before],
                "gemini_first": gemini_model.turns[0],
            }
        codex.close()
        gemini.close()


def test_codex_only_logged_the_fact_and_its_model_only_edited_a_block(hosts: dict[str, Any]) -> None:
    calls = [i for t in hosts["codex_turns"] for i in t["input"] if i.get("type") == "function_call_output"]
    assert len(calls) == 1 and "requires approval" not in json.dumps(calls)  # the block edit, and nothing else
    logged = [m.content for m in hosts["codex"].logged() if m.role == "user"]
    assert STATED in logged


def test_the_fact_from_codex_is_in_a_later_claude_code_prompt(hosts: dict[str, Any]) -> None:
    context = hosts["cc"].system_text(hosts["claude_first"])
    start = context.index("UserPromptSubmit hook additional context")
    assert STATED in context[start:]  # the Codex session's prompt, recalled
    assert EDITED in context  # and Codex's block edit, in core memory from the session's start


def test_the_fact_from_codex_is_in_a_later_gemini_prompt(hosts: dict[str, Any]) -> None:
    context = hook_context("gemini", hosts["gemini_first"])
    assert STATED in context and EDITED in context


def test_one_data_directory_holds_every_host_turn(hosts: dict[str, Any]) -> None:
    named = {json.loads(m.payload)["host"] for m in hosts["codex"].logged() if m.payload}
    assert named == {"codex", "claude-code", "gemini"}
