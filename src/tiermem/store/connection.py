"""``Connection``: one open LanceDB database (a data directory or an object-store prefix) and the state every part
of the ``Store`` shares: the table handles, the cached snapshots of small tables, the meta table, the write counter
that schedules upkeep, and the session whose caches are renewed.

The connection never assumes a local path: ``uri`` may be a directory or an object-store URI
(``s3://bucket/prefix``) with ``storage_options``.

Why this module is long: it is everything the parts of the store share about one open database (its tables, their
creation and migration under the creation lock, the writers' locks, the caches, the session and the upkeep
schedule); split, each piece would reach into the others' state.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict, Unpack

from ..base import fences
from ..base.errors import SchemaError, StoreBusyError, StoreError
from ..base.files import locked, locked_unless_held
from ..base.object_deadlines import for_bulk, with_deadlines
from ..base.object_errors import DOCS, FAILURES, explain, is_object_uri, store_code
from ..base.records import new_id, now
from .boundary import first_line, is_conflict, library, reads, writes
from .loading import import_lancedb
from .query import Filter, compile_filter
from .schemas import (
    EMBEDDING_LOCK_FILE,
    KEYWORD_CONTEXT,
    KEYWORD_CONTEXT_UNMARKED,
    KEYWORD_TEXT,
    KEYWORD_TEXT_VERSION,
    REEMBED_LOCK_FILE,
    REEMBED_SUFFIX,
    REEMBEDDING,
    SCHEMA_VERSION,
    SEARCHABLE,
    TURNS_CHANGED,
    migrate,
    missing_columns,
    table_names,
    table_schemas,
)
from .swaps import settle_copies, unfinished_reembed

REMOTE_WRITABLE_TTL = 2.0  # s a passed check_writable is trusted on object storage (one bucket request saved a write)
lancedb = import_lancedb()  # the package's only import of lancedb at module level: see loading.py
log = logging.getLogger(__name__)

DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE = 8 << 20, 512 << 20
DEFAULT_SESSION_RENEW_WRITES = 200
DEFAULT_OPTIMIZE_EVERY_COMMITS = 20
# Superseded table versions an upkeep keeps. On object storage every LanceDB operation lists the table's versions
# (one listing holds them all), so fewer kept means flatter latency under sustained commits (bench objmix).
LOCAL_RETENTION, OBJECT_STORE_RETENTION = timedelta(minutes=10), timedelta(seconds=10)
OBJECT_STORE_STALENESS = timedelta(milliseconds=250)  # ConnectionOptions' read_staleness
CREATION_LOCK_FILE = ".tiermem-create.lock"  # in a local store's directory: Connection.creating
UPKEEP_EXIT_SECONDS = 120.0  # how long a process's exit waits for its background upkeep (a compaction)
# Search-paced upkeep (``Connection.searched``). Each commit leaves a small fragment every search of its table reads
# until the next compaction (LanceDB 0.40, 2k rows, quiet: a leg over 180 one-row fragments 12-25 ms, over the same
# rows in one fragment 3 ms: ~0.1 ms per fragment and leg), and an optimize costs more as the table grows (after 20
# commits: 0.05 s at 2k rows, ~1 s at 100k). The upkeep runs once searches have lost to the fragments what the last one
# took (ski rental: at most twice the better schedule in hindsight), with at least MIN_TAIL_COMMITS commits to fold in.
# The upkeep is timed by the wall clock, so under load it counts its waits too; a fragment's cost is taken at the same
# scale: 0.4 ms per fragment and leg was best of 0.1 / 0.4 / 1.5 under ``python -m bench load --oauth`` (interleaved).
FRAGMENT_LEG_MS, MIN_TAIL_COMMITS = 0.4, 4
CREATE_TRIES = 40  # opens and creations of a table another process is creating (~5 s in all)
FIRST_UPKEEP_MS = 50.0  # what an upkeep is taken to cost before this process has timed one


def creator_race(table: str, exc: BaseException) -> bool:
    """Whether ``exc``, raised opening or creating ``table``, is what another process creating it at the same time
    causes: the table listed and not yet committed ("Table 'x' was not found"), or a creation that lost to the other
    creator's (a commit conflict, "already exists"). Never the store's answer that the bucket is missing or the
    credentials are refused."""
    if is_conflict(exc):
        return True
    if store_code(str(exc)) in FAILURES:
        return False
    text = str(exc).lower()
    return f"table '{table.lower()}' was not found" in text or "already exists" in text


def is_remote(uri: str) -> bool:
    """True for an object-store URI (``s3://...``, ``gs://...``, ``az://...``), False for a directory."""
    return is_object_uri(uri)


def open_error(uri: str, exc: BaseException) -> StoreError:
    """What a person (or a model) is told when the store at ``uri`` did not open: for object storage the failure
    recognised (``object_errors.explain``) or the library's first line, with the settings to check (the library's
    whole text goes to the debug log); for a directory, the directory's advice."""
    if not is_remote(uri):
        return StoreError(
            f"Could not open the data directory {uri!r}: {exc}. Check that it exists, is writable, "
            "and is not a file; or choose another with --data-dir / TIERMEM_DATA_DIR."
        )
    log.debug("opening %s failed: %s", uri, exc)
    reason = explain(uri, str(exc))
    if reason is None:
        reason = f"{first_line(exc)}. Check `uri` and [storage_options] (endpoint, region, credentials); see {DOCS}"
    return StoreError(f"Could not open the object store {uri}: {reason}. Nothing was changed.")


def connect(
    uri: str,
    storage_options: dict[str, str] | None,
    metadata_cache: int,
    index_cache: int,
    staleness: timedelta = timedelta(0),
) -> tuple[Any, Any]:
    """A connection whose caches are bounded, and its session. LanceDB's own defaults are GiBs, and its metadata
    cache keeps a manifest per table version: with a version per write, a long-running server grew ~100-200 KB per
    write without levelling off (bench/load.py). Every read checks out the newest version unless it was checked
    out less than ``staleness`` ago (LanceDB's read consistency interval), so other processes' writes are seen.
    On object storage the requests' deadlines the options leave out are tiermem's (``object_deadlines``)."""
    session = lancedb.Session(index_cache_size_bytes=index_cache, metadata_cache_size_bytes=metadata_cache)
    options = with_deadlines(uri, storage_options)
    db = lancedb.connect(uri, read_consistency_interval=staleness, storage_options=options, session=session)
    return db, session


class ConnectionOptions(TypedDict, total=False):
    """How a ``Connection`` (and the ``Store`` over it) is tuned; every key may be left out (the defaults below).

    ``storage_options``: credentials and endpoint of an object store (None: a local directory).
    ``optimize_every``: written rows between two background upkeeps (200; 0: never).
    ``metadata_cache_bytes`` / ``index_cache_bytes``: bounds of LanceDB's caches (8 MiB / 512 MiB).
    ``session_renew_writes``: writes between two renewals of the LanceDB session (200; 0: never).
    ``optimize_every_commits``: on object storage, also commits of this process between two background upkeeps
    (20; 0: by rows only). Each commit adds a table version, and every LanceDB operation there lists the table's
    versions, so the upkeep that removes them keeps pace with commits, however few rows each writes.
    ``read_staleness``: on object storage, how long a check for a table's newest version holds (250 ms). LanceDB
    checks at every step of an operation, each check a listing of the table's versions (a search: 3-10 of them);
    within this window they are one. A read then sees every commit of another process acknowledged this long before
    it started (its own process's at once); on a local directory every read checks (the check is cheap there).
    ``version_retention``: how long an optimize keeps the versions it supersedes (None: 10 minutes for a local
    directory, 10 seconds on object storage, where every operation lists the kept versions).
    ``creation_lock``: held while missing tables are created and a new meta table is filled, so that of several
    processes opening a new store at once one creates (a table created twice is committed twice, and LanceDB lets
    the later creation replace the earlier one and every row written to it meanwhile). None: a lock file in the
    directory for a local store; nothing for object storage (the composition passes a lease object there).
    ``leases``: name -> a lock held by one replica at a time on object storage (a lease object; ``exclusive``); None:
    a lock file in the directory for a local store, nothing for object storage.
    ``reembedding``: the connection of ``tiermem reembed``, which opens a store another reembed left unfinished (any
    other connection refuses it: ``ReembedUnfinishedError``)."""

    storage_options: dict[str, str] | None
    optimize_every: int
    metadata_cache_bytes: int
    index_cache_bytes: int
    session_renew_writes: int
    optimize_every_commits: int
    read_staleness: timedelta
    version_retention: timedelta | None
    creation_lock: Callable[[], AbstractContextManager[object]] | None
    leases: Callable[[str], AbstractContextManager[object]] | None
    reembedding: bool


class Connection:
    """All tables of one data directory (or object-store prefix), opened, created where missing, and checked."""

    def __init__(
        self, uri: str, *, embedding_model: str, embedding_dim: int, **options: Unpack[ConnectionOptions]
    ) -> None:
        self.uri = uri
        retention = options.get("version_retention")
        self.remote = is_remote(uri)
        self.version_retention = (
            retention if retention is not None else (OBJECT_STORE_RETENTION if self.remote else LOCAL_RETENTION)
        )
        self.optimize_every_commits = (
            options.get("optimize_every_commits", DEFAULT_OPTIMIZE_EVERY_COMMITS) if self.remote else 0
        )
        self.read_staleness = options.get("read_staleness", OBJECT_STORE_STALENESS) if self.remote else timedelta(0)
        self.session_renew_writes = options.get("session_renew_writes", DEFAULT_SESSION_RENEW_WRITES)
        self.since_renewal = 0  # writes since the session was last renewed
        self.renewals = 0
        storage_options = options.get("storage_options")
        metadata_cache_bytes = options.get("metadata_cache_bytes", DEFAULT_METADATA_CACHE)
        index_cache_bytes = options.get("index_cache_bytes", DEFAULT_INDEX_CACHE)
        self._settings = (storage_options, metadata_cache_bytes, index_cache_bytes, self.read_staleness)
        self.embedding_model = embedding_model
        self.embedding_dim = embedding_dim
        self.optimize_every = options.get("optimize_every", 200)
        self.writes = 0  # rows written since the last upkeep was scheduled
        self.commits = 0  # commits made since the last upkeep was scheduled
        self.lock = threading.Lock()
        self.snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self.writer = new_id("writer")  # names this process's marks of rows stored without vectors
        self.upkeep: Callable[[], object] | None = None  # run in a thread every ``optimize_every`` writes
        # Held around a background upkeep when set (replicas on one object store: one at a time, ``core.lease``);
        # a background upkeep that does not get it is skipped.
        self.upkeep_lease: Callable[[], AbstractContextManager[bool]] | None = None
        self._creation_lock = options.get("creation_lock")
        self._leases = options.get("leases")
        self._reembedding = options.get("reembedding", False)
        self._writable_at = -REMOTE_WRITABLE_TTL  # when check_writable last passed (object storage trusts it a while)
        self._writable_stamp: tuple[int, int, int] | None = None  # the reembed lock's stamp when it last passed (local)
        # ``vectors_unusable``'s last answer: (the reembed lock's stamp, when, the reason or None), one tuple so that
        # concurrent searches read it whole
        self._searchable: tuple[tuple[int, int, int] | None, float, str | None] = (None, -REMOTE_WRITABLE_TTL, None)
        self._upkeeps: list[threading.Thread] = []  # upkeep threads started (those alive are waited for at exit)
        self.tail: dict[str, int] = {}  # table -> this process's commits to it since the last upkeep was started
        self.lost_ms = 0.0  # search time taken to be lost to those commits' fragments since then (``searched``)
        self.upkeep_ms = FIRST_UPKEEP_MS  # how long this process's last upkeep that ran took (wall time)
        self.paced = 0  # upkeeps started by ``searched``
        self.on_renewal: list[Callable[[], None]] = []  # what parts forget of the old session's table handles
        try:
            self.db, self.session = connect(uri, *self._settings)
            self.tables: dict[str, Any] = self._open_tables()
        except (SchemaError, StoreError):
            raise
        except (OSError, RuntimeError, ValueError) as exc:
            raise open_error(uri, exc) from exc
        self._check_meta()

    # -- the meta table ------------------------------------------------------

    @reads("settings")
    def meta(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self.tables["meta"].to_arrow().to_pylist()}

    @writes("settings")
    def set_meta(self, key: str, value: str) -> None:
        t = self.tables["meta"]
        t.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(
            [{"key": key, "value": value}]
        )

    def unsettle_keyword_contexts(self) -> None:
        """Unmark the store (``KEYWORD_CONTEXT``: ``keyword_context.recontext`` looks at every row again), and change
        ``KEYWORD_CONTEXT_UNMARKED`` so that a ``recontext`` under way, which read the rows before, does not mark it."""
        self.set_meta(KEYWORD_CONTEXT_UNMARKED, new_id("unmarked"))
        self.set_meta(KEYWORD_CONTEXT, "")

    def change_turns(self) -> None:
        """Change ``TURNS_CHANGED`` (a message is deleted or edited in place, under ``TEXTS_LOCK``)."""
        self.set_meta(TURNS_CHANGED, new_id("turns"))

    def turns_changed(self) -> str:
        """``TURNS_CHANGED`` as the meta table's newest version holds it (a check made under ``TEXTS_LOCK``)."""
        with library(self.uri, "the meta table"):
            self.tables["meta"].checkout_latest()
        return self.meta().get(TURNS_CHANGED, "")

    # -- reads and writes every part makes -------------------------------------

    def rows(
        self,
        table: str,
        where: Filter | None = None,
        limit: int | None = None,
        columns: Sequence[str] | None = None,
        *,
        latest: bool = False,
    ) -> list[dict[str, Any]]:
        """The rows of ``where`` (every column, or ``columns``; limit None: every matching row). ``latest``: at the
        table's newest version, not one read up to ``read_staleness`` ago (a check made under ``exclusive``)."""
        text = compile_filter(where)
        with library(self.uri, f"the {table} table"):
            if latest:
                self.tables[table].checkout_latest()
            q = self.tables[table].search()
            if text:
                q = q.where(text)
            if columns is not None:
                q = q.select(list(columns))
            rows: list[dict[str, Any]] = q.limit(limit).to_list()
        for r in rows:
            r.pop("_distance", None)  # never a column: only what a vector query scores
        return rows

    def row_batches(
        self, table: str, where: Filter | None = None, columns: Sequence[str] | None = None, *, rows: int = 128
    ) -> Iterator[list[dict[str, Any]]]:
        """The rows of ``where`` (every column, or ``columns``), up to ``rows`` a batch of one scan at a time: a reader
        holds a batch or two as Python objects, whatever the table's size."""
        text = compile_filter(where)
        with library(self.uri, f"the {table} table"):
            q = self.tables[table].search()
            if text:
                q = q.where(text)
            if columns is not None:
                q = q.select(list(columns))
            for batch in q.limit(None).to_batches(rows):
                yield batch.to_pylist()

    def snapshot(self, table: str) -> list[dict[str, Any]]:
        """Every row of a small table, re-read only when its version moved (any process's write)."""
        t = self.tables[table]
        with library(self.uri, f"the {table} table"):
            version = int(t.version)  # checks out the latest version: sees other processes' writes
            cached = self.snapshot_at(table, version)
            if cached is not None:
                return cached
            rows: list[dict[str, Any]] = t.to_arrow().to_pylist()
        return self.keep_snapshot(table, version, rows)

    def snapshot_at(self, table: str, version: int) -> list[dict[str, Any]] | None:
        """The cached rows of ``table`` if they are those of ``version``, else None (read them, then ``keep_snapshot``)."""
        cached = self.snapshots.get(table)
        return cached[1] if cached is not None and cached[0] == version else None

    def keep_snapshot(self, table: str, version: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Cache ``rows`` as ``table`` at ``version`` (the snapshot ``snapshot`` and a search's hand-off share); returns them."""
        self.snapshots[table] = (version, rows)
        return rows

    def wrote(self, n: int = 1, table: str | None = None) -> None:
        """Count one commit of ``n`` written rows (to ``table``, when the caller names it); every ``optimize_every``
        rows, or on object storage every ``optimize_every_commits`` commits, ``upkeep`` runs in a background thread
        (never with ``optimize_every`` 0). ``searched`` may start it sooner."""
        with self.lock:
            self.writes += n
            self.commits += 1
            self.since_renewal += n
            if table is not None:
                self.tail[table] = self.tail.get(table, 0) + 1
            due = self.optimize_every > 0 and (
                self.writes >= self.optimize_every or 0 < self.optimize_every_commits <= self.commits
            )
            if due:
                self._reset_upkeep_counts()
        if due:
            self._start_upkeep()

    def searched(self, table: str, legs: int = 2) -> None:
        """Count a search of ``table`` (``legs`` legs) against the fragments this process's commits left since the last
        upkeep, and start the upkeep once the time lost to them reaches what the last upkeep took (see
        FRAGMENT_LEG_MS). Not while an upkeep of this process is under way."""
        with self.lock:
            tail = self.tail.get(table, 0)
            if self.optimize_every <= 0 or tail < MIN_TAIL_COMMITS or self.upkeep is None:
                return
            self.lost_ms += tail * legs * FRAGMENT_LEG_MS
            if self.lost_ms < self.upkeep_ms or any(t.is_alive() for t in self._upkeeps):
                return
            self._reset_upkeep_counts()
            self.paced += 1
        self._start_upkeep()

    def _reset_upkeep_counts(self) -> None:  # with ``lock`` held: an upkeep is starting, what it folds in is not owed
        self.writes = self.commits = 0
        self.tail.clear()
        self.lost_ms = 0.0

    def _start_upkeep(self) -> None:
        if self.upkeep is None:
            return
        thread = threading.Thread(target=self._run_upkeep, args=(self.upkeep,), name="tiermem-optimize", daemon=True)
        with self.lock:
            if not self._upkeeps:
                atexit.register(self.finish_upkeep)
            self._upkeeps = [t for t in self._upkeeps if t.is_alive()] + [thread]
        thread.start()

    def _run_upkeep(self, upkeep: Callable[[], object]) -> None:
        """Run ``upkeep`` and time it; a run that was skipped (its report says so) leaves the last timing. In its own
        thread nothing can take an error: a store error (a purge that other writers kept from finishing) is one line
        in the log, the next upkeep tries again; anything else is logged with its traceback."""
        started = time.perf_counter()
        try:
            report = upkeep()
        except StoreError as exc:
            log.warning("background upkeep did not finish; the next one tries again: %s", exc)
            return
        except Exception:
            log.exception("background upkeep failed; the next one tries again")
            return
        if isinstance(report, dict) and "skipped" in report:
            return
        with self.lock:
            self.upkeep_ms = (time.perf_counter() - started) * 1000

    def upkeep_deferred(self) -> None:
        """A background upkeep was skipped (another replica held the lease): the next is due after half the usual
        commits, so the versions of a store whose lease holder stopped optimizing do not wait a whole period."""
        with self.lock:
            self.commits = max(self.commits, self.optimize_every_commits // 2)

    def finish_upkeep(self, timeout: float = UPKEEP_EXIT_SECONDS) -> None:
        """Wait (up to ``timeout`` s) for the background upkeep under way; registered to run at exit.

        A daemon thread still inside LanceDB while the interpreter finalises aborts the process ("PyGILState_Release:
        ... finalizing"): a short command (``tiermem import``) that wrote enough to start an upkeep lets it finish."""
        with self.lock:
            running = list(self._upkeeps)
        deadline = time.monotonic() + timeout
        for t in running:
            t.join(max(0.0, deadline - time.monotonic()))

    @reads("a table version")
    def version(self, table: str) -> int:
        return int(self.tables[table].version)

    @reads("table versions")
    def table_versions(self) -> dict[str, int]:
        return {name: int(t.version) for name, t in self.tables.items()}

    @reads("a table's schema")
    def schema_fields(self, table: str) -> list[str]:
        return [f.name for f in self.tables[table].schema]

    def table_names(self) -> list[str]:
        return table_names(self.db)

    # -- renewing the session ----------------------------------------------------

    def renew_session(self) -> None:
        """Reopen every table on a new connection with a new, empty LanceDB session; the old one is dropped.

        LanceDB's index cache keeps the entries of superseded table and index versions (a version per write),
        bounded only by ``index_cache_bytes``, and its Python API cannot evict them: under HTTP load the session
        grew ~1.4 MB a minute. A new session starts empty; the old one is freed once the last call still using its
        tables returns. Calls under way keep the tables they hold, which read the newest version as every table
        here does (``read_consistency_interval=0``), so every call sees every committed write whichever
        connection it runs on.
        """
        with library(self.uri, "the tables (reopening them on a new connection)"):
            db, session = connect(self.uri, *self._settings)
            tables = {name: db.open_table(name) for name in self.tables}
        with self.lock:
            self.db, self.session, self.tables = db, session, tables
            for forget in self.on_renewal:
                forget()
            self.since_renewal = 0
            self.renewals += 1
        log.debug("renewed the LanceDB session (%d tables reopened)", len(tables))

    def upkeep_tables(self, names: Sequence[str]) -> dict[str, Any]:
        """The tables ``names`` an upkeep compacts, on object storage opened anew on a connection of their own with a bulk
        command's deadlines (``object_deadlines.for_bulk``: a compaction uploads whole data files, which the
        request path's 5 s ``read_timeout`` cuts short on a slow link); the request path's tables keep theirs. Its
        session (caches as bounded as the request path's) is freed with the tables once the upkeep drops them.
        Elsewhere (no requests): the connection's own tables."""
        if not self.remote:
            return {name: self.tables[name] for name in names}
        options, metadata_cache, index_cache, staleness = self._settings
        with library(self.uri, "the tables (opening them for the upkeep)"):
            db, _ = connect(self.uri, for_bulk(self.uri, options), metadata_cache, index_cache, staleness)
            return {name: db.open_table(name) for name in names}

    def cache_bytes(self) -> int:
        """What LanceDB's caches of the current session hold (its metadata and index caches), in bytes."""
        return int(self.session.size_bytes)

    def renew_session_if_due(self) -> bool:
        """``renew_session`` once ``session_renew_writes`` writes were made since the last (0: never); True if it did.

        Called at the end of a background optimize: the indexes it updated are reloaded by the next search anyway.
        """
        if self.session_renew_writes <= 0 or self.since_renewal < self.session_renew_writes:
            return False
        self.renew_session()
        return True

    # -- opening ------------------------------------------------------------

    def _open_tables(self) -> dict[str, Any]:
        schemas = table_schemas(self.embedding_dim)
        existing = set(self.table_names())
        if any(f"{name}{REEMBED_SUFFIX}" in existing for name in SEARCHABLE):  # a reembed under way or interrupted
            with self.creating():  # of several processes opening the store at once, one settles them
                settle_copies(self.db, self.uri, reembedding=self._reembedding)
            existing = set(self.table_names())
        if set(schemas) <= existing:
            try:
                return {name: self.db.open_table(name) for name in schemas}
            except (OSError, RuntimeError, ValueError) as exc:  # listed while another process is creating it
                log.debug("a table of %s did not open (%s); waiting for its creation", self.uri, exc)
        with self.creating():  # one process creates; the others find every table whole once it is done
            existing = set(self.table_names())
            return {name: self._open_or_create(name, schema, name in existing) for name, schema in schemas.items()}

    def creating(self) -> AbstractContextManager[object]:
        """The lock held while tables are created or a new meta table is filled (``ConnectionOptions``)."""
        if self._creation_lock is not None:
            return self._creation_lock()
        if self.remote:
            return nullcontext()
        return self._locked_directory()

    def exclusive(self, name: str) -> AbstractContextManager[object]:
        """The lock ``name``, held by one writer at a time, for writes of several commits that two processes must not
        interleave (a file's chunks replaced: a deletion then an append, where two at once leave both appends). Local
        store: a lock file in its directory (every process and thread of this machine; not re-entrant). Object
        storage: the composition's lease (``ConnectionOptions.leases``), else nothing."""
        if self._leases is not None:
            return self._leases(name)
        if self.remote:
            return nullcontext()
        return self._locked_directory(f".tiermem-{name}.lock")

    @contextmanager
    def writing(self, table: str) -> Iterator[None]:
        """Held around each commit to a searchable table: refused (``check_writable``) while a reembed rewrites the
        tables, or once one has switched the store to another model since this process opened it. On a local store
        the check and the commit hold the reembed lock shared, so a reembed's start (``reembed_lock``) waits for
        every commit under way, and none comes after it unchecked; object storage has no shared lock: a reembed
        there merges what was committed while it read (``Reembed.replace_vectors``). Any table's commit first checks
        the leases the work holds (``base.fences``: one that lapsed raises ``LeaseLapsedError``, nothing written)."""
        fences.check(f"rows of {table} to {self.uri}")
        if table not in SEARCHABLE:
            yield
            return
        with self.reembed_lock(shared=True):
            stamp = self._reembed_stamp()
            # the lock file moves whenever a reembed marks the store or switches its model
            if stamp is None or stamp != self._writable_stamp:
                self.check_writable(table)
                self._writable_stamp = stamp
            yield

    def _local(self, name: str) -> Path:
        """The file ``name`` in a local store's directory."""
        return Path(self.uri.removeprefix("file://")) / name

    def embedding(self) -> AbstractContextManager[object]:
        """Held (shared: by any number of processes) while a process embeds rows stored without vectors, or stores
        rows it embeds next (a ``folders sync``): ``embedding_elsewhere`` tells such work from rows left unembedded.
        Local stores only."""
        if self.remote:
            return nullcontext()
        return self._locked_directory(EMBEDDING_LOCK_FILE, shared=True)

    def embedding_elsewhere(self) -> bool:
        """Whether a live process holds ``embedding`` on this local store (False on object storage: not known)."""
        if self.remote:
            return False
        path = self._local(EMBEDDING_LOCK_FILE)
        if not path.exists():
            return False
        try:
            with locked_unless_held(path, None) as holder:  # a probe, taken and let go at once when nobody holds it
                return holder is not None
        except OSError as exc:
            log.debug("could not probe %s: %s", path, exc)
            return False

    def _reembed_stamp(self) -> tuple[int, int, int] | None:
        """The reembed lock file's identity and change time on a local store (None elsewhere, or unreadable): a
        reembed touches it (``touch_reembed_lock``) after every change of the mark or the model, so a writer that saw
        the same stamp when its check last passed need not read the meta table again (a read through LanceDB's
        runtime at every write cost ~9 ms p50 of a logged turn under 8 HTTP clients)."""
        if self.remote:
            return None
        try:
            st = os.stat(self._local(REEMBED_LOCK_FILE))
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def touch_reembed_lock(self) -> None:
        """Move the reembed lock file's stamp (a byte appended): writers read the meta table again at their next
        commit. A reembed calls it after it marks the store and after it records the new model."""
        if self.remote:
            return
        with self._local(REEMBED_LOCK_FILE).open("a") as f:
            f.write(".")

    def reembed_lock(self, *, shared: bool) -> AbstractContextManager[object]:
        """The reembed lock: shared by writers, exclusive while a reembed marks the store (local stores only)."""
        if self.remote:
            return nullcontext()
        return self._locked_directory(REEMBED_LOCK_FILE, shared=shared)

    def check_writable(self, table: str) -> None:
        """Refuse a write to ``table`` while a reembed is under way (or was interrupted), or when the store records
        another model than this process embeds with (a reembed finished since it opened the store). On object storage
        reading the meta table's version is a request to the bucket: a check that passed is trusted for
        ``REMOTE_WRITABLE_TTL`` s (a reembed there waits that long after marking the store, and merges what was
        committed while it read)."""
        if self.remote and time.monotonic() - self._writable_at < REMOTE_WRITABLE_TTL:
            return
        reembedding, recorded = self._model_state()
        if reembedding:
            raise StoreBusyError(
                f"`tiermem reembed` is rebuilding every vector of {self.uri} with {reembedding}, or was "
                f"interrupted doing so; writes to {table} wait for it. Nothing was written: try again once it has "
                "finished (if no reembed is running, run `tiermem reembed` again to finish it)."
            )
        if recorded is not None:
            raise SchemaError(
                f"The vectors of {self.uri} were rebuilt with {recorded} by `tiermem reembed` after this process "
                f"opened it with {self.embedding_model} (dim {self.embedding_dim}); its vectors would not match. "
                f"Nothing was written to {table}: restart this process (a server: restart it) so it uses the "
                "recorded model."
            )
        self._writable_at = time.monotonic()

    def vectors_unusable(self) -> str | None:
        """Why a query vector of this process's model cannot be compared with the store's vectors now (a sentence
        a model reads), or None when it can: a reembed is rewriting them (or was interrupted), or one switched the
        store to another model since this process opened it (its writes are refused then: ``check_writable``).

        A search asks before its legs run, so this is as cheap as ``writing``'s check: on a local store the meta table
        is read only when the reembed lock file's stamp moved since the last answer (a reembed touches it after each
        change of its mark or the model; the stamp is taken before the meta table is read, so a change made meanwhile
        moves it again); on object storage an answer is trusted for ``REMOTE_WRITABLE_TTL`` s. When it finds that a
        reembed has finished since it last looked, the tables are reopened on a new session first
        (``renew_session``): the reembed replaced them, and what this process holds and caches of the old ones (their
        handles, index caches, version numbers, which start again) would mislead its keyword leg."""
        stamp = self._reembed_stamp()
        known_stamp, known_at, known = self._searchable
        if self.remote:
            if time.monotonic() - known_at < REMOTE_WRITABLE_TTL:
                return known
        elif stamp is not None and stamp == known_stamp:
            return known
        reembedding, recorded = self._model_state()
        reason = None
        if reembedding:
            reason = (
                f"`tiermem reembed` is rebuilding every vector of the store with {reembedding} (or was interrupted "
                "doing so), so its tables may hold vectors of two models and this search could not match by "
                "meaning. Hybrid search returns once it has finished (if none is running, run `tiermem reembed` "
                "again to finish it)."
            )
        elif recorded is not None:
            reason = (
                f"`tiermem reembed` rebuilt the store's vectors with {recorded} after this server opened it with "
                f"{self.embedding_model} (dim {self.embedding_dim}), so this search could not match by meaning. "
                "Restart the server (or this process) to search with the new model's vectors; until then its "
                "writes to recall, archival memory and folders are refused too."
            )
        moved = known_stamp is not None and stamp != known_stamp  # a reembed began or finished since the last look
        if not reembedding and (moved or reason != known):
            self.renew_session()
        if reason is not None and reason != known:
            log.warning("searches are keyword-only: %s", reason)
        elif reason is None and known is not None:
            log.info("searches of %s match by meaning again", self.uri)
        self._searchable = (stamp, time.monotonic(), reason)
        return reason

    def _model_state(self) -> tuple[str, str | None]:
        """What the meta table says of the store's vectors against this process's model: the model a reembed is
        rebuilding them with ("" when none is), and the model recorded there when it is not this process's
        ("name (dim n)"; None when it is)."""
        meta = {r["key"]: r["value"] for r in self.snapshot("meta")}
        model, dim = meta.get("embedding_model"), meta.get("embedding_dim")
        other = None if (model, dim) == (self.embedding_model, str(self.embedding_dim)) else f"{model} (dim {dim})"
        return meta.get(REEMBEDDING) or "", other

    @contextmanager
    def _locked_directory(self, name: str = CREATION_LOCK_FILE, *, shared: bool = False) -> Iterator[None]:
        path = self._local(name)
        with ExitStack() as held:
            try:
                held.enter_context(locked(path, shared=shared))
            except OSError as exc:
                raise StoreError(
                    f"Could not open the lock file {path}: {exc}. Check that the data directory is "
                    "writable, or choose another with --data-dir / TIERMEM_DATA_DIR."
                ) from exc
            yield

    def _open_or_create(self, name: str, schema: Any, listed: bool) -> Any:
        """Open a table, creating it if missing (called under ``creating``). A table can be listed and not open
        ("not found") when its creator died before its first commit, or when a process without the lock (an older
        tiermem) is creating it, and a creation can lose to that creator's commit: on those answers open and create
        are tried in turn for up to ~5 s. Any other error (a damaged table, the store refusing or not answering) is
        raised at once."""
        for attempt in range(CREATE_TRIES):
            try:
                if listed:
                    return self.db.open_table(name)
                fences.check(f"the new table {name} to {self.uri}")  # the creation lease (``creating``) still held
                return self.db.create_table(name, schema=schema, exist_ok=True)
            except (OSError, RuntimeError, ValueError) as exc:
                if attempt == CREATE_TRIES - 1 or not creator_race(name, exc):
                    raise
                log.debug("table %s is being created by another process (%s); retrying", name, exc)
                time.sleep(min(0.25, 0.01 * (attempt + 1)))
                listed = name in set(self.table_names()) and attempt % 2 == 0  # alternate open and create
        raise AssertionError("unreachable")

    def _migrate(self) -> None:
        """Bring an older store up to ``SCHEMA_VERSION`` (``schemas.migrate``), or give a store recorded at it the
        columns it lacks, under the creation lock (of several processes opening it at once one migrates, the others
        find it done) and the reembed lock held exclusively (a local store: commits under way finish first, and a
        ``tiermem reembed`` cannot mark the store meanwhile). A store a reembed marked is refused before anything is
        written: that reembed is rewriting the tables with its own schema, so a column added now would be lost in
        its copies (``_check_meta`` refuses it before, and this again under the locks). The new version is recorded
        last, so a migration cut short is finished by the next open, and an older tiermem refuses the store only once
        it is migrated (``_check_meta``: "written by a newer tiermem")."""
        with self.creating(), self.reembed_lock(shared=False):
            meta = self.meta()  # another process may have migrated, or a reembed marked the store, meanwhile
            if meta.get(REEMBEDDING) and not self._reembedding:
                raise unfinished_reembed(self.uri, meta)
            version = int(meta.get("schema_version", "0"))
            if version > SCHEMA_VERSION or (version == SCHEMA_VERSION and not missing_columns(self.tables)):
                return
            unfinished = "The migration is unfinished: the next open of the store (any tiermem command) finishes it."
            with library(
                self.uri,
                f"the tables (migrating them from schema version {version})",
                writing=True,
                unfinished=unfinished,
            ):
                if version == SCHEMA_VERSION:
                    log.warning(
                        "the store %s lacks %s (a tiermem of an older schema replaced its tables): adding them again",
                        self.uri,
                        ", ".join(missing_columns(self.tables)),
                    )
                migrate(self.uri, version, self.tables)
            if version == SCHEMA_VERSION and meta.get(KEYWORD_CONTEXT):  # rows an older tiermem wrote: unknown
                self.unsettle_keyword_contexts()  # ``keyword_context.recontext`` looks at every row again
            if version < SCHEMA_VERSION:
                self.set_meta("schema_version", str(SCHEMA_VERSION))
                log.info("migrated the store %s from schema version %d to %d", self.uri, version, SCHEMA_VERSION)

    def _check_meta(self) -> None:
        meta = self.meta()
        wanted = {
            "schema_version": str(SCHEMA_VERSION),
            "embedding_model": self.embedding_model,
            "embedding_dim": str(self.embedding_dim),
        }
        if not meta:
            with self.creating():
                meta = self.meta()  # another process may have filled it meanwhile
                if not meta:
                    rows = [{"key": k, "value": v} for k, v in wanted.items()]
                    rows.append({"key": "created_at", "value": now().isoformat()})
                    rows.append({"key": KEYWORD_TEXT, "value": KEYWORD_TEXT_VERSION})  # no row of an older form
                    rows.append({"key": KEYWORD_CONTEXT, "value": "1"})  # nor a keyword text holding a tool's result
                    fences.check(f"the new store's settings to {self.uri}")  # the creation lease still held
                    self.tables["meta"].merge_insert("key").when_not_matched_insert_all().execute(rows)
                    meta = self.meta()
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"The data directory {self.uri!r} was written by a newer tiermem (schema version {version}; "
                f"this one reads version {SCHEMA_VERSION}). Upgrade tiermem, or use another --data-dir."
            )
        if meta.get(REEMBEDDING) and not self._reembedding:  # before migrating: see ``_migrate``
            raise unfinished_reembed(self.uri, meta)
        if version < SCHEMA_VERSION or missing_columns(self.tables):
            self._migrate()
        if meta.get("embedding_model") != self.embedding_model or meta.get("embedding_dim") != str(self.embedding_dim):
            raise SchemaError(
                f"The data directory {self.uri!r} holds vectors of embedding model "
                f"{meta.get('embedding_model')!r} (dim {meta.get('embedding_dim')}), but this server is configured for "
                f"{self.embedding_model!r} (dim {self.embedding_dim}). Configure the same model, or none (remove "
                "--embedding-model, TIERMEM_EMBEDDING_MODEL and the config file's embedding_model: with none set, "
                "tiermem uses the data directory's own), or run `tiermem reembed` to rebuild all vectors with the "
                "configured one."
            )
