"""Block history as changes: the delta codec, the chunked replay, checkpoints, and SQLite files of core schema 1."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem.core import delta
from tiermem.core.protocol import FIELDS
from tiermem.core.sqlite import SqliteCore
from tiermem.domain import blocks as b
from tiermem.domain.memory import Memory
from tiermem.store import Store

from .conftest import memory_over, spec

texts = st.text(alphabet="ab\n é", max_size=40)


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_a_delta_turns_the_old_value_into_the_new_one(old: str, new: str) -> None:
    d = delta.diff(old, new)
    assert delta.apply(old, d) == new
    assert len(d.text) <= len(new)


def test_a_delta_is_the_size_of_the_change_and_replays_across_chunks() -> None:
    rnd = random.Random(7)
    value = "".join(rnd.choice("abcdefgh \n") for _ in range(3 * delta.CHUNK + 123))  # spans several chunks
    text = delta.Text(value)
    for _ in range(300):
        i = rnd.randrange(len(value) + 1)
        j = min(len(value), i + rnd.randrange(50))
        new = value[:i] + "".join(rnd.choice("xyz\n") for _ in range(rnd.randrange(30))) + value[j:]
        d = delta.diff(value, new)
        assert len(d.text) <= 30 and d.start + d.tail >= len(value) - 50  # the span that changed, not the value
        text.apply(d)
        value = new
    assert text.value() == value and len(text) == len(value)


def test_every_version_reads_back_exactly_through_checkpoints(memory: Memory) -> None:
    """Random edits of every kind (appends, replacements, insertions, rewrites, limit changes) on both backends:
    each version's value and fields read back as they were, and revert restores any of them."""
    rnd = random.Random(3)
    agent = memory.ensure_agent("default").id
    memory.update_block(agent, "human", limit=200_000)
    seen = {v.version: (v.value, v.limit) for v in memory.history(agent, "human", 10)}
    for i in range(250):
        value = memory.block(agent, "human").value
        kind = rnd.random()
        if kind < 0.5 or not value:
            edit: b.Edit = b.Append(f"fact {i} " + "z" * rnd.randrange(80))
        elif kind < 0.8:
            edit = b.Rethink(value.replace("z", "y", 1) + f"\nrewritten {i}")
        elif kind < 0.95:
            edit = b.Insert(f"inserted {i}", rnd.randrange(value.count("\n") + 1))
        else:
            memory.update_block(agent, "human", limit=200_000 + i)
            block = memory.block(agent, "human")
            seen[block.version] = (block.value, block.limit)
            continue
        block = memory.edit(agent, "human", edit)
        seen[block.version] = (block.value, block.limit)
    hist = memory.history(agent, "human", 1000)
    assert {v.version: (v.value, v.limit) for v in hist} == seen
    for version in (1, 2, 57, 130, max(seen) - 1):
        assert memory.core.history_version(memory.block(agent, "human").id, version).value == seen[version][0]  # type: ignore[union-attr]
    assert memory.revert(agent, "human", 57).value == seen[57][0]


def test_a_schema_1_database_upgrades_in_place_and_reads_its_old_history(tmp_path: Path) -> None:
    """A core.sqlite3 written before history was stored as changes (whole values, user_version 1)."""
    path = tmp_path / "core.sqlite3"
    conn = sqlite3.connect(path)
    for table, cols in FIELDS.items():
        key = "id" if table in ("agents", "blocks") else "key"
        conn.execute(
            f"CREATE TABLE {table} ({', '.join(chr(34) + c + chr(34) + (' PRIMARY KEY' if c == key else '') for c in cols)})"
        )
    conn.execute("INSERT INTO agents VALUES ('agent-1', 'default', '', '{}', 1, 1)")
    conn.execute("INSERT INTO blocks VALUES ('block-1', 'human', 'Ada\nLikes tea', 5000, 'h', 0, '{}', 2, 2)")
    conn.execute("INSERT INTO attachments VALUES ('agent-1:block-1', 'agent-1', 'block-1', 1)")
    for v, value in ((1, "Ada"), (2, "Ada\nLikes tea")):
        conn.execute(
            "INSERT INTO block_history VALUES (?, 'block-1', ?, 'human', ?, 5000, 'h', 0, 'append', 'agent', ?)",
            (f"block-1:{v}", v, value, v),
        )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()

    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    m = memory_over(store, core=SqliteCore(path))
    m.edit("agent-1", "human", b.Append("Plays go"))
    assert [v.value for v in m.history("agent-1", "human", 10)] == ["Ada\nLikes tea\nPlays go", "Ada\nLikes tea", "Ada"]
    assert m.revert("agent-1", "human", 1).value == "Ada"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'block_history'").fetchone()  # moved
    stored = conn.execute("SELECT version, value IS NULL, delta FROM history ORDER BY version").fetchall()
    conn.close()
    assert stored[:2] == [(1, 0, None), (2, 0, None)]  # the old rows, untouched
    assert stored[2][1] == 1 and "Plays go" in stored[2][2]  # a new version is stored as its change
    backup_rows = m.core.all_rows("block_history")
    assert sorted(r["value"] for r in backup_rows)[:2] == ["Ada", "Ada"]  # backups still see whole values


def test_sqlite_history_costs_about_the_change(tmp_path: Path) -> None:
    """The issue's target: history bytes per edit <= 2x the edit's size + 200 (whole values: ~5.8 KB here)."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    m = memory_over(store, core=SqliteCore(tmp_path / "core.sqlite3"), default_blocks=[spec("human", limit=1_000_000)])
    agent = m.ensure_agent("default").id
    line = "Ada prefers green tea in the morning."
    for i in range(300):
        m.edit(agent, "human", b.Append(f"{i}: {line}"))
    conn = sqlite3.connect(tmp_path / "core.sqlite3")
    text = " + ".join(
        f'ifnull(length(CAST("{c}" AS BLOB)), 0)'
        for c in ("block_id", "label", "value", "description", "operation", "actor", "delta")
    )
    stored = conn.execute(f"SELECT sum({text}) + 40 * count(*) FROM history WHERE version > 2").fetchone()[0]
    pages = (
        conn.execute("SELECT count(*) * 4096 FROM dbstat WHERE name = 'history'").fetchone()[0]
        if conn.execute("SELECT 1 FROM pragma_module_list WHERE name = 'dbstat'").fetchone()
        else None
    )
    conn.close()
    change = len(f"\n0: {line}") + 2
    assert stored / 300 <= 2 * change + 200, stored / 300
    if pages is not None:  # the table's pages on disk, not only its contents (bench objstore --sqlite-edits too)
        assert pages / 300 <= 2 * change + 200 + 60, pages / 300
