"""jsonl backups restored into a store that already holds agents (the new machine where a first command made the
``default`` agent; a store changed differently), backups cut short (the trailer's counts), damaged headers and
backups of older formats. On both core-state backends (the ``memory`` fixture)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ValidationError
from tiermem.core.rows import CORE_TABLES
from tiermem.core.uses import Use
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.filesystem import render_agent_directories
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory
from tiermem.domain.use_stats import use_stats
from tiermem.interop.commands import run_export, run_import

from .conftest import ROOT

FORMAT_1 = ROOT / "tests" / "fixtures" / "backup" / "format1.jsonl"
FORMAT_4 = ROOT / "tests" / "fixtures" / "backup" / "format4.jsonl"


def fresh(tmp_path: Path, name: str) -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"))


def export(memory: Memory, path: Path) -> Path:
    run_export(memory, agent=None, fmt="jsonl", output=str(path), vectors=False)
    return path


def restore(memory: Memory, path: Path, *, replace: bool = False, include_forgotten: bool = False) -> dict[str, Any]:
    return run_import(
        memory, path, fmt="jsonl", agent="default", rename=None, replace=replace, include_forgotten=include_forgotten
    )


def stored(memory: Memory) -> dict[str, Any]:
    """Everything a restore could write: the core tables' rows and the archive's rows, as text."""
    core = {t: sorted(json.dumps(r, sort_keys=True) for r in memory.core.all_rows(t)) for t in CORE_TABLES}
    rows = {
        t: sorted(str(r["id"]) for r in memory.archive.rows.backup_rows(t, vectors=False))
        for t in ("messages", "passages")
    }
    return {**core, **rows}


def old_machine(tmp_path: Path) -> Memory:
    """A store in use: its ``default`` agent's human block edited twice, its system prompt and metadata set, and a
    ``work`` agent with a passage."""
    src = fresh(tmp_path, "old")
    default = src.ensure_agent("default").id
    src.edit(default, "human", Rethink("Name: Ada"))
    src.edit(default, "human", Rethink("Name: Ada Lovelace, likes tea"))
    src.set_agent_metadata(default, {"team": "maths"}, system="You are Ada's assistant.")
    work = src.create_agent("work").id
    src.archival_insert(work, "the launch is on 3 March", None)
    return src


def test_a_restore_replaces_the_agents_a_new_machine_made_and_left_untouched(memory: Memory, tmp_path: Path) -> None:
    src = old_machine(tmp_path)
    backup = export(src, tmp_path / "backup.jsonl")
    memory.ensure_agent("default")  # the first command on the new machine (same ids as the backup's default)
    memory.create_agent("work")  # made, never used: another id than the backup's work
    report = restore(memory, backup)
    assert any("'default'" in n and "'work'" in n and "replaced" in n for n in report["notes"]), report["notes"]
    assert sorted(a.name for a in memory.list_agents()) == ["default", "work"]  # no second work
    default, old = memory.get_agent("default"), src.get_agent("default")
    assert (default.system, default.metadata) == ("You are Ada's assistant.", {"team": "maths"})
    assert memory.block(default.id, "human").value == "Name: Ada Lovelace, likes tea"
    assert [(v.version, v.value) for v in memory.history(default.id, "human")] == [
        (v.version, v.value) for v in src.history(old.id, "human")
    ]
    assert memory.get_agent("work").id == src.get_agent("work").id
    assert [p.content for p in memory.archive.rows.passages_of(memory.get_agent("work").id)] == [
        "the launch is on 3 March"
    ]
    assert sum(restore(memory, backup)["inserted"].values()) == 0  # again: nothing twice, nothing replaced
    memory.edit(default.id, "human", Rethink("Name: Ada L."))
    assert [v.version for v in memory.history(default.id, "human")] == [4, 3, 2, 1]


def test_a_restore_into_a_store_changed_differently_is_refused_before_writing(memory: Memory, tmp_path: Path) -> None:
    src = old_machine(tmp_path)
    backup = export(src, tmp_path / "backup.jsonl")
    default = memory.ensure_agent("default").id
    memory.edit(default, "human", Rethink("Name: Bob"))
    work = memory.create_agent("work").id
    memory.archival_insert(work, "Bob's own note", None)  # a used agent of the same name
    before = stored(memory)
    with pytest.raises(ValidationError) as refused:
        restore(memory, backup)
    text = str(refused.value)
    assert "agent 'default': block 'human': version 2 differs from the backup's" in text, text
    assert "agent 'work': it is another agent than the backup's 'work'" in text, text
    assert "nothing was written" in text and "--data-dir NEW_DIR import" in text and "--replace" in text
    assert stored(memory) == before
    report = restore(memory, backup, replace=True)
    assert any(n.startswith("--replace:") for n in report["notes"]), report["notes"]
    default_now = memory.get_agent("default")
    assert [v.value for v in memory.history(default_now.id, "human")] == [
        v.value for v in src.history(src.get_agent("default").id, "human")
    ]
    assert sorted(a.id for a in memory.list_agents()) == sorted(a.id for a in src.list_agents())
    assert "Bob's own note" not in json.dumps(stored(memory))
    assert [p.content for p in memory.archive.rows.passages_of(memory.get_agent("work").id)] == [
        "the launch is on 3 March"
    ]


def test_a_restore_run_again_after_the_store_went_on_writes_nothing(memory: Memory, tmp_path: Path) -> None:
    backup = export(old_machine(tmp_path), tmp_path / "backup.jsonl")
    restore(memory, backup)
    default = memory.get_agent("default").id
    memory.edit(default, "human", Rethink("Name: Ada, moved to Lyon"))
    memory.set_agent_metadata(default, {"city": "Lyon"})
    before = stored(memory)
    assert sum(restore(memory, backup)["inserted"].values()) == 0
    assert stored(memory) == before


def test_a_restore_again_brings_back_nothing_of_an_agent_changed_since_and_replace_rolls_it_back(
    memory: Memory, tmp_path: Path
) -> None:
    """Restored, then a passage forgotten and a block edited here: the same backup again writes nothing of that
    agent (the forgotten passage stays forgotten; no mix of the two states) and says so; --replace rolls the agent
    back to the backup, but for what was forgotten (the forget record), and with --include-forgotten whole."""
    src = old_machine(tmp_path)
    backup = export(src, tmp_path / "backup.jsonl")
    restore(memory, backup)
    work = memory.get_agent("work").id
    (forgotten,) = memory.archive.rows.passages_of(work)
    forget(memory, Target("passage", work, forgotten.id), now=True)
    memory.edit(work, "human", Rethink("Name: Bob"))
    memory.archival_insert(work, "written here after the restore", None)
    before = stored(memory)
    report = restore(memory, backup)
    assert sum(report["inserted"].values()) == 0 and stored(memory) == before
    assert report["notes"] == [
        "this data directory holds agent(s) 'work' already, changed here since the backup was made: kept as they are, "
        "nothing of the backup's copy written. To roll them back to the backup (losing the changes made here "
        "since), run the import again with --replace",
        "left out what was forgotten here (`tiermem forget`): 1 passage row(s). To restore it too, run the import "
        "again with --include-forgotten",
    ], report["notes"]
    assert [p.content for p in memory.archive.rows.passages_of(work)] == ["written here after the restore"]

    report = restore(memory, backup, replace=True)
    assert any(n.startswith("--replace: this data directory's agent(s) 'work'") for n in report["notes"])
    assert memory.archive.rows.passages_of(work) == []  # rolled back, the forgotten passage left out
    assert memory.block(work, "human").value == src.block(work, "human").value
    report = restore(memory, backup, replace=True, include_forgotten=True)
    assert stored(memory) == stored(src)
    assert memory.block(work, "human").value == src.block(work, "human").value
    assert [p.content for p in memory.archive.rows.passages_of(work)] == ["the launch is on 3 March"]


def test_a_backup_restores_onto_a_new_machine_whose_default_agent_a_first_command_made(tmp_path: Path) -> None:
    """The new machine's first command made its ``default`` agent (the same id in every store, created at another
    moment) and nothing else: the backup's default, with its passages, is restored in its place (it was kept as
    "changed here", nothing written, and the restore said rows had been forgotten)."""
    src = fresh(tmp_path, "a")
    default = src.ensure_agent("default").id
    src.archival_insert(default, "the launch is on 3 March", None)
    src.archival_insert(default, "the venue is the old library", None)
    backup = export(src, tmp_path / "backup.jsonl")
    new = fresh(tmp_path, "b")
    assert new.ensure_agent("default").id == default  # `tiermem blocks list`, say
    report = restore(new, backup)
    assert report["inserted"]["passages"] == 2, report
    assert report["notes"] == [
        "this data directory's agent(s) 'default', untouched since tiermem made them, were replaced by the backup's"
    ], report["notes"]
    assert stored(new) == stored(src)
    assert [h.content for h in new.archive.search(default, "launch March", top_k=1).hits] == [
        "the launch is on 3 March"
    ]


def test_a_default_agent_used_on_both_machines_gets_the_backup_rows_beside_its_own(tmp_path: Path) -> None:
    """Two machines that each used their own ``default`` agent (one id, created at different moments): the backup's
    rows are added beside this machine's, and the note says so (never kept silently as "changed here")."""
    src = fresh(tmp_path, "a")
    default = src.ensure_agent("default").id
    src.archival_insert(default, "the launch is on 3 March", None)
    backup = export(src, tmp_path / "backup.jsonl")
    new = fresh(tmp_path, "b")
    new.archival_insert(new.ensure_agent("default").id, "written on the new machine", None)
    report = restore(new, backup)
    assert report["inserted"]["passages"] == 1, report
    assert sorted(p.content for p in new.archive.rows.passages_of(default)) == [
        "the launch is on 3 March",
        "written on the new machine",
    ]
    assert report["notes"] == [
        "this data directory's agent(s) 'default' and the backup's share a name and id but were made apart (each "
        "machine makes its own 'default' agent): the backup's rows they lacked were added to them, and what they held "
        "here was kept. To have them as the backup has them instead, run the import again with --replace (losing "
        "what was made here)"
    ], report["notes"]
    restore(new, backup, replace=True)
    assert stored(new) == stored(src)


