"""How often and how recently each memory was used: one record per agent and memory id, kept apart from the memories.

A record holds the memory's kind, the agent that used it, how many times, when last, and its *heat*: the uses
decayed with a half-life, as of the last use (each use adds 1, then halves every half-life). A memory shared by
agents (a block attached to several, a file in a folder several have) has one record per agent, so each agent sees
its own uses and deleting one agent leaves the others' records. Two records of one agent's memory merge exactly,
whatever their order (``merged``): counts add, the later time wins, each heat is decayed to that time and added. So the processes that share a data directory each add their batches with one additive upsert (``SqliteUses``:
``INSERT ... ON CONFLICT DO UPDATE``, inside ``BEGIN IMMEDIATE``), and no count is lost however their flushes
interleave.

The records live in their own SQLite file (``<data_dir>/uses.sqlite3``), not in the LanceDB rows they describe (a
search must not rewrite the rows it read) nor in the core state's file (a flush never waits on a block edit's lock,
nor one on it). Deleted records are overwritten on disk (``secure_delete``) and the write-ahead log truncated, so a
forgotten memory leaves no use record behind (forgetting a memory deletes every agent's record of it). A store on
object storage keeps its records in the process (``MemoryUses``): they are not shared there.

The file's layout is versioned with SQLite's ``user_version``: 0, a file written before records were per agent (one
record per memory id, the agent its first user), is brought to 1 when first opened (``_upgrade``: its records kept,
each under the agent it names, in one transaction; two processes opening it at once upgrade it once). A newer
layout than this code knows is refused, naming the file.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..base.errors import StoreError

log = logging.getLogger(__name__)

USES_FILE = "uses.sqlite3"
KINDS = ("passage", "message", "block", "file")  # what is counted: archival passages, recall turns, blocks, files
DAY_US = 86_400_000_000
LAYOUT = 1  # the records file's layout (``PRAGMA user_version``): 1, one record per (agent_id, id)


@dataclass(frozen=True)
class Use:
    id: str  # the memory's id (a passage, message, block or file id)
    kind: str  # one of KINDS
    agent_id: str  # the agent it was used by (a file's: the agent that opened it)
    count: int  # uses recorded
    last_us: int  # when last used (microseconds since the epoch)
    heat: float  # the uses decayed with the half-life, as of ``last_us``


def decayed(heat: float, from_us: int, to_us: int, half_life_us: float) -> float:
    """``heat`` as of ``from_us``, decayed to ``to_us`` (unchanged when ``to_us`` is not later)."""
    if to_us <= from_us:
        return heat
    return float(heat * 0.5 ** ((to_us - from_us) / half_life_us))


def merged(a: Use, b: Use, half_life_us: float) -> Use:
    """One record of the uses of two records of the same memory (commutative and associative); the records of
    several agents merged give the memory's uses by all of them, under the first's agent."""
    last = max(a.last_us, b.last_us)
    heat = decayed(a.heat, a.last_us, last, half_life_us) + decayed(b.heat, b.last_us, last, half_life_us)
    return Use(a.id, a.kind, a.agent_id or b.agent_id, a.count + b.count, last, heat)


def later(use: Use, kept: Use | None) -> bool:
    """Whether a backup's record ``use`` is later than the one ``kept`` (None: there is none): used last later, or as
    late and more often. Not merged: a backup's counts include those a store restored from an older one holds."""
    return kept is None or (use.last_us, use.count) > (kept.last_us, kept.count)


def in_group(memory_id: str, group: str) -> bool:
    """Whether ``memory_id`` is a chunk of the passage insert ``group`` (its first chunk has the group's id)."""
    return memory_id == group or memory_id.startswith(f"{group}.")


def passage_of(memory_id: str) -> str:
    """The passage insert a chunk id is part of: ``<group>.<n>`` -> ``<group>``; the first chunk's id is the group's."""
    group, dot, n = memory_id.rpartition(".")
    return group if dot and group and n.isdigit() else memory_id


