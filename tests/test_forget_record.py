"""A backup made before a forget does not bring back what was forgotten (``domain/forget_record.py``): the forget
record (digests, no text) in the core state of each backend, the restore leaving out what it names and saying so,
and ``--include-forgotten`` bringing it back. Real CLI round trips on a local data directory and on object storage
(moto's S3 server)."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import Settings, load_settings
from tiermem.cli.main import main
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory
from tiermem.interop.commands import run_export, run_import

from .test_forgetting import SECRET, fill, scan_dir
from .test_object_storage import s3_config, s3_endpoint  # noqa: F401  (the module's moto fixture)


def cli(argv: list[str]) -> tuple[str, str]:
    """Run the CLI in process: (stdout, stderr); it must exit 0."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 0, (out.getvalue(), err.getvalue())
    return out.getvalue(), err.getvalue()


def opened(common: list[str]) -> Memory:
    """The memory the CLI's ``common`` flags name, opened as a command opens it."""
    if common[0] == "--config":
        return open_memory(load_settings(config=Path(common[1])), start_embedder=False)
    return open_memory(load_settings(data_dir=Path(common[1]), embedding_model="hashing"), start_embedder=False)


def check_round_trip(memory: Memory, common: list[str], backup: Path) -> None:
    """Export, forget a passage, a message and a block version (``--now``), import: not back, and the import says
    so; import with ``--include-forgotten``: back, and out of the record (a third import changes nothing)."""
    ids = fill(memory)
    memory.core.close()
    cli(["export", "--format", "jsonl", "-o", str(backup), *common])
    yes = [*common, "--yes", "--now"]
    cli(["forget", "passage", ids["passage"], *yes])
    cli(["forget", "message", ids["message"], *yes])
    cli(["forget", "block", "human", "--version", ids["secret_version"], *yes])

    _out, err = cli(["import", str(backup), *common])
    assert (
        "left out what was forgotten here (`tiermem forget`): 1 passage row(s), 1 message(s), 1 block version(s). "
        "To restore it too, run the import again with --include-forgotten"
    ) in err, err
    after = opened(common)
    try:
        assert after.archive.counts(ids["agent"])[:2] == (2, 20)
        assert int(ids["secret_version"]) not in [v.version for v in after.core.history(ids["block"])]
        passages = after.archive.rows.passages_of(ids["agent"])
        assert ids["passage"] not in {p.id for p in passages} and SECRET not in json.dumps(
            [p.content for p in passages]
        )
        assert len(after.core.forgotten_keys()) == 4  # and the turn after the message, its keyword text rewritten
        dump = json.dumps([r for t in ("agents", "blocks", "block_history") for r in after.core.all_rows(t)])
        for key in after.core.forgotten_keys():  # digests (the record read raw: test_forget_record_edits.py)
            assert len(key) == 64 and key not in dump
    finally:
        after.core.close()

    _out, err = cli(["import", str(backup), "--include-forgotten", *common])
    assert "--include-forgotten: restored what was forgotten here: 1 passage row(s), 1 message(s)" in err, err
    back = opened(common)
    try:
        assert back.archive.counts(ids["agent"])[:2] == (3, 21)
        assert int(ids["secret_version"]) in [v.version for v in back.core.history(ids["block"])]
        assert back.core.forgotten_keys() == set()
    finally:
        back.core.close()
    out, err = cli(["import", str(backup), "--json", *common])
    assert "left out" not in err and all(n == 0 for k, n in json.loads(out)["inserted"].items() if k != "uses")


def test_a_backup_made_before_a_forget_does_not_bring_it_back_unless_asked(settings: Settings, tmp_path: Path) -> None:
    root = settings.resolved_data_dir()
    check_round_trip(
        open_memory(settings, start_embedder=False),
        ["--data-dir", str(root), "--embedding-model", "hashing"],
        tmp_path / "backup.jsonl",
    )


