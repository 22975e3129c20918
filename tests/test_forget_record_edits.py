"""The forget record beyond the rows a forget deletes (``domain/forget_record.py``): the rows ``forget --text`` edits
(a later turn's keyword text, a system prompt) stay as edited through a rollback to an older backup; a forget running
during a restore is not undone by it; ``--include-forgotten`` of an agent forgotten whole takes its rows' keys out too;
a forget whose deletion fails leaves no key behind; the record holds no id and no text. On both core backends."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import StoreError
from tiermem.core import forget_record as core_record
from tiermem.domain.blocks import Rethink
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory

from .test_forget_record import export, restore
from .test_forgetting import SECRET


def message_rows(memory: Memory) -> list[dict[str, Any]]:
    return memory.archive.rows.backup_rows("messages", vectors=False)


def log(memory: Memory, agent: str) -> None:
    memory.conversation_log(
        agent,
        [
            {"role": "user", "content": f"remember {SECRET} for the vault"},
            {"role": "assistant", "content": "noted, the vault"},
            {"role": "user", "content": "thanks for the tea"},
        ],
    )


def test_a_rollback_keeps_what_a_forget_of_a_text_edited(memory: Memory, tmp_path: Path) -> None:
    """The system prompt and the keyword text of the turn after the forgotten one, as ``forget --text`` left them,
    after ``--replace`` to a backup made before; a backup made after the forget restores its own system prompt."""
    agent = memory.ensure_agent("default")
    memory.set_agent_metadata(agent.id, {}, system=agent.system + f"\nThe vault code is {SECRET}.")
    log(memory, agent.id)
    before = export(memory, tmp_path / "before.jsonl")
    done = forget(memory, Target("text", None, SECRET), now=True)
    assert done.prompts == ["default"] and done.retexted == 1
    edited = memory.core.get_agent(agent.id).system

    restore(memory, before, replace=True)
    assert memory.core.get_agent(agent.id).system == edited
    rows = message_rows(memory)
    assert [r["content"] for r in rows if SECRET in json.dumps(r)] == []
    assert sorted(r["content"] for r in rows) == ["noted, the vault", "thanks for the tea"]
    noted = next(r for r in rows if r["content"] == "noted, the vault")
    assert "vault" in noted["text"] and SECRET not in noted["text"]

    after = export(memory, tmp_path / "after.jsonl")  # made after the forget: its system prompt is restored
    memory.set_agent_metadata(agent.id, {}, system="a prompt set later")
    restore(memory, after, replace=True)
    assert memory.core.get_agent(agent.id).system == edited


def test_an_agent_deleted_after_a_forget_of_a_text_gets_the_default_system_prompt_back(
    memory: Memory, tmp_path: Path
) -> None:
    """The backup's system prompt predates a ``forget --text`` that edited it, and the agent was deleted since: the
    record holds no text to edit out of the backup's, so the agent is restored with the default system prompt, with
    a note; ``--include-forgotten`` restores the backup's. An agent the forget did not edit keeps the backup's."""
    work = memory.create_agent("work", system=f"You help. The vault code is {SECRET}.")
    other = memory.create_agent("other", system="You help others.")
    before = export(memory, tmp_path / "before.jsonl")
    assert forget(memory, Target("text", None, SECRET), now=True).prompts == ["work"]
    memory.delete_agent(work.id)
    memory.delete_agent(other.id)

    report = restore(memory, before)
    assert memory.get_agent("work").system == memory.default_system
    assert memory.get_agent("other").system == "You help others."
    said = [n for n in report["notes"] if "default system prompt" in n]
    assert len(said) == 1 and said[0].startswith("agent(s) 'work': the backup's system prompt predates"), report
    assert SECRET not in json.dumps(message_rows(memory)) + memory.get_agent("work").system

    memory.delete_agent(memory.get_agent("work").id)
    report = restore(memory, before, include_forgotten=True)
    assert memory.get_agent("work").system == f"You help. The vault code is {SECRET}."
    assert not any("default system prompt" in n for n in report["notes"]), report["notes"]


def test_a_forget_running_during_a_restore_is_not_undone(memory: Memory, tmp_path: Path) -> None:
    """Another process's forget lands after the restore read the record: what the restore wrote back of it is
    forgotten again, and the restore says so."""
    agent = memory.ensure_agent("default").id
    memory.archival_insert(agent, "filler", None)
    pid = memory.archival_insert(agent, f"vault {SECRET}", None).stored[0]
    backup = export(memory, tmp_path / "backup.jsonl")
    real = memory.core.forgotten_keys
    calls = []

    def keys_then_forget() -> set[str]:
        keys = real()
        if not calls:  # the first read, the restore's: the forget lands right after it
            calls.append(1)
            forget(memory, Target("passage", agent, pid), now=True)
        return keys

    memory.core.forgotten_keys = keys_then_forget  # type: ignore[method-assign]
    report = restore(memory, backup)
    assert not any(SECRET in p.content for p in memory.archive.rows.passages_of(agent))
    assert any("a forget ran while this restore did" in n for n in report["notes"]), report["notes"]


def test_including_an_agent_forgotten_whole_unrecords_its_rows_forgotten_before(memory: Memory, tmp_path: Path) -> None:
    """A passage forgotten, then its agent: ``--include-forgotten`` restores both and takes both keys out, so a
    later ``--replace`` does not delete the passage the user asked back."""
    work = memory.create_agent("work").id
    memory.archival_insert(work, "keep me", None)
    pid = memory.archival_insert(work, "forgotten first", None).stored[0]
    backup = export(memory, tmp_path / "backup.jsonl")
    forget(memory, Target("passage", work, pid), now=True)
    forget(memory, Target("agent", work, "work"), now=True)
    restore(memory, backup, include_forgotten=True)
    assert memory.core.forgotten_keys() == set()
    work = memory.get_agent("work").id
    memory.archival_insert(work, "new here", None)
    restore(memory, backup, replace=True)
    assert sorted(p.content for p in memory.archive.rows.passages_of(work)) == ["forgotten first", "keep me"]


def test_a_forget_whose_deletion_fails_leaves_no_key(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded first, the deletion fails (the store refuses): the keys are taken out again, the passage is still
    there and a restore would not leave it out."""
    agent = memory.ensure_agent("default").id
    pid = memory.archival_insert(agent, f"vault {SECRET}", None).stored[0]

    def refused(*_a: Any, **_k: Any) -> int:
        raise StoreError("the store refused the delete")

    monkeypatch.setattr(memory.archive.rows, "forget", refused)
    with pytest.raises(StoreError):
        forget(memory, Target("passage", agent, pid))
    assert memory.core.forgotten_keys() == set()
    assert [p.id for p in memory.archive.rows.passages_of(agent)] == [pid]