class UseStore(Protocol):
    """Where the use records live; ``add`` merges a batch into them (``merged``)."""

    half_life_us: float
    shared: bool  # other processes write to these records too (a forgetting there can race this one's flush)

    def add(self, uses: Sequence[Use]) -> None: ...

    def read(self, ids: Collection[str] | None = None, *, agent_id: str | None = None) -> list[Use]:
        """The records of ``ids`` (None: all), of ``agent_id`` only when given: one per agent that used a memory."""
        ...

    def forget(self, ids: Collection[str], *, groups: Collection[str] = ()) -> int:
        """Delete every agent's records of ``ids`` and of each chunk of the passage inserts ``groups``."""
        ...

    def forget_agent(self, agent_id: str) -> int: ...

    def restore(self, uses: Sequence[Use]) -> int:
        """Write a backup's records: each where its (agent, memory) has none, or has an earlier one (``later``: a
        newer backup of the same store brings its counts; restoring twice counts nothing twice, and a record that
        went on here since is kept); returns how many were written."""
        ...

    def close(self) -> None: ...


class MemoryUses:
    """Records kept in this process only (object storage; tests)."""

    shared = False

    def __init__(self, half_life_us: float) -> None:
        self.half_life_us = half_life_us
        self._rows: dict[tuple[str, str], Use] = {}  # (agent_id, id) -> record
        self._lock = threading.Lock()

    def add(self, uses: Sequence[Use]) -> None:
        with self._lock:
            for use in uses:
                key = (use.agent_id, use.id)
                known = self._rows.get(key)
                self._rows[key] = use if known is None else merged(known, use, self.half_life_us)

    def read(self, ids: Collection[str] | None = None, *, agent_id: str | None = None) -> list[Use]:
        wanted = None if ids is None else set(ids)
        with self._lock:
            return [
                u
                for u in self._rows.values()
                if (wanted is None or u.id in wanted) and (agent_id is None or u.agent_id == agent_id)
            ]

    def forget(self, ids: Collection[str], *, groups: Collection[str] = ()) -> int:
        wanted = set(ids)
        with self._lock:
            gone = [k for k in self._rows if k[1] in wanted or any(in_group(k[1], g) for g in groups)]
            for key in gone:
                del self._rows[key]
            return len(gone)

    def forget_agent(self, agent_id: str) -> int:
        with self._lock:
            gone = [k for k in self._rows if k[0] == agent_id]
            for key in gone:
                del self._rows[key]
            return len(gone)

    def restore(self, uses: Sequence[Use]) -> int:
        with self._lock:
            new = {(u.agent_id, u.id): u for u in uses if later(u, self._rows.get((u.agent_id, u.id)))}
            self._rows.update(new)
            return len(new)

    def close(self) -> None:
        pass


_UPSERT = (
    "INSERT INTO uses (id, kind, agent_id, count, last_us, heat) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(agent_id, id) DO UPDATE SET count = count + excluded.count, "
    "heat = tiermem_decay(heat, last_us, max(last_us, excluded.last_us)) "
    "+ tiermem_decay(excluded.heat, excluded.last_us, max(last_us, excluded.last_us)), "
    "last_us = max(last_us, excluded.last_us)"
)  # every right-hand side reads the row as it was: the merge of ``merged``, in one statement
_RESTORE = (
    "INSERT INTO uses (id, kind, agent_id, count, last_us, heat) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(agent_id, id) DO UPDATE SET kind = excluded.kind, count = excluded.count, "
    "last_us = excluded.last_us, heat = excluded.heat "
    "WHERE excluded.last_us > uses.last_us OR (excluded.last_us = uses.last_us AND excluded.count > uses.count)"
)  # ``later``: a backup's record written where none is kept, or only an earlier one
_TABLE = (
    "CREATE TABLE {name} (agent_id TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL, count INTEGER NOT NULL, "
    "last_us INTEGER NOT NULL, heat REAL NOT NULL, PRIMARY KEY (agent_id, id))"
)
_LISTED = " WHERE EXISTS (SELECT 1 FROM json_each(?) AS listed WHERE listed.value = uses.id)"  # ids: one JSON array