def test_on_object_storage_a_backup_made_before_a_forget_does_not_bring_it_back(
    s3_endpoint: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = s3_config(tmp_path, s3_endpoint, f"record-{uuid.uuid4().hex[:8]}")
    memory = open_memory(load_settings(config=config), start_embedder=False)
    check_round_trip(memory, ["--config", str(config)], tmp_path / "backup.jsonl")


def test_an_agent_forgotten_whole_is_left_out_of_a_restore(settings: Settings, tmp_path: Path) -> None:
    """Its rows, blocks and their history stay out, the note names it; ``default``, forgotten too and made again
    with the same id by the next command, is not taken for the forgotten one it replaced."""
    root = settings.resolved_data_dir()
    common = ["--data-dir", str(root), "--embedding-model", "hashing"]
    memory = open_memory(settings, start_embedder=False)
    work = memory.create_agent("work").id
    memory.archival_insert(work, f"the vault is {SECRET}", None)
    memory.archival_insert(memory.ensure_agent("default").id, "the launch is on 3 March", None)
    memory.core.close()
    backup = tmp_path / "backup.jsonl"
    cli(["export", "--format", "jsonl", "-o", str(backup), *common])
    cli(["forget", "agent", "work", "--yes", "--now", *common])
    cli(["forget", "agent", "default", "--yes", "--now", *common])
    cli(["remember", "a new start", *common])  # makes `default` again: the same id, another moment

    _out, err = cli(["import", str(backup), *common])
    assert "agent(s) 'default', 'work' (forgotten whole, with all of theirs)" in err, err
    after = opened(common)
    try:
        assert [a.name for a in after.list_agents()] == ["default"]
        default = after.ensure_agent("default").id
        assert [p.content for p in after.archive.rows.passages_of(default)] == ["a new start"]
    finally:
        after.core.close()
    assert scan_dir(root) == []

    cli(["import", str(backup), "--include-forgotten", "--replace", *common])
    back = opened(common)
    try:
        assert sorted(a.name for a in back.list_agents()) == ["default", "work"]
        assert [p.content for p in back.archive.rows.passages_of(work)] == [f"the vault is {SECRET}"]
        assert back.core.forgotten_keys() == set()
    finally:
        back.core.close()


def export(memory: Memory, path: Path) -> Path:
    run_export(memory, agent=None, fmt="jsonl", output=str(path), vectors=False)
    return path


def restore(memory: Memory, path: Path, **kw: Any) -> dict[str, Any]:
    return run_import(memory, path, fmt="jsonl", agent="default", rename=None, **{"replace": False, **kw})


def test_a_block_whose_backed_up_value_was_forgotten_is_restored_at_its_newest_kept_version(
    memory: Memory, tmp_path: Path
) -> None:
    """``forget --text`` edits the text out of the current value and forgets the versions holding it; a rollback to
    a backup made before (``--replace``) restores the block at the newest version the backup holds without it."""
    agent = memory.ensure_agent("default").id
    memory.edit(agent, "human", Rethink("Name: Ada"), actor="human")
    memory.edit(agent, "human", Rethink(f"Name: Ada, vault {SECRET}"), actor="human")
    backup = export(memory, tmp_path / "backup.jsonl")
    forget(memory, Target("text", agent, SECRET), now=True)
    assert memory.block(agent, "human").value == "Name: Ada, vault "
    report = restore(memory, backup, replace=True)
    assert any("1 block version(s)" in n for n in report["notes"]), report["notes"]
    block = memory.block(agent, "human")
    assert (block.value, block.version) == ("Name: Ada", 2)
    assert all(SECRET not in v.value for v in memory.core.history(block.id))
    # the next edit goes on from the version restored
    memory.edit(agent, "human", Rethink("Name: Ada Lovelace"), actor="human")
    assert memory.block(agent, "human").version == 3


def test_include_forgotten_applies_to_backups_only(memory: Memory, tmp_path: Path) -> None:
    from tiermem.base.errors import ValidationError

    graph = tmp_path / "memory.jsonl"
    graph.write_text('{"type": "entity", "name": "Ada", "entityType": "person", "observations": ["x"]}\n')
    with pytest.raises(ValidationError, match="--include-forgotten applies to tiermem backups"):
        run_import(memory, graph, fmt="auto", agent="a", rename=None, replace=False, include_forgotten=True)
    assert [a.name for a in memory.list_agents()] == []


def test_a_backup_carries_the_forget_record_so_an_older_backup_restored_after_it_leaves_the_forgotten_out(
    settings: Settings, tmp_path: Path
) -> None:
    """Forget X; B1 made before, B2 after. Restore B2 in a new data directory, then B1 there: X stays forgotten (B2
    carries the record's digests, never text); with --include-forgotten it comes back."""
    memory = open_memory(settings, start_embedder=False)
    common = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing"]
    ids = fill(memory)
    memory.core.close()
    before, after = tmp_path / "b1.jsonl", tmp_path / "b2.jsonl"
    cli(["export", "--format", "jsonl", "-o", str(before), *common])
    cli(["forget", "passage", ids["passage"], *common, "--yes", "--now"])
    cli(["export", "--format", "jsonl", "-o", str(after), *common])
    carried = [json.loads(line) for line in after.read_text().splitlines() if '"type": "forgotten"' in line]
    assert carried and all(len(r["row"]) == 64 for r in carried)

    elsewhere = ["--data-dir", str(tmp_path / "new"), "--embedding-model", "hashing"]
    cli(["import", str(after), *elsewhere])
    _out, err = cli(["import", str(before), *elsewhere])
    assert "left out what was forgotten here" in err, err
    fresh = opened(elsewhere)
    try:
        assert ids["passage"] not in {p.id for p in fresh.archive.rows.passages_of(ids["agent"])}
        assert {r["row"] for r in carried} <= fresh.core.forgotten_keys()
    finally:
        fresh.core.close()
    cli(["import", str(before), "--include-forgotten", *elsewhere])
    back = opened(elsewhere)
    try:
        assert ids["passage"] in {p.id for p in back.archive.rows.passages_of(ids["agent"])}
    finally:
        back.core.close()


def test_a_damaged_forget_record_key_in_a_backup_is_refused(settings: Settings, tmp_path: Path) -> None:
    open_memory(settings, start_embedder=False).core.close()
    common = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing"]
    backup = tmp_path / "b.jsonl"
    cli(["export", "--format", "jsonl", "-o", str(backup), *common])
    lines = backup.read_text().splitlines()
    end = json.loads(lines[-1])
    end["rows"]["forgotten"] = 1
    lines[-1:] = [json.dumps({"type": "forgotten", "row": "not a digest"}), json.dumps(end)]
    backup.write_text("\n".join(lines) + "\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["import", str(backup), "--data-dir", str(tmp_path / "other"), "--embedding-model", "hashing"])
    assert code != 0 and "forget record key that is not one" in err.getvalue(), err.getvalue()


def test_a_refused_restore_adds_nothing_to_the_forget_record(settings: Settings, tmp_path: Path) -> None:
    """A restore refused after its backup is read (an agent changed differently here) leaves the record as it was;
    the same restore with ``--replace`` adds the backup's digests."""
    memory = open_memory(settings, start_embedder=False)
    common = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing"]
    ids = fill(memory)
    memory.core.close()
    after = tmp_path / "b2.jsonl"
    cli(["forget", "passage", ids["passage"], *common, "--yes", "--now"])
    cli(["export", "--format", "jsonl", "-o", str(after), *common])
    carried = {json.loads(line)["row"] for line in after.read_text().splitlines() if '"type": "forgotten"' in line}
    assert carried

    elsewhere = ["--data-dir", str(tmp_path / "new"), "--embedding-model", "hashing"]
    other = opened(elsewhere)
    try:
        here = other.ensure_agent("default").id
        other.edit(here, "human", Rethink("Name: Bob"))
        other.archival_insert(here, "Bob's own note", None)
    finally:
        other.core.close()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["import", str(after), *elsewhere])
    assert code != 0 and "nothing was written" in err.getvalue(), err.getvalue()
    refused = opened(elsewhere)
    try:
        assert refused.core.forgotten_keys() == set()
    finally:
        refused.core.close()
    cli(["import", str(after), "--replace", *elsewhere])
    replaced = opened(elsewhere)
    try:
        assert carried <= replaced.core.forgotten_keys()
        assert ids["passage"] not in {p.id for p in replaced.archive.rows.passages_of(ids["agent"])}
    finally:
        replaced.core.close()