def test_a_restore_after_only_deleting_brings_the_deleted_rows_back_and_leaves_the_forgotten_out(
    memory: Memory, tmp_path: Path
) -> None:
    """An agent that was only deleted and forgotten from holds nothing the backup lacks: the restore takes it for an
    earlier state of the backup's store and restores the deleted passage (a deletion is not a forget), saying how
    many rows came back; the forgotten one stays out (the forget record), with a note saying how to have it."""
    src = old_machine(tmp_path)
    work_src = src.get_agent("work").id
    src.archival_insert(work_src, "the venue is the old library", None)
    backup = export(src, tmp_path / "backup.jsonl")
    restore(memory, backup)
    work = memory.get_agent("work").id
    deleted, forgotten = sorted(memory.archive.rows.passages_of(work), key=lambda p: p.content)
    memory.archival_delete(work, deleted.id, guarded=False)
    forget(memory, Target("passage", work, forgotten.id), now=True)
    report = restore(memory, backup)
    assert report["inserted"]["passages"] == 1
    assert report["notes"] == [
        "1 row(s) of agent 'work' that this data directory did not hold were restored (added where the backup was "
        "made, or deleted here since; what `tiermem forget` forgot here is left out)",
        "left out what was forgotten here (`tiermem forget`): 1 passage row(s). To restore it too, run the import "
        "again with --include-forgotten",
    ], report["notes"]
    assert [p.content for p in memory.archive.rows.passages_of(work)] == [deleted.content]