def test_the_record_holds_no_id_and_no_text(memory: Memory, settings: Settings) -> None:
    """The record itself (SQLite's table, or the objects under core/forgotten/), read raw: neither the ids of what
    was forgotten (agent, passage, messages, block) nor any of its text."""
    agent = memory.ensure_agent("default")
    memory.set_agent_metadata(agent.id, {}, system=agent.system + f"\nThe vault code is {SECRET}.")
    log(memory, agent.id)
    pid = memory.archival_insert(agent.id, f"the vault is {SECRET}", None).stored[0]
    ids = [agent.id, pid, memory.block(agent.id, "human").id, *[r["id"] for r in message_rows(memory)]]
    forget(memory, Target("text", None, SECRET), now=True)
    bucket = getattr(memory.core, "bucket", None)
    if bucket is not None:
        raw = [bucket.get(item.path).data.decode() for item in bucket.list(core_record.PREFIX)]  # type: ignore[union-attr]
    else:
        with sqlite3.connect(settings.resolved_data_dir() / "core.sqlite3") as conn:
            raw = [json.dumps(row) for row in conn.execute(f"SELECT * FROM {core_record.TABLE}")]
    assert raw and len(memory.core.forgotten_keys()) >= 4
    held = "\n".join(raw)
    for needle in [*ids, SECRET, "vault", "remember", *[i.split("-", 1)[1] for i in ids if "-" in i]]:
        assert needle not in held, needle


def test_on_object_storage_a_restore_reads_block_heads_for_gaps_only_when_asked(memory: Memory) -> None:
    """Restoring block history looks for the versions a history lacks below its newest (forgotten here: one more GET
    of each block's head) only for ``--include-forgotten`` (``fill_gaps``), not on every restore."""
    bucket = getattr(memory.core, "bucket", None)
    if bucket is None:
        pytest.skip("object storage only: SQLite inserts the rows by key")
    agent = memory.ensure_agent("default").id
    for i in range(3):
        memory.edit(agent, "human", Rethink(f"v{i}", check_line_numbers=False), actor="human")
    rows = memory.core.all_rows("block_history")
    gets = []
    for fill in (False, True):
        bucket.requests.clear()
        memory.core.merge_rows("block_history", "key", rows, fill_gaps=fill)
        gets.append(bucket.requests["GET"])
    assert gets[0] < gets[1], gets
