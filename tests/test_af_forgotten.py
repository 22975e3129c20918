"""An agent file (.af) imported after a forget leaves out what was forgotten (``interop/af_forgotten.py``): the
messages and passages of a tiermem export, matched by the ids it carries, and the messages of a file imported
again, matched by the ids its import gives them; ``--include-forgotten`` imports them and takes them out of the
record. Real CLI runs on a local data directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory
from tiermem.interop import agentfile

from .test_agentfile_roundtrip import LETTA
from .test_forget_record import cli


def _open(data: Path) -> Memory:
    return open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)


def _contents(memory: Memory, agent: str) -> tuple[set[str], set[str]]:
    agent_id = memory.core.find_agent(agent)
    assert agent_id is not None
    rows = memory.archive.rows
    return {m.content for m in rows.messages_of(agent_id.id)}, {p.content for p in rows.passages_of(agent_id.id)}


def test_an_agent_file_exported_before_a_forget_does_not_bring_it_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--embedding-model", "hashing"]
    memory = _open(data)
    agent = memory.create_agent("work", system="You help.")
    kept_p = memory.archival_insert(agent.id, "the office opens at nine", None).stored[0]
    gone_p = memory.archival_insert(agent.id, "the vault code is 4711", ["vault"]).stored[0]
    logged = memory.conversation_log(
        agent.id,
        [{"role": "user", "content": "remember 4711 for the vault"}, {"role": "assistant", "content": "noted"}],
    ).stored
    memory.link(agent.id, logged[0].id, gone_p, "the same secret")
    memory.link(agent.id, logged[1].id, kept_p, "kept")
    memory.core.close()
    exported = tmp_path / "work.af"
    cli(["export", "work", "-o", str(exported), *common])
    file = json.loads(exported.read_text())
    assert {p["tiermem_id"] for p in file["tiermem"]["passages"][file["agents"][0]["id"]]} == {kept_p, gone_p}
    yes = [*common, "--agent", "work", "--yes", "--now"]
    cli(["forget", "passage", gone_p, *yes])
    cli(["forget", "message", logged[0].id, *yes])

    for how in (["--rename", "copy"], ["--replace"]):
        _out, err = cli(["import", str(exported), *how, *common])
        assert (
            "left out what was forgotten here (`tiermem forget`): 1 passage row(s), 1 message(s). To restore it too, "
            "run the import again with --include-forgotten"
        ) in err, err
        name = "copy" if how[0] == "--rename" else "work"
        memory = _open(data)
        messages, passages = _contents(memory, name)
        assert "noted" in messages and "remember 4711 for the vault" not in messages
        assert passages == {"the office opens at nine"}
        mine = memory.core.find_agent(name)
        assert mine is not None
        rows = memory.archive.rows
        ids = [m.id for m in rows.messages_of(mine.id)] + [p.id for p in rows.passages_of(mine.id)]
        assert [x.note for x in memory.archive.links.among(ids)] == ["kept"]  # the forgotten ends' link: out
        memory.core.close()

    _out, err = cli(["import", str(exported), "--replace", "--include-forgotten", *common])
    assert "--include-forgotten: restored what was forgotten here: 1 passage row(s), 1 message(s)" in err, err
    memory = _open(data)
    messages, passages = _contents(memory, "work")
    assert "remember 4711 for the vault" in messages and "the vault code is 4711" in passages
    memory.core.close()
    _out, err = cli(["import", str(exported), "--rename", "again", *common])  # out of the record: not left out
    assert "left out" not in err, err
    memory = _open(data)
    assert "remember 4711 for the vault" in _contents(memory, "again")[0]
    memory.core.close()


def _import_and_forget_one(data: Path, path: Path, common: list[str], pick: Callable[[list[Any]], Any]) -> Any:
    """``path`` imported, then the message ``pick`` chooses of its agent's forgotten (``--now``): the agent's name,
    its messages before the forget and the one forgotten."""
    out, _err = cli(["import", str(path), "--json", *common])
    name = json.loads(out)["imported"][0]
    memory = _open(data)
    agent = memory.core.find_agent(name)
    assert agent is not None
    first = memory.archive.rows.messages_of(agent.id)
    victim = pick(first)
    forget(memory, Target("message", agent.id, victim.id), now=True)
    memory.core.close()
    return name, first, victim


def test_a_letta_file_imported_again_leaves_out_the_messages_forgotten_from_its_first_import(tmp_path: Path) -> None:
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--embedding-model", "hashing"]
    path = LETTA / "letta_memgpt_agent_with_convo.af"
    name, first, victim = _import_and_forget_one(data, path, common, lambda first: first[len(first) // 2])
    assert len(first) > 2

    _out, err = cli(["import", str(path), "--replace", *common])
    assert "left out what was forgotten here (`tiermem forget`): 1 message(s)." in err, err
    memory = _open(data)
    again = memory.archive.rows.messages_of(memory.core.find_agent(name).id)
    assert victim.id not in {m.id for m in again}
    assert len(again) == len(first) - 1
    memory.core.close()


def test_a_letta_file_imported_again_under_another_name_leaves_out_what_was_forgotten(tmp_path: Path) -> None:
    """``--rename`` gives the agent another id, so its messages other ids: the agents here the same file was
    imported as name the ids the forgotten messages had."""
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--embedding-model", "hashing"]
    path = LETTA / "letta_memgpt_agent_with_convo.af"
    pick = lambda first: next(m for m in first if m.role == "user" and m.content)  # noqa: E731
    _name, first, victim = _import_and_forget_one(data, path, common, pick)
    assert sum(m.content == victim.content for m in first) == 1

    _out, err = cli(["import", str(path), "--rename", "again", *common])
    assert "left out what was forgotten here (`tiermem forget`): 1 message(s)." in err, err
    memory = _open(data)
    again = memory.core.find_agent("again")
    assert again is not None
    contents = [m.content for m in memory.archive.rows.messages_of(again.id)]
    assert victim.content not in contents and len(contents) == len(first) - 1
    memory.core.close()


def test_a_forget_running_during_an_import_is_not_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another forget lands after the import read the forget record, before it writes (interleaved at the import's
    check of its agents): what the import wrote of it is forgotten again, with a note, as a backup's restore does."""
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--embedding-model", "hashing"]
    memory = _open(data)
    agent = memory.create_agent("work", system="You help.")
    memory.archival_insert(agent.id, "the office opens at nine", None)
    gone_p = memory.archival_insert(agent.id, "the vault code is 4711", ["vault"]).stored[0]
    logged = memory.conversation_log(
        agent.id,
        [{"role": "user", "content": "remember 4711 for the vault"}, {"role": "assistant", "content": "noted"}],
    ).stored
    memory.core.close()
    exported = tmp_path / "work.af"
    cli(["export", "work", "-o", str(exported), *common])
    real = agentfile._check_agents
    landed: list[int] = []

    def forget_then_check(memory: Memory, *args: Any) -> None:
        assert memory.core.forgotten_keys() == set()  # the import read the record: nothing in it yet
        forget(memory, Target("passage", agent.id, gone_p))
        forget(memory, Target("message", agent.id, logged[0].id))
        landed.append(1)
        real(memory, *args)

    monkeypatch.setattr(agentfile, "_check_agents", forget_then_check)
    _out, err = cli(["import", str(exported), "--rename", "copy", *common])
    assert landed == [1]
    assert "left out what was forgotten here" not in err  # the record was empty when the import read it
    assert (
        "a forget ran while this import did: what it forgot and the import wrote was forgotten again (1 message(s), "
        "1 passage row(s);"
    ) in err, err
    memory = _open(data)
    messages, passages = _contents(memory, "copy")
    assert messages == {"noted"} and passages == {"the office opens at nine"}
    copy = memory.core.find_agent("copy")
    assert copy is not None
    rows = memory.archive.rows.backup_rows("messages", vectors=False)
    texts = [r["text"] for r in rows if r["agent_id"] == copy.id]
    assert texts and not any("4711" in t for t in texts)  # the next turn's keyword text quotes it no more
    memory.core.close()
