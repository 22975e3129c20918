"""Core state in the LanceDB tables of ``Store`` (object storage, ``memory://``, or forced by settings).

Optimistic concurrency over LanceDB commits: ``commit_edit`` is a conditional update followed by
a history append (two commits, so not atomic; ``Memory`` repairs a history gap left by a writer
killed between them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import StoreError
from ..records import Agent, Block, BlockVersion

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)


T = TypeVar("T")


class LanceCore:
    atomic = False
    name = "lancedb"
    watch_cheap = False  # each table version is a listing of the table's manifests: remote requests on a bucket

    def __init__(self, store: Store) -> None:
        self.store = store

    def read_cached(self, fn: Callable[[], T]) -> tuple[T] | None:
        return None  # every read checks the table versions: I/O, never on the event loop

    def change_token(self) -> object:
        """The versions of the agents, blocks and attachments tables (any process's commit moves one)."""
        return tuple(self.store.version(t) for t in ("agents", "blocks", "attachments"))

    def list_agents(self) -> list[Agent]:
        return self.store.list_agents()

    def find_agent(self, name: str) -> Agent | None:
        return self.store.find_agent(name)

    def get_agent(self, agent_id: str) -> Agent:
        return self.store.get_agent(agent_id)

    def insert_agent(self, agent: Agent) -> None:
        self.store.insert_agent(agent)

    def update_agent(self, agent: Agent) -> None:
        self.store.update_agent(agent)

    def delete_agent(self, agent_id: str) -> None:
        self.store.delete_agent_state(agent_id)

    def get_conversation(self, agent_id: str, conversation_id: str) -> dict[str, Any] | None:
        return self.store.get_conversation(agent_id, conversation_id)

    def put_conversation(self, row: dict[str, Any]) -> None:
        self.store.put_conversation(row)

    def get_block(self, block_id: str) -> Block | None:
        return self.store.get_block(block_id)

    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        return self.store.get_blocks(block_ids)

    def attached_block_ids(self, agent_id: str) -> list[str]:
        return self.store.attached_block_ids(agent_id)

    def agents_of_block(self, block_id: str) -> list[str]:
        return self.store.agents_of_block(block_id)

    def insert_block(self, block: Block, first: BlockVersion) -> None:
        self.store.insert_block(block, first)

    def commit_edit(self, block: Block, expected_version: int, version: BlockVersion) -> bool:
        if not self.store.cas_block(block, expected_version):
            return False
        try:
            self.store.append_history(version)
        except StoreError as exc:  # the edit itself is saved; the next edit or read fills the gap
            log.warning("block %s version %d saved without its history row: %s", block.id, block.version, exc)
        return True

    def recover_history(self, version: BlockVersion) -> None:
        self.store.recover_history(version)

    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]:
        return self.store.history(block_id, limit)

    def history_version(self, block_id: str, version: int) -> BlockVersion | None:
        return self.store.history_version(block_id, version)

    def attach(self, agent_id: str, block_id: str) -> None:
        self.store.attach(agent_id, block_id)

    def detach(self, agent_id: str, block_id: str) -> None:
        self.store.detach(agent_id, block_id)

    def get_request(self, key: str) -> dict[str, Any] | None:
        return self.store.get_request(key)

    def put_request(self, row: dict[str, Any]) -> None:
        self.store.put_request(row)

    def all_rows(self, table: str) -> list[dict[str, Any]]:
        from ..store.rows import newest_by

        rows = self.store.all_rows(table)
        return newest_by(rows) if table == "blocks" else rows  # a stale copy from a concurrent first start never leaves

    def merge_rows(self, table: str, key: str, rows: Sequence[dict[str, Any]]) -> int:
        return self.store.merge_rows(table, key, rows)

    def schema_fields(self, table: str) -> list[str]:
        return self.store.schema_fields(table)

    def close(self) -> None:
        """Nothing to release: LanceDB holds no open file between calls."""

    def describe(self) -> str:
        return f"LanceDB tables at {self.store.uri}"
