"""Choosing the core-state backend, and moving core tables an older tiermem kept in LanceDB into it.

A data directory written before core state moved to SQLite keeps agents, blocks, attachments,
history, idempotency keys and conversation state in LanceDB tables. On first open the rows are
copied into a temporary SQLite file, which is fsynced and renamed to ``core.sqlite3``: a crash
leaves either no file (the copy runs again) or the whole copy. A file lock makes concurrent first
starts copy once. On object storage the rows become objects (``open_objects``).

Once the copy is whole (checked row by row before the file is renamed into place; on object storage, the format
marker written last) and the core holds every agent, block and block version of the old tables (``not_in_core``,
checked again before emptying them: an older tiermem copied without checking, and one opened after the move wrote
there again), the LanceDB core tables are emptied and purged from the store's files (``retire_lance_core``), as a
forget purges: what the user forgets or deletes afterwards must not live on in the old tables. Where the core
lacks some of their rows they are kept, with a warning at each open and ``tiermem doctor`` failing. That runs on
every open with the store (a few row counts when there is nothing to do), so a process stopped between the copy
and the purge finishes it at the next open, and a purge cut short stays marked for the next upkeep (``tiermem
doctor`` shows it).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.config import LANCEDB_RETIRED
from ..base.errors import ConfigError, PurgeUnfinishedError, StoreError
from ..base.files import locked
from .lance import LanceCoreTables
from .protocol import CORE_TABLES, CoreStore
from .sqlite import SqliteCore, create_schema, insert_rows

if TYPE_CHECKING:
    from ..store import Store
    from .objects import ObjectCore

log = logging.getLogger(__name__)
CORE_FILE = "core.sqlite3"
LANCE_CORE_MARKER = "agents.lance"  # in the LanceDB directory: the store has (or had) core tables


def open_core(
    store: Store, backend: str, data_dir: Path | None, storage_options: Mapping[str, str] | None = None
) -> CoreStore:
    """The core store for ``backend``: SQLite in ``data_dir`` (a local directory) or objects under the store's
    uri (object storage, ``memory://``). Core state an older tiermem kept in LanceDB tables is moved on first open."""
    check_backend(backend)
    if backend == "object" or (backend == "auto" and data_dir is None):
        if data_dir is not None:
            raise ConfigError(
                "core_backend = 'object' keeps core state on object storage: set uri (for example "
                "s3://bucket/prefix), or use core_backend = 'auto' for a local data directory."
            )
        core = open_objects(store.uri, storage_options, store)
        assert core is not None  # with the store, the move runs instead
        return core
    if data_dir is None:
        raise ConfigError(
            "core_backend = 'sqlite' needs a local data directory (data_dir), not an object-storage uri; "
            "use core_backend = 'auto' with uri."
        )
    path = data_dir / CORE_FILE
    if not path.exists():
        migrate_from_lance(LanceCoreTables(store), path)
    local = SqliteCore(path)
    retire_lance_core(store, local)  # once every row of the old tables is in it
    return local


def check_backend(backend: str) -> None:
    """For callers that skip the settings, which refuse these (``base.config``)."""
    if backend == "lancedb":
        raise ConfigError(f"core_backend = {LANCEDB_RETIRED}.")
    if backend not in ("auto", "sqlite", "object"):
        raise ConfigError(f"core_backend must be 'auto', 'sqlite' or 'object', not {backend!r}.")


def open_objects(uri: str, storage_options: Mapping[str, str] | None, store: Store | None) -> ObjectCore | None:
    """The object-storage core under ``uri``. Without ``store`` (opening before LanceDB): None when the prefix
    holds LanceDB core tables of an older tiermem but no object core yet (``open_core`` moves them, with the store).

    The move writes only objects that are not there (create-only PUTs, conditional updates), then the format
    marker: replicas starting together each finish it, nothing is written twice, and none overwrites an edit
    made through a replica that finished first."""
    from .bucket import Bucket
    from .objects import ObjectCore

    core = ObjectCore(Bucket(uri, storage_options))
    if core.exists():
        if store is not None:
            retire_lance_core(store, core)
        return core
    if store is None:
        if core.bucket.list(LANCE_CORE_MARKER + "/"):
            core.close()
            return None
        core.mark_created()
        return core
    rows = LanceCoreTables(store).rows()
    for table, key in CORE_TABLES.items():
        core.merge_rows(table, key, rows[table])
    core.mark_created()
    if any(rows.values()):
        summary = ", ".join(f"{len(r)} {t}" for t, r in rows.items() if r)
        print(
            f"tiermem: moved core state from LanceDB tables into objects under {uri}/core ({summary}); {RETIRING}",
            file=sys.stderr,
            flush=True,
        )
    retire_lance_core(store, core)
    return core


RETIRING = (
    "the LanceDB core tables are now emptied and purged from the store's files, so that what is forgotten or "
    "deleted from now on is gone from disk (an older tiermem no longer sees this memory: see docs/security.md)"
)


def retire_lance_core(store: Store, core: CoreStore) -> int:
    """Empty the core tables an older tiermem kept in LanceDB once ``core`` holds every row of theirs
    (``not_in_core``): every row deleted and purged from the store's files (``Purge.forget_table``, then the purge),
    so that a forget or an agent deletion made after the move leaves no copy in them. Returns the rows removed.

    When ``core`` lacks some (a copy an older tiermem made and never checked, rows an older tiermem wrote there after
    the move: a downgrade, or ``core_backend = 'lancedb'``), nothing is removed: a warning names what is missing and
    how to recover it, and `tiermem doctor` keeps failing ``old core tables``.

    A no-op (a few row counts) once they are empty: it runs on every open with the store, so a process stopped
    after the move finishes it at the next open. A purge that does not finish now is logged; its marks stay, and the
    next upkeep (or `tiermem optimize`) finishes it, `tiermem doctor` showing it until then."""
    moved_into = core.describe()
    try:
        tables = [t for t in CORE_TABLES if t in store.conn.tables and store.rows.count(t)]
        if not tables:
            return 0
        missing = not_in_core(LanceCoreTables(store), core)
        if missing:
            log.warning(
                "the old LanceDB core tables hold rows that %s lacks (%s): they are kept, nothing was removed. An "
                "older tiermem may have written them after the move (or they were deleted or forgotten here since). "
                "`tiermem doctor` shows them (old core tables); docs/security.md says how to recover them into a "
                "backup, or to remove them",
                moved_into,
                missing,
            )
            return 0
        removed = sum(store.purge.forget_table(t) for t in tables)
        store.indexes.purge_now()
    except PurgeUnfinishedError as exc:  # emptied; the marks stay for the next upkeep
        log.warning("the old LanceDB core tables are emptied but not yet purged from the store's files: %s", exc)
        return 0
    except StoreError as exc:  # a read-only data directory, say: the core in ``moved_into`` works without this
        log.warning(
            "could not empty the old LanceDB core tables (their rows are in %s; the next open tries again, and "
            "`tiermem doctor` shows them until then): %s",
            moved_into,
            exc,
        )
        return 0
    log.info(
        "removed %d row(s) of the old LanceDB core tables (%s); their rows are in %s",
        removed,
        ", ".join(tables),
        moved_into,
    )
    return removed


def open_without_store(path: Path, store_dir: Path) -> SqliteCore | None:
    """The SQLite core at ``path`` if it can be opened without the LanceDB store in ``store_dir``: it exists,
    or the store never held core tables (a new directory: an empty file is created). None when the core
    state is still in LanceDB tables and must be migrated first (``open_core``, which needs the store).

    The empty file is created under the migration's lock, so it never replaces, nor is replaced by, a
    migration another process is running."""
    if not path.exists() and migrate_from_lance(None, path, unless_exists=store_dir / LANCE_CORE_MARKER) is None:
        return None  # the store has core tables (now, or since another process opened it): migrate properly
    return SqliteCore(path)


def migrate_from_lance(
    old: LanceCoreTables | None, path: Path, *, unless_exists: Path | None = None
) -> dict[str, int] | None:
    """Create ``path`` holding every core row of ``old`` (none if ``old`` is None), atomically; a no-op if
    ``path`` exists. With ``unless_exists``, does nothing and returns None if that path exists (checked under
    the lock)."""
    counts: dict[str, int] = {}
    try:
        with locked(path.with_name(path.name + ".lock")):
            if path.exists():
                return counts  # another process finished first
            if unless_exists is not None and unless_exists.exists():
                return None
            rows = {table: old.all_rows(table) if old is not None else [] for table in CORE_TABLES}
            tmp = path.with_name(f"{path.name}.migrating-{os.getpid()}")
            tmp.unlink(missing_ok=True)
            conn = sqlite3.connect(str(tmp), isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                create_schema(conn)
                for table, table_rows in rows.items():
                    counts[table] = insert_rows(conn, table, table_rows)
                missing = _not_copied(conn, rows)
                if missing:  # never renamed into place: the LanceDB tables stay, and are never emptied
                    tmp.unlink(missing_ok=True)
                    raise StoreError(
                        f"Moving core state from LanceDB into {path} copied only part of it ({missing}); nothing "
                        "was changed (the LanceDB tables are kept). Run `tiermem export` with the tiermem that "
                        "wrote this data directory and import the backup into a new one, and report this."
                    )
                conn.execute("COMMIT")
            finally:
                conn.close()
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(
            f"Could not create the core-state database {path}: {exc}. Check that the data directory "
            "is local and writable, or keep core state on object storage (uri = s3://bucket/prefix)."
        ) from exc
    if any(counts.values()):
        summary = ", ".join(f"{n} {t}" for t, n in counts.items() if n)
        print(
            f"tiermem: moved core state from LanceDB into {path} ({summary}); {RETIRING}", file=sys.stderr, flush=True
        )
        log.info("migrated core state into %s: %s", path, summary)
    return counts


def not_in_core(old: LanceCoreTables, core: CoreStore) -> str:
    """What of the old LanceDB core tables ``core`` lacks ('' when nothing): agents, blocks (or a block at a lower
    version than there), block history versions."""

    def rows(store: LanceCoreTables | CoreStore, table: str) -> list[dict[str, Any]]:
        return [dict(r) for r in store.all_rows(table)]

    missing: list[str] = []
    agents = {str(r["id"]) for r in rows(core, "agents")}
    wanted = {str(r["id"]) for r in rows(old, "agents")}
    if lacking := wanted - agents:
        missing.append(f"{len(lacking)} of {len(wanted)} agents")
    blocks = {str(r["id"]): int(r["version"]) for r in rows(core, "blocks")}
    theirs = {str(r["id"]): int(r["version"]) for r in rows(old, "blocks")}
    if behind := [b for b, v in theirs.items() if blocks.get(b, 0) < v]:
        missing.append(f"{len(behind)} of {len(theirs)} blocks (or their later versions)")
    history = {(str(r["block_id"]), int(r["version"])) for r in rows(core, "block_history")}
    versions = {(str(r["block_id"]), int(r["version"])) for r in rows(old, "block_history")}
    if gone := versions - history:
        missing.append(f"{len(gone)} of {len(versions)} block_history")
    return ", ".join(missing)


def _not_copied(conn: sqlite3.Connection, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """What of ``rows`` the SQLite file on ``conn`` lacks ('' when every row is there): each row's key looked up
    after the copy, so the LanceDB tables are emptied only after a copy that is whole."""
    missing: list[str] = []
    for table, table_rows in rows.items():
        if table == "block_history":
            have = {f"{b}\x1f{int(v)}" for b, v in conn.execute("SELECT block_id, version FROM history")}
            wanted = {f"{r['block_id']}\x1f{int(r['version'])}" for r in table_rows}
        else:
            key = CORE_TABLES[table]
            have = {str(k) for (k,) in conn.execute(f'SELECT "{key}" FROM {table}')}
            wanted = {str(r[key]) for r in table_rows}
        if wanted - have:
            missing.append(f"{len(wanted - have)} of {len(wanted)} {table}")
    return ", ".join(missing)