def test_a_restore_that_replaces_agents_purges_the_core_once(tmp_path: Path) -> None:
    """--replace deletes each agent it rolls back without a purge of its own, then purges the core's files once."""
    src = old_machine(tmp_path)
    backup = export(src, tmp_path / "backup.jsonl")
    memory = fresh(tmp_path, "new")
    restore(memory, backup)
    for name in ("default", "work"):
        memory.edit(memory.get_agent(name).id, "human", Rethink("Name: Bob"))
    statements: list[str] = []
    memory.core._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    report = restore(memory, backup, replace=True)
    assert any(n.startswith("--replace: this data directory's agent(s) 'default', 'work'") for n in report["notes"])
    assert [s for s in statements if s.strip().upper() == "VACUUM"] == ["VACUUM"]
    assert stored(memory) == stored(src)


def test_replace_refuses_a_rollback_that_a_block_shared_with_another_agent_would_leave_half_done(
    memory: Memory, tmp_path: Path
) -> None:
    src = old_machine(tmp_path)
    backup = export(src, tmp_path / "backup.jsonl")
    restore(memory, backup)
    work = memory.get_agent("work").id
    other = memory.create_agent("other", blocks=[]).id
    memory.attach(other, memory.block(work, "human").id)
    memory.edit(work, "human", Rethink("Name: Bob"))
    before = stored(memory)
    with pytest.raises(ValidationError) as refused:
        restore(memory, backup, replace=True)
    assert "block 'human' (version 2 here, 1 in the backup) is attached to 'other' too" in str(refused.value)
    assert "Nothing was written" in str(refused.value) and stored(memory) == before