class SqliteUses:
    """Records in ``<data_dir>/uses.sqlite3``, opened on first use (WAL; one connection, one lock)."""

    shared = True

    def __init__(self, path: Path, half_life_us: float, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.half_life_us = half_life_us
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _decay(self, heat: float, from_us: int, to_us: int) -> float:
        return decayed(heat, from_us, to_us, self.half_life_us)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                if self._conn is None:
                    conn = sqlite3.connect(
                        self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
                    )
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA secure_delete=ON")  # a forgotten record's bytes are overwritten
                    conn.create_function("tiermem_decay", 3, self._decay, deterministic=True)
                    try:
                        self._upgrade(conn)
                    except BaseException:
                        conn.close()
                        raise
                    self._conn = conn
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(
                    f"The use counters in {self.path} could not be read or written: {exc}. Check that the data "
                    "directory is writable; memory works without them."
                ) from exc

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Make the table, or bring a file of an older layout to ``LAYOUT`` (see the module's doc); one transaction,
        so a crash leaves the old layout whole or the new one, and a second process waits and finds it done."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            layout = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if layout > LAYOUT:
                raise StoreError(
                    f"The use counters in {self.path} were written by a newer tiermem (layout {layout}; this one "
                    f"knows {LAYOUT}). Upgrade tiermem, or remove the file to start the counts afresh."
                )
            if layout < LAYOUT:
                old = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'uses'").fetchone()
                conn.execute(_TABLE.format(name="uses_by_agent"))
                if old:  # layout 0: one record per id, kept under the agent it names
                    conn.execute(
                        "INSERT INTO uses_by_agent (agent_id, id, kind, count, last_us, heat) "
                        "SELECT agent_id, id, kind, count, last_us, heat FROM uses"
                    )
                    conn.execute("DROP TABLE uses")
                conn.execute("ALTER TABLE uses_by_agent RENAME TO uses")
                conn.execute("CREATE INDEX IF NOT EXISTS uses_id ON uses (id)")  # a forgetting's and a read's key
                conn.execute(f"PRAGMA user_version = {LAYOUT}")
                if old:
                    log.info("use counters in %s now kept per agent (layout %d)", self.path, LAYOUT)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def add(self, uses: Sequence[Use]) -> None:
        if not uses:
            return
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(_UPSERT, [(u.id, u.kind, u.agent_id, u.count, u.last_us, u.heat) for u in uses])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def read(self, ids: Collection[str] | None = None, *, agent_id: str | None = None) -> list[Use]:
        sql = "SELECT id, kind, agent_id, count, last_us, heat FROM uses"
        if ids is None:
            where, args = (" WHERE agent_id = ?", (agent_id,)) if agent_id is not None else ("", ())
        else:  # the ids as one JSON parameter: no bound on how many
            where, args = _LISTED, (json.dumps(list(ids)),)
        if self._conn is None and not self.path.exists():
            return []  # nothing recorded yet: a read creates no file
        with self._connection() as conn:
            rows = conn.execute(sql + where, args).fetchall()
        found = [Use(*row) for row in rows]
        return [u for u in found if agent_id is None or u.agent_id == agent_id]

    def forget(self, ids: Collection[str], *, groups: Collection[str] = ()) -> int:
        wanted = list(ids)
        if not wanted and not groups:
            return 0
        with self._connection() as conn:
            removed = int(conn.execute("DELETE FROM uses" + _LISTED, (json.dumps(wanted),)).rowcount)
            for group in groups:  # the group's first chunk has its id, the others "<group>.<n>"
                removed += conn.execute(
                    "DELETE FROM uses WHERE id = ? OR (id >= ? AND id < ?)", (group, f"{group}.", f"{group}/")
                ).rowcount
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    def forget_agent(self, agent_id: str) -> int:
        with self._connection() as conn:
            removed = conn.execute("DELETE FROM uses WHERE agent_id = ?", (agent_id,)).rowcount
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(removed)

    def restore(self, uses: Sequence[Use]) -> int:
        if not uses:
            return 0
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                before = conn.total_changes
                conn.executemany(_RESTORE, [(u.id, u.kind, u.agent_id, u.count, u.last_us, u.heat) for u in uses])
                written = conn.total_changes - before
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return int(written)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
