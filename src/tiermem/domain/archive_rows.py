"""Recall and archival rows taken whole, apart from searching: an agent's rows for export and deletion, a
conversation's messages in the agent loop's order, rows of no agent, and the raw rows of a backup (vectors kept
only where they fit the model). A part of ``Archive`` (``archive.rows``) over its store.

Each operation decides which rows (the filter) and in what order; the store's ``Rows`` only reads and writes.
Two answer straight from the store's connection, on purpose: ``messages_version`` (the agent loop's cache key) and
``fields`` (the columns a restored row must have, for the backup). Their callers are above the domain layer, which
may not reach the store (``tests/test_layers.py``: STORE_HOLDERS), so these are their way in, not forwarders to remove."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from ..base.records import Message, Passage
from ..store import (
    DERIVED,
    KEYWORD_CONTEXT,
    KEYWORD_CONTEXT_UNMARKED,
    KEYWORD_TEXT,
    KEYWORD_TEXT_VERSION,
    SEARCHABLE,
    TEXTS_LOCK,
    Filter,
    passage_from_row,
)
from .archive_links import ManualLinks
from .links import Link
from .search.cjk import MAX_CHARS, base_of, keyword_text, scripts

AGENT_TABLES = ("messages", "passages")  # the searchable tables whose rows belong to agents (file chunks: to folders)

if TYPE_CHECKING:
    from ..store import Store

EVERY_ROW = 10**9  # a page size that is every row of one agent
ID_BATCH = 1000  # ids asked about in one read (``existing``): a filter of bounded length
VECTOR_DIGITS = 7  # a backed-up vector's precision (float32 holds ~7 significant digits)
TURN_COLUMNS = ("id", "agent_id", "conversation_id", "seq", "created_us", "role", "content")  # ``AgentRows.turns``


def _export_order(m: Message) -> tuple[bool, str, int]:
    """An agent's messages by conversation (``default`` first), then by their order in it."""
    return m.conversation_id != "default", m.conversation_id, m.seq


def _log_order(m: Message) -> int:
    return m.seq