def test_a_newer_backup_of_the_same_store_restores_over_an_older_one(memory: Memory, tmp_path: Path) -> None:
    """Monday's backup restored, then Tuesday's: the store holds Monday's state, nothing Tuesday's lacks, so the
    restore brings it up to Tuesday's (it was refused as "changed differently")."""
    src = old_machine(tmp_path)
    default, work = src.get_agent("default").id, src.get_agent("work").id
    search(src, work, "launch March")
    monday = export(src, tmp_path / "monday.jsonl")
    restore(memory, monday)
    src.edit(default, "human", Rethink("Name: Ada, moved to Lyon"))
    src.set_agent_metadata(default, {"city": "Lyon"})
    src.archival_insert(work, "the venue is the old library", None)
    src.conversation_log(default, [{"role": "user", "content": "I moved to Lyon"}])
    search(src, work, "launch March")
    report = restore(memory, export(src, tmp_path / "tuesday.jsonl"))
    assert report["notes"] == [
        "this data directory's agent(s) 'default' held an earlier state of the backup's (nothing the backup lacks), "
        "and were brought up to it (use counts recorded here since were replaced by the backup's)",
        *(
            f"{n} row(s) of agent {name!r} that this data directory did not hold were restored (added where the "
            "backup was made, or deleted here since; what `tiermem forget` forgot here is left out)"
            for n, name in ((2, "default"), (1, "work"))
        ),
    ], report["notes"]  # work, only added to, is not in conflict: its new rows and its later use counts are written
    assert stored(memory) == stored(src)
    assert temperatures(memory) == temperatures(src)
    assert memory.block(default, "human").value == "Name: Ada, moved to Lyon"


