"""The real Codex CLI, Gemini CLI and opencode (npm, pinned; skipped when not installed) run one turn each against
tiermem, registered from `tiermem config HOST`, with their model faked on loopback (``host_harness``).

Each checks what reaches the model (the server's instructions and tiermem's tools in the first request) and that a
block edit goes through (Codex: under ``approval_policy = "never"``, which refuses destructive tools). Gemini CLI
without `trust` on tiermem's entry (the default of a hand-written entry) gets no tiermem tools in `gemini -p`; its request must then carry no instructions to use them.
One host run per test: these are the slow tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory

from .fake_models import FakeModel, Turn
from .host_harness import run_codex, run_gemini, run_opencode
from .install_hosts import install

INSTRUCTIONS_MARK = "You have a persistent memory (tiermem"  # the start of the server's instructions
PERSONA = "I am Sam, and I keep my notes short."  # core memory: the instructions carry it to the first request


def host(name: str) -> Path:
    exe, why = install(name)
    if exe is None:
        pytest.skip(why)
    return exe


def stored(tmp_path: Path, label: str) -> str:
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    return memory.block(memory.ensure_agent("default").id, label).value


@pytest.fixture(autouse=True)
def persona(tmp_path: Path) -> None:
    """The agent's persona block, set before the host starts (as `tiermem blocks set persona ...` would)."""
    from tiermem.domain.blocks import Rethink

    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    memory.edit(memory.ensure_agent("default").id, "persona", Rethink(PERSONA), actor="human")


def test_codex_edits_a_block_under_approval_policy_never(tmp_path: Path) -> None:
    exe = host("codex")
    script = [
        Turn(calls=[("mcp__tiermem__memory_rethink", {"label": "human", "new_memory": "Name: Ada"})]),
        Turn(
            calls=[
                ("mcp__tiermem__memory_replace", {"label": "human", "old_string": "Ada", "new_string": "Ada Lovelace"})
            ]
        ),
        Turn(text="Saved."),
    ]
    with FakeModel("responses", script) as fake:
        done = run_codex(exe, tmp_path, fake, "Remember that my name is Ada Lovelace.")
    assert done.returncode == 0, done.stderr[-3000:]
    first = fake.turns[0]
    namespace = next(t for t in first["tools"] if t.get("name") == "mcp__tiermem")
    assert INSTRUCTIONS_MARK in namespace["description"]  # the server's instructions, whole
    assert PERSONA in namespace["description"]  # with the agent's core memory
    assert {"memory_rethink", "memory_replace"} <= {t["name"] for t in namespace["tools"]}
    outputs = [json.dumps(i) for t in fake.turns[1:] for i in t["input"] if i.get("type") == "function_call_output"]
    assert outputs and not any("requires approval" in o for o in outputs), outputs
    assert stored(tmp_path, "human") == "Name: Ada Lovelace"


def test_gemini_edits_a_block(tmp_path: Path) -> None:
    exe = host("gemini")
    script = [
        Turn(calls=[("mcp_tiermem_memory_rethink", {"label": "human", "new_memory": "Name: Ada"})]),
        Turn(text="Saved."),
    ]
    with FakeModel("gemini", script) as fake:
        done = run_gemini(exe, tmp_path, fake, "Remember that my name is Ada.", trusted=True)
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.dumps(fake.turns[0])
    assert INSTRUCTIONS_MARK in first and PERSONA in first  # in the first user message, with core memory
    names = {d["name"] for t in fake.turns[0].get("tools", []) for d in t.get("functionDeclarations", [])}
    assert "mcp_tiermem_memory_rethink" in names
    assert stored(tmp_path, "human") == "Name: Ada"


def test_gemini_without_trust_gets_no_instructions_to_use_tools(tmp_path: Path) -> None:
    exe = host("gemini")
    with FakeModel("gemini", [Turn(text="Hello.")]) as fake:
        done = run_gemini(exe, tmp_path, fake, "Hello", trusted=False)
    assert done.returncode == 0, done.stderr[-3000:]
    first = fake.turns[0]
    names = {d["name"] for t in first.get("tools", []) for d in t.get("functionDeclarations", [])}
    assert not any("tiermem" in n for n in names)  # Gemini offers no tools of a server it does not trust
    text = json.loads(json.dumps(first))  # the request as sent
    flat = "\n".join(p.get("text", "") for c in text.get("contents", []) for p in c.get("parts", []))
    assert INSTRUCTIONS_MARK in flat and PERSONA in flat  # the instructions and core memory still arrive
    told = [
        line
        for line in flat.splitlines()
        for tool in (
            "memory_replace",
            "memory_rethink",
            "memory_insert",
            "archival_memory_insert",
            "conversation_search",
            "memory_open",
        )
        if tool in line
    ]
    assert told, "the instructions name tiermem's tools (for hosts that offer them)"
    for line in told:  # never an unconditional instruction to call a tool the model does not have
        assert "When your host offers you tiermem's tools" in line or "when your host offers them" in line, line


def test_opencode_edits_a_block(tmp_path: Path) -> None:
    exe = host("opencode")
    script = [
        Turn(calls=[("tiermem_memory_rethink", {"label": "human", "new_memory": "Name: Ada"})]),
        Turn(text="Saved."),
    ]
    with FakeModel("chat", script) as fake:
        done = run_opencode(exe, tmp_path, fake, "Remember that my name is Ada.")
    assert done.returncode == 0, done.stderr[-3000:]
    first = fake.turns[0]
    system = json.dumps(first["messages"][0])  # the system prompt, under <mcp_instructions>
    assert INSTRUCTIONS_MARK in system and PERSONA in system
    assert "tiermem_memory_rethink" in {t["function"]["name"] for t in first["tools"]}
    assert stored(tmp_path, "human") == "Name: Ada"
