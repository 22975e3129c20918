"""Core state in one SQLite file (``<data_dir>/core.sqlite3``): WAL, ``synchronous=FULL``.

Every write is one ``BEGIN IMMEDIATE`` transaction; a block edit writes the new value, version
and history row together, only if the stored version is the one the edit was computed from.
Reads of agents, blocks and attachments come from an in-process copy, re-read only when
``PRAGMA data_version`` says another connection committed (this connection's own commits update
the copy in place). SQLite needs a local filesystem with working locks (not NFS).

Why this module is long: ``SqliteCore`` implements the whole ``CoreStore`` protocol (agents, blocks, attachments,
history, idempotency keys, conversations) over one connection, one cache and one transaction discipline; history's
encoding is already ``sqlite_history.py``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..base.errors import NotFoundError, StoreError
from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult, now, to_us
from . import forget_record
from . import sqlite_history as history_rows
from .protocol import FIELDS
from .rows import (
    CoreRow,
    agent_from_row,
    agent_row,
    attachment_row,
    block_from_row,
    block_row,
    label_taken,
    name_taken,
    result_from_row,
    result_row,
    rows_of,
    window_from_row,
    window_row,
)

_COLUMNS: dict[str, tuple[str, ...]] = dict(FIELDS)  # block_history: the history table (sqlite_history.py)
_KEYS = {"agents": "id", "blocks": "id"}
_BOOLS = {"read_only"}
_INDEXES = ("CREATE INDEX IF NOT EXISTS attachments_agent ON attachments (agent_id)",)
SCHEMA_VERSION = 3  # 2: block history as deltas; 3: in the ``history`` table (sqlite_history.py)


def _q(name: str) -> str:
    return f'"{name}"'


def _ddl(table: str) -> str:
    key = _KEYS.get(table, "key")
    cols = ", ".join(f"{_q(c)}{' PRIMARY KEY' if c == key else ''}" for c in _COLUMNS[table])
    return f"CREATE TABLE IF NOT EXISTS {table} ({cols})"


def _insert_sql(table: str, verb: str = "INSERT OR IGNORE") -> str:
    cols = _COLUMNS[table]
    return f"{verb} INTO {table} ({', '.join(map(_q, cols))}) VALUES ({', '.join('?' * len(cols))})"


def create_schema(conn: sqlite3.Connection) -> None:
    for table in _COLUMNS:
        if table != "block_history":
            conn.execute(_ddl(table))
    for sql in _INDEXES:
        conn.execute(sql)
    history_rows.upgrade(conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def insert_rows(conn: sqlite3.Connection, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """INSERT OR IGNORE ``rows`` (shaped like the LanceDB rows); returns how many were new."""
    if table == "block_history":
        return history_rows.merge(conn, rows)
    before = conn.total_changes
    cols = _COLUMNS[table]
    conn.executemany(_insert_sql(table), [tuple(r.get(c) for c in cols) for r in rows])
    return conn.total_changes - before


class _Cache:
    def __init__(
        self, agents: dict[str, dict[str, Any]], blocks: dict[str, dict[str, Any]], attachments: list[dict[str, Any]]
    ) -> None:
        self.agents, self.blocks, self.attachments = agents, blocks, attachments


T = TypeVar("T")


class SqliteCore:
    atomic = True
    name = "sqlite"
    watch_cheap = True

    def __init__(self, path: Path, *, busy_timeout: float = 30.0) -> None:
        """``busy_timeout``: how long opening and each write wait for another process's lock before giving up."""
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._cache: _Cache | None = None
        self._data_version = -1
        # Another process's lock is not a read-only disk: SQLite can answer "database is locked" at once (e.g. to
        # processes switching a new file to WAL together) without waiting its busy timeout, so opening is retried
        # until the timeout; only then is it an error. Read-only opening is for disks that refuse writes.
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                self._open()
                return
            except (sqlite3.Error, StoreError) as exc:
                cause = exc if isinstance(exc, sqlite3.Error) else exc.__cause__
                busy = isinstance(cause, sqlite3.OperationalError) and _busy(cause)
                if busy and time.monotonic() < deadline:
                    self._close_quietly()
                    time.sleep(0.05)
                    continue
                if isinstance(exc, StoreError):
                    raise
                if busy:
                    raise StoreError(
                        f"The core-state database {self.path} stayed locked by another process for {busy_timeout:g} s "
                        f"({exc}); nothing was changed. Try again, or find the process holding it (`fuser {self.path}`)."
                    ) from exc
                if isinstance(exc, sqlite3.OperationalError) and self._open_read_only(exc):
                    return
                raise StoreError(
                    f"Could not open the core-state database {self.path}: {exc}. Check that the data directory is on a "
                    "local, writable filesystem (SQLite needs working file locks; not NFS)."
                ) from exc

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            del self._conn

    def _open(self) -> None:
        """Connect, switch to WAL and create or upgrade the schema (raises what SQLite raises)."""
        self._conn = self._connect()
        self._conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(
                f"{self.path} cannot use SQLite's WAL mode (got {mode!r}); put the data directory "
                "on a local filesystem."
            )
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._tx() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                from ..base.errors import SchemaError

                raise SchemaError(
                    f"{self.path} was written by a newer tiermem (core schema {version}); upgrade tiermem."
                )
            if version != SCHEMA_VERSION:  # a current file is not written to at all (it may be on a full disk)
                create_schema(conn)

    # -- plumbing ------------------------------------------------------------

    def _connect(self, query: str = "") -> sqlite3.Connection:
        target = f"file:{self.path}{query}" if query else str(self.path)
        conn = sqlite3.connect(
            target, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False, uri=bool(query)
        )
        conn.row_factory = sqlite3.Row
        return conn

    def _open_read_only(self, exc: sqlite3.Error) -> bool:
        """On a full or read-only disk, keep the data readable: writes then fail with a clear error."""
        if not self.path.exists():
            return False
        wal = self.path.with_name(self.path.name + "-wal")
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            if "immutable" in query and wal.exists() and wal.stat().st_size:
                break  # committed pages may still be in the WAL: an immutable open would miss them
            try:
                conn = self._connect(query)
                conn.execute("SELECT count(*) FROM blocks").fetchone()
            except sqlite3.Error:
                continue
            self._close_quietly()
            self._conn = conn
            history_rows.read_only_view(conn)  # a file of an older schema: read its history as it is
            sys.stderr.write(f"tiermem: {self.path} opened read-only ({exc}); edits will be refused\n")
            return True
        return False

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                self._cache = None
                if isinstance(exc, sqlite3.Error):
                    raise _error(self.path, exc) from exc
                raise

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            try:
                return [dict(r) for r in self._conn.execute(sql, tuple(args))]
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection inside one read transaction (a consistent snapshot of several queries)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc
            finally:
                try:
                    self._conn.execute("COMMIT")
                except sqlite3.Error:
                    pass

    def _state(self) -> _Cache:
        """The cached small tables, re-read if another connection committed since they were read."""
        with self._lock:
            try:
                dv = self._conn.execute("PRAGMA data_version").fetchone()[0]
                if self._cache is None or dv != self._data_version:
                    self._conn.execute("BEGIN")
                    try:
                        agents = {r["id"]: dict(r) for r in self._conn.execute("SELECT * FROM agents")}
                        blocks = {r["id"]: dict(r) for r in self._conn.execute("SELECT * FROM blocks")}
                        att = [
                            dict(r)
                            for r in self._conn.execute("SELECT * FROM attachments ORDER BY created_us, block_id")
                        ]
                    finally:
                        self._conn.execute("COMMIT")
                    self._cache, self._data_version = _Cache(agents, blocks, att), dv
                return self._cache
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc

    def read_cached(self, fn: Callable[[], T]) -> tuple[T] | None:
        """``(fn(),)`` if the cached state is current and no thread holds the connection; else None.

        The check is one ``PRAGMA data_version`` (no file lock, no disk read): the server answers block
        reads with it on its event loop instead of handing them to a worker thread."""
        if not self._lock.acquire(blocking=False):
            return None  # a writer (or a re-read) is in progress: the caller waits for it in a thread
        try:
            if self._cache is None:
                return None
            try:
                current = self._conn.execute("PRAGMA data_version").fetchone()[0] == self._data_version
            except sqlite3.Error:
                return None  # the normal read path meets the same error and reports it
            return (fn(),) if current else None
        finally:
            self._lock.release()

    def change_token(self, agents_only: bool = False) -> object:
        """``PRAGMA data_version`` on the core's connection: it moves with every other connection's commit (this
        connection's own commits leave it alone: this process reports those itself); ``agents_only`` changes nothing
        (it costs no request)."""
        with self._lock:
            try:
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- agents --------------------------------------------------------------

    def list_agents(self) -> list[Agent]:
        return sorted((agent_from_row(r) for r in self._state().agents.values()), key=lambda a: a.name)

    def find_agent(self, name: str) -> Agent | None:
        rows = [r for r in self._state().agents.values() if r["name"] == name]
        return agent_from_row(min(rows, key=lambda r: r["created_us"])) if rows else None

    def get_agent(self, agent_id: str) -> Agent:
        row = self._state().agents.get(agent_id)
        if row is None:
            raise NotFoundError(f"No agent with id {agent_id!r}. List agents with `tiermem agents list`.")
        return agent_from_row(row)

    def insert_agent(self, agent: Agent) -> None:
        with self._tx() as conn:  # BEGIN IMMEDIATE: no other process writes between the check and the insert
            taken = conn.execute("SELECT 1 FROM agents WHERE name = ? AND id != ?", (agent.name, agent.id)).fetchone()
            if taken is not None:
                raise name_taken(agent.name)
            insert_rows(conn, "agents", [agent_row(agent)])
            self._cache = None

    def update_agent(self, agent: Agent) -> None:
        row = agent_row(agent)
        with self._tx() as conn:
            conn.execute(
                "UPDATE agents SET name = ?, system = ?, metadata = ?, updated_us = ? WHERE id = ?",
                (row["name"], row["system"], row["metadata"], row["updated_us"], agent.id),
            )
            self._cache = None

    def delete_agent(self, agent_id: str) -> None:
        """One transaction: the blocks no other agent is attached to (with their history), the agent's idempotency
        keys, conversation state, attachments and row."""
        with self._tx() as conn:
            own = [r[0] for r in conn.execute("SELECT block_id FROM attachments WHERE agent_id = ?", (agent_id,))]
            alone = [
                (b,)
                for b in own
                if conn.execute(
                    "SELECT count(*) FROM attachments WHERE block_id = ? AND agent_id != ?", (b, agent_id)
                ).fetchone()[0]
                == 0
            ]
            conn.executemany("DELETE FROM history WHERE block_id = ?", alone)  # sqlite_history.py's table
            conn.executemany("DELETE FROM blocks WHERE id = ?", alone)
            for table, col in (
                ("requests", "agent_id"),
                ("conversations", "agent_id"),
                ("attachments", "agent_id"),
                ("agents", "id"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {col} = ?", (agent_id,))
            self._cache = None

    # -- conversations ---------------------------------------------------------

    def get_conversation(self, agent_id: str, conversation_id: str) -> ContextWindow | None:
        rows = self._read("SELECT * FROM conversations WHERE key = ?", (f"{agent_id}:{conversation_id}",))
        return window_from_row(rows[0]) if rows else None

    def put_conversation(self, window: ContextWindow) -> None:
        row = window_row(window)
        with self._tx() as conn:
            conn.execute(
                _insert_sql("conversations", "INSERT OR REPLACE"), tuple(row.get(c) for c in _COLUMNS["conversations"])
            )

    # -- blocks ----------------------------------------------------------------

    def get_block(self, block_id: str) -> Block | None:
        row = self._state().blocks.get(block_id)
        return block_from_row(row) if row is not None else None

    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        blocks = self._state().blocks
        return [block_from_row(blocks[i]) for i in dict.fromkeys(block_ids) if i in blocks]

    def attached_block_ids(self, agent_id: str) -> list[str]:
        return [r["block_id"] for r in self._state().attachments if r["agent_id"] == agent_id]

    def agents_of_block(self, block_id: str) -> list[str]:
        return [r["agent_id"] for r in self._state().attachments if r["block_id"] == block_id]

    def find_block(self, agent_id: str, label: str) -> Block | None:
        state = self._state()
        for r in state.attachments:
            row = state.blocks.get(r["block_id"]) if r["agent_id"] == agent_id else None
            if row is not None and row["label"] == label:
                return block_from_row(row)
        return None

    def insert_block(self, block: Block, first: BlockVersion) -> None:
        with self._tx() as conn:
            if insert_rows(conn, "blocks", [block_row(block)]):
                history_rows.write_first(conn, first)
            self._cache = None

    def create_block(self, agent_id: str, block: Block, first: BlockVersion) -> None:
        """One transaction: the label checked, the block, its first history row and its attachment written."""
        with self._tx() as conn:
            _refuse_label(conn, block.label, block.id, agent_id=agent_id)
            if insert_rows(conn, "blocks", [block_row(block)]):
                history_rows.write_first(conn, first)
            insert_rows(conn, "attachments", [attachment_row(agent_id, block.id, to_us(now()))])
            self._cache = None

    def commit_edit(self, previous: Block, block: Block, version: BlockVersion) -> tuple[str, ...] | None:
        row: dict[str, Any] = dict(block_row(block))
        sets = ", ".join(f"{_q(c)} = ?" for c in _COLUMNS["blocks"] if c != "id")
        args = [row[c] for c in _COLUMNS["blocks"] if c != "id"]
        with self._tx() as conn:
            # the version by its number and commit time (a block made again under its id is another), each as a row is
            # read (``block_from_row``: ``int``): a restored backup may hold them as text or a fraction of a microsecond
            cur = conn.execute(
                f"UPDATE blocks SET {sets} WHERE id = ? AND CAST(version AS INTEGER) = ?"
                " AND CAST(updated_us AS INTEGER) = ?",
                (*args, block.id, previous.version, to_us(previous.updated_at)),
            )
            if cur.rowcount != 1:
                self._cache = None  # another writer won: re-read before retrying
                return None
            if block.label != previous.label:  # a rename: no agent of the block may have another of that label
                _refuse_label(conn, block.label, block.id)  # raising rolls the update back
            history_rows.write_edit(conn, previous, version)
            agents = tuple(
                r[0]
                for r in conn.execute(
                    "SELECT agent_id FROM attachments WHERE block_id = ? ORDER BY created_us, agent_id", (block.id,)
                )
            )
        if self._cache is not None:  # own commits leave data_version alone: keep the copy current
            self._cache.blocks[block.id] = row
        return agents

    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]:
        with self._reading() as conn:
            return history_rows.versions(conn, block_id, limit)

    def history_version(self, block_id: str, version: int) -> BlockVersion | None:
        with self._reading() as conn:
            return history_rows.version(conn, block_id, int(version))

    def forget_versions(self, block_id: str, versions: Collection[int]) -> int:
        """One transaction: the block's history rewritten without ``versions`` (the current one is kept)."""
        with self._tx() as conn:
            row = conn.execute("SELECT version FROM blocks WHERE id = ?", (block_id,)).fetchone()
            if row is None:
                return 0
            return history_rows.forget(conn, block_id, {int(v) for v in versions}, int(row[0]))

    def forget_requests(self, text: str, *, agent_id: str | None) -> int:
        """Delete the idempotency records of ``agent_id`` (None: every agent's) whose stored result holds ``text`` (as
        written, or escaped as JSON). A record names its agent twice (its ``agent_id``, and its key's first part,
        ``memory.request_key``); one with no ``agent_id`` goes by its key."""
        quoted = json.dumps(text, ensure_ascii=False)[1:-1]
        sql = "DELETE FROM requests WHERE (instr(result, ?) > 0 OR instr(result, ?) > 0)"
        args: list[str | int] = [text, quoted]
        if agent_id is not None:
            prefix = agent_id + "\x1f"
            sql += " AND (agent_id = ? OR (coalesce(agent_id, '') = '' AND substr(key, 1, ?) = ?))"
            args += [agent_id, len(prefix), prefix]
        with self._tx() as conn:
            return int(conn.execute(sql, args).rowcount)

    def record_forgotten(self, keys: Collection[str]) -> int:
        with self._tx() as conn:
            return forget_record.sqlite_record(conn, keys)

    def forgotten_keys(self) -> set[str]:
        with self._reading() as conn:
            return forget_record.sqlite_keys(conn)

    def unrecord_forgotten(self, keys: Collection[str]) -> int:
        with self._tx() as conn:
            return forget_record.sqlite_remove(conn, keys)

    def purge(self) -> dict[str, int]:
        """Leave no deleted bytes in the files: ``VACUUM`` writes the database afresh (free pages, and the free space
        inside pages where old values lay, are gone), then the WAL's frames are written back and the file truncated
        to nothing. Readers of other processes keep their snapshot until their read ends; the truncation waits for
        them up to the busy timeout and is reported as not done when one outlasts it (the next purge does it)."""
        with self._lock:
            try:
                self._conn.execute("VACUUM")
                busy = int(self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
            except sqlite3.Error as exc:
                raise _error(self.path, exc) from exc
            self._cache = None
        return {"database rewritten (VACUUM)": 1, "WAL truncated": 0 if busy else 1}

    def attach(self, agent_id: str, block_id: str, *, unique_label: bool = False) -> None:
        with self._tx() as conn:
            found = (
                conn.execute("SELECT label FROM blocks WHERE id = ?", (block_id,)).fetchone() if unique_label else None
            )
            if found is not None:
                _refuse_label(conn, str(found[0]), block_id, agent_id=agent_id)
            insert_rows(conn, "attachments", [attachment_row(agent_id, block_id, to_us(now()))])
            self._cache = None

    def detach(self, agent_id: str, block_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM attachments WHERE key = ?", (f"{agent_id}:{block_id}",))
            self._cache = None

    # -- idempotency keys --------------------------------------------------------

    def get_request(self, key: str) -> StoredResult | None:
        rows = self._read("SELECT * FROM requests WHERE key = ?", (key,))
        return result_from_row(rows[0]) if rows else None

    def claim_request(self, claim: StoredResult, replacing: StoredResult | None = None) -> StoredResult | None:
        with self._tx() as conn:  # BEGIN IMMEDIATE: no other process writes between the look and the claim
            rows = [dict(r) for r in conn.execute("SELECT * FROM requests WHERE key = ?", (claim.key,))]
            if rows and (replacing is None or rows[0]["result"] != replacing.result):
                return result_from_row(rows[0])
            conn.execute(
                _insert_sql("requests", "INSERT OR REPLACE"),
                tuple(result_row(claim).get(c) for c in _COLUMNS["requests"]),
            )
            return None

    def put_request(self, result: StoredResult, claim: StoredResult | None = None) -> None:
        row = result_row(result)
        with self._tx() as conn:
            if claim is not None:
                conn.execute(
                    "UPDATE requests SET result = ?, created_us = ? WHERE key = ? AND result = ?",
                    (row["result"], row["created_us"], claim.key, claim.result),
                )
            insert_rows(conn, "requests", [row])  # nothing if stored (the claim's record, or another's result)

    def drop_request(self, claim: StoredResult) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM requests WHERE key = ? AND result = ?", (claim.key, claim.result))

    # -- whole tables --------------------------------------------------------------

    def all_rows(self, table: str) -> list[CoreRow]:
        if _table(table) == "block_history":
            with self._reading() as conn:
                return list(history_rows.logical_rows(conn))
        rows = self._read(f"SELECT * FROM {_table(table)}")
        for r in rows:
            for c in _BOOLS & r.keys():
                r[c] = bool(r[c])
        return rows_of(table, rows)

    def merge_rows(self, table: str, key: str, rows: Sequence[CoreRow], *, fill_gaps: bool = False) -> int:
        with self._tx() as conn:
            if _table(table) == "block_history":
                done = history_rows.merge(conn, rows)
            else:
                done = insert_rows(conn, table, rows)
            self._cache = None
        return done

    def schema_fields(self, table: str) -> list[str]:
        return list(history_rows.LOGICAL if _table(table) == "block_history" else _COLUMNS[table])

    def tidy(self) -> dict[str, int]:
        """``purge`` when the file has free pages (a deletion's old bytes: an agent deleted, history forgotten);
        otherwise nothing: SQLite reuses the pages an edit frees."""
        try:
            free = int(self._read("PRAGMA freelist_count")[0]["freelist_count"])
        except (StoreError, IndexError, KeyError):
            return {}
        return self.purge() if free else {}

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version} at {self.path} (WAL, synchronous=FULL)"


def _table(table: str) -> str:
    if table not in _COLUMNS:
        raise StoreError(f"{table!r} is not a core-state table; use one of {', '.join(_COLUMNS)}.")
    return table


_LABEL_OF_AGENT = (  # another block attached to the agent has the label
    "SELECT 1 FROM attachments a JOIN blocks b ON b.id = a.block_id WHERE a.agent_id = ? AND b.label = ? AND b.id != ?"
)
_LABEL_OF_AGENTS_OF_BLOCK = (  # another block attached to one of the block's agents has the label
    "SELECT 1 FROM attachments mine JOIN attachments a ON a.agent_id = mine.agent_id JOIN blocks b ON b.id = a.block_id "
    "WHERE mine.block_id = ? AND b.label = ? AND b.id != ?"
)


def _refuse_label(conn: sqlite3.Connection, label: str, block_id: str, *, agent_id: str | None = None) -> None:
    """``label_taken`` if a block other than ``block_id`` has ``label`` and is attached to ``agent_id`` (None: to
    one of the agents ``block_id`` is attached to); read inside the caller's transaction."""
    sql, owner = (_LABEL_OF_AGENTS_OF_BLOCK, block_id) if agent_id is None else (_LABEL_OF_AGENT, agent_id)
    if conn.execute(sql, (owner, label, block_id)).fetchone() is not None:
        raise label_taken(label)


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock (not because the disk refuses writes)."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _error(path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if _busy(exc):
        hint = "another process held the database too long; try again"
    elif "full" in text:
        return StoreError(
            f"The disk holding the data directory {path.parent} is full (core-state database: {text}); "
            "nothing was written. Free some space and try again."
        )
    elif "readonly" in text or "read-only" in text:
        return StoreError(
            f"The data directory {path.parent} is read-only (core-state database: {text}); nothing was "
            "written. Make it writable, or choose another with --data-dir."
        )
    else:
        hint = "run `tiermem doctor`, or restore from a backup if the file is damaged"
    return StoreError(f"The core-state database {path} failed: {text}. Nothing was written; {hint}.")


def check_readable(path: Path) -> None:
    """A quick look, read-only and without changing anything, that ``path`` is a core-state database this tiermem
    reads (what a server checks before it answers its host). Raises ``StoreError`` or ``SchemaError``."""
    from ..base.errors import SchemaError

    def user_version(query: str) -> int:
        conn = sqlite3.connect(f"file:{path}{query}", uri=True, timeout=5.0)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])  # reads the header: fails on a damaged file
        finally:
            conn.close()

    try:
        try:
            version = user_version("?mode=ro")
        except sqlite3.Error as exc:
            if _busy(exc):
                return  # another process is writing it: readable, and the opening waits its turn
            version = user_version("?mode=ro&immutable=1")  # a read-only directory: no lock file can be made
    except sqlite3.Error as exc:
        raise StoreError(
            f"The core-state database {path} cannot be read ({exc}). Restore it from a backup, move it away to start "
            "an empty memory there, or choose another data directory with --data-dir or TIERMEM_DATA_DIR."
        ) from exc
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{path} was written by a newer tiermem (core schema {version}); upgrade tiermem, or choose another data "
            "directory with --data-dir or TIERMEM_DATA_DIR."
        )
