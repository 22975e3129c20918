"""The core-state interface shared by the SQLite and object-storage implementations."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol, TypeVar

from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult
from .rows import CORE_TABLES, FIELDS, CoreRow

__all__ = ["CORE_TABLES", "FIELDS", "CoreRow", "CoreStore", "LOCAL_POLL_SECONDS"]

T = TypeVar("T")

LOCAL_POLL_SECONDS = 0.05  # how often a cheap change token (``CoreStore.watch_cheap``) is polled


class CoreStore(Protocol):
    """Transactional core state. Every read sees every write acknowledged (by any process) before it started.
    ``atomic`` is True when an edit's value and history entry commit together (both implementations)."""

    atomic: bool
    name: str
    # True: ``change_token`` is a local check costing microseconds (poll it every ~50 ms); False: it costs a
    # request to remote storage (poll it every ``watch_seconds``).
    watch_cheap: bool

    # change detection (how a server learns of other processes' edits)
    def change_token(self, agents_only: bool = False) -> object:
        """An opaque value that differs from an earlier call's whenever another process (or another connection in
        this one) may have committed agents, blocks or attachments since. It may also differ when nothing changed
        (the caller re-reads and finds nothing new); it never stays equal across such a commit. It reads no table
        rows: SQLite's ``PRAGMA data_version``; on object storage the ETags of the agents, agents' block lists and
        blocks, from three listings. With ``agents_only``, it need only move with the agents' rows (their metadata
        holds the attached folders): on object storage one listing."""
        ...

    # agents
    def list_agents(self) -> list[Agent]: ...
    def find_agent(self, name: str) -> Agent | None: ...
    def get_agent(self, agent_id: str) -> Agent: ...
    def insert_agent(self, agent: Agent) -> None:
        """Store a new agent; refused (``ValidationError``, nothing stored) when an agent with another id has its
        name. The check and the insert are one step for every process (SQLite: one transaction; object storage:
        under the agent-names lease), so two creations of one name at once make one agent."""
        ...

    def update_agent(self, agent: Agent) -> None: ...
    def delete_agent(self, agent_id: str) -> None:
        """Delete the agent's core state: the blocks no other agent is attached to (with their history), its
        idempotency keys, conversation state, attachments, and its row last (or all in one transaction), so a
        deletion interrupted part way is found again by its row and finished. Safe to run twice."""
        ...

    # conversations (agent-loop state)
    def get_conversation(self, agent_id: str, conversation_id: str) -> ContextWindow | None: ...
    def put_conversation(self, window: ContextWindow) -> None:
        """Store the conversation's agent-loop state, replacing what was stored."""
        ...

    # reads that cannot block
    def read_cached(self, fn: Callable[[], T]) -> tuple[T] | None:
        """``(fn(),)`` if ``fn`` (reads of agents, blocks, attachments) can run now without waiting: the
        cached state is current and no writer holds it; else None (the caller reads the normal way)."""
        ...

    # blocks, attachments, history
    def get_block(self, block_id: str) -> Block | None: ...
    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]: ...
    def attached_block_ids(self, agent_id: str) -> list[str]: ...
    def agents_of_block(self, block_id: str) -> list[str]: ...
    def find_block(self, agent_id: str, label: str) -> Block | None:
        """The block attached to ``agent_id`` whose label is ``label`` (already normalised), or None."""
        ...

    def insert_block(self, block: Block, first: BlockVersion) -> None:
        """Create ``block`` with its first history entry; nothing if a block with its id exists."""
        ...

    def create_block(self, agent_id: str, block: Block, first: BlockVersion) -> None:
        """Create ``block`` with its first history entry, attached to ``agent_id``; refused (``LabelTakenError``,
        nothing written) when a block attached to the agent has its label. The check and the writes are one step
        for every process (SQLite: one transaction; object storage: under the agent's labels lease), so of two
        creations of one label at once exactly one makes a block."""
        ...

    def commit_edit(self, previous: Block, block: Block, version: BlockVersion) -> tuple[str, ...] | None:
        """Write ``block`` and its history entry ``version`` together if the stored block is still ``previous``
        (same version: its number and commit time, so a block deleted and made again under its id is not it). None,
        writing nothing, if another writer got there first; else the ids of the agents the
        block is attached to as of the commit (whom to notify). The entry is stored as the change from
        ``previous`` (history costs about the size of the change) and read back whole. A rename (another label) is
        refused (``LabelTakenError``, nothing written) when an agent the block is attached to has another block of
        that label, checked in the same step as ``create_block`` checks."""
        ...

    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]: ...
    def history_version(self, block_id: str, version: int) -> BlockVersion | None: ...
    def forget_versions(self, block_id: str, versions: Collection[int]) -> int:
        """Remove these past versions (the current one never) from the block's history, storing the versions kept
        afresh so that no delta, checkpoint or base still holds a forgotten value; returns how many were removed.
        One commit (a transaction; on object storage one conditional PUT of the head, the objects it replaced
        deleted once it landed)."""
        ...

    def forget_requests(self, text: str, *, agent_id: str | None) -> int:
        """Delete the idempotency records of agent ``agent_id`` (None: of every agent, a whole-store forget) whose
        stored result holds ``text``; returns how many. The scope is required: a forget for one agent must never
        reach (or tell about) another agent's records."""
        ...

    # the forget record (``core/forget_record.py``): keys of what was forgotten (digests, never text), so a restore
    # of an older backup leaves it out
    def record_forgotten(self, keys: Collection[str]) -> int:
        """Add ``keys`` to the forget record (one commit); returns how many."""
        ...

    def forgotten_keys(self) -> set[str]: ...
    def unrecord_forgotten(self, keys: Collection[str]) -> int:
        """Take ``keys`` out of the forget record (a restore asked to bring them back); returns how many."""
        ...

    def purge(self) -> dict[str, int]:
        """Remove from the storage what deletions left behind, now (SQLite: ``VACUUM`` and the WAL truncated;
        object storage: history objects no chain uses, the grace period aside). What it did, by name."""
        ...

    def attach(self, agent_id: str, block_id: str, *, unique_label: bool = False) -> None:
        """Attach the block to the agent (nothing if it is). With ``unique_label``: refused (``LabelTakenError``,
        nothing written) when another block attached to the agent has its label, checked in the same step as
        ``create_block`` checks."""
        ...

    def detach(self, agent_id: str, block_id: str) -> None: ...

    # idempotency keys: a call claims its key (a pending record), writes, then records its result in the claim's
    # place (or drops the claim when it failed); every step is one atomic, conditional write for every process
    def get_request(self, key: str) -> StoredResult | None: ...
    def claim_request(self, claim: StoredResult, replacing: StoredResult | None = None) -> StoredResult | None:
        """Store ``claim`` under its key if nothing is stored there (or what is stored is still ``replacing``: a stale
        claim taken over) and return None; otherwise store nothing and return what is stored. One step for every
        process (SQLite: one transaction; object storage: a create-if-absent or replace-if-unchanged PUT), so of
        two claims of one key at once exactly one is stored."""
        ...

    def put_request(self, result: StoredResult, claim: StoredResult | None = None) -> None:
        """Keep ``result`` under its key in place of ``claim`` (this caller's pending claim) if that is still stored,
        or where nothing is stored; nothing otherwise (the first result stands)."""
        ...

    def drop_request(self, claim: StoredResult) -> None:
        """Delete ``claim`` if it is still what is stored under its key (its call failed: a retry may write)."""
        ...

    # whole tables (backup, restore, migration, doctor): rows of ``FIELDS[table]`` (typed in rows.py)
    def all_rows(self, table: str) -> list[CoreRow]:
        """Every row of ``table``; ``block_history`` as whole values, one row per version."""
        ...

    def merge_rows(self, table: str, key: str, rows: Sequence[CoreRow], *, fill_gaps: bool = False) -> int:
        """Insert the rows whose ``key`` is not stored yet (a restore or migration is re-runnable); returns how many.
        ``fill_gaps``: block versions a history lacks below its newest (forgotten here) are put back too, a restore
        ``--include-forgotten`` (object storage reads each block's head for it; SQLite inserts them either way)."""
        ...

    def schema_fields(self, table: str) -> list[str]: ...
    def describe(self) -> str: ...
    def tidy(self) -> dict[str, int]:
        """Upkeep ``tiermem optimize`` runs (what it did, by name); it also runs in the background where needed."""
        ...

    def close(self) -> None: ...
