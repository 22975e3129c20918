"""An agent's recall and archival rows taken whole: listing them for export, deleting them, finding rows of no
agent or without vectors. A part of ``Archive`` (a mixin over its ``store``), kept apart from searching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .records import Message, Passage
from .store import SEARCHABLE, Filter, passage_from_row

if TYPE_CHECKING:
    from .store import Store

EVERY_ROW = 10**9  # a page size that is every row of one agent


class AgentRows:
    store: Store

    def passages_of(self, agent_id: str, *, tags_any: Sequence[str] | None = None) -> list[Passage]:
        """Every passage of an agent (with at least one of ``tags_any``, if given), oldest first."""
        where = Filter(agent_id=agent_id, tags_any=None if tags_any is None else tuple(tags_any))
        return [passage_from_row(r) for r in self.store.select("passages", where, limit=EVERY_ROW)]

    def messages_of(self, agent_id: str) -> list[Message]:
        """Every message of an agent, by conversation (``default`` first) then order (for export and backup)."""
        return self.store.agent_messages(agent_id)

    def delete_agent_data(self, agent_id: str) -> int:
        """Delete every message and passage of an agent; returns how many rows went."""
        where = Filter(agent_id=agent_id)
        return sum(self.store.delete(table, where) for table in ("messages", "passages"))

    def missing_vectors(self) -> dict[str, int]:
        """Rows stored without a vector, per table (a full count: it reads every row's vector column)."""
        return {table: self.store.count(table, Filter(missing_vector=True)) for table in SEARCHABLE}

    def stray_rows(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """Messages and passages of none of ``agent_ids`` (every row when there are none), per table."""
        where = Filter(not_agent_ids=tuple(agent_ids))
        return {table: self.store.count(table, where) for table in SEARCHABLE}