@pytest.mark.parametrize("change", ["passage", "block", "link"])
def test_a_newer_backup_is_refused_over_a_restored_store_changed_since(
    memory: Memory, tmp_path: Path, change: str
) -> None:
    """The store went on after Monday's restore (a passage of its own, another block's edit, a link made here):
    Tuesday's backup would lose it, so the agent is in conflict as before and not replaced."""
    src = old_machine(tmp_path)
    default = src.get_agent("default").id
    src.conversation_log(default, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    restore(memory, export(src, tmp_path / "monday.jsonl"))
    src.edit(default, "human", Rethink("Name: Ada, moved to Lyon"))
    tuesday = export(src, tmp_path / "tuesday.jsonl")
    if change == "passage":
        memory.archival_insert(default, "written here only", None)
    elif change == "block":
        memory.edit(default, "persona", Rethink("I am Ada's helper."))
    else:
        first, second = memory.archive.rows.messages_of(default)
        memory.link(default, first.id, second.id, "said here")
    before = stored(memory)
    with pytest.raises(ValidationError) as refused:
        restore(memory, tuesday)
    text = str(refused.value)
    assert "agent 'default': block 'human': the backup holds versions up to 4, this data directory up to 3" in text
    assert "--replace" in text, text
    assert stored(memory) == before


def cut(backup: Path, keep: int, to: Path) -> Path:
    to.write_text("".join(backup.read_text(encoding="utf-8").splitlines(keepends=True)[:keep]), encoding="utf-8")
    return to


def test_a_backup_cut_short_or_changed_is_refused_before_writing(memory: Memory, tmp_path: Path) -> None:
    backup = export(old_machine(tmp_path), tmp_path / "backup.jsonl")
    lines = backup.read_text(encoding="utf-8").splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "tiermem-backup-end"
    before = stored(memory)
    for keep in (6, len(lines) - 1):  # cut at a line boundary; only the last line lost
        with pytest.raises(ValidationError, match="it was cut short"):
            restore(memory, cut(backup, keep, tmp_path / f"cut{keep}.jsonl"))
    counts = json.loads(lines[-1])
    counts["rows"]["block_history"] += 1
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(lines[:-1]) + json.dumps(counts) + "\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"does not hold the rows its last line counts \(block_history: 6 of 7\)"):
        restore(memory, changed)
    after = tmp_path / "after.jsonl"
    after.write_text("".join(lines) + lines[3], encoding="utf-8")
    with pytest.raises(ValidationError, match="a record after the backup's last line"):
        restore(memory, after)
    assert stored(memory) == before


def test_a_backed_up_folder_of_a_name_the_store_has_is_restored_under_a_free_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store's own folder keeps its name and files; the backup's is restored as NAME_(1), with a note, and its
    agent's view names it so. ``folders list`` counts each folder's own files (by id, not by name)."""
    from tiermem.cli.main import main

    src = fresh(tmp_path, "src")
    work = src.create_agent("work").id
    src.files.create_folder("docs", description="backed up")
    src.files.upload("docs", "a.txt", b"backed up file")
    src.files.upload("docs", "b.txt", b"another backed up file")
    src.files.attach(work, "docs")
    backup = export(src, tmp_path / "backup.jsonl")
    mine = fresh(tmp_path, "mine")
    mine.files.create_folder("docs", description="mine")
    mine.files.upload("docs", "mine.txt", b"my own file")
    report = restore(mine, backup)
    assert report["notes"] == [
        "this data directory has its own folder of a name the backup's has (kept as it is): the backup's 'docs' was "
        "restored as 'docs_(1)'"
    ], report["notes"]
    assert sorted(f.name for f in mine.files.folders()) == ["docs", "docs_(1)"]
    assert [f.name for f in mine.files.files("docs")] == ["mine.txt"]
    assert [f.name for f in mine.files.files("docs_(1)")] == ["a.txt", "b.txt"]
    assert "docs_(1)/a.txt" in render_agent_directories(mine.get_agent("work"))
    assert sum(restore(mine, backup)["inserted"].values()) == 0  # again: the same folder, not another one

    # two folders of one name (made before tiermem took a lock for it): each counted with its own files
    mine.files.rows.put_folder(replace(mine.files.folder("docs_(1)"), name="docs"))
    assert sorted(f.name for f in mine.files.folders()) == ["docs", "docs"]
    assert (
        main(["folders", "list", "--json", "--data-dir", str(tmp_path / "mine"), "--embedding-model", "hashing"]) == 0
    )
    listed = json.loads(capsys.readouterr().out)
    assert sorted((f["description"], f["files"]) for f in listed) == [("backed up", 2), ("mine", 1)]


def test_a_backup_whose_block_disagrees_with_its_history_is_refused(memory: Memory, tmp_path: Path) -> None:
    """The trailer counts records, not what they hold: a block's value changed after the export (its history's
    current version, written with it, left as it was) is refused before anything is written."""
    backup = export(old_machine(tmp_path), tmp_path / "backup.jsonl")
    lines = []
    for line in backup.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["type"] == "blocks" and record["row"]["label"] == "human" and record["row"]["version"] == 3:
            record["row"]["value"] = "CHANGED AFTER EXPORT"
        lines.append(json.dumps(record) + "\n")
    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(lines), encoding="utf-8")
    before = stored(memory)
    with pytest.raises(ValidationError, match="holds another value than its history's version 3") as refused:
        restore(memory, changed)
    assert "changed after it was written" in str(refused.value) and "Nothing was written" in str(refused.value)
    assert stored(memory) == before


@pytest.mark.parametrize("value", [None, "abc", True, 0, 2.5])
def test_a_damaged_header_is_refused_with_a_clear_error(memory: Memory, tmp_path: Path, value: object) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_text(json.dumps({"type": "tiermem-backup", "format": value}) + "\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"the backup header's format is .*, not a format number \(1 to 6\)"):
        restore(memory, path)


def test_a_format_1_backup_restores_with_the_fields_added_since(memory: Memory) -> None:
    """tests/fixtures/backup/format1.jsonl: written by tiermem before messages and passages had a project."""
    report = restore(memory, FORMAT_1)
    assert report["notes"] == [
        "the backup is of format 1 (an older tiermem's), which does not record how many rows it holds: whether it is "
        "complete cannot be checked",
        "the backup is of format 1, which holds no use counts: its memories are restored as never used (cold in "
        "`tiermem stats`)",
    ]
    agent = memory.get_agent("default").id
    assert memory.block(agent, "human").value == "Name: Ada Lovelace (mathematician)"
    assert [v.version for v in memory.history(agent, "human")] == [4, 3, 2, 1]
    messages = memory.archive.rows.messages_of(agent)
    assert [m.content for m in messages] == ["I am planning a trip to Lyon in May", "Lyon in May sounds lovely"]
    passages = memory.archive.rows.passages_of(agent)
    assert [(p.content, p.project) for p in passages] == [("Ada prefers green tea", None)]


def search(memory: Memory, agent: str, query: str) -> list[str]:
    result = memory.archival_search(
        agent, query, tags=None, tag_match_mode="any", top_k=1, start_datetime=None, end_datetime=None
    )
    return [h.id for h in result.hits]


def temperatures(memory: Memory) -> dict[str, Any]:
    """What `tiermem stats` shows of each agent: hot, warm and cold per kind, and the hottest memories' uses."""
    memory.uses.flush()
    out = {}
    for agent in memory.list_agents():
        stats = use_stats(memory, agent.id).as_dict()
        out[agent.name] = (stats["counts"], [(u["id"], u["uses"], u["temperature"]) for u in stats["hottest"]])
    return out