class AgentRows:
    """Whole rows of one store's messages and passages."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def passages_of(self, agent_id: str, *, tags_any: Sequence[str] | None = None) -> list[Passage]:
        """Every passage of an agent (with at least one of ``tags_any``, if given), oldest first."""
        where = Filter(agent_id=agent_id, tags_any=None if tags_any is None else tuple(tags_any))
        return [passage_from_row(r) for r in self.store.rows.select("passages", where, limit=EVERY_ROW)]

    def messages_of(self, agent_id: str) -> list[Message]:
        """Every message of an agent, by conversation (``default`` first) then order (for export and backup)."""
        return sorted(self.store.rows.messages(Filter(agent_id=agent_id)), key=_export_order)

    def messages_since(self, agent_id: str, conversation_id: str, start_seq: int) -> list[Message]:
        """Messages of one conversation with ``seq >= start_seq``, oldest first (the agent loop's window)."""
        where = Filter(agent_id=agent_id, conversation_id=conversation_id, seq_from=start_seq)
        return sorted(self.store.rows.messages(where), key=_log_order)

    def columns_of(
        self,
        table: str,
        agent_id: str,
        columns: Sequence[str],
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        projects: Sequence[str | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Only ``columns`` of an agent's rows created within [start, end] (of these ``projects``, if given; None in
        it: rows of no project), in no order: the timeline reads times, ids and texts, never vectors."""
        where = Filter(agent_id=agent_id, start=start, end=end, projects=None if projects is None else tuple(projects))
        return self.store.conn.rows(_searchable(table), where, columns=tuple(columns))

    def existing(
        self, table: str, ids: Sequence[str], *, agent_id: str | None = None, latest: bool = False
    ) -> set[str]:
        """Which of ``ids`` are rows of ``table`` (of ``agent_id``, if given): one read per ``ID_BATCH`` ids.
        ``latest``: at the table's newest version (object storage may otherwise answer from one read moments ago)."""
        found: set[str] = set()
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), ID_BATCH):
            where = Filter(agent_id=agent_id, ids=tuple(wanted[start : start + ID_BATCH]))
            rows = self.store.conn.rows(_searchable(table), where, columns=("id",), latest=latest)
            found.update(r["id"] for r in rows)
        return found

    def message(self, message_id: str) -> Message | None:
        """The message with this id, or None."""
        found = self.store.rows.messages(Filter(ids=(message_id,)), limit=1)
        return found[0] if found else None

    def messages_version(self) -> int:
        """A number that moves with every write of a message, by any process (the agent loop's cache key)."""
        return self.store.conn.version("messages")

    def delete_agent_data(self, agent_id: str) -> int:
        """Delete every message and passage of an agent, to be purged from the files at the next upkeep; returns
        how many rows went. The store's ``TURNS_CHANGED`` is changed after (not under ``rewriting_texts``: an agent's
        turns go all at once), so a ``keyword_context.recontext`` under way checks every turn again (an import run
        again writes the agent's turns anew)."""
        where = Filter(agent_id=agent_id)
        gone = sum(self.forget(table, where) for table in AGENT_TABLES)
        self.store.conn.change_turns()
        return gone

    # -- forgetting (domain/forgetting.py): gone from search at once, from the files at the purge --

    def forget(self, table: str, where: Filter) -> int:
        """Delete the rows of ``where``, their data fragments marked for the purge first, and the links made on
        purpose to any of them (``links.ManualLinks``); returns how many rows went.

        The links go twice. Before the rows: a crash between the two deletions then leaves no link of a deleted
        row. And after them, read again at the meta table's newest version: a link another process wrote meanwhile
        (its check that both ends exist ran before the rows went) is found there, since ``Memory.link`` writes its
        link before it checks the ends again (the ordering, and why it leaves no link behind: ``ManualLinks``)."""
        links = ManualLinks(self.store)
        ids = (
            []
            if table == "file_chunks"
            else [r["id"] for r in self.store.conn.rows(_searchable(table), where, columns=("id",))]
        )
        if ids and links.any():
            links.forget(ids)
        self.store.purge.mark(_searchable(table), where)
        removed = self.store.rows.delete(_searchable(table), where)
        if ids:
            links.forget(ids, latest=True)
        return removed

    def dangling_links(self) -> list[Link]:
        """The links made on purpose with an end that is no message or passage any more (one left by a forget cut
        short between its deletions, or by a tiermem before the ordering ``ManualLinks`` describes), each once
        (source: the smaller id), oldest first."""
        every = ManualLinks(self.store).every()
        gone = self._missing({end for link in every for end in (link.source, link.target)})
        return [link for link in every if link.source in gone or link.target in gone]

    def remove_dangling_links(self) -> int:
        """Delete the links ``dangling_links`` finds, their notes with them (``ManualLinks.forget``: the meta table's
        fragments holding them are marked for the purge); returns how many."""
        links = ManualLinks(self.store)
        return links.forget(self._missing({end for link in links.every() for end in (link.source, link.target)}))

    def _missing(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` that are neither a message nor a passage (of any agent), read at the tables' newest
        versions: a memory another replica has just written (and linked) is no dangling end."""
        if not ids:
            return set()
        return (
            ids - self.existing("messages", list(ids), latest=True) - self.existing("passages", list(ids), latest=True)
        )

    def rows_where(self, table: str, where: Filter) -> list[dict[str, Any]]:
        """Every row of ``where``, every column but the vector's values kept as stored, oldest first."""
        return self.store.rows.select(_searchable(table), where, limit=EVERY_ROW)

    def chunked(self, table: str, where: Filter) -> dict[str, list[str]]:
        """The chunks (in order) of each insert of ``where`` stored in two chunks or more, by group id (one scan of
        their group, chunk index and content)."""
        return self.store.rows.chunked(_searchable(table), where)

    def retext(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Store these rows (whole, read by ``rows_where``) with a changed keyword ``text``; the old copies' fragments
        are marked for the purge."""
        if rows:
            self.store.purge.mark(_searchable(table), Filter(ids=tuple(r["id"] for r in rows)))
            self.store.rows.upsert_rows(_searchable(table), "id", rows)

    def purge_old_copies(self, table: str, ids: Sequence[str]) -> None:
        """Mark the fragments holding these rows of ``table`` (by id) for the purge, before they are written anew
        with a forgotten text taken out (a folder's description): the old copies leave the files with it."""
        self.store.purge.mark(table, Filter(ids=tuple(ids)))

    def purge_pending(self) -> dict[str, int]:
        """The tables whose files may still hold deleted or forgotten rows, each with how many data fragments were
        marked for the purge (empty: none; the next upkeep purges them)."""
        return {table: len(marks) for table, marks in self.store.purge.marked().items() if marks}

    def purge(self) -> dict[str, str]:
        """Purge the forgotten rows from the store's files now (``Indexes.purge_now``)."""
        return self.store.indexes.purge_now()

    def stray_rows(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """Messages and passages of none of ``agent_ids`` (every row when there are none), per table."""
        where = Filter(not_agent_ids=tuple(agent_ids))
        return {table: self.store.rows.count(table, where) for table in AGENT_TABLES}

    def stray_agents(self, agent_ids: Sequence[str]) -> set[str]:
        """The agents (ids) that messages and passages of none of ``agent_ids`` belong to."""
        where = Filter(not_agent_ids=tuple(agent_ids))
        return {
            str(r["agent_id"])
            for table in AGENT_TABLES
            for r in self.store.conn.rows(table, where, columns=("agent_id",))
        }

    # -- backup and restore: the raw rows of messages and passages (``CoreStore`` holds the rest) --

    def backup_rows(self, table: str, *, vectors: bool) -> list[dict[str, Any]]:
        """Every row of ``table``, every column but those the store derives (``DERIVED``: a restore derives them
        again); vectors rounded to VECTOR_DIGITS if ``vectors``, else None."""
        rows = self.store.rows.all_rows(_searchable(table))
        for r in rows:
            for column in DERIVED.get(table, ()):
                r.pop(column, None)
            v = r.get("vector")
            r["vector"] = [round(float(x), VECTOR_DIGITS) for x in v] if vectors and v is not None else None
        return rows

    def restore_rows(
        self, table: str, key: str, rows: Sequence[dict[str, Any]], *, model: tuple[str, int] | None
    ) -> int:
        """Insert the rows whose ``key`` is not stored yet (a restore is re-runnable); returns rows inserted.

        ``model``: (name, dimension) of the model the rows' vectors were made with. Vectors of another model (or of
        the wrong length) are dropped, and those rows embedded later like any row stored without a vector."""
        same = model == (self.store.conn.embedding_model, self.store.conn.embedding_dim)
        kept = [
            r if same and _fits(r.get("vector"), self.store.conn.embedding_dim) else {**r, "vector": None} for r in rows
        ]
        # a backup of an older store holds keyword texts without the bigrams of some words (``cjk.scripts``)
        kept = [{**r, "text": keyword_text(base_of(r["text"]))} if isinstance(r.get("text"), str) else r for r in kept]
        return self.store.rows.merge_rows(_searchable(table), key, kept)

    def rewriting_texts(self) -> AbstractContextManager[object]:
        """The lock held while keyword texts made from other rows are read and written: forgetting's rewrite of the
        turns after a forgotten one (its read of the conversation, its deletion, its rewrite), a redaction, and each
        batch of ``keyword_context.recontext`` and ``regram``, which read the rows again under it and write nothing
        made from a row forgotten or changed meanwhile. Not re-entrant. A tiermem without it (before this lock) is
        not held off: its forget may still race an optimize."""
        return self.store.conn.exclusive(TEXTS_LOCK)

    @contextmanager
    def changing_turns(self) -> Iterator[None]:
        """``rewriting_texts`` held by a writer that deletes messages or edits them in place (a forget, a redaction):
        the store's ``TURNS_CHANGED`` is changed first, so a ``keyword_context.recontext`` under way, which compares
        it under the same lock between its batches, reads again every turn it checked before (it reads only the new
        ones while it holds)."""
        with self.rewriting_texts():
            self.store.conn.change_turns()
            yield

    def turns_changed(self) -> str:
        """What the store holds of when a message was last deleted or edited in place (``changing_turns``), read
        under ``rewriting_texts``."""
        return self.store.conn.turns_changed()

    def rewrite_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Replace stored rows, whole, by id (``tiermem doctor --secrets --redact``); rows without vectors are
        marked for the backfill."""
        # the fragments holding the old text are rewritten at the next upkeep, and old table versions removed
        with self.changing_turns():
            self.store.purge.mark(_searchable(table), Filter(ids=tuple(str(r["id"]) for r in rows)))
            self.store.rows.upsert_rows(_searchable(table), "id", rows)
        if any(r.get("vector") is None for r in rows):
            self.store.rows.mark_unembedded(_searchable(table))

    def stale_keyword_texts(self) -> dict[str, list[str]]:
        """The rows, by table, whose keyword text lacks the bigrams of its words of the scripts written as bigrams
        (``cjk.scripts``: stored by a tiermem that wrote none, or none of those scripts), by the store's own filter (ids
        only: the texts are read there, never here): for one of the scripts, its expression matching the text's first
        ``cjk.MAX_CHARS`` characters and not its line of bigrams (or no line). Asked whatever the store's mark
        (``KEYWORD_TEXT``) says: an older tiermem may write to a store after ``regram`` has marked it."""
        where = Filter(lines_lacking=(MAX_CHARS, scripts()))
        found = {}
        for table in SEARCHABLE:
            ids = [r["id"] for r in self.store.conn.rows(table, where, columns=("id",))]
            if ids:
                found[table] = ids
        return found

    def regram(self) -> dict[str, int]:
        """Write the keyword text of every row ``stale_keyword_texts`` names anew (``cjk.keyword_text``; the full-text
        index takes them in at the next upkeep), then set the store's mark (if not set yet); the rows written, by
        table. A row deleted or forgotten meanwhile by another process stays so (``Rows.set_texts`` only updates), and
        one whose text a forget wrote anew meanwhile is read again under the lock that forget holds
        (``rewriting_texts``), so its new text is the one given bigrams."""
        done: dict[str, int] = {}
        for table, ids in self.stale_keyword_texts().items():
            for start in range(0, len(ids), ID_BATCH):
                with self.rewriting_texts():
                    n = self.store.rows.set_texts(table, ids[start : start + ID_BATCH], _regrammed)
                if n:
                    done[table] = done.get(table, 0) + n
        if self.store.conn.meta().get(KEYWORD_TEXT) != KEYWORD_TEXT_VERSION:
            self.store.conn.set_meta(KEYWORD_TEXT, KEYWORD_TEXT_VERSION)
        return done

    # -- the turn before each message, as its keyword text holds it (``keyword_context``) --

    def turns(self) -> list[dict[str, Any]]:
        """Every message's id, agent, conversation, place (seq, created_us), role and content, in no order: never its
        keyword text, payload or vector."""
        return self.store.conn.rows("messages", None, columns=TURN_COLUMNS)

    def message_batches(self, columns: Sequence[str] = TURN_COLUMNS) -> Iterator[list[dict[str, Any]]]:
        """Only ``columns`` (``turns``' by default) of every message, a batch of one scan at a time
        (``Connection.row_batches``): a reader that keeps less of each row than its content
        (``keyword_context.unrebuilt``) holds one batch of contents at most."""
        return self.store.conn.row_batches("messages", None, columns=tuple(columns))

    def turns_now(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The turns (``turns``' columns) of ``ids`` still stored, read at the table's newest version (a check made
        under ``rewriting_texts``), ``ID_BATCH`` ids a read."""
        return [
            r
            for start in range(0, len(ids), ID_BATCH)
            for r in self.store.conn.rows(
                "messages", Filter(ids=tuple(ids[start : start + ID_BATCH])), columns=TURN_COLUMNS, latest=True
            )
        ]

    def keyword_texts(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The id, content, creation time and keyword text of the messages ``ids`` still stored, ``ID_BATCH`` ids a
        read."""
        return [
            r
            for start in range(0, len(ids), ID_BATCH)
            for r in self.store.conn.rows(
                "messages",
                Filter(ids=tuple(ids[start : start + ID_BATCH])),
                columns=("id", "content", "text", "created_us"),
            )
        ]

    def undecided_plumbing(self) -> int:
        """Messages an older tiermem wrote without the ``plumbing`` column since the store was migrated (a count)."""
        return self.store.rows.count("messages", Filter(undecided=True))

    def set_keyword_texts(self, ids: Sequence[str], text_of: Callable[[dict[str, Any]], str]) -> int:
        """Write the keyword text of the messages ``ids`` anew as ``text_of(the row)``, ``ID_BATCH`` at a time; returns
        the rows written (those whose text changes; one deleted meanwhile stays so: ``Rows.set_texts``)."""
        return sum(
            self.store.rows.set_texts("messages", ids[start : start + ID_BATCH], text_of)
            for start in range(0, len(ids), ID_BATCH)
        )

    def unsettle_keyword_contexts(self) -> None:
        """Unmark the store (``KEYWORD_CONTEXT``): rows an older tiermem wrote since it was marked may hold a tool's
        result in their keyword text (``Rows.settle_plumbing`` found some), so ``recontext`` runs again (and one
        under way does not mark it: ``unmarked``, which it compares and marks under ``rewriting_texts``, held here too,
        as a server's upkeep holds it: ``Rows.settle_plumbing_round``)."""
        with self.rewriting_texts():
            self.store.conn.unsettle_keyword_contexts()

    def unmarked(self) -> str:
        """What the store holds of when it was last unmarked (``KEYWORD_CONTEXT_UNMARKED``): ``recontext`` reads it
        before its rows and marks the store only if it is the same then (under ``rewriting_texts``)."""
        return self.store.conn.meta().get(KEYWORD_CONTEXT_UNMARKED, "")

    def keyword_contexts_settled(self) -> bool:
        """Whether the store is marked as holding no keyword text of a tool's result (``KEYWORD_CONTEXT``)."""
        return bool(self.store.conn.meta().get(KEYWORD_CONTEXT))

    def settle_keyword_contexts(self, unmarked: str) -> bool:
        """Mark the store (``KEYWORD_CONTEXT``) unless it was unmarked since ``unmarked`` (``self.unmarked()``) was
        read; returns whether it is marked. The caller holds ``rewriting_texts``."""
        if self.unmarked() != unmarked:
            return False
        self.store.conn.set_meta(KEYWORD_CONTEXT, "1")
        return True

    def fields(self, table: str) -> list[str]:
        """The columns of ``table`` a restored row must have (those the store derives as it writes a row, ``DERIVED``,
        left out)."""
        derived = DERIVED.get(table, ())
        return [f for f in self.store.conn.schema_fields(_searchable(table)) if f not in derived]


def _regrammed(row: dict[str, Any]) -> str:
    """A stored row's keyword text written anew with the bigrams of its Chinese, Japanese and Korean words."""
    return keyword_text(base_of(row["text"] or ""))


def _fits(vector: object, dim: int) -> bool:
    return isinstance(vector, list) and len(vector) == dim


def _searchable(table: str) -> str:
    if table not in SEARCHABLE:
        raise ValidationError(
            f"{table!r} is not a table of recall or archival memory; use one of {', '.join(SEARCHABLE)}."
        )
    return table
