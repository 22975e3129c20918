"""The core tables an older tiermem kept in LanceDB (agents, blocks, attachments, whole-value block history,
idempotency keys, conversation state), read once to move them into the SQLite core (a local data directory) or
the object-storage core (a uri). Nothing writes them any more; once moved they are emptied and purged
(``migrate.retire_lance_core``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .protocol import CORE_TABLES
from .rows import CoreRow, rows_of

if TYPE_CHECKING:
    from ..store import Store


class LanceCoreTables:
    def __init__(self, store: Store) -> None:
        self.store = store

    def all_rows(self, table: str) -> list[CoreRow]:
        """Every row of ``table``; of a block stored twice (a concurrent first start), the newest copy."""
        rows = self.store.rows.all_rows(table)
        return rows_of(table, newest_by(rows) if table == "blocks" else rows, older=True)

    def rows(self) -> dict[str, list[CoreRow]]:
        """Every core table's rows (empty lists for a store that never held core state)."""
        return {t: self.all_rows(t) for t in CORE_TABLES}


def newest_by(rows: Iterable[dict[str, Any]], key: str = "id") -> list[dict[str, Any]]:
    """One row per ``key``: the one with the highest ``version`` (ties: the first seen), in first-seen order.

    Concurrent first starts of an older tiermem could each insert a block (LanceDB's insert-only merge does not
    conflict), and one of those inserts could land after edits began: the copy with the highest version is the
    block as it was last edited."""
    best: dict[Any, dict[str, Any]] = {}
    for r in rows:
        seen = best.get(r[key])
        if seen is None or int(r["version"]) > int(seen["version"]):
            best[r[key]] = r
    return list(best.values())
