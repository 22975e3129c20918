"""Block history in the SQLite core: ``history.Entry`` records as rows of the ``history`` table.

``history`` is keyed by (block id, version) with no rowid and no other index, so a row costs its content and
little else. A row with a ``value`` is a checkpoint (every row copied from the ``block_history`` table of core
schemas 1 and 2 is one, or keeps its delta); a row without one holds ``delta`` (JSON ``[start, tail, text]``)
and only the fields that changed. Reads take the rows from the checkpoint the oldest wanted version builds on,
and replay them. Every function here runs on a connection the caller holds (inside its transaction, for writes).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from ..base.records import Block, BlockVersion
from .delta import Delta
from .history import Chain, Entry, checkpoint, encode, replay, rewrite
from .protocol import FIELDS
from .rows import HistoryRow, version_from_row, version_row

LOGICAL = FIELDS["block_history"]  # a history row as backups and migration read and write it: the whole value
PHYSICAL = (
    "block_id",
    "version",
    "label",
    "value",
    "limit",
    "description",
    "read_only",
    "operation",
    "actor",
    "created_us",
    "delta",
    "base",
    "chain",
    "steps",
)
DDL = (
    f"CREATE TABLE IF NOT EXISTS history ({', '.join(chr(34) + c + chr(34) for c in PHYSICAL)}, "
    "PRIMARY KEY (block_id, version)) WITHOUT ROWID"
)


def _insert(conn: sqlite3.Connection, e: Entry, verb: str = "INSERT OR IGNORE") -> int:
    delta = json.dumps([e.delta.start, e.delta.tail, e.delta.text], ensure_ascii=False) if e.delta else None
    checkpoint = e.value is not None
    row = (
        e.block_id,
        e.version,
        e.label,
        e.value,
        e.limit,
        e.description,
        e.read_only,
        e.operation,
        e.actor,
        e.created_us,
        delta,
        None if checkpoint else e.chain.base,
        None if checkpoint else e.chain.bytes,
        None if checkpoint else e.chain.steps,
    )
    cols = ", ".join(f'"{c}"' for c in PHYSICAL)
    return conn.execute(f"{verb} INTO history ({cols}) VALUES ({', '.join('?' * len(PHYSICAL))})", row).rowcount


def _entry(r: sqlite3.Row | dict[str, Any]) -> Entry:
    raw = r["delta"]
    delta = None
    if raw is not None:
        start, tail, text = json.loads(raw)
        delta = Delta(int(start), int(tail), str(text))
    base = r["base"]
    chain = Chain(int(r["version"]) if base is None else int(base), int(r["chain"] or 0), int(r["steps"] or 0))
    read_only = r["read_only"]
    return Entry(
        block_id=r["block_id"],
        version=int(r["version"]),
        operation=r["operation"],
        actor=r["actor"],
        created_us=int(r["created_us"]),
        chain=chain,
        value=r["value"],
        delta=delta,
        label=r["label"],
        limit=r["limit"],
        description=r["description"],
        read_only=None if read_only is None else bool(read_only),
    )


def _chain(conn: sqlite3.Connection, block_id: str, version: int) -> Chain | None:
    r = conn.execute(
        "SELECT version, base, chain, steps FROM history WHERE block_id = ? AND version = ?", (block_id, version)
    ).fetchone()
    if r is None:
        return None
    return Chain(int(r[0]) if r[1] is None else int(r[1]), int(r[2] or 0), int(r[3] or 0))


def write_first(conn: sqlite3.Connection, version: BlockVersion) -> None:
    _insert(conn, checkpoint(version))


def write_edit(conn: sqlite3.Connection, previous: Block, version: BlockVersion) -> None:
    """The entry of ``version``, the edit of ``previous`` (its row, if stored, says where its run of deltas is)."""
    _insert(conn, encode(previous, _chain(conn, previous.id, previous.version), version), "INSERT OR REPLACE")


def _rows_from(conn: sqlite3.Connection, block_id: str, low: int, high: int) -> list[Entry]:
    """The entries from the checkpoint ``low`` builds on up to ``high``, ascending."""
    base = _chain(conn, block_id, low)
    start = base.base if base is not None else low
    rows = conn.execute(
        "SELECT * FROM history WHERE block_id = ? AND version >= ? AND version <= ? ORDER BY version",
        (block_id, start, high),
    ).fetchall()
    return [_entry(r) for r in rows]


def versions(conn: sqlite3.Connection, block_id: str, limit: int | None) -> list[BlockVersion]:
    """The newest ``limit`` versions (all if None), newest first."""
    found = [
        int(r[0])
        for r in conn.execute(
            "SELECT version FROM history WHERE block_id = ? ORDER BY version DESC LIMIT ?",
            (block_id, -1 if limit is None else int(limit)),
        )
    ]
    if not found:
        return []
    wanted = set(found)
    out = [v for v in replay(_rows_from(conn, block_id, min(found), max(found))) if v.version in wanted]
    return out[::-1]


def version(conn: sqlite3.Connection, block_id: str, number: int) -> BlockVersion | None:
    if _chain(conn, block_id, number) is None:
        return None
    found = [v for v in replay(_rows_from(conn, block_id, number, number), range(number, number + 1))]
    return found[-1] if found else None


def forget(conn: sqlite3.Connection, block_id: str, versions: set[int], current: int) -> int:
    """Remove ``versions`` (never ``current``) from the block's history: its rows are written again from the kept
    versions (``history.rewrite``), so no delta or checkpoint still holds a forgotten value. Returns how many went.
    Runs inside the caller's transaction; the freed pages keep the old bytes until ``VACUUM`` (``SqliteCore.purge``)."""
    rows = [_entry(r) for r in conn.execute("SELECT * FROM history WHERE block_id = ? ORDER BY version", (block_id,))]
    gone = {e.version for e in rows} & (versions - {current})
    if not gone:
        return 0
    kept = [v for v in replay(rows) if v.version not in gone]
    conn.execute("DELETE FROM history WHERE block_id = ?", (block_id,))
    for e in rewrite(kept):
        _insert(conn, e, "INSERT")
    return len(gone)


