"""``Rows``: the two searchable tables, messages (recall) and passages (archival): rows in and out, vectors, and
the marks that announce rows stored without vectors. Rows leave as records (``Message``, ``Passage``) or, for
backup, restore and paging, as plain dicts of their columns."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..base.errors import StoreError, ValidationError
from ..base.records import Message, Passage, from_us
from . import schemas
from .appends import GroupAppend
from .boundary import commit_with_retries, reads, writes
from .connection import Connection
from .query import Filter, compile_filter, with_plumbing
from .schemas import (
    MESSAGE_COLUMNS,
    SEARCHABLE,
    TEXTS_LOCK,
    UNEMBEDDED_PREFIX,
    settle_plumbing,
)

log = logging.getLogger(__name__)


def message_from_row(r: dict[str, Any]) -> Message:
    return Message(
        id=r["id"],
        agent_id=r["agent_id"],
        conversation_id=r["conversation_id"],
        seq=r["seq"],
        role=r["role"],
        content=r["content"],
        created_at=from_us(r["created_us"]),
        payload=r["payload"],
        project=r.get("project"),
    )


def passage_from_row(r: dict[str, Any]) -> Passage:
    return Passage(
        id=r["id"],
        agent_id=r["agent_id"],
        content=r["content"],
        tags=tuple(r["tags"] or ()),
        created_at=from_us(r["created_us"]),
        group_id=r["group_id"],
        chunk=r["chunk"],
        project=r.get("project"),
    )


def _as_written(table: str, rows: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """``rows`` as ``table`` stores them: messages with their ``plumbing`` decided from their role and payload
    (``query.is_plumbing``; whatever a row brings, a restored backup's or a rewritten row's)."""
    return with_plumbing(rows) if table == "messages" else rows


def marks_in(meta: Sequence[dict[str, Any]], table: str) -> dict[str, str]:
    """The marks announcing rows without vectors in ``table``, among the rows of the meta table."""
    prefix = f"{UNEMBEDDED_PREFIX}{table}:"
    return {r["key"]: r["value"] for r in meta if str(r["key"]).startswith(prefix)}


class Rows:
    """Rows of the searchable tables over one ``Connection``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._appends: dict[str, GroupAppend] = {}  # per table: this process's appends, committed together
        self._appends_lock = threading.Lock()

    # -- messages ------------------------------------------------------------

    @reads("messages")
    def messages(self, where: Filter, *, limit: int | None = None) -> list[Message]:
        """The messages of ``where`` (up to ``limit``; None: all), in no particular order: the caller orders them."""
        rows = (
            self.conn.tables["messages"]
            .search()
            .where(compile_filter(where))
            .select(list(MESSAGE_COLUMNS))
            .limit(limit)
            .to_list()
        )
        return [message_from_row(r) for r in rows]

    # -- messages and passages ------------------------------------------------

    def add_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Append ``rows`` (each with its own ``id``). The appends of this process's threads to one table are committed
        one at a time, each carrying the rows of every call waiting meanwhile (``GroupAppend``). A commit that lost to
        other writers (another replica, an upkeep) is tried again (``commit_with_retries``), and from the second try
        on only the rows not stored yet are appended: whatever a failed try left behind, no row is stored twice."""
        if not rows:
            return
        rows = _as_written(table, rows)
        with self._appends_lock:
            group = self._appends.get(table)
            if group is None:
                group = self._appends[table] = GroupAppend(
                    lambda batch: self._append(table, batch), f"row(s) of {table} to {self.conn.uri}"
                )
        group.append(list(rows))
        if table in SEARCHABLE and any(r.get("vector") is None for r in rows):
            self.mark_unembedded(table)

    def _append(self, table: str, rows: list[dict[str, Any]]) -> None:
        """One append of ``rows`` to ``table``, tried again on commit conflicts without doubling a row."""

        def attempt(n: int) -> None:
            with self.conn.writing(table):
                todo = rows if n == 0 else self._not_stored(table, rows)
                if todo:
                    self.conn.tables[table].add(todo)

        commit_with_retries(self.conn.uri, "rows", attempt)
        self.conn.wrote(len(rows), table)

    def _not_stored(self, table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows whose ``id`` is not in ``table`` at its newest version (a retried append's check)."""
        t = self.conn.tables[table]
        t.checkout_latest()  # not the version read up to ``read_staleness`` ago: a failed try may have committed
        ids = [str(r["id"]) for r in rows]
        found = {
            r["id"]
            for r in t.search().where(compile_filter(Filter(ids=tuple(ids)))).select(["id"]).limit(len(ids)).to_list()
        }
        return [r for r in rows if r["id"] not in found]

    @writes("restored rows")
    def merge_rows(self, table: str, key: str, rows: Sequence[dict[str, Any]]) -> int:
        """Insert the rows whose ``key`` is not stored yet (restores and imports are re-runnable); returns rows inserted."""
        if not rows:
            return 0
        rows = _as_written(table, rows)
        with self.conn.writing(table):
            result = self.conn.tables[table].merge_insert(key).when_not_matched_insert_all().execute(list(rows))
        self.conn.wrote(1, table)
        if table in SEARCHABLE and any(r.get("vector") is None for r in rows):
            self.mark_unembedded(table)
        return int(result.num_inserted_rows)

    @writes("rows")
    def upsert_rows(self, table: str, key: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert ``rows``, replacing the stored rows with the same ``key`` (folders and files: one commit)."""
        if not rows:
            return
        rows = _as_written(table, rows)
        with self.conn.writing(table):
            self.conn.tables[table].merge_insert(key).when_matched_update_all().when_not_matched_insert_all().execute(
                list(rows)
            )
        self.conn.wrote(1, table)

    @reads("rows")
    def all_rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of ``table``, every column (backup, re-embedding, moving old core tables)."""
        return self.conn.rows(table)

    @reads("row counts")
    def count(self, table: str, where: Filter | None = None) -> int:
        t = self.conn.tables[table]
        text = compile_filter(where)
        return int(t.count_rows(text) if text else t.count_rows())

    @writes("a deletion")
    def delete(self, table: str, where: Filter) -> int:
        """Delete the rows of ``where`` (never every row: an empty filter is refused); returns how many."""
        text = compile_filter(where)
        if not text:
            raise ValidationError("delete needs a filter that names the rows; an empty one would delete every row")
        t = self.conn.tables[table]
        before = t.count_rows(text)
        if before:
            with self.conn.writing(table):
                t.delete(text)
            self.conn.wrote()
        return int(before)

    @writes("vectors")
    def set_vectors(self, table: str, vectors: dict[str, list[float]]) -> None:
        """Fill in vectors of rows stored before the model was ready."""
        if not vectors:
            return
        t = self.conn.tables[table]
        rows = t.search().where(compile_filter(Filter(ids=tuple(vectors)))).limit(len(vectors) * 2).to_list()
        for r in rows:
            r.pop("_distance", None)
            r["vector"] = vectors[r["id"]]
        if rows:
            with self.conn.writing(table):
                t.merge_insert("id").when_matched_update_all().execute(rows)
            self.conn.wrote(len(rows), table)

    @writes("the plumbing column of messages")
    def settle_plumbing(self, limit: int | None = None) -> int:
        """Decide the ``plumbing`` column of the messages an older tiermem wrote without it since the store was
        migrated (``schemas.settle_plumbing``: a count of undecided rows when there are none; ``limit``: at most that
        many); returns the rows decided."""
        with self.conn.writing("messages"):
            decided = settle_plumbing(self.conn.tables["messages"], limit)
        if decided:
            self.conn.wrote(decided, "messages")
        return int(decided)

    def settle_plumbing_round(self) -> int:
        """A server's background upkeep's share of ``settle_plumbing``: up to ``PLUMBING_ROUND`` rows an older tiermem
        wrote without ``plumbing`` (so a search leaves them out as it leaves out this tiermem's plumbing, without
        waiting for ``tiermem optimize``), decided under ``TEXTS_LOCK``, and the store unmarked
        (their keyword texts may hold a tool's result: ``keyword_context.recontext``, which marks it under that lock).
        Costs one count of undecided rows when there are none (no lock taken)."""
        messages = self.conn.tables["messages"]
        if "plumbing" not in messages.schema.names or not self.count("messages", Filter(undecided=True)):
            return 0
        with self.conn.exclusive(TEXTS_LOCK):
            decided = self.settle_plumbing(schemas.PLUMBING_ROUND)
            if decided:  # (also when unmarked already: a ``recontext`` under way must not mark it)
                self.conn.unsettle_keyword_contexts()
        if decided:
            log.info("decided whether %d message(s) an older tiermem wrote are the agent loop's plumbing", decided)
        return decided

    def set_texts(self, table: str, ids: Sequence[str], text_of: Callable[[dict[str, Any]], str]) -> int:
        """Write the keyword ``text`` of the rows ``ids`` of ``table`` anew, as ``text_of(the row)``; returns the
        rows written (those whose text changes). Only rows still stored are written: one another process deleted
        since its id was read stays deleted (an update, never an insert). The rows are read at the table's newest
        version (not one ``read_staleness`` old: the row is written whole, so a change of it made under a lock the
        caller holds now is read, never written over), and read again so after a commit conflict
        (``commit_with_retries``)."""
        t = self.conn.tables[table]
        where = compile_filter(Filter(ids=tuple(ids)))

        def attempt(n: int) -> int:
            t.checkout_latest()  # the newest version, not the one a lost commit started from
            rows: list[dict[str, Any]] = t.search().where(where).limit(None).to_list()
            changed = []
            for r in rows:
                r.pop("_distance", None)
                text = text_of(r)
                if text != r["text"]:
                    changed.append({**r, "text": text})
            if changed:
                with self.conn.writing(table):
                    t.merge_insert("id").when_matched_update_all().execute(changed)
                self.conn.wrote(len(changed), table)
            return len(changed)

        return commit_with_retries(self.conn.uri, f"keyword texts in {table}", attempt) if ids else 0

    @reads("rows without vectors")
    def rows_without_vectors(self, table: str, limit: int = 256, where: Filter | None = None) -> list[dict[str, Any]]:
        """Up to ``limit`` rows of ``where`` stored without a vector."""
        return self.conn.rows(table, replace(where or Filter(), missing_vector=True), limit=limit)

    # Rows stored without vectors are announced in ``meta`` (key "unembedded:<table>:<writer>"), written
    # right after the rows, so a search in any process learns of them from the small meta table instead
    # of counting ``vector IS NULL`` over the whole table (a scan of every vector). The marks are cleared
    # by whoever sees the table without such rows, and only the marks read before that count: a mark is
    # written after its rows, so rows whose mark was read are in the count. Rows a crash left unmarked
    # are found by the full count each process makes when it opens the store (``factory.open_memory``).

    @reads("settings")
    def unembedded_marks(self, table: str) -> dict[str, str]:
        """The marks announcing rows without vectors in ``table`` (cheap: meta is re-read only when it changed)."""
        return marks_in(self.conn.snapshot("meta"), table)

    def mark_unembedded(self, table: str) -> None:
        """Announce that ``table`` holds rows without vectors (after writing them)."""
        try:
            self.conn.set_meta(f"{UNEMBEDDED_PREFIX}{table}:{self.conn.writer}", str(time.time_ns()))
        except StoreError as exc:  # the rows are stored; the next process to open the store counts them
            log.warning("could not record rows without vectors in %s: %s", table, exc)

    @reads("rows without vectors")
    def settle_unembedded(self, table: str) -> int:
        """Rows of ``table`` without vectors; when there are none, clear the marks read before counting."""
        marks = self.unembedded_marks(table)
        missing = self.count(table, Filter(missing_vector=True))
        if missing == 0 and marks:
            self._clear_marks(marks)
        return missing

    @writes("settings")
    def _clear_marks(self, marks: dict[str, str]) -> None:
        where = compile_filter(Filter(entries=tuple(marks.items())))
        assert where is not None  # marks is not empty
        self.conn.tables["meta"].delete(where)

    @reads("tags")
    def distinct_tags(self, agent_id: str) -> list[str]:
        import pyarrow.compute as pc

        data = (
            self.conn.tables["passages"]
            .search()
            .where(compile_filter(Filter(agent_id=agent_id)))
            .select(["tags"])
            .limit(None)
            .to_arrow()
        )
        if data.num_rows == 0:
            return []
        flat = pc.list_flatten(data.column("tags").combine_chunks())
        return sorted(str(t) for t in pc.unique(flat).to_pylist() if t is not None)

    @reads("the chunks of long inserts")
    def chunked(self, table: str, where: Filter) -> dict[str, list[str]]:
        """The chunks (their content, in order) of each insert of ``where`` stored in two chunks or more, by group id:
        one scan of three columns (never the vectors), read a batch at a time. Rows of a single-chunk insert are kept
        as Arrow until the scan ends (a chunked insert's first row is known only then), not as Python text."""
        import pyarrow as pa
        import pyarrow.compute as pc

        q = self.conn.tables[table].search()
        text = compile_filter(where)
        reader = (q.where(text) if text else q).select(["group_id", "chunk", "content"]).limit(None).to_batches()
        later: dict[str, list[tuple[int, str]]] = {}
        firsts: list[pa.RecordBatch] = []
        for batch in reader:
            more = pc.fill_null(pc.greater(batch.column("chunk"), 0), False)
            rest = batch.filter(more)
            for group, n, content in zip(*(rest.column(c).to_pylist() for c in ("group_id", "chunk", "content"))):
                if group:
                    later.setdefault(str(group), []).append((int(n), str(content or "")))
            firsts.append(batch.filter(pc.invert(more)))
        known = pa.array(list(later), pa.string())
        for batch in firsts:
            first = batch.filter(pc.fill_null(pc.is_in(batch.column("group_id"), value_set=known), False))
            for group, n, content in zip(*(first.column(c).to_pylist() for c in ("group_id", "chunk", "content"))):
                later[str(group)].append((int(n or 0), str(content or "")))
        return {group: [c for _, c in sorted(parts)] for group, parts in later.items()}

    @reads("the latest time")
    def latest_us(self, table: str, where: Filter) -> int | None:
        """The newest ``created_us`` of the rows matching ``where`` (None if there are none)."""
        import pyarrow.compute as pc

        q = self.conn.tables[table].search()
        text = compile_filter(where)
        data = (q.where(text) if text else q).select(["created_us"]).limit(None).to_arrow()
        if data.num_rows == 0:
            return None
        found = pc.max(data.column("created_us")).as_py()
        return int(found) if found is not None else None

    @reads("the latest row")
    def newest(
        self, table: str, where: Filter, keep: Callable[[dict[str, Any]], bool] | None = None
    ) -> dict[str, Any] | None:
        """The latest row matching ``where`` (by time, then sequence), of those ``keep`` keeps (None: all): its content,
        created_us and seq (a message's role too)."""
        q = self.conn.tables[table].search()
        text = compile_filter(where)
        cols = ["content", "created_us", "seq", *(["role"] if table == "messages" else [])]
        data = (q.where(text) if text else q).select(cols).limit(None).to_list()
        kept = data if keep is None else filter(keep, data)
        return max(kept, key=lambda r: (r["created_us"], r["seq"]), default=None)

    @reads("turns")
    def turns(self, table: str, where: Filter) -> list[dict[str, Any]]:
        """Every row matching ``where`` as its id, content, conversation_id, created_us and seq, by time then seq."""
        q = self.conn.tables[table].search()
        text = compile_filter(where)
        cols = ["id", "content", "conversation_id", "created_us", "seq"]
        data = (q.where(text) if text else q).select(cols).limit(None).to_list()
        return sorted(({k: r[k] for k in cols} for r in data), key=lambda r: (r["created_us"], r["seq"]))

    @reads("rows")
    def select(self, table: str, where: Filter | None, *, limit: int, offset: int = 0) -> list[dict[str, Any]]:
        """Rows oldest first (by time, then id), one page.

        A page smaller than the matching rows reads only the sort keys of every row, then the page's rows
        (the inspector pages through 10k passages without reading every row and its vector).
        """
        q = self.conn.tables[table].search()
        text = compile_filter(where)
        keys = (q.where(text) if text else q).select(["id", "created_us"]).limit(None).to_list()
        keys.sort(key=lambda r: (r["created_us"], r["id"]))
        page = [r["id"] for r in keys[offset : offset + limit]]
        if not page:
            return []
        if len(page) == len(keys):
            rows = self.conn.rows(table, where)
        else:
            rows = self.conn.rows(table, replace(where or Filter(), ids=tuple(page)))
        rows.sort(key=lambda r: (r["created_us"], r["id"]))
        return rows[:limit] if len(page) == len(keys) else rows
