"""Index upkeep: the full-text and bitmap indexes, the vector index once a table is large, compaction, and
the per-index coverage ``doctor`` reports."""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from datetime import timedelta

from ..base import fences
from ..base.errors import PurgeUnfinishedError, StoreBusyError, StoreError, StoreWriteError
from .boundary import COMMIT_RETRY, LIBRARY_ERRORS, commit_with_retries, first_line, is_conflict, reads
from .connection import Connection
from .purge import Purge
from .query import Filter
from .schemas import SEARCHABLE
from .tables import Rows

log = logging.getLogger(__name__)


# The vector index: built at VECTOR_INDEX_MIN_ROWS rows (``Store(vector_index_min_rows=...)``), trained again once the
# table has REINDEX_GROWTH times the rows it was trained on, or when LanceDB's upkeep has split it into more segments
# than ``REINDEX_SEGMENTS`` allows at its size, while the table has at most REINDEX_MAX_ROWS rows (a training reads up
# to 256 vectors per partition: ~120 MB and about a minute at 100k rows; beyond that the index is only appended to).
# LanceDB's optimize appends the rows written since the last one to a vector index as a new segment and never merges
# them: a search reads every segment, and the index cache keeps each one (measured: 21 segments after 20 rounds of
# 200 writes + optimize; ``python -m bench load``).
VECTOR_INDEX_MIN_ROWS, REINDEX_GROWTH, REINDEX_MAX_ROWS = 1_000, 4, 100_000
REINDEX_SEGMENTS = {20_000: 4, REINDEX_MAX_ROWS: 16}  # up to that many rows: at most that many segments
TRAINED_PREFIX = "vector_index_trained_rows:"
MIN_PARTITION_ROWS = 256


def trained_key(table: str) -> str:
    """The meta key holding how many rows ``table``'s vector index was trained on."""
    return f"{TRAINED_PREFIX}{table}"


def needs_retraining(trained: int, rows: int, segments: int = 1) -> bool:
    """True when an index trained on ``trained`` rows, now in ``segments`` segments, should be trained again now that
    the table has ``rows`` rows (``REINDEX_GROWTH``, ``REINDEX_SEGMENTS``, ``REINDEX_MAX_ROWS``)."""
    if rows > REINDEX_MAX_ROWS:
        return False
    allowed = next(most for upto, most in sorted(REINDEX_SEGMENTS.items()) if rows <= upto)
    return rows >= REINDEX_GROWTH * max(trained, 1) or segments > allowed


