"""Core state on object storage: one object per block, per agent and per agent's list of blocks, each changed
only by a conditional PUT on the ETag it was read with (layout: object_layout.py).

An edit reads the agent's list of blocks and the block's head (conditional GETs: a cached copy costs a 304)
and writes the head once, with If-Match: value, version and history entry in one request, so it is atomic; a
writer that lost the race gets 412, writes nothing, and the caller re-reads and retries. No request lists a
growing folder and nothing accumulates per edit but the history itself (about the size of each change; sealed
into segments of ~16 KB). Every read asks the store (at most a 304), so every replica sees every acknowledged
write. Attaching writes the block's head (its agents) before the agent's list; detaching the other way round,
so the heads' lists of agents are a superset that ``agents_of_block`` checks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..base.errors import NotFoundError, StoreError
from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult, now, to_us
from . import object_history as segments
from . import object_rows
from .bucket import NOT_MODIFIED, Bucket
from .history import checkpoint, encode
from .object_layout import (AGENTS, ATTACHED, BLOCKS, CONVERSATIONS, FORMAT, FORMAT_PATH, REQUESTS, Attached, Head, Link,
                           agent_json, agent_of, agent_path, attached_json, attached_of, attached_path,
                           conversation_path, dumps, head_json, head_of, head_path, id_of, loads, request_path)
from .protocol import FIELDS
from .rows import CoreRow, result_from_row, result_row, window_from_row, window_row

log = logging.getLogger(__name__)
T = TypeVar("T")
_CAS_ATTEMPTS = 100
UPKEEP_SEALS = 8  # a process tidies a block's history after this many of its edits sealed a segment


class ObjectCore:
    atomic = True
    name = "object"
    watch_cheap = False  # change_token costs requests: poll it every watch_seconds

    def __init__(self, bucket: Bucket, *, grace_seconds: float = segments.GRACE_SECONDS) -> None:
        """``grace_seconds``: how old a history segment off every chain must be before upkeep deletes it. A writer
        gives up an edit that took over ``segments.WRITER_SECONDS`` between its segment and its commit, so the
        default (4x that) is safe; a smaller one only while nobody edits (tests)."""
        self.bucket = bucket
        self.grace_seconds = grace_seconds
        self._cache: dict[str, tuple[str, Any]] = {}  # path -> (ETag, parsed object)
        self._lock = threading.Lock()
        self._seals: dict[str, int] = {}  # block id -> segments this process sealed
        self._upkeep = threading.Lock()

    @classmethod
    def open(cls, bucket: Bucket, *, grace_seconds: float = segments.GRACE_SECONDS) -> ObjectCore:
        """The core state under ``bucket`` (created there if it has none)."""
        core = cls(bucket, grace_seconds=grace_seconds)
        if not core.exists():
            core.mark_created()
        return core

    def exists(self) -> bool:
        return self.bucket.get(FORMAT_PATH) is not None

    def mark_created(self) -> None:
        self.bucket.create(FORMAT_PATH, dumps({"format": FORMAT, "created_us": to_us(now())}))

    # -- reading with the cache ---------------------------------------------------------------

    def _read(self, path: str, parse: Callable[[bytes], T]) -> tuple[T, str] | None:
        """The object at ``path`` parsed, and its ETag; a cached copy is re-validated (one conditional GET)."""
        with self._lock:
            cached = self._cache.get(path)
        stored = self.bucket.get(path, cached[0] if cached else None)
        return self._settle(path, stored, cached, parse)

    def _read_many(self, paths: Sequence[str], parse: Callable[[bytes], T]) -> dict[str, tuple[T, str]]:
        with self._lock:
            cached = {p: self._cache[p] for p in paths if p in self._cache}
        got = self.bucket.get_many(list(dict.fromkeys(paths)), {p: c[0] for p, c in cached.items()})
        out = {}
        for path, stored in got.items():
            found = self._settle(path, stored, cached.get(path), parse)
            if found is not None:
                out[path] = found
        return out

    def _settle(self, path: str, stored: Any, cached: tuple[str, Any] | None,
                parse: Callable[[bytes], T]) -> tuple[T, str] | None:
        with self._lock:
            if stored is None:
                self._cache.pop(path, None)
                return None
            if stored is NOT_MODIFIED and cached is not None:
                return cached[1], cached[0]
            value = parse(stored.data)
            self._cache[path] = (stored.etag, value)
            return value, stored.etag

    def _remember(self, path: str, etag: str, value: object) -> None:
        with self._lock:
            self._cache[path] = (etag, value)

    def _forget(self, path: str) -> None:
        with self._lock:
            self._cache.pop(path, None)

    def _update(self, path: str, parse: Callable[[bytes], T], change: Callable[[T | None], T | None],
                dump: Callable[[T], bytes]) -> T | None:
        """Read-modify-write ``path`` with conditional PUTs until it sticks; ``change`` gets the current value (None
        if absent) and returns the new one (None: leave it). Returns what is stored afterwards."""
        for _ in range(_CAS_ATTEMPTS):
            found = self._read(path, parse)
            current = found[0] if found else None
            new = change(current)
            if new is None or new == current:
                return current
            data = dump(new)
            etag = self.bucket.replace(path, data, found[1]) if found else self.bucket.create(path, data)
            if etag is not None:
                self._remember(path, etag, new)
                return new
            self._forget(path)
            time.sleep(0.002)
        raise StoreError(f"{path} is being changed by other writers and {_CAS_ATTEMPTS} attempts failed; nothing "
                         "more was written. Try again.")

    def read_cached(self, fn: Callable[[], T]) -> tuple[T] | None:
        return None  # every read asks the store (a conditional GET): I/O, never on the event loop

    def change_token(self) -> object:
        """The ETags of every agent, list of blocks and block head (three listings): any commit to them changes it."""
        return tuple((i.path, i.etag) for prefix in (AGENTS, ATTACHED, BLOCKS) for i in self.bucket.list(prefix))

    # -- agents --------------------------------------------------------------------------------

    def list_agents(self) -> list[Agent]:
        found = self._read_many([i.path for i in self.bucket.list(AGENTS)], agent_of)
        return sorted((a for a, _ in found.values()), key=lambda a: a.name)

    def find_agent(self, name: str) -> Agent | None:
        named = [a for a in self.list_agents() if a.name == name]
        return min(named, key=lambda a: a.created_at) if named else None

    def get_agent(self, agent_id: str) -> Agent:
        found = self._read(agent_path(agent_id), agent_of)
        if found is None:
            raise NotFoundError(f"No agent with id {agent_id!r}. List agents with `tiermem agents list`.")
        return found[0]

    def insert_agent(self, agent: Agent) -> None:
        self.bucket.create(agent_path(agent.id), agent_json(agent))

    def update_agent(self, agent: Agent) -> None:
        self._update(agent_path(agent.id), agent_of,
                     lambda old: replace(agent, created_at=old.created_at) if old is not None else None, agent_json)

    def delete_agent(self, agent_id: str) -> None:
        """Delete the agent's whole core state: the blocks no other agent is attached to (with their history), its
        list of blocks, idempotency records and conversation state, and its own object last. Safe to run again
        after an interruption (every step is a delete of what is still there)."""
        attached = self._attached(agent_id)
        for block_id in attached.ids():
            if [a for a in self.agents_of_block(block_id) if a != agent_id]:
                self._update(head_path(block_id), head_of, lambda h: None if h is None or agent_id not in h.agents
                             else replace(h, agents=tuple(a for a in h.agents if a != agent_id)), head_json)
                continue
            for seg in segments.listed_segments(self.bucket, block_id):
                self.bucket.delete(seg.path)
            self.bucket.delete(head_path(block_id))
            self._forget(head_path(block_id))
        self.bucket.delete(attached_path(agent_id))
        self._forget(attached_path(agent_id))
        for prefix in (f"{REQUESTS}{agent_id}/", f"{CONVERSATIONS}{agent_id}/"):
            for item in self.bucket.list(prefix):
                self.bucket.delete(item.path)
        self.bucket.delete(agent_path(agent_id))
        self._forget(agent_path(agent_id))

    # -- blocks ----------------------------------------------------------------------------------

    def _head(self, block_id: str) -> tuple[Head, str] | None:
        return self._read(head_path(block_id), head_of)

    def _attached(self, agent_id: str) -> Attached:
        found = self._read(attached_path(agent_id), attached_of)
        return found[0] if found else Attached(agent_id)

    def get_block(self, block_id: str) -> Block | None:
        found = self._head(block_id)
        return found[0].block if found else None

    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        found = self._read_many([head_path(i) for i in block_ids], head_of)
        return [found[head_path(i)][0].block for i in dict.fromkeys(block_ids) if head_path(i) in found]

    def attached_block_ids(self, agent_id: str) -> list[str]:
        return self._attached(agent_id).ids()

    def agents_of_block(self, block_id: str) -> list[str]:
        found = self._head(block_id)
        if found is None:
            return []
        lists = self._read_many([attached_path(a) for a in found[0].agents], attached_of)
        return [a for a in found[0].agents if attached_path(a) in lists and block_id in lists[attached_path(a)][0].ids()]

    def find_block(self, agent_id: str, label: str) -> Block | None:
        attached = self._attached(agent_id)
        for link in attached.links:
            if link.label == label:
                found = self._head(link.block_id)
                if found is not None and found[0].block.label == label:
                    return found[0].block
        # a label renamed by a writer that stopped before updating this list: look at every block
        for block in self.get_blocks(attached.ids()):
            if block.label == label:
                self._relabel((agent_id,), block.id, block.label)
                return block
        return None

    def insert_block(self, block: Block, first: BlockVersion) -> None:
        entry = checkpoint(first)
        head = Head(block=block, tail=(entry,), chain=entry.chain, tail_bytes=entry.size())
        etag = self.bucket.create(head_path(block.id), head_json(head))
        if etag is not None:
            self._remember(head_path(block.id), etag, head)

    def commit_edit(self, previous: Block, block: Block, version: BlockVersion) -> tuple[str, ...] | None:
        """See ``CoreStore.commit_edit``: one conditional PUT of the head. The agents returned are the head's list
        as of the commit (a superset only after a writer died between a detach's two writes)."""
        path = head_path(block.id)
        with self._lock:
            cached = self._cache.get(path)
        if cached is None or cached[1].block.version != previous.version:
            found = self._head(block.id)  # the caller's read was not through this cache: read it now
            if found is None:
                return None
            cached = (found[1], found[0])
        head: Head = cached[1]
        if head.block.version != previous.version:
            return None
        entry = encode(head.block, head.chain, version)
        started = time.monotonic()
        sealed = segments.seal(self.bucket, head)
        kept, tail = sealed if sealed is not None else (head.sealed, head.tail)
        new = Head(block=block, agents=head.agents, sealed=kept, tail=(*tail, entry), chain=entry.chain,
                   tail_bytes=sum(e.size() for e in tail) + entry.size())
        if sealed is not None and time.monotonic() - started > segments.WRITER_SECONDS:
            return None  # too slow: its segment may be taken for an orphan and deleted; re-read and retry
        etag = self.bucket.replace(path, head_json(new), cached[0])
        if etag is None:
            # 412: another writer won, or this very PUT landed and a retry of it (object_store retries a request
            # whose answer was lost) found its own write. Only the head says which: ours has our block, to the µs.
            found = self._head(block.id)
            if found is None or found[0].block != block:
                return None  # nothing of ours was committed
            etag = found[1]
        self._remember(path, etag, new)
        if block.label != previous.label:
            self._relabel(head.agents, block.id, block.label)
        if sealed is not None:
            self._sealed(block.id)
        return head.agents

    def _sealed(self, block_id: str) -> None:
        """Count a segment sealed by this process; every ``UPKEEP_SEALS`` of a block, tidy its history in the
        background (merge small segments, delete those off the chain): objects stay bounded without a command."""
        with self._lock:
            n = self._seals[block_id] = self._seals.get(block_id, 0) + 1
        if n % UPKEEP_SEALS == 0:
            threading.Thread(target=self._tidy_quietly, args=(block_id,), name="tiermem-history-upkeep",
                             daemon=True).start()

    def _tidy_quietly(self, block_id: str) -> None:
        try:
            self.tidy_block(block_id)
        except StoreError as exc:  # upkeep only saves space: the next one tries again
            log.warning("history upkeep of block %s failed: %s", block_id, exc)

    def _relabel(self, agent_ids: Sequence[str], block_id: str, label: str) -> None:
        """Bring the label recorded in these agents' lists up to date (a lookup aid: failures only cost speed)."""
        def change(old: Attached | None) -> Attached | None:
            if old is None or all(x.block_id != block_id or x.label == label for x in old.links):
                return None
            return replace(old, links=tuple(replace(x, label=label) if x.block_id == block_id else x for x in old.links))

        for agent_id in agent_ids:
            try:
                self._update(attached_path(agent_id), attached_of, change, attached_json)
            except StoreError as exc:
                log.warning("could not record block %s's new label for agent %s: %s", block_id, agent_id, exc)

    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]:
        found = self._head(block_id)
        if found is None:
            return []
        top = found[0].block.version
        low = 1 if limit is None else max(1, top - int(limit) + 1)
        return segments.versions(self.bucket, found[0], low, top)[::-1]

    def history_version(self, block_id: str, version: int) -> BlockVersion | None:
        found = self._head(block_id)
        if found is None or not 1 <= version <= found[0].block.version:
            return None
        got = segments.versions(self.bucket, found[0], version, version)
        return got[-1] if got else None

    def attach(self, agent_id: str, block_id: str) -> None:
        found = self._update(head_path(block_id), head_of, lambda h: None if h is None or agent_id in h.agents
                             else replace(h, agents=(*h.agents, agent_id)), head_json)
        label = found.block.label if found is not None else ""
        link = Link(block_id, label, to_us(now()))
        self._update(attached_path(agent_id), attached_of,
                     lambda old: Attached(agent_id, (link,)) if old is None else None if block_id in old.ids()
                     else replace(old, links=(*old.links, link)), attached_json)

    def detach(self, agent_id: str, block_id: str) -> None:
        self._update(attached_path(agent_id), attached_of, lambda old: None if old is None or block_id not in old.ids()
                     else replace(old, links=tuple(x for x in old.links if x.block_id != block_id)), attached_json)
        self._update(head_path(block_id), head_of, lambda h: None if h is None or agent_id not in h.agents
                     else replace(h, agents=tuple(a for a in h.agents if a != agent_id)), head_json)

    # -- idempotency keys and conversation state -------------------------------------------------

    def get_request(self, key: str) -> StoredResult | None:
        stored = self.bucket.get(request_path(key))
        return result_from_row(loads(stored.data, "idempotency record")) if stored is not None else None

    def put_request(self, result: StoredResult) -> None:
        self.bucket.create(request_path(result.key), dumps(result_row(result)))

    def get_conversation(self, agent_id: str, conversation_id: str) -> ContextWindow | None:
        stored = self.bucket.get(conversation_path(agent_id, conversation_id))
        return window_from_row(loads(stored.data, "conversation state")) if stored is not None else None

    def put_conversation(self, window: ContextWindow) -> None:
        self.bucket.put(conversation_path(window.agent_id, window.conversation_id), dumps(window_row(window)))

    # -- upkeep ---------------------------------------------------------------------------------

    def tidy(self) -> dict[str, int]:
        """``tidy_block`` for every block (``tiermem optimize``); returns the totals."""
        total: dict[str, int] = {"segments merged": 0, "orphan segments deleted": 0}
        for item in self.bucket.list(BLOCKS):
            for key, n in self.tidy_block(id_of(item.path)).items():
                total[key] += n
        return total

    def tidy_block(self, block_id: str) -> dict[str, int]:
        """Merge runs of a block's small history segments into one and delete the segments no chain uses that are
        older than the grace period (replaced by a merge, or left by a writer that lost a race after writing one).
        Any replica may run it at any time, alone or with others: segments are never changed, only added (a merge
        writes what its pieces hold) or deleted once off the chain."""
        if not self._upkeep.acquire(blocking=False):
            return {"segments merged": 0, "orphan segments deleted": 0}  # one at a time per process
        try:
            found = self._head(block_id)
            if found is None:
                return {"segments merged": 0, "orphan segments deleted": 0}
            merged = segments.merge(self.bucket, found[0])
            deleted = 0
            for seg in segments.orphans(segments.listed_segments(self.bucket, block_id), found[0].sealed,
                                        self.grace_seconds):
                self.bucket.delete(seg.path)
                deleted += 1
            return {"segments merged": merged, "orphan segments deleted": deleted}
        finally:
            self._upkeep.release()

    # -- whole tables (backup, restore, migration, doctor) -----------------------------------------

    def all_rows(self, table: str) -> list[CoreRow]:
        return object_rows.all_rows(self.bucket, table)

    def merge_rows(self, table: str, key: str, rows: Sequence[CoreRow]) -> int:
        try:
            return object_rows.merge_rows(self.bucket, table, rows)
        finally:
            with self._lock:
                self._cache.clear()

    def schema_fields(self, table: str) -> list[str]:
        return list(FIELDS[object_rows.check_table(table)])

    def describe(self) -> str:
        return f"objects under {self.bucket.uri}/core (one per block, conditional PUTs)"

    def close(self) -> None:
        self.bucket.close()

