"""Memory facade over a real LanceDB store: agents, blocks, sharing, history, revert, schema."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import EditError, NotFoundError, SchemaError, StoreError, ValidationError
from tiermem.core.migrate import CORE_FILE, open_core
from tiermem.core.protocol import CORE_TABLES
from tiermem.domain import blocks as b
from tiermem.domain.memory import Change, Memory
from tiermem.store import Store

from .conftest import PYTHON, ROOT, legacy_core, memory_over, spec, stored_result


def test_default_agent_has_configured_blocks(memory: Memory) -> None:
    agent = memory.ensure_agent("default")
    blocks = {x.label: x for x in memory.blocks(agent.id)}
    assert list(blocks) == ["persona", "human"]
    assert blocks["human"].limit == 5000
    assert blocks["persona"].description.startswith("The persona block: Stores details about your current persona")
    assert memory.ensure_agent("default").id == agent.id  # created once


def test_edit_writes_version_and_history(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    memory.edit(a, "human", b.Rethink("Name: Ada"))
    memory.edit(a, "human", b.Append("Likes tea"))
    block = memory.block(a, "human")
    assert block.value == "Name: Ada\nLikes tea" and block.version == 3
    hist = memory.history(a, "human", 10)
    assert [(v.version, v.operation, v.actor) for v in hist] == [
        (3, "core_memory_append", "agent"),
        (2, "memory_rethink", "agent"),
        (1, "create", "system"),
    ]
    assert hist[0].value == block.value


def test_failed_edit_writes_nothing(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    memory.create_block(a, spec("small", "abc", limit=5))
    before = memory.block(a, "small")
    for edit in (b.Append("toolong"), b.StrReplace("zzz", "y"), b.Insert("x", 9)):
        with pytest.raises(EditError):
            memory.edit(a, "small", edit)
    after = memory.block(a, "small")
    assert after == before
    assert len(memory.history(a, "small", 50)) == 1


def test_read_only_refuses_agents_not_humans(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    memory.create_block(a, spec("rules", "be kind", read_only=True), actor="human")
    with pytest.raises(EditError, match=r"^Error This block is read-only and cannot be edited\.$"):
        memory.edit(a, "rules", b.Append("x"))
    with pytest.raises(EditError):
        memory.delete_block(a, "rules")
    assert memory.edit(a, "rules", b.Append("and brief"), actor="human").value == "be kind\nand brief"


def test_unknown_label_names_existing(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    with pytest.raises(NotFoundError, match=r"Blocks that exist: 'persona', 'human'"):
        memory.edit(a, "nope", b.Append("x"))


def test_revert_is_a_new_version(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    memory.edit(a, "human", b.Rethink("v2"))
    memory.edit(a, "human", b.Rethink("v3"))
    reverted = memory.revert(a, "human", 2)
    assert reverted.value == "v2" and reverted.version == 4
    assert [v.value for v in memory.history(a, "human", 10)] == ["v2", "v3", "v2", ""]
    with pytest.raises(NotFoundError, match="no version 99"):
        memory.revert(a, "human", 99)
    with pytest.raises(ValidationError):
        memory.revert(a, "human", 0)


def test_shared_block_seen_by_both_agents(memory: Memory) -> None:
    one = memory.ensure_agent("one").id
    two = memory.create_agent("two", blocks=[]).id
    shared = memory.create_block(one, spec("team", "Team: blue"))
    memory.attach(two, shared.id)
    seen: list[Change] = []
    memory.subscribe(seen.append)
    memory.edit(two, "team", b.Append("Standup 9:30"))
    assert memory.block(one, "team").value == "Team: blue\nStandup 9:30"
    assert set(seen[-1].agent_ids) == {one, two} and seen[-1].label == "team"


def test_create_rename_delete(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    memory.create_block(a, spec("notes", "n"))
    with pytest.raises(ValidationError, match="already exists"):
        memory.create_block(a, spec("notes"))
    memory.update_block(a, "notes", new_label="project", actor="agent")
    assert [x.label for x in memory.blocks(a)] == ["persona", "human", "project"]
    memory.delete_block(a, "project")
    assert [x.label for x in memory.blocks(a)] == ["persona", "human"]


def test_a_deletion_that_fails_part_way_leaves_no_block_that_says_it_was_deleted(tmp_path: Path) -> None:
    """A deletion with a reason is two steps (the detach, the reason recorded as the block's last version). The
    detach failing (here: a SQLite trigger refusing it, as a full disk would) writes nothing: no version says the
    still-attached block was deleted. Recording the reason failing after the detach leaves the block deleted,
    without its reason."""
    import sqlite3

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    store = Store(settings.store_uri(), embedding_model="hashing-384", embedding_dim=384)
    memory = memory_over(store, default_blocks=settings.default_blocks)
    a = memory.ensure_agent("default").id
    memory.create_block(a, spec("notes", "n"))
    memory.create_block(a, spec("drafts", "d"))
    db = sqlite3.connect(settings.resolved_data_dir() / CORE_FILE)
    db.execute("CREATE TRIGGER no_detach BEFORE DELETE ON attachments BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    db.commit()
    with pytest.raises(StoreError):
        memory.delete_block(a, "notes", operation="memory delete: tidy up")
    notes = memory.block(a, "notes")
    assert notes.version == 1 and [v.operation for v in memory.history(a, "notes")] == ["create"]

    db.execute("DROP TRIGGER no_detach")
    db.execute("CREATE TRIGGER no_edit BEFORE UPDATE ON blocks BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    db.commit()
    memory.delete_block(a, "drafts", operation="memory delete: tidy up")
    db.close()
    assert [x.label for x in memory.blocks(a)] == ["persona", "human", "notes"]


def test_an_agent_deleted_whose_purge_cannot_run_is_deleted_with_the_purge_pending(tmp_path: Path) -> None:
    """The purge of the core's files after an agent's deletion fails (another process holds the write lock): the
    deletion is done and heard (a server serving the agent drops it), the purge is reported pending, not raised;
    and each deletion of a restore or a forget purges once (``purge=False``), not once per agent."""
    import sqlite3

    from tiermem.core.sqlite import SqliteCore

    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    memory = memory_over(store, core=SqliteCore(tmp_path / CORE_FILE, busy_timeout=0.2))
    gone = memory.create_agent("gone", blocks=[spec("human", "Name: Ada")]).id
    other = sqlite3.connect(str(tmp_path / CORE_FILE), isolation_level=None)
    heard: list[Change] = []

    def hold_the_lock(change: Change) -> None:  # another process starts writing right after the deletion
        heard.append(change)
        if change.kind == "agent_deleted":
            other.execute("BEGIN IMMEDIATE")

    memory.subscribe(hold_the_lock)
    done = memory.delete_agent(gone)
    assert [c.agent_ids for c in heard if c.kind == "agent_deleted"] == [(gone,)]
    assert memory.core.find_agent("gone") is None
    assert "locked" in done.purge_unfinished, done
    other.execute("ROLLBACK")
    memory.unsubscribe(hold_the_lock)

    statements: list[str] = []
    memory.core._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    kept = [memory.create_agent(name).id for name in ("a", "b")]
    for agent_id in kept:
        assert memory.delete_agent(agent_id, purge=False).purge_unfinished == ""
    assert not [s for s in statements if s.strip().upper() == "VACUUM"]
    assert memory.purge_core() == ""
    assert [s for s in statements if s.strip().upper() == "VACUUM"] == ["VACUUM"]


def test_over_limit_default_block_rejected(memory: Memory) -> None:
    with pytest.raises(ValidationError, match=r"block 'human' has 7 characters, more than its limit \(3\)"):
        memory.create_agent("x", blocks=[spec("human", "toolong", limit=3)])
    assert memory.core.find_agent("x") is None


def test_schema_version_and_model_mismatch_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "db")
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    with pytest.raises(SchemaError, match="tiermem reembed"):
        Store(uri, embedding_model="other-model", embedding_dim=768)
    store.conn.set_meta("schema_version", "99")
    with pytest.raises(SchemaError, match="newer tiermem"):
        Store(uri, embedding_model="hashing-384", embedding_dim=384)
    store.conn.set_meta("schema_version", "0")
    with pytest.raises(SchemaError, match="cannot migrate"):
        Store(uri, embedding_model="hashing-384", embedding_dim=384)


def test_a_stale_commit_writes_nothing(memory: Memory) -> None:
    """Value, version and history entry are one commit: one computed from a version that is no longer stored is
    refused whole (no value, no history entry), on every backend."""
    from dataclasses import replace

    a = memory.ensure_agent("default").id
    block = memory.block(a, "human")
    memory.edit(a, "human", b.Rethink("current"))
    stale = replace(block, value="stale", version=2)
    assert memory.core.commit_edit(block, stale, memory.history(a, "human", 1)[0]) is None
    memory.edit(a, "human", b.Append("next"))
    assert [(v.version, v.value) for v in memory.history(a, "human", 5)] == [
        (3, "current\nnext"),
        (2, "current"),
        (1, ""),
    ]


WORKER = textwrap.dedent(
    """
    import sys
    from tiermem.store import Store
    from tiermem.domain.archive import Archive
    from tiermem.embedding.embedders import make_embedder
    from tiermem.domain.memory import Memory
    from pathlib import Path
    from tiermem.base.config import BlockSpec
    from tiermem.core.migrate import open_core
    from tiermem.domain import blocks as b
    uri, me, n, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    m = Memory(Archive(store, make_embedder("hashing", Path())), default_blocks=[BlockSpec(label="shared", value="", limit=100000)],
               core=open_core(store, backend, Path(uri).parent))
    agent = m.ensure_agent("default").id
    for i in range(n):
        m.edit(agent, "shared", b.Append(f"{me}-{i}"))
    """
)


@pytest.mark.parametrize("backend", ["sqlite"])  # object storage: tests/test_object_storage.py (moto S3)
def test_concurrent_processes_lose_no_append(tmp_path: Path, backend: str) -> None:
    uri = str(tmp_path / "db")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen([PYTHON, str(script), uri, f"p{p}", "12", backend], cwd=ROOT, stderr=subprocess.PIPE)
        for p in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()[-2000:]
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    m = memory_over(store, core=open_core(store, backend, tmp_path))
    agent = m.ensure_agent("default").id
    assert len(m.core.list_agents()) == 1
    block = m.block(agent, "shared")
    lines = [x for x in block.value.split("\n") if x]
    assert sorted(lines) == sorted(f"p{p}-{i}" for p in range(4) for i in range(12))
    hist = m.history(agent, "shared", 1000)
    assert [v.version for v in hist] == list(range(49, 0, -1))  # one unbroken chain
    for newer, older in zip(hist, hist[1:]):
        assert newer.value.startswith(older.value + "\n")  # each version extends the previous one


def test_values_with_sql_metacharacters_round_trip(memory: Memory) -> None:
    a = memory.ensure_agent("default").id
    nasty = "O'Brien said \"hi\" \\ back\\slash'); DROP TABLE blocks; --\nüñï 🎉 %_*"
    assert memory.edit(a, "human", b.Rethink(nasty)).value == nasty
    assert memory.block(a, "human").value == nasty
    assert memory.history(a, "human", 1)[0].value == nasty
    assert memory.edit(a, "human", b.StrReplace("O'Brien", "O'Neil")).value == nasty.replace("O'Brien", "O'Neil")


def test_commit_conflicts_are_retried_other_failures_are_clear(tmp_path: Path) -> None:
    """A commit that lost to other writers changed nothing: writes retry it; other failures say what happened, and
    conflicts that outlast the retries (tries or time) are a StoreBusyError (a StoreWriteError) naming the last one,
    never Lance's own RuntimeError."""
    from tiermem.base.errors import StoreBusyError, StoreError, StoreWriteError
    from tiermem.store import Retry, writes

    def flaky(retry: Retry) -> Any:
        class Flaky:
            uri = str(tmp_path)
            calls = 0

            @writes("a test row", retry)
            def write(self, failures: int, message: str) -> str:
                self.calls += 1
                if self.calls <= failures:
                    raise RuntimeError(message)
                return "written"

        return Flaky()

    quick = Retry(attempts=6, budget=5.0, first=0.001, cap=0.002)
    once = flaky(quick)
    assert once.write(3, "lance error: Retryable commit conflict for version 7: ...") == "written"
    assert once.calls == 4
    assert flaky(quick).write(2, "lance error: Incompatible transaction: ...") == "written"
    cleaned = "lance error: Not found: bucket/p/messages.lance/_versions/18446744073709551610.manifest"
    assert flaky(quick).write(1, cleaned) == "written"  # a version it read was cleaned up meanwhile
    missing = flaky(quick)
    with pytest.raises(StoreError, match="Not found: bucket/p/messages.lance/data/x.lance"):
        missing.write(1, "lance error: Not found: bucket/p/messages.lance/data/x.lance")
    assert missing.calls == 1  # a data file missing is damage, not a race: not tried again
    failing = flaky(quick)
    with pytest.raises(StoreError, match="Writing a test row to the data directory .* failed: lance error: boom"):
        failing.write(1, "lance error: boom")
    assert failing.calls == 1  # not a conflict: not tried again
    busy = flaky(quick)
    with pytest.raises(
        StoreBusyError, match=r"kept committing .* \(6 tries; last: Too many concurrent writers"
    ) as raised:
        busy.write(1000, "Too many concurrent writers. ")
    assert busy.calls == 6 and isinstance(raised.value, StoreWriteError)
    assert "Nothing was written; the call is safe to repeat" in str(raised.value)
    slow = flaky(Retry(attempts=1000, budget=0.05, first=0.01, cap=0.01))  # the time runs out before the tries
    with pytest.raises(StoreBusyError):
        slow.write(10_000, "lance error: Commit conflict for version 3")
    assert 2 <= slow.calls < 100


def test_a_write_of_several_commits_failing_midway_says_what_it_left(tmp_path: Path) -> None:
    """ "Nothing was written" holds for one commit; a write of several (a migration, a reembed's swap) that fails midway
    says what it left and how it is finished instead."""
    from tiermem.base.errors import StoreWriteError
    from tiermem.store import library

    left = "The migration is unfinished: the next open of the store (any tiermem command) finishes it."
    for failure, said in (
        ("lance error: boom, /root/.cargo/registry/src/x.rs:1:2", "failed: lance error: boom. The migration is"),
        ("No space left on device (os error 28)", "is full (while writing the tables). The migration is unfinished"),
    ):
        with pytest.raises(StoreWriteError) as raised:
            with library(str(tmp_path), "the tables", writing=True, unfinished=left):
                raise RuntimeError(failure)
        assert said in str(raised.value) and left in str(raised.value)
        assert "othing was written" not in str(raised.value)
    with pytest.raises(StoreWriteError, match=r"failed: lance error: boom\. Nothing was written\.$"):
        with library(str(tmp_path), "a row", writing=True):  # one commit: nothing was written
            raise RuntimeError("lance error: boom")


def test_old_lancedb_data_dir_migrates_to_sqlite(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A data directory with core state in LanceDB opens with the SQLite default, everything carried over."""
    uri = str(tmp_path / "db")
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    agent = legacy_core(
        store, {"human": ["Name: Ada", "Name: Ada\nLikes tea"]}, requests={("core_memory_append", "k1"): "done"}
    )
    assert not (tmp_path / CORE_FILE).exists()

    store2 = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    new = memory_over(store2, core=open_core(store2, "auto", tmp_path))
    assert new.core.name == "sqlite" and (tmp_path / CORE_FILE).exists()
    assert "moved core state from LanceDB" in capfd.readouterr().err
    assert new.block(agent, "human").value == "Name: Ada\nLikes tea"
    assert [v.version for v in new.history(agent, "human", 10)] == [2, 1]
    assert stored_result(new, agent, "core_memory_append", "k1") == "done"
    new.edit(agent, "human", b.Append("Plays go"))
    # the old tables are emptied and purged once the copy is whole: no file of the store keeps their rows
    assert all(Store(uri, embedding_model="hashing-384", embedding_dim=384).rows.count(t) == 0 for t in CORE_TABLES)
    assert files_holding(tmp_path / "db", "Likes tea") == []

    store3 = Store(uri, embedding_model="hashing-384", embedding_dim=384)  # reopening does not copy again
    again = memory_over(store3, core=open_core(store3, "auto", tmp_path))
    assert again.block(agent, "human").version == 3
    assert "moved core state" not in capfd.readouterr().err
    assert not list(tmp_path.glob(f"{CORE_FILE}.migrating-*"))


def test_a_copy_of_the_old_core_tables_is_checked_row_by_row_before_it_is_used() -> None:
    """The LanceDB core tables are emptied only after a copy that holds every row read: ``_not_copied`` names
    what a copy lacks (the migration then keeps the old tables and renames nothing into place)."""
    import sqlite3

    from tiermem.core.migrate import _not_copied
    from tiermem.core.sqlite import create_schema, insert_rows

    rows: dict[str, list[dict[str, object]]] = {t: [] for t in CORE_TABLES}
    rows["agents"] = [
        {"id": f"agent-{i}", "name": f"a{i}", "system": "", "metadata": "{}", "created_us": 0, "updated_us": 0}
        for i in range(3)
    ]
    rows["block_history"] = [
        {
            "key": f"b:{v}",
            "block_id": "b",
            "version": v,
            "label": "human",
            "value": f"v{v}",
            "limit": 9,
            "description": "",
            "read_only": False,
            "operation": "create",
            "actor": "agent",
            "created_us": 0,
        }
        for v in (1, 2)
    ]
    conn = sqlite3.connect(":memory:")
    create_schema(conn)
    insert_rows(conn, "agents", rows["agents"][:2])
    insert_rows(conn, "block_history", rows["block_history"][:1])
    assert _not_copied(conn, rows) == "1 of 3 agents, 1 of 2 block_history"
    insert_rows(conn, "agents", rows["agents"])
    insert_rows(conn, "block_history", rows["block_history"])
    assert _not_copied(conn, rows) == ""


def files_holding(root: Path, text: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


def test_what_is_forgotten_after_a_migration_is_gone_from_the_old_tables_too(tmp_path: Path) -> None:
    """A forget and an agent deletion after the move leave nothing in the old LanceDB core tables, even when the
    process that moved them stopped before emptying them (the next open finishes it), and doctor calls it clean."""
    from tiermem.cli.main import main
    from tiermem.core.lance import LanceCoreTables
    from tiermem.core.migrate import migrate_from_lance
    from tiermem.domain.doctor_checks import check_old_core_tables

    uri = str(tmp_path / "db")
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    agent = legacy_core(store, {"human": ["Name: Ada", "Name: Ada\nold-address-4471"]}, agent="work")
    migrate_from_lance(LanceCoreTables(store), tmp_path / CORE_FILE)  # a process stopped right after the copy
    assert files_holding(tmp_path / "db", "old-address-4471")  # not emptied yet
    said: list[tuple[str, bool, str]] = []
    from tiermem.core.sqlite import SqliteCore

    copied = SqliteCore(tmp_path / CORE_FILE)
    check_old_core_tables(store, copied, lambda name, ok, detail, fix="": said.append((name, ok, detail)))
    copied.close()
    assert said == [
        (
            "old core tables",
            False,
            "the LanceDB core tables of an older tiermem still hold 1 agents, 1 blocks, 1 attachments, 2 block_history "
            f"row(s), moved into {copied.describe()} but not yet removed: forgetting and deleting do not reach them",
        )
    ]

    cli = ["--data-dir", str(tmp_path), "--embedding-model", "hashing"]
    assert main(["forget", "--text", "old-address-4471", "--agent", "work", "--yes", "--now", *cli]) == 0
    assert files_holding(tmp_path, "old-address-4471") == []  # the next open emptied the old tables first
    assert main(["blocks", "set", "human", "Name: Ada Lovelace", "--agent", "work", *cli]) == 0
    assert main(["agents", "delete", "work", "--yes", *cli]) == 0
    assert main(["optimize", *cli]) == 0
    # (the SQLite core keeps a deleted agent's bytes in free pages until a purge: `tiermem forget agent` does it)
    assert files_holding(tmp_path / "db", "Name: Ada") == [] and files_holding(tmp_path / "db", agent) == []
    assert main(["doctor", *cli]) == 0


def test_old_core_tables_holding_rows_the_core_lacks_are_kept_flagged_and_recoverable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A data directory an older tiermem moved (core.sqlite3 there, its copy never checked, the LanceDB tables kept)
    whose old tables gained rows after the move (a downgrade wrote there): opening it removes nothing, warns naming
    what the core lacks, and doctor fails; the rows are recovered from a copy without core.sqlite3 (docs/security.md),
    and once the old tables are removed by hand doctor passes."""
    import logging
    import shutil

    from tiermem.cli.main import main
    from tiermem.core.lance import LanceCoreTables
    from tiermem.core.migrate import migrate_from_lance
    from tiermem.domain.doctor_checks import check_old_core_tables

    uri = str(tmp_path / "db")
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    legacy_core(store, {"human": ["Name: Ada"]}, agent="work")
    migrate_from_lance(LanceCoreTables(store), tmp_path / CORE_FILE)  # an earlier tiermem's move: tables kept
    legacy_core(store, {"human": ["Name: Bob", "Name: Bob\nwritten-after-the-move-5512"]}, agent="downgraded")

    again = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    with caplog.at_level(logging.WARNING, logger="tiermem.core.migrate"):
        core = open_core(again, "auto", tmp_path)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "lacks (1 of 2 agents, 1 of 2 blocks (or their later versions), 2 of 3 block_history)" in warning
    assert "nothing was removed" in warning and "docs/security.md" in warning, warning
    assert files_holding(tmp_path / "db", "written-after-the-move-5512")  # kept
    said: list[tuple[str, bool, str, str]] = []
    check_old_core_tables(again, core, lambda name, ok, detail, fix="": said.append((name, ok, detail, fix)))
    ((name, ok, detail, fix),) = said
    assert (name, ok) == ("old core tables", False) and "lacks 1 of 2 agents" in detail and "Old core tables" in fix
    core.close()

    copy = tmp_path.parent / f"{tmp_path.name}-copy"  # the recovery: a copy without core.sqlite3 moves them anew
    shutil.copytree(tmp_path, copy)
    for f in copy.glob(f"{CORE_FILE}*"):
        f.unlink()
    cli = ["--embedding-model", "hashing"]
    backup = tmp_path.parent / f"{tmp_path.name}-old-core.jsonl"
    assert main(["--data-dir", str(copy), "export", "--format", "jsonl", "-o", str(backup), *cli]) == 0
    assert "written-after-the-move-5512" in backup.read_text()

    for table in CORE_TABLES:  # removed by hand, no tiermem running: the next open makes them again, empty
        shutil.rmtree(tmp_path / "db" / f"{table}.lance", ignore_errors=True)
    assert main(["--data-dir", str(tmp_path), "doctor", *cli]) == 0
    assert files_holding(tmp_path / "db", "written-after-the-move-5512") == []


def test_a_server_opens_the_core_first_and_the_archive_behind_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``open_memory(lazy=True)``: on a local directory the SQLite core opens at once and the archive in a
    background thread; an old directory whose core state is still in LanceDB is migrated first, as before."""
    from tiermem.core.migrate import open_without_store
    from tiermem.domain.factory import open_memory

    fresh = load_settings(data_dir=tmp_path / "fresh", embedding_model="hashing")
    waits: list[int] = []
    lazy = open_memory(fresh, lazy=True, on_archive_wait=lambda took: None if took is not None else waits.append(1))
    assert lazy.core.name == "sqlite" and (tmp_path / "fresh" / CORE_FILE).exists()
    agent = lazy.ensure_agent("default").id
    lazy.edit(agent, "human", b.Append("Likes tea"))
    lazy.archive.insert(agent, "Ada likes green tea", [])  # waits for the archive if it is still opening
    assert lazy.archive_ready and len(waits) <= 1
    assert [h.content for h in lazy.archive.search(agent, "green tea", top_k=1).hits] == ["Ada likes green tea"]
    assert "Likes tea" in lazy.render_core(agent)

    # A directory whose core tables are in LanceDB (written before core state moved to SQLite): the lazy
    # path does not open an empty SQLite core beside it; it migrates through the store, like the eager path.
    old_dir = tmp_path / "old"
    store = Store(str(old_dir / "db"), embedding_model="hashing-384", embedding_dim=384)
    old_agent = legacy_core(store, {"human": ["Name: Ada", "Name: Ada\nPlays go"]})
    assert open_without_store(old_dir / CORE_FILE, old_dir / "db") is None
    assert not (old_dir / CORE_FILE).exists()
    moved = open_memory(load_settings(data_dir=old_dir, embedding_model="hashing"), lazy=True)
    assert moved.core.name == "sqlite" and moved.archive_ready
    assert moved.block(old_agent, "human").value.endswith("Plays go")
    assert "moved core state from LanceDB" in capfd.readouterr().err
    assert files_holding(old_dir / "db", "Plays go") == []

    # moved by a process that stopped before emptying the old tables: the lazy path's archive thread empties them
    from tiermem.core.lance import LanceCoreTables
    from tiermem.core.migrate import migrate_from_lance

    cut = tmp_path / "cut"
    store = Store(str(cut / "db"), embedding_model="hashing-384", embedding_dim=384)
    legacy_core(store, {"human": ["Name: Ada", "Name: Ada\nPlays chess"]})
    migrate_from_lance(LanceCoreTables(store), cut / CORE_FILE)
    lazy = open_memory(load_settings(data_dir=cut, embedding_model="hashing"), lazy=True)
    assert lazy.archive.counts(old_agent) is not None  # waits for the archive's thread
    assert files_holding(cut / "db", "Plays chess") == []


def test_block_edits_work_while_the_archive_cannot_open(tmp_path: Path) -> None:
    """The core state does not depend on the archive: a store that fails to open fails only what needs it."""
    from tiermem.domain.factory import open_memory

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "db").write_text("not a directory")  # LanceDB cannot open a store here
    memory = open_memory(settings, lazy=True)
    agent = memory.ensure_agent("default").id
    assert memory.edit(agent, "human", b.Append("Likes rain")).value.endswith("Likes rain")
    with pytest.raises(StoreError, match="data directory"):
        memory.archive.counts(agent)
    with pytest.raises(StoreError, match="data directory"):
        memory.render_core(agent)  # the metadata counts need the archive; the error says what is wrong
    assert memory.block(agent, "human").value.endswith("Likes rain")


def test_cached_reads_answer_now_only_when_current_and_free(tmp_path: Path) -> None:
    """``Memory.read_now`` (the server's block reads on its event loop) answers from the SQLite core's cache
    only while nobody else has committed since it was read and no thread holds the connection."""
    import threading

    from tiermem.core.sqlite import SqliteCore

    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    ours = memory_over(store, default_blocks=[spec("human", "Name: Ada")], core=SqliteCore(tmp_path / CORE_FILE))
    agent = ours.ensure_agent("default").id
    ours.block(agent, "human")  # fills the cache
    assert ours.read_now(lambda: ours.block(agent, "human").value) == ("Name: Ada",)
    ours.edit(agent, "human", b.Append("Likes tea"))  # our own commit keeps the cache current
    assert ours.read_now(lambda: ours.block(agent, "human").value) == ("Name: Ada\nLikes tea",)

    theirs = memory_over(store, core=SqliteCore(tmp_path / CORE_FILE))  # another connection, as another process
    theirs.edit(agent, "human", b.Append("Plays go"))
    assert ours.read_now(lambda: ours.block(agent, "human").value) is None  # stale: read the normal way
    assert ours.block(agent, "human").value.endswith("Plays go")
    assert ours.read_now(lambda: ours.block(agent, "human").value) == ("Name: Ada\nLikes tea\nPlays go",)

    held, release = threading.Event(), threading.Event()

    def writer_holding_the_connection() -> None:
        with ours.core._lock:  # type: ignore[attr-defined]  # what a write in progress holds
            held.set()
            release.wait(10)

    thread = threading.Thread(target=writer_holding_the_connection)
    thread.start()
    held.wait(10)
    try:
        assert ours.read_now(lambda: ours.block(agent, "human").value) is None  # never waits on the event loop
    finally:
        release.set()
        thread.join()
    with pytest.raises(NotFoundError, match="No memory block with label 'nope'"):
        ours.read_now(lambda: ours.block(agent, "nope"))  # errors of the read itself reach the caller


def test_the_lancedb_core_never_answers_reads_on_the_spot(memory: Memory) -> None:
    agent = memory.ensure_agent("default").id
    answered = memory.read_now(lambda: memory.block(agent, "human").label)
    assert answered == (("human",) if memory.core.name == "sqlite" else None)


def test_two_creations_of_one_agent_name_at_once_make_one_agent(memory: Memory) -> None:
    """Two `tiermem agents create proj` at once both pass the name check before either inserts; the core's insert
    checks again in one step (a SQLite transaction, the object store's agent-names lease): the second is refused and
    leaves no blocks behind."""
    from tiermem.base.records import Agent, new_id, now

    first = memory.create_agent("proj")
    blocks = len(memory.core.all_rows("blocks"))
    late = Agent(id=new_id("agent"), name="proj", system="", created_at=now(), updated_at=now())
    with pytest.raises(ValidationError, match="already exists"):
        memory.core.insert_agent(late)  # what the second creation reaches once past its check
    with pytest.raises(ValidationError, match="already exists"):
        memory.create_agent("proj", stable=True)  # a stable id skips the check: refused at the insert
    assert [a.id for a in memory.list_agents() if a.name == "proj"] == [first.id]
    assert len(memory.core.all_rows("blocks")) == blocks  # the refused creation's blocks were removed