def vector_partitions(rows: int) -> int:
    """IVF partitions for a vector index over ``rows`` vectors: ~sqrt(rows), so a probe reads ~sqrt(rows) rows, but
    at least MIN_PARTITION_ROWS vectors per partition (LanceDB's k-means trains on 256 per partition and warns below
    that; up to 20k rows a search probes every partition anyway, and from ~65k rows sqrt(rows) is the smaller)."""
    return max(1, min(math.isqrt(rows), rows // MIN_PARTITION_ROWS))


class Indexes:
    """Index upkeep over one ``Connection`` (row counts through its ``Rows``)."""

    def __init__(
        self,
        conn: Connection,
        rows: Rows,
        *,
        vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS,
        purge: Purge | None = None,
    ) -> None:
        self.conn, self.rows = conn, rows
        self.purge = purge if purge is not None else Purge(conn)
        self.vector_index_min_rows = vector_index_min_rows
        self.purge_retry = COMMIT_RETRY  # how the purge's index rebuild and cleanup are tried again on commit conflicts
        # tables known to have their full-text index (never dropped; a reembed's swap makes a new table: ``replaced``,
        # and other processes reopen their tables once it has finished: ``Connection.vectors_unusable``)
        self._fts_ready: set[str] = set()
        conn.on_renewal.append(self._fts_ready.clear)
        self._optimizing = threading.Lock()
        self._optimized: dict[str, int] = {}  # table -> its version after this process's last optimize of it
        self._settling = False  # the last background run decided rows an older tiermem wrote (more may be left)

    def ensure_search_indexes(self) -> None:
        """Build the full-text indexes when the store opens, so that searching (a read-only tool) never writes.

        Several processes may open a new store at once; one that loses the race leaves it to the other, and
        ``Search`` builds a missing index only in that case.
        """
        for table in SEARCHABLE:
            try:
                self.ensure_fts(table)
            except StoreError as exc:
                if isinstance(exc.__cause__, LIBRARY_ERRORS) and is_conflict(exc.__cause__):  # normal: said quietly
                    log.debug(
                        "full-text index of %s not built at open (another process was committing): %s", table, exc
                    )
                else:
                    log.warning("full-text index of %s not built at open (the next upkeep tries again): %s", table, exc)

    def replaced(self, table: str) -> None:
        """``table`` was replaced by a new one holding its rows but none of its indexes (a reembed's swap,
        ``Reembed.replace_vectors``): its full-text and bitmap indexes are built again, so keyword searches (those of
        servers still on the old model included) find its rows before any process opens the store again."""
        self._fts_ready.discard(table)
        self.ensure_fts(table)

    @reads("the search indexes")
    def has_fts(self, table: str) -> bool:
        if table in self._fts_ready:
            return True
        found = any(i.index_type == "FTS" for i in self.conn.tables[table].list_indices())
        if found:
            self._fts_ready.add(table)  # indexes are never dropped by tiermem
        return found

    @reads("the search indexes")
    def ensure_fts(self, table: str) -> None:
        from lancedb.index import FTS, Bitmap

        t = self.conn.tables[table]
        indexed = [i.columns for i in t.list_indices()]
        # The agent filter runs before every search, and auto-recall's project filter before its searches: a bitmap
        # makes each cheap at any size. So does one on a message's role for a search of tool results, whose filter
        # reads the role and the ``plumbing`` column (``query.TOOL_PLUMBING``).
        names = t.schema.names
        for column in ("agent_id", *(c for c in ("project", "role") if c in names)):
            if [column] in indexed:
                continue
            fences.check(f"the {column} index of {table} to {self.conn.uri}")
            try:
                t.create_index(column, config=Bitmap(), replace=False)
            except (RuntimeError, ValueError) as exc:
                # several processes opening a new store at once: one builds it, the others lose its commit (normal)
                if is_conflict(exc) or [column] in [i.columns for i in t.list_indices()]:
                    log.debug("%s index of %s not built here (another process was committing): %s", column, table, exc)
                else:
                    log.warning(
                        "%s index of %s not built (the next upkeep tries again): %s", column, table, first_line(exc)
                    )
        if not self.has_fts(table):
            fences.check(f"the full-text index of {table} to {self.conn.uri}")
            try:
                t.create_index("text", config=FTS(with_position=False), replace=False)
            except (RuntimeError, ValueError) as exc:
                if not self.has_fts(table):  # another process may have built it meanwhile
                    raise StoreWriteError(f"Could not build the full-text index of {table}: {first_line(exc)}") from exc

    @reads("the search indexes")
    def ensure_vector_index(self, table: str) -> bool:
        """Build an IVF-SQ vector index once ``table`` has ``vector_index_min_rows`` rows; retrain it as it grows.

        Returns True if an index exists afterwards. Without an index a vector search is LanceDB's exact scan, which
        holds the whole vector column in memory while it runs (~2 KB a row: +38 MB per search at 20k rows, several
        at once under load; ``python -m bench small_index``), so the index comes early (1,000 rows by default);
        up to ``EXACT_PROBE_ROWS`` a search probes all its partitions, which returns what the exact scan would
        (``store/search.py``). ``optimize`` appends later rows to the index (LanceDB's incremental update: a new
        segment each time), and the index is trained again, in one segment with ``vector_partitions(rows)``
        partitions, when ``needs_retraining`` says so: a table grown from 1,000 rows is not left with the
        partitions of its first thousand, nor a long-running server with a segment per upkeep. The rows each index
        was trained on are kept in the meta table (``trained_key``); an index built by an earlier version has none
        and is only appended to. IVF-SQ builds in about a tenth of the time of LanceDB's default IVF-HNSW-SQ (66 s
        against ~600 s at 100k rows on the shared 2-core machine) at equal or better recall; stores whose index an
        earlier version built keep it (``VECTOR_EF`` serves those). Measured in bench/search_profile.py and
        bench/small_index.py.
        """
        t = self.conn.tables[table]
        built = [i for i in t.list_indices() if i.columns == ["vector"]]
        if built:
            trained = self.conn.meta().get(trained_key(table))
            if trained is None:
                return True
            rows = int(t.count_rows())
            stats = t.index_stats(built[0].name)
            segments = int(stats.num_indices or 1) if stats is not None else 1
            if not needs_retraining(int(trained), rows, segments):
                return True
            try:  # the old index serves searches until the new one is committed
                self._train_vector_index(
                    table, rows, f"retrained ({segments} segments; trained on {trained} rows)", replace=True
                )
            except (RuntimeError, ValueError) as exc:  # a concurrent writer won; the old index stays
                log.warning("could not retrain the vector index of %s (tried again at the next upkeep): %s", table, exc)
            return True
        if self.vector_index_min_rows <= 0 or t.count_rows() < self.vector_index_min_rows:
            return False  # cheap (table metadata) before the filtered count, which reads every row's vector
        rows = self.rows.count(table, Filter(missing_vector=False))
        if rows < self.vector_index_min_rows:
            return False
        try:
            self._train_vector_index(table, rows, "built", replace=False)  # fails if another process built one
        except (RuntimeError, ValueError) as exc:
            if any(i.columns == ["vector"] for i in t.list_indices()):  # another process built it meanwhile
                return True
            raise StoreWriteError(f"Could not build the vector index of {table}: {exc}") from exc
        return True

    def _train_vector_index(self, table: str, rows: int, what: str, *, replace: bool) -> None:
        """Train ``table``'s vector index over its ``rows`` rows and record them in the meta table (``what`` names it in
        the log); with ``replace`` an existing index gives way once the new one is committed, else its presence fails."""
        from lancedb.index import IvfSq

        started = time.perf_counter()
        fences.check(f"the vector index of {table} to {self.conn.uri}")
        self.conn.tables[table].create_index(
            "vector", config=IvfSq(distance_type="cosine", num_partitions=vector_partitions(rows)), replace=replace
        )
        self.conn.set_meta(trained_key(table), str(rows))
        log.info("%s the vector index of %s over %d rows in %.1fs", what, table, rows, time.perf_counter() - started)

    def purge_now(self) -> dict[str, str]:
        """The purge of the rows marked forgotten (``store/purge.py``), now, under this process's upkeep lock."""
        with self._optimizing:
            return self._purge_marked()

    def _purge_marked(self) -> dict[str, str]:
        """For each table with forgotten rows: the rest of their fragments written again, the full-text index
        built afresh and the vector index trained again (their entries for those rows go with the old files), then
        every version but the newest removed with the files only they used. A reader that opened an older version
        before this and reads a file of it afterwards gets an error (its read is refused, never wrong); readers
        that start afterwards read the newest version. A writer's unfinished files are never touched.

        Other processes (servers' upkeeps compacting, writers appending) commit to the same tables meanwhile: each
        step is tried again on a commit conflict (``commit_with_retries``), from the table's newest version. A purge
        that still cannot finish raises ``PurgeUnfinishedError`` (its marks stay: the next upkeep tries again)."""
        report: dict[str, str] = {}
        try:
            marked = self.purge.marked()
        except StoreError as exc:
            raise _unfinished("the store", exc) from exc
        for table, marks in marked.items():
            try:
                if table not in self.conn.tables:
                    self.purge.clear(marks)
                    continue
                started = time.perf_counter()
                rewritten = self.purge.rewrite(table, marks)
                commit_with_retries(
                    self.conn.uri,
                    f"the indexes of {table} (after forgetting)",
                    lambda n: self._reindex_after_purge(table, n),
                    self.purge_retry,
                )
                commit_with_retries(
                    self.conn.uri,
                    f"the files of {table} (removing older versions)",
                    lambda n: self._drop_old_files(table, n),
                    self.purge_retry,
                )
                self.purge.clear(marks)
            except StoreError as exc:
                raise _unfinished(table, exc) from exc
            self._optimized.pop(table, None)
            report[f"{table} purge"] = (
                f"{len(marks)} fragment(s) with forgotten rows, {rewritten} row(s) written "
                f"again, older versions removed in {time.perf_counter() - started:.2f}s"
            )
        return report

    def _drop_old_files(self, table: str, attempt: int) -> None:
        """Compact ``table`` and remove every version but the newest with the files only they used (try ``attempt``
        of ``commit_with_retries``: from the second on, from the newest version)."""
        t = self.conn.tables[table]
        if attempt:
            t.checkout_latest()
        with warnings.catch_warnings():  # LanceDB warns that older versions' readers fail: see ``_purge_marked``
            warnings.simplefilter("ignore")
            t.optimize(cleanup_older_than=timedelta(0))

    def _reindex_after_purge(self, table: str, attempt: int) -> None:
        """The full-text index of ``table`` built afresh, its vector index trained again (try ``attempt`` of
        ``commit_with_retries``: from the second on, from the newest version, not the one a lost commit started
        from)."""
        from lancedb.index import FTS

        t = self.conn.tables[table]
        if attempt:
            t.checkout_latest()
        if table not in SEARCHABLE or not t.count_rows():
            return
        if self.has_fts(table):
            t.create_index("text", config=FTS(with_position=False), replace=True)
        if any(i.columns == ["vector"] for i in t.list_indices()):
            rows = self.rows.count(table, Filter(missing_vector=False))
            if rows >= MIN_PARTITION_ROWS:
                self._train_vector_index(table, rows, "retrained after forgetting rows", replace=True)

    @reads("index statistics")
    def index_health(self) -> dict[str, dict[str, int]]:
        """Rows covered and not covered by each index, per searchable table."""
        out: dict[str, dict[str, int]] = {}
        for name in SEARCHABLE:
            t = self.conn.tables[name]
            entry = {"rows": int(t.count_rows()), "missing_vectors": self.rows.count(name, Filter(missing_vector=True))}
            for idx in t.list_indices():
                stats = t.index_stats(idx.name)
                if stats is not None:
                    kind = {"text": "fts", "vector": "vector"}.get(idx.columns[0], idx.columns[0])
                    entry[f"{kind}_indexed"] = int(stats.num_indexed_rows)
                    entry[f"{kind}_unindexed"] = int(stats.num_unindexed_rows)
            out[name] = entry
        return out

    def optimize_in_background(self) -> dict[str, str]:
        """``optimize`` unless one is under way in this process (the connection's upkeep, in its own thread)."""
        return self.optimize(background=True)

    def optimize(self, *, background: bool = False) -> dict[str, str]:
        """Compact small fragments, delete superseded versions (``version_retention``) and bring indexes up to
        date. Safe to call from any process, and from several at once (a commit conflict is retried; nothing is lost).

        A background run is skipped while another run is under way in this process, or while another replica holds
        the connection's ``upkeep_lease`` (one set: on object storage, where two at once would only conflict); an
        explicit one waits for the run of this process and ignores the lease.
        """
        if not self._optimizing.acquire(blocking=not background):
            return {"skipped": "already optimizing in this process"}
        try:
            if background and self.conn.upkeep_lease is not None:
                with self.conn.upkeep_lease() as held:
                    if not held:
                        self.conn.upkeep_deferred()
                        return {"skipped": "another replica is optimizing"}
                    return self._optimize(changed_only=True)
            return self._optimize(changed_only=background)
        finally:
            self._optimizing.release()

    def _optimize(self, *, changed_only: bool) -> dict[str, str]:
        """``changed_only`` (background runs): skip the tables no commit changed since this process last optimized
        them (on object storage each one costs requests; the old core tables never change). A background run first
        decides some of the messages an older tiermem wrote without ``plumbing`` (``Rows.settle_plumbing_round``;
        ``tiermem optimize`` decides them all before it optimizes)."""
        report: dict[str, str] = {}
        if changed_only and (self._settling or self._messages_changed()):
            try:
                decided = self.rows.settle_plumbing_round()
                self._settling = decided > 0  # more may be left: the next background run looks again
            except StoreError as exc:  # left undecided: the next upkeep tries again, messages changed or not
                decided, self._settling = 0, True
                report["plumbing"] = f"retry later: {exc}"
                log.warning("could not decide the plumbing of messages an older tiermem wrote: %s", exc)
            if decided:
                report["plumbing"] = f"{decided} message(s) an older tiermem wrote decided"
        due: list[str] = []
        for name, t in self.conn.tables.items():
            try:
                version = int(t.version)
            except LIBRARY_ERRORS as exc:
                report[name] = f"retry later: {exc}"
                continue
            if not (changed_only and self._optimized.get(name) == version):
                due.append(name)
        try:  # opened with a bulk command's deadlines on object storage (a compaction uploads whole files)
            tables = self.conn.upkeep_tables(due) if due else {}
        except StoreError as exc:  # not opened: the next upkeep tries again
            tables = {}
            report.update({name: f"retry later: {exc}" for name in due})
            log.warning("could not open the tables for their upkeep: %s", exc)
        for name, t in tables.items():
            started = time.perf_counter()
            for attempt in range(OPTIMIZE_TRIES):
                fences.check(f"the compaction of {name} (an upkeep) to {self.conn.uri}")  # its lease still held
                try:
                    t.optimize(cleanup_older_than=self.conn.version_retention)
                    report[name] = f"ok in {time.perf_counter() - started:.2f}s"
                    self._optimized[name] = int(t.version)
                    break
                except (RuntimeError, OSError) as exc:  # a concurrent writer won: try again later
                    report[name] = f"retry later: {first_line(exc)}"
                    _log_failed_optimize(name, attempt, exc, background=changed_only)
                    time.sleep(0.05 * (attempt + 1))
        for name in SEARCHABLE:  # after compaction: an index is trained over a few large fragments, not many small ones
            if self.rows.count(name):
                self.ensure_fts(name)
                self.ensure_vector_index(name)
        report.update(self._purge_marked())
        try:  # the indexes just changed: drop the old session's caches with the versions they superseded
            if self.conn.renew_session_if_due():
                report["session"] = "renewed"
        except StoreError as exc:  # the old session stays; the next optimize tries again
            report["session"] = f"not renewed: {exc}"
            log.warning("could not renew the LanceDB session: %s", exc)
        from ..base.memtrim import trim

        trim()  # compaction's buffers are freed now: hand the pages back instead of keeping them resident
        return report

    def _messages_changed(self) -> bool:
        """Whether a commit changed messages since this process last optimized them (an older tiermem's rows
        may have come with it): otherwise a background run does not count the undecided rows again (unless the
        last one decided some: ``_settling``)."""
        try:
            return self._optimized.get("messages") != int(self.conn.tables["messages"].version)
        except LIBRARY_ERRORS:  # the count is tried instead, and reports its own failure
            return True


OPTIMIZE_TRIES = 3  # tries of one table's compaction per optimize (a lost commit conflict is tried again)


def _log_failed_optimize(table: str, attempt: int, exc: BaseException, *, background: bool) -> None:
    """A compaction try that failed, logged by what it means, in plain words (never Lance's Rust source line). A
    commit conflict (another commit, often this process's own writes, landed first; nothing is lost) is tried
    again: DEBUG; once the tries are used up it is put off to the next optimize: INFO for a background upkeep,
    WARNING for one asked for (``tiermem optimize``). Any other failure: WARNING."""
    reason = first_line(exc)
    if not is_conflict(exc):
        log.warning("optimize %s attempt %d failed: %s", table, attempt + 1, reason)
    elif attempt + 1 < OPTIMIZE_TRIES:
        log.debug("optimize %s attempt %d lost a commit conflict, trying again: %s", table, attempt + 1, reason)
    else:
        log.log(
            logging.INFO if background else logging.WARNING,
            "optimize %s put off: other commits to it won %d tries in a row (nothing is lost); the next optimize "
            "or upkeep compacts it",
            table,
            OPTIMIZE_TRIES,
        )


def _unfinished(table: str, exc: StoreError) -> PurgeUnfinishedError:
    """The error of a purge of ``table`` stopped by ``exc``: what was forgotten is gone from search already (the rows
    were deleted before their fragments' purge), so it says that, what stopped it, and how the purge is finished."""
    cause = exc.__cause__
    reason = first_line(cause) if isinstance(cause, LIBRARY_ERRORS) else str(exc)
    if isinstance(exc, StoreBusyError):
        reason = f"other writers (a server's upkeep, another replica) kept committing to it; last: {reason}"
    return PurgeUnfinishedError(
        f"Purging the forgotten rows of {table} from the store's files did not finish ({reason}). What was forgotten "
        "is already gone from every search and listing, but older files of the store may still hold it. The purge "
        "stays pending: `tiermem optimize` (or the next upkeep of a server) finishes it, and `tiermem doctor` shows "
        "it until then."
    )
