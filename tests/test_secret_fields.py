"""Credentials are refused in every text a person or a model writes, not only in values: names, labels, tags,
projects, system prompts, metadata, folder descriptions; an agent file's import redacts them instead. The error
names the field and the kind, never the secret, and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tiermem.base.config import BlockSpec
from tiermem.base.errors import SecretError
from tiermem.domain.memory import Memory

TOKEN = "ghp_" + "Zq3xW9vB7nM2kL5jH8gF4dS1aP6oI0uY2tR4"  # a GitHub token's shape, split so no scanner flags this file
AWS = "AKIA" + "QWERTYUIOPASDFGH"


def _refused(match: str) -> pytest.RaisesContext[SecretError]:
    return pytest.raises(SecretError, match=match)


def test_every_field_of_a_write_is_scanned_and_nothing_is_written(memory: Memory) -> None:
    agent = memory.ensure_agent("default").id
    blocks_before = {b.label for b in memory.blocks(agent)}
    with _refused("the system prompt would store a GitHub token"):
        memory.create_agent("deployer", system=f"Deploy with {TOKEN}.")
    with _refused("the agent's name would store"):
        memory.create_agent(f"x-{AWS}")
    assert "deployer" not in {a.name for a in memory.list_agents()}
    with _refused("the system prompt would store"):
        memory.set_agent_metadata(agent, {}, system=f"use {TOKEN}")
    with _refused("a metadata value would store"):
        memory.set_agent_metadata(agent, {"note": f"key {AWS}"})
    assert memory.get_agent("default").system != f"use {TOKEN}"
    assert "note" not in memory.get_agent("default").metadata
    with _refused("the label would store a GitHub token"):
        memory.create_block(agent, BlockSpec(label=TOKEN, value="x"))
    with _refused("a metadata key would store"):
        memory.create_block(agent, BlockSpec(label="ok", value="x", metadata={TOKEN: "1"}))
    assert {b.label for b in memory.blocks(agent)} == blocks_before
    with _refused("the new label would store"):
        memory.update_block(agent, "human", new_label=f"h-{TOKEN}")
    with _refused("tags\\[1\\] would store"):
        memory.archival_insert(agent, "a plain fact", ["fine", f"k-{TOKEN}"])
    with _refused("project would store"):
        memory.archival_insert(agent, "a plain fact", None, project=f"proj-{TOKEN}")
    assert memory.archival_list(agent, offset=0, limit=10, tags=None)[1] == 0
    with _refused("messages\\[0\\].conversation_id would store"):
        memory.conversation_log(agent, [{"role": "user", "content": "hi", "conversation_id": f"c-{TOKEN}"}])
    with _refused("messages\\[1\\].project would store"):
        memory.conversation_log(
            agent, [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "project": f"p-{AWS}"}]
        )
    with _refused("the description would store"):
        memory.files.create_folder("docs", description=f"token {TOKEN}")
    with _refused("the folder's name would store"):
        memory.files.create_folder(f"f-{TOKEN}")
    assert memory.files.folders() == []
    memory.files.create_folder("docs")
    with _refused("the instructions would store"):
        memory.files.update_folder("docs", instructions=f"log in with {AWS}")
    assert memory.files.folder("docs").instructions == ""


def test_the_error_never_holds_the_secret(memory: Memory) -> None:
    agent = memory.ensure_agent("default").id
    for call in (
        lambda: memory.create_block(agent, BlockSpec(label="ok", value="x", metadata={TOKEN: "1"})),
        lambda: memory.archival_insert(agent, "fact", [TOKEN]),
        lambda: memory.files.create_folder(f"f-{TOKEN}"),
    ):
        with pytest.raises(SecretError) as caught:
            call()
        assert TOKEN not in str(caught.value) and TOKEN[4:20] not in str(caught.value)


def test_scanning_off_keeps_every_field_as_given(memory: Memory) -> None:
    memory.secret_scan = False
    agent = memory.create_agent("deployer", system=f"Deploy with {TOKEN}.")
    assert TOKEN in agent.system
    memory.archival_insert(agent.id, "a fact", [f"k-{TOKEN}"])


def test_agents_create_refuses_a_system_prompt_holding_a_credential(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiermem",
            "--data-dir",
            str(tmp_path / "d"),
            "agents",
            "create",
            "ops",
            "--system",
            f"use {TOKEN}",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1, run
    assert "the system prompt would store a GitHub token" in run.stderr and TOKEN not in run.stderr + run.stdout


def test_an_edit_that_keeps_a_credential_already_held_is_not_refused(memory: Memory) -> None:
    """A prompt or folder description stored with scanning off keeps its credential until `doctor --secrets`; an
    edit of another part of it (a forget --text) is not refused for it."""
    from tiermem.domain.forgetting import Target, forget

    memory.secret_scan = False
    ops = memory.create_agent("ops", system=f"Key {TOKEN}. My old address is 1 Elm St.")
    memory.files.create_folder("docs", description=f"Key {TOKEN}. My old address is 1 Elm St.")
    memory.secret_scan = True
    done = forget(memory, Target("text", None, "My old address is 1 Elm St."))
    assert done.prompts == ["ops"] and done.folder_texts == ["docs"]
    assert memory.get_agent("ops").system == f"Key {TOKEN}. "
    assert memory.files.folder("docs").description == f"Key {TOKEN}. "
    with _refused("the system prompt would store"):  # a new one still is
        memory.set_agent_metadata(ops.id, {}, system=f"Key {AWS}.")