def logical_rows(conn: sqlite3.Connection) -> list[HistoryRow]:
    """Every version of every block as a whole row (``LOGICAL``): backups and doctor read these."""
    out: list[HistoryRow] = []
    ids = [r[0] for r in conn.execute("SELECT DISTINCT block_id FROM history ORDER BY block_id")]
    for block_id in ids:
        rows = conn.execute("SELECT * FROM history WHERE block_id = ? ORDER BY version", (block_id,)).fetchall()
        out.extend(version_row(v) for v in replay(_entry(r) for r in rows))
    return out


def merge(conn: sqlite3.Connection, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert whole history rows (a backup's) that are not stored yet; returns how many were new. A row whose
    version before it was inserted by this call is stored as a delta from it."""
    done = 0
    previous: BlockVersion | None = None
    chain: Chain | None = None
    for row in sorted(rows, key=lambda r: (str(r["block_id"]), int(r["version"]))):
        current = version_from_row(row)
        fits = previous is not None and previous.block_id == current.block_id
        entry = encode(previous if fits else None, chain if fits else None, current)
        if _insert(conn, entry):
            done += 1
            previous, chain = current, entry.chain
        else:
            previous, chain = None, None  # a stored row of that key may differ: never build a delta on it
    return done


def upgrade(conn: sqlite3.Connection) -> None:
    """Create ``history``; move the rows of an older schema's ``block_history`` into it (whole values, or the
    deltas schema 2 kept there) and drop that table. Runs inside the caller's transaction: all or nothing."""
    conn.execute(DDL)
    have = [r[1] for r in conn.execute("PRAGMA table_info(block_history)")]
    if not have:
        return
    cols = ", ".join(f'"{c}"' if c in have else "NULL" for c in PHYSICAL)
    conn.execute(f"INSERT OR IGNORE INTO history SELECT {cols} FROM block_history")
    conn.execute("DROP TABLE block_history")


def read_only_view(conn: sqlite3.Connection) -> None:
    """On a read-only file of an older schema (not upgraded): a temporary ``history`` view over its rows."""
    have = [r[1] for r in conn.execute("PRAGMA table_info(block_history)")]
    if have and not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'history'").fetchone():
        cols = ", ".join(f'"{c}"' if c in have else f'NULL AS "{c}"' for c in PHYSICAL)
        conn.execute(f"CREATE TEMP VIEW history AS SELECT {cols} FROM main.block_history")
