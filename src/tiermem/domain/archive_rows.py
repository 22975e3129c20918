"""Recall and archival rows read and written whole, apart from searching: an agent's rows for export and
deletion, a conversation's messages for the agent loop, rows of no agent or without vectors, raw rows for backup.
A part of ``Archive`` (a mixin over its ``store``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from ..base.records import Message, Passage
from ..store import SEARCHABLE, Filter, passage_from_row

if TYPE_CHECKING:
    from ..store import Store

EVERY_ROW = 10**9  # a page size that is every row of one agent


class AgentRows:
    store: Store

    def passages_of(self, agent_id: str, *, tags_any: Sequence[str] | None = None) -> list[Passage]:
        """Every passage of an agent (with at least one of ``tags_any``, if given), oldest first."""
        where = Filter(agent_id=agent_id, tags_any=None if tags_any is None else tuple(tags_any))
        return [passage_from_row(r) for r in self.store.rows.select("passages", where, limit=EVERY_ROW)]

    def messages_of(self, agent_id: str) -> list[Message]:
        """Every message of an agent, by conversation (``default`` first) then order (for export and backup)."""
        return self.store.rows.agent_messages(agent_id)

    def delete_agent_data(self, agent_id: str) -> int:
        """Delete every message and passage of an agent; returns how many rows went."""
        where = Filter(agent_id=agent_id)
        return sum(self.store.rows.delete(table, where) for table in ("messages", "passages"))

    def missing_vectors(self) -> dict[str, int]:
        """Rows stored without a vector, per table (a full count: it reads every row's vector column)."""
        return {table: self.store.rows.count(table, Filter(missing_vector=True)) for table in SEARCHABLE}

    def stray_rows(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """Messages and passages of none of ``agent_ids`` (every row when there are none), per table."""
        where = Filter(not_agent_ids=tuple(agent_ids))
        return {table: self.store.rows.count(table, where) for table in SEARCHABLE}

    def messages_since(self, agent_id: str, conversation_id: str, start_seq: int) -> list[Message]:
        """Messages of one conversation with ``seq >= start_seq``, oldest first (the agent loop's window)."""
        return self.store.rows.messages_since(agent_id, conversation_id, start_seq)

    def message(self, message_id: str) -> Message | None:
        return self.store.rows.message(message_id)

    def version(self, table: str) -> int:
        """The version of ``messages`` or ``passages``: it moves with every write, by any process."""
        return self.store.conn.version(table)

    # -- backup and restore: the raw rows of messages and passages (``CoreStore`` holds the rest) --

    @property
    def embedding_model(self) -> str:
        return self.store.conn.embedding_model

    @property
    def embedding_dim(self) -> int:
        return self.store.conn.embedding_dim

    def all_rows(self, table: str) -> list[dict[str, Any]]:
        return self.store.rows.all_rows(_searchable(table))

    def merge_rows(self, table: str, key: str, rows: Sequence[dict[str, Any]]) -> int:
        """Insert the rows whose ``key`` is not stored yet (a restore is re-runnable); returns rows inserted."""
        return self.store.rows.merge_rows(_searchable(table), key, rows)

    def schema_fields(self, table: str) -> list[str]:
        return self.store.conn.schema_fields(_searchable(table))

    def optimize(self) -> dict[str, str]:
        """Compact every table of the store and bring its indexes up to date; table -> outcome."""
        return self.store.indexes.optimize()


def _searchable(table: str) -> str:
    if table not in SEARCHABLE:
        raise ValidationError(f"{table!r} is not a table of recall or archival memory; use one of {', '.join(SEARCHABLE)}.")
    return table