def test_a_backup_carries_each_agents_uses_and_a_restore_keeps_them(memory: Memory, tmp_path: Path) -> None:
    src = old_machine(tmp_path)
    default, work = src.get_agent("default").id, src.get_agent("work").id
    src.archival_insert(work, "the budget is four thousand euros", None)
    src.archival_insert(work, "the venue is the old library", None)
    for _ in range(3):
        assert search(src, work, "launch March")  # hot: three uses now
    assert search(src, work, "budget euros")  # warm: one use
    src.open_block(default, "human")  # a block opened: warm
    src.uses.flush()
    src.open_block(default, "human")  # one more use, still in this process's batch: a backup holds it too
    before = temperatures(src)
    assert before["work"][0]["passage"] == {"hot": 1, "warm": 1, "cold": 1, "total": 3}, before
    backup = export(src, tmp_path / "backup.jsonl")
    report = restore(memory, backup)
    assert report["inserted"]["uses"] == 3 and report["notes"] == [], report
    assert temperatures(memory) == before
    assert restore(memory, backup)["inserted"]["uses"] == 0  # again: nothing twice (the counts are not doubled)
    assert temperatures(memory) == before
    hits = search(memory, memory.get_agent("work").id, "launch March")
    memory.uses.flush()
    assert restore(memory, backup)["inserted"]["uses"] == 0  # a use here since: the later record is kept
    assert memory.uses.records(hits)[hits[0]].count == 4


def test_a_backup_holds_no_use_of_a_forgotten_memory(memory: Memory, tmp_path: Path) -> None:
    src = old_machine(tmp_path)
    work = src.get_agent("work").id
    src.archival_insert(work, "the door code is 4711", None)
    [secret] = search(src, work, "door code")
    search(src, work, "launch March")
    src.uses.flush()
    forget(src, Target("passage", work, secret))
    assert secret not in {u.id for u in src.uses.by_agent()}
    src.uses.restore([Use(secret, "passage", work, 1, 1, 1.0)])  # written back by a process that raced the forget
    backup = export(src, tmp_path / "backup.jsonl")
    assert secret not in backup.read_text(encoding="utf-8")
    assert restore(memory, backup)["inserted"]["uses"] == 1


def test_a_format_4_backup_restores_with_no_uses(memory: Memory) -> None:
    """tests/fixtures/backup/format4.jsonl: written by tiermem before backups held use records."""
    report = restore(memory, FORMAT_4)
    assert report["notes"] == [
        "the backup is of format 4, which holds no use counts: its memories are restored as never used (cold in "
        "`tiermem stats`)"
    ]
    assert report["inserted"]["uses"] == 0
    agent = memory.get_agent("default").id
    assert memory.block(agent, "human").value == "Name: Grace Hopper, admiral"
    assert [p.content for p in memory.archive.rows.passages_of(agent)] == ["Grace keeps a nanosecond wire on her desk"]
    counts = use_stats(memory, agent).as_dict()["counts"]
    assert counts["passage"] == {"hot": 0, "warm": 0, "cold": 1, "total": 1}


