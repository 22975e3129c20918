"""The small tables: agents, blocks, their attachments and history, idempotency records, conversation state.

They are read whole and cached until their version moves (``StoreBase._snapshot``); a block edit is a
conditional update (compare-and-swap on its version)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import NotFoundError
from ..records import Agent, Block, BlockVersion, now, to_us
from .base import StoreBase
from .boundary import reads, writes
from .query import Filter, sql_str
from .rows import agent_from_row, agent_to_row, block_from_row, block_to_row, first_by, newest_by, version_from_row, version_to_row


class CoreTables(StoreBase):
    # -- agents --------------------------------------------------------------

    @reads("agents")
    def list_agents(self) -> list[Agent]:
        rows = first_by(self._snapshot("agents"), "id")
        return sorted((agent_from_row(r) for r in rows), key=lambda a: a.name)

    @reads("agents")
    def find_agent(self, name: str) -> Agent | None:
        rows = [r for r in self._snapshot("agents") if r["name"] == name]
        return agent_from_row(rows[0]) if rows else None

    @reads("agents")
    def get_agent(self, agent_id: str) -> Agent:
        rows = [r for r in self._snapshot("agents") if r["id"] == agent_id]
        if not rows:
            raise NotFoundError(f"No agent with id {agent_id!r}. List agents with `tiermem agents list`.")
        return agent_from_row(rows[0])

    @writes("an agent")
    def insert_agent(self, agent: Agent) -> None:
        self._tables["agents"].merge_insert("id").when_not_matched_insert_all().execute([agent_to_row(agent)])
        self._wrote()

    @writes("an agent")
    def update_agent(self, agent: Agent) -> None:
        row = agent_to_row(agent)
        del row["id"]
        self._tables["agents"].update(where=f"id = {sql_str(agent.id)}", values=row)
        self._wrote()

    def delete_agent_state(self, agent_id: str) -> None:
        """Delete an agent's row first (a half-deleted agent is not found), then its attachments and conversation state."""
        self.delete("agents", Filter(ids=(agent_id,)))
        for table in ("attachments", "conversations"):
            self.delete(table, Filter(agent_id=agent_id))

    # -- conversations (agent-loop state) -----------------------------------------

    @reads("conversation state")
    def get_conversation(self, agent_id: str, conversation_id: str) -> dict[str, Any] | None:
        key = f"{agent_id}:{conversation_id}"
        rows = [r for r in self._snapshot("conversations") if r["key"] == key]
        return rows[0] if rows else None

    @writes("conversation state")
    def put_conversation(self, row: dict[str, Any]) -> None:
        row = {**row, "key": f"{row['agent_id']}:{row['conversation_id']}", "updated_us": to_us(now())}
        t = self._tables["conversations"]
        t.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([row])
        self._wrote()

    # -- blocks --------------------------------------------------------------

    @reads("blocks")
    def get_block(self, block_id: str) -> Block | None:
        rows = newest_by(r for r in self._snapshot("blocks") if r["id"] == block_id)
        return block_from_row(rows[0]) if rows else None

    @reads("blocks")
    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        wanted = set(block_ids)
        rows = newest_by(r for r in self._snapshot("blocks") if r["id"] in wanted)
        return [block_from_row(r) for r in rows]


    @reads("block attachments")
    def attached_block_ids(self, agent_id: str) -> list[str]:
        rows = [r for r in self._snapshot("attachments") if r["agent_id"] == agent_id]
        rows.sort(key=lambda r: (r["created_us"], r["block_id"]))
        return [r["block_id"] for r in first_by(rows, "block_id")]

    @reads("block attachments")
    def agents_of_block(self, block_id: str) -> list[str]:
        rows = [r for r in self._snapshot("attachments") if r["block_id"] == block_id]
        return [r["agent_id"] for r in first_by(rows, "agent_id")]

    @writes("a block")
    def insert_block(self, block: Block, first: BlockVersion) -> None:
        """Create a block and its first history row (idempotent for a stable id)."""
        result = self._tables["blocks"].merge_insert("id").when_not_matched_insert_all().execute([block_to_row(block)])
        if result.num_inserted_rows:
            self.append_history(first)
        self._wrote()

    @writes("a block edit")
    def cas_block(self, block: Block, expected_version: int) -> bool:
        """Write ``block`` only if the stored version is still ``expected_version``.

        A conditional update: when another process commits first, Lance re-checks the
        condition against its commit, so exactly one writer of each version wins.
        """
        row = block_to_row(block)
        del row["id"]
        cached = self._snapshots.get("blocks")
        result = self._tables["blocks"].update(
            where=f"id = {sql_str(block.id)} AND version = {int(expected_version)}", values=row
        )
        self._wrote()
        if result.rows_updated and cached is not None and int(result.version) == cached[0] + 1:
            # Nobody else committed in between: the snapshot plus our row is exactly the new version.
            rows = [({**r, **row} if r["id"] == block.id else r) for r in cached[1]]
            self._snapshots["blocks"] = (int(result.version), rows)
        return bool(result.rows_updated)

    @writes("block history")
    def append_history(self, version: BlockVersion) -> None:
        """Append one history row; only the writer that won a version's CAS writes its row."""
        self._tables["block_history"].add([version_to_row(version)])
        self._wrote()

    @writes("block history")
    def recover_history(self, version: BlockVersion) -> None:
        """Insert a history row unless that version already has one (gap repair)."""
        self._tables["block_history"].merge_insert("key").when_not_matched_insert_all().execute([version_to_row(version)])
        self._wrote()

    @reads("block history")
    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]:
        rows = self._rows("block_history", f"block_id = {sql_str(block_id)}")
        rows.sort(key=lambda r: r["operation"] == "recovered")  # a writer's own row wins over a recovered copy
        rows = first_by(rows, "key")
        rows.sort(key=lambda r: r["version"], reverse=True)
        if limit is not None:
            rows = rows[:limit]
        return [version_from_row(r) for r in rows]

    @reads("block history")
    def history_version(self, block_id: str, version: int) -> BlockVersion | None:
        rows = self._rows("block_history", f"key = {sql_str(f'{block_id}:{int(version)}')}", limit=1)
        return version_from_row(rows[0]) if rows else None

    @writes("a block attachment")
    def attach(self, agent_id: str, block_id: str) -> None:
        row = {"key": f"{agent_id}:{block_id}", "agent_id": agent_id, "block_id": block_id, "created_us": to_us(now())}
        self._tables["attachments"].merge_insert("key").when_not_matched_insert_all().execute([row])
        self._wrote()

    @writes("a block attachment")
    def detach(self, agent_id: str, block_id: str) -> None:
        self._tables["attachments"].delete(f"key = {sql_str(f'{agent_id}:{block_id}')}")
        self._wrote()

    # -- idempotent requests ---------------------------------------------------

    @reads("an idempotency record")
    def get_request(self, key: str) -> dict[str, Any] | None:
        rows = self._rows("requests", f"key = {sql_str(key)}", limit=1)
        return rows[0] if rows else None

    @writes("an idempotency record")
    def put_request(self, row: dict[str, Any]) -> None:
        self._tables["requests"].merge_insert("key").when_not_matched_insert_all().execute([row])
        self._wrote()