def test_a_use_record_of_a_memory_the_backup_lacks_is_refused(memory: Memory, tmp_path: Path) -> None:
    src = old_machine(tmp_path)
    search(src, src.get_agent("work").id, "launch March")
    lines = export(src, tmp_path / "backup.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    [at] = [n for n, line in enumerate(lines) if json.loads(line)["type"] == "use"]
    before = stored(memory)
    for change, error in (
        ({"id": "passage-nowhere"}, "a use record names passage passage-nowhere, which the backup does not hold"),
        ({"agent_id": "agent-nobody"}, "a use record names agent agent-nobody, which the backup does not hold"),
        ({"count": 0}, "a use record must be"),
    ):
        record = json.loads(lines[at])
        record["row"].update(change)
        damaged = tmp_path / "damaged.jsonl"
        damaged.write_text("".join([*lines[:at], json.dumps(record) + "\n", *lines[at + 1 :]]), encoding="utf-8")
        with pytest.raises(ValidationError, match=error):
            restore(memory, damaged)
    assert stored(memory) == before and memory.uses.by_agent() == []


CORE_ROW_DAMAGE = [
    ("blocks", "version", "3"),
    ("blocks", "limit", 2.5),
    ("blocks", "version", True),
    ("blocks", "updated_us", "1700000000000000"),  # a time as text, or a fraction of a microsecond: refused too
    ("blocks", "updated_us", 1.7e15 + 0.25),
    ("blocks", "read_only", "no"),  # read as true
    ("block_history", "version", None),
    ("block_history", "limit", "5000"),
    ("attachments", "created_us", 12.0),
    ("agents", "updated_us", "yesterday"),
    ("conversations", "turns", "4"),
    ("conversations", "start_seq", 0.5),
]


@pytest.mark.parametrize(("table", "field", "value"), CORE_ROW_DAMAGE)
def test_a_core_row_whose_typed_field_holds_another_type_is_refused_before_writing(
    memory: Memory, tmp_path: Path, table: str, field: str, value: object
) -> None:
    """A backup's block, history, attachment, agent or conversation-state row whose version, limit, count or time is
    not a whole number (text, a float, a bool), or whose read_only is not true or false, is refused naming the line,
    the row and the field, before anything is written (it was stored as it stood: "3" as text, 2.5 cut to 2 when
    read, "no" read as true)."""
    src = old_machine(tmp_path)
    work = src.get_agent("work").id
    src.set_context_window(replace(src.context_window(work, "default"), turns=2, start_seq=1))  # a conversation state
    lines = export(src, tmp_path / "backup.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if json.loads(line)["type"] == table)
    record = json.loads(lines[at])
    record["row"][field] = value
    key = record["row"]["key" if "key" in record["row"] else "id"]
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("".join([*lines[:at], json.dumps(record) + "\n", *lines[at + 1 :]]), encoding="utf-8")
    before = stored(memory)
    with pytest.raises(ValidationError) as refused:
        restore(memory, damaged)
    said = str(refused.value)
    assert f"damaged.jsonl:{at + 1}: the {table} row {key!r} holds {field} = {value!r}, not " in said, said
    assert "Nothing was written" in said
    assert stored(memory) == before


def test_a_store_holding_a_time_as_text_exports_a_backup_that_restores(tmp_path: Path) -> None:
    """A store whose core rows hold a time as text or a limit as a fraction (a restore before restores checked the
    types stored a changed backup's values as they stood; the store reads them with ``int``) exports them as it reads
    them: the backup restores (the restore's type check refused it, naming it changed)."""
    src = old_machine(tmp_path)
    src.core.close()
    with sqlite3.connect(tmp_path / "old" / "core.sqlite3") as conn:
        conn.execute('UPDATE blocks SET updated_us = CAST(updated_us AS TEXT), "limit" = "limit" + 0.0')
        conn.execute("UPDATE agents SET created_us = CAST(created_us AS TEXT)")
    src = fresh(tmp_path, "old")
    assert {type(r["updated_us"]) for r in src.core.all_rows("blocks")} == {str}  # as the store holds them
    backup = export(src, tmp_path / "backup.jsonl")
    memory = fresh(tmp_path, "new")
    restore(memory, backup)
    kept = {r["id"]: (int(r["updated_us"]), int(r["limit"])) for r in src.core.all_rows("blocks")}
    assert {r["id"]: (r["updated_us"], r["limit"]) for r in memory.core.all_rows("blocks")} == kept
    assert memory.get_agent("work").created_at == src.get_agent("work").created_at
