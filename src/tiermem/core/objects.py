"""Core state on object storage: one object per block, per agent and per agent's list of blocks, each changed
only by a conditional PUT on the ETag it was read with (layout: object_layout.py).

Reads go through an ``ObjectCache`` (object_cache.py). An edit reads the agent's list of blocks and the block's
head (conditional GETs: a cached copy costs a 304) and writes the head once, with If-Match: value, version and
history entry in one request, so it is atomic; a writer that lost the race gets 412, writes nothing, and the caller re-reads and retries. No request lists a
growing folder and nothing accumulates per edit but the history itself (about the size of each change; sealed
into segments of ~16 KB). Every read asks the store (at most a 304), so every replica sees every acknowledged
write. Attaching writes the block's head (its agents) before the agent's list; detaching the other way round,
so the heads' lists of agents are a superset that ``agents_of_block`` checks.

Why this module is long: ``ObjectCore`` implements the whole ``CoreStore`` protocol with conditional requests; its
layout, cache, history segments, whole-table rows and idempotency records are already modules of their own
(``object_*.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import TypeVar

from ..base.errors import NotFoundError, StoreError
from ..base.records import Agent, Block, BlockVersion, ContextWindow, StoredResult, now, to_us
from . import forget_record, object_rows
from . import object_history as segments
from .bucket import Bucket
from .history import checkpoint, encode, replay, rewrite
from .lease import AGENT_NAMES_LEASE, AGENT_NAMES_SECONDS, LABELS_SECONDS, Lease, labels_lease
from .object_cache import ObjectCache
from .object_layout import (
    AGENTS,
    ATTACHED,
    BLOCKS,
    CONVERSATIONS,
    FORMAT,
    FORMAT_PATH,
    INLINE_CHARS,
    REQUESTS,
    REQUESTS_LAYOUT,
    Attached,
    Head,
    Link,
    agent_json,
    agent_of,
    agent_path,
    attached_json,
    attached_of,
    attached_path,
    checksum,
    checksum_after,
    conversation_path,
    dumps,
    head_json,
    head_of,
    head_path,
    id_of,
    loads,
    segment_json,
    segment_path,
    value_path,
)
from .object_requests import OLD_REQUESTS_SECONDS, Requests
from .protocol import FIELDS
from .rows import CoreRow, label_taken, name_taken, window_from_row, window_row

log = logging.getLogger(__name__)
T = TypeVar("T")
UPKEEP_SEALS = 8  # a process tidies a block's history after this many of its edits sealed a segment


class ObjectCore:
    atomic = True
    name = "object"
    watch_cheap = False  # change_token costs requests: poll it every watch_seconds

    def __init__(
        self,
        bucket: Bucket,
        *,
        grace_seconds: float = segments.GRACE_SECONDS,
        old_requests_seconds: float = OLD_REQUESTS_SECONDS,
    ) -> None:
        """``grace_seconds``: how old a history segment off every chain must be before upkeep deletes it. A writer
        gives up an edit that took over ``segments.WRITER_SECONDS`` between its segment and its commit, so the
        default (4x that) is safe; a smaller one only while nobody edits (tests). ``old_requests_seconds``: how
        long a look for idempotency records of the old layout holds (``object_requests``)."""
        self.bucket = bucket
        self.cache = ObjectCache(bucket)
        self._lock = threading.Lock()
        self.grace_seconds = grace_seconds
        self.requests = Requests(bucket, old_requests_seconds)
        self._seals: dict[str, int] = {}  # block id -> segments this process sealed
        self._bases: dict[str, tuple[int, str]] = {}  # block id -> (version, value) of its newest base read here
        self._upkeep = threading.Lock()

    @classmethod
    def open(
        cls,
        bucket: Bucket,
        *,
        grace_seconds: float = segments.GRACE_SECONDS,
        old_requests_seconds: float = OLD_REQUESTS_SECONDS,
    ) -> ObjectCore:
        """The core state under ``bucket`` (created there if it has none)."""
        core = cls(bucket, grace_seconds=grace_seconds, old_requests_seconds=old_requests_seconds)
        if not core.exists():
            core.mark_created()
        return core

    def exists(self) -> bool:
        """True if core state is stored here. Idempotency records an older version kept at the top of
        ``requests/`` are moved under their agent's folder the first time (``format.json`` records it)."""
        stored = self.bucket.get(FORMAT_PATH)
        if stored is None:
            return False
        marker = loads(stored.data, "core state marker")
        if marker.get("requests", 1) < REQUESTS_LAYOUT:
            self.move_old_requests()
            # None (412): a replica starting at the same moment recorded it first
            self.bucket.replace(FORMAT_PATH, dumps({**marker, "requests": REQUESTS_LAYOUT}), stored.etag)
        return True

    def move_old_requests(self) -> int:
        return self.requests.move_old()

    def mark_created(self) -> None:
        self.requests.none_old()  # a new store: no records of the old layout
        self.bucket.create(
            FORMAT_PATH, dumps({"format": FORMAT, "created_us": to_us(now()), "requests": REQUESTS_LAYOUT})
        )

    # -- reading (through ``self.cache``) --------------------------------------------------------

    def _head_of(self, data: bytes) -> Head:
        """Parse a head; one stored without its value is rebuilt from this process's copy of an earlier version
        (the changes since are in the head's tail) or else from its base object."""

        def known(block_id: str) -> Head | None:
            cached = self.cache.cached(head_path(block_id))
            return cached[1] if cached is not None else None

        return head_of(data, self._base, known)

    def _base(self, block_id: str, version: int) -> str:
        """The whole value of ``block_id`` at ``version`` (a base object: never changed, so kept once read)."""
        with self._lock:
            kept = self._bases.get(block_id)
        if kept is not None and kept[0] == version:
            return kept[1]
        value = segments.read_base(self.bucket, block_id, version)
        with self._lock:
            self._bases[block_id] = (version, value)
        return value

    def read_cached(self, fn: Callable[[], T]) -> tuple[T] | None:
        return None  # every read asks the store (a conditional GET): I/O, never on the event loop

    def change_token(self, agents_only: bool = False) -> object:
        """The ETags of every agent, list of blocks and block head (three listings): any commit to them changes it;
        with ``agents_only``, of the agents alone (one listing)."""
        prefixes = (AGENTS,) if agents_only else (AGENTS, ATTACHED, BLOCKS)
        return tuple((i.path, i.etag) for prefix in prefixes for i in self.bucket.list(prefix))

    # -- agents --------------------------------------------------------------------------------

    def list_agents(self) -> list[Agent]:
        found = self.cache.read_many([i.path for i in self.bucket.list(AGENTS)], agent_of)
        return sorted((a for a, _ in found.values()), key=lambda a: a.name)

    def find_agent(self, name: str) -> Agent | None:
        named = [a for a in self.list_agents() if a.name == name]
        return min(named, key=lambda a: a.created_at) if named else None

    def get_agent(self, agent_id: str) -> Agent:
        found = self.cache.read(agent_path(agent_id), agent_of)
        if found is None:
            raise NotFoundError(f"No agent with id {agent_id!r}. List agents with `tiermem agents list`.")
        return found[0]

    def insert_agent(self, agent: Agent) -> None:
        names = Lease(self.bucket, AGENT_NAMES_LEASE, AGENT_NAMES_SECONDS)
        with names.waiting(timeout=AGENT_NAMES_SECONDS * 1.5, doing="creating an agent"):
            if any(a.name == agent.name and a.id != agent.id for a in self.list_agents()):
                raise name_taken(agent.name)
            self.bucket.create(agent_path(agent.id), agent_json(agent))

    def update_agent(self, agent: Agent) -> None:
        self.cache.update(
            agent_path(agent.id),
            agent_of,
            lambda old: replace(agent, created_at=old.created_at) if old is not None else None,
            agent_json,
        )

    def delete_agent(self, agent_id: str) -> None:
        """Delete the agent's whole core state: the blocks no other agent is attached to (with their history), its
        list of blocks, idempotency records and conversation state, and its own object last. Safe to run again
        after an interruption (every step is a delete of what is still there)."""
        attached = self._attached(agent_id)
        self.move_old_requests()  # records an older replica may still have written at the top of requests/
        for block_id in attached.ids():
            if [a for a in self.agents_of_block(block_id) if a != agent_id]:
                self.cache.update(
                    head_path(block_id),
                    self._head_of,
                    lambda h: (
                        None
                        if h is None or agent_id not in h.agents
                        else replace(h, agents=tuple(a for a in h.agents if a != agent_id))
                    ),
                    head_json,
                )
                continue
            listed = [*segments.listed_segments(self.bucket, block_id), *segments.listed_bases(self.bucket, block_id)]
            for seg in listed:
                self.bucket.delete(seg.path)
            self.bucket.delete(head_path(block_id))
            self.cache.forget(head_path(block_id))
        self.bucket.delete(attached_path(agent_id))
        self.cache.forget(attached_path(agent_id))
        for prefix in (f"{REQUESTS}{agent_id}/", f"{CONVERSATIONS}{agent_id}/"):
            for item in self.bucket.list(prefix):
                self.bucket.delete(item.path)
        self.bucket.delete(agent_path(agent_id))
        self.cache.forget(agent_path(agent_id))
        self.bucket.delete(labels_lease(agent_id))

    # -- blocks ----------------------------------------------------------------------------------

    def _head(self, block_id: str) -> tuple[Head, str] | None:
        return self.cache.read(head_path(block_id), self._head_of)

    def _attached(self, agent_id: str) -> Attached:
        found = self.cache.read(attached_path(agent_id), attached_of)
        return found[0] if found else Attached(agent_id)

    def get_block(self, block_id: str) -> Block | None:
        found = self._head(block_id)
        return found[0].block if found else None

    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        found = self.cache.read_many([head_path(i) for i in block_ids], self._head_of)
        return [found[head_path(i)][0].block for i in dict.fromkeys(block_ids) if head_path(i) in found]

    def attached_block_ids(self, agent_id: str) -> list[str]:
        return self._attached(agent_id).ids()

    def agents_of_block(self, block_id: str) -> list[str]:
        found = self._head(block_id)
        if found is None:
            return []
        lists = self.cache.read_many([attached_path(a) for a in found[0].agents], attached_of)
        return [
            a for a in found[0].agents if attached_path(a) in lists and block_id in lists[attached_path(a)][0].ids()
        ]

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

    def insert_block(self, block: Block, first: BlockVersion, agents: tuple[str, ...] = ()) -> None:
        entry = checkpoint(first)
        head = Head(block=block, agents=agents, tail=(entry,), chain=entry.chain, tail_bytes=entry.size())
        etag = self.bucket.create(head_path(block.id), head_json(head))
        if etag is not None:
            self.cache.remember(head_path(block.id), etag, head)

    @contextmanager
    def _labels_held(self, agent_ids: Collection[str]) -> Iterator[None]:
        """Hold the labels leases (``labels_lease``) of these agents inside, taken in one order (two holders of
        several never wait for each other), each waited for as long as a holder that died keeps it."""
        with ExitStack() as held:
            for agent_id in sorted(set(agent_ids)):
                lease = Lease(self.bucket, labels_lease(agent_id), LABELS_SECONDS)
                held.enter_context(
                    lease.waiting(LABELS_SECONDS * 1.5, doing="creating or renaming a block of an agent")
                )
            yield

    def _refuse_label(self, agent_id: str, label: str, block_id: str) -> None:
        """``label_taken`` if a block other than ``block_id`` attached to the agent has ``label`` (the heads are
        read: a list's labels may lag a rename); called with the agent's labels lease held."""
        if any(b.label == label and b.id != block_id for b in self.get_blocks(self.attached_block_ids(agent_id))):
            raise label_taken(label)

    def create_block(self, agent_id: str, block: Block, first: BlockVersion) -> None:
        """See ``CoreStore.create_block``: under the agent's labels lease, the labels checked, then the head created
        (naming the agent) and the agent's list written."""
        with self._labels_held((agent_id,)):
            self._refuse_label(agent_id, block.label, block.id)
            self.insert_block(block, first, (agent_id,))
            self._attach(agent_id, block.id)

    def commit_edit(self, previous: Block, block: Block, version: BlockVersion) -> tuple[str, ...] | None:
        """See ``CoreStore.commit_edit``: one conditional PUT of the head. The agents returned are the head's list
        as of the commit (a superset only after a writer died between a detach's two writes). A rename commits
        under the labels leases of the head's agents, after checking their blocks' labels; if the head names other
        agents by the time it is written (an attachment meanwhile), nothing is written (the caller retries)."""
        if block.label == previous.label:
            return self._commit_head(previous, block, version, None)
        found = self._head(block.id)
        if found is None:
            return None
        agents = found[0].agents
        with self._labels_held(agents):
            for agent_id in agents:
                if block.id in self.attached_block_ids(agent_id):
                    self._refuse_label(agent_id, block.label, block.id)
            return self._commit_head(previous, block, version, agents)

    def _commit_head(
        self, previous: Block, block: Block, version: BlockVersion, agents: tuple[str, ...] | None
    ) -> tuple[str, ...] | None:
        """``commit_edit``'s conditional PUT; None, writing nothing, when the head is not at ``previous``'s version
        (its number and commit time: a block deleted and made again under its id reaches the same number) or
        (``agents`` given) names other agents."""
        path = head_path(block.id)
        cached = self.cache.cached(path)
        if cached is None or not _same_version(cached[1].block, previous):
            found = self._head(block.id)  # the caller's read was not through this cache: read it now
            if found is None:
                return None
            cached = (found[1], found[0])
        head: Head = cached[1]
        if not _same_version(head.block, previous) or (agents is not None and head.agents != agents):
            return None
        entry = encode(head.block, head.chain, version)
        started = time.monotonic()
        sealed = segments.seal(self.bucket, head)
        kept, tail = sealed if sealed is not None else (head.sealed, head.tail)
        base = head.base if sealed is None else 0
        if sealed is not None and len(head.block.value) >= INLINE_CHARS:
            # the value as of the sealed versions, whole, once: the heads until the next seal carry only the changes
            self._write_base(block.id, head.block.version, head.block.value)
            base = head.block.version
        crc = checksum_after(head.value_crc, (entry,), len(head.block.value))  # an append: its own size
        if crc is None and len(block.value) >= INLINE_CHARS:
            crc = checksum(block.value)
        new = Head(
            block=block,
            agents=head.agents,
            sealed=kept,
            tail=(*tail, entry),
            chain=entry.chain,
            tail_bytes=(head.tail_bytes if sealed is None else 0) + entry.size(),
            base=base,
            value_crc=crc,
        )
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
        self.cache.remember(path, etag, new)
        if block.label != previous.label:
            self._relabel(head.agents, block.id, block.label)
        if sealed is not None:
            self._sealed(block.id)
        return head.agents

    def _write_base(self, block_id: str, version: int, value: str) -> None:
        self.bucket.create(value_path(block_id, version), value.encode("utf-8"))  # exists: the same value
        with self._lock:
            self._bases[block_id] = (version, value)

    def _sealed(self, block_id: str) -> None:
        """Count a segment sealed by this process; every ``UPKEEP_SEALS`` of a block, tidy its history in the
        background (merge small segments, delete those off the chain): objects stay bounded without a command."""
        with self._lock:
            n = self._seals[block_id] = self._seals.get(block_id, 0) + 1
        if n % UPKEEP_SEALS == 0:
            threading.Thread(
                target=self._tidy_quietly, args=(block_id,), name="tiermem-history-upkeep", daemon=True
            ).start()

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
            return replace(
                old, links=tuple(replace(x, label=label) if x.block_id == block_id else x for x in old.links)
            )

        for agent_id in agent_ids:
            try:
                self.cache.update(attached_path(agent_id), attached_of, change, attached_json)
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

    def forget_versions(self, block_id: str, versions: Collection[int]) -> int:
        """The block's history stored afresh without ``versions`` (the current one is kept): every kept entry in one
        segment named ``1..<current>`` and a head that seals it (empty tail), committed with one conditional PUT;
        then the segments and bases the old head used are deleted. A reader still holding the old head finds its
        segments gone and gets "try again" (the next read takes the new head); an edit that read the old head
        loses the PUT race (412), re-reads and edits the new one."""
        wanted = {int(v) for v in versions}

        def without(stored: list[BlockVersion], top: int) -> list[BlockVersion]:
            return [v for v in stored if v.version == top or v.version not in wanted]

        return self._rewrite_history(block_id, without, "forgotten")

    def restore_versions(self, block_id: str, versions: Sequence[BlockVersion]) -> int:
        """Put past ``versions`` the history lacks back among the versions it holds (a restore of what was forgotten:
        ``tiermem import --include-forgotten``), stored afresh as ``forget_versions`` stores them."""

        def added(stored: list[BlockVersion], top: int) -> list[BlockVersion]:
            have = {v.version for v in stored}
            new = [v for v in versions if v.version < top and v.version not in have]
            return sorted([*stored, *new], key=lambda v: v.version)

        return self._rewrite_history(block_id, added, "restored")

    def _rewrite_history(
        self, block_id: str, change: Callable[[list[BlockVersion], int], list[BlockVersion]], what: str
    ) -> int:
        """The history ``change`` makes of the stored one (given the current version), stored afresh in one segment
        ``1..<current>`` under a head sealing it (one conditional PUT), the objects the old head used deleted once
        it landed; returns how many versions were removed or added."""
        for _ in range(8):
            found = self._head(block_id)
            if found is None:
                return 0
            head, etag = found
            top = head.block.version
            listed = [*segments.listed_segments(self.bucket, block_id), *segments.listed_bases(self.bucket, block_id)]
            stored = list(replay(segments.entries(self.bucket, head, 1, top)))
            versions = change(stored, top)
            moved = len({v.version for v in stored} ^ {v.version for v in versions})
            if not moved:
                return 0
            kept = rewrite(versions)
            path = segment_path(block_id, 1, top)
            self.bucket.put(
                path, segment_json(block_id, tuple(kept))
            )  # a former forget's segment of this name: replaced
            long = len(head.block.value) >= INLINE_CHARS
            if long:
                self._write_base(block_id, top, head.block.value)
            new = replace(head, sealed=top, tail=(), chain=kept[-1].chain, tail_bytes=0, base=top if long else 0)
            landed = self.bucket.replace(head_path(block_id), head_json(new), etag)
            if landed is None:
                self.cache.forget(head_path(block_id))
                continue  # another writer won: read its head and change it again
            self.cache.remember(head_path(block_id), landed, new)
            keep = {path, value_path(block_id, top)}
            for item in listed:
                if item.path not in keep:
                    self.bucket.delete(item.path)
            return moved
        raise StoreError(
            f"Block {block_id} kept changing while its history was being {what}; nothing of it was {what}. Try again."
        )

    def forget_requests(self, text: str, *, agent_id: str | None) -> int:
        """Delete the idempotency records of ``agent_id`` (None: every agent's) whose stored result holds ``text`` (as
        written, or escaped as JSON). An agent's records are under its folder (``request_path``: by the key's first
        part); those an older replica left at the top of ``requests/`` are moved there first."""
        needles = {text.encode("utf-8"), json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")}
        done = 0
        if agent_id is not None:
            self.move_old_requests()
        for item in self.bucket.list(REQUESTS if agent_id is None else f"{REQUESTS}{agent_id}/"):
            stored = self.bucket.get(item.path)
            if stored is not None and any(n in stored.data for n in needles):
                self.bucket.delete(item.path)
                done += 1
        return done

    def record_forgotten(self, keys: Collection[str]) -> int:
        return forget_record.object_record(self.bucket, keys)

    def forgotten_keys(self) -> set[str]:
        return forget_record.object_keys(self.bucket)

    def unrecord_forgotten(self, keys: Collection[str]) -> int:
        return forget_record.object_remove(self.bucket, keys)

    def purge(self) -> dict[str, int]:
        """Objects are deleted, not left behind: a forget deletes what its block's old head used at once, an agent's
        deletion its objects. What is left is upkeep's (segments a merge replaced, a lost race's segment)."""
        return self.tidy()

    def attach(self, agent_id: str, block_id: str, *, unique_label: bool = False) -> None:
        """See ``CoreStore.attach``: the block's head names the agent, then the agent's list names the block; with
        ``unique_label``, under the agent's labels lease after checking its blocks' labels."""
        if not unique_label:
            self._attach(agent_id, block_id)
            return
        with self._labels_held((agent_id,)):
            found = self._head(block_id)
            if found is not None:
                self._refuse_label(agent_id, found[0].block.label, block_id)
            self._attach(agent_id, block_id)

    def _attach(self, agent_id: str, block_id: str) -> None:
        found = self.cache.update(
            head_path(block_id),
            self._head_of,
            lambda h: None if h is None or agent_id in h.agents else replace(h, agents=(*h.agents, agent_id)),
            head_json,
        )
        label = found.block.label if found is not None else ""
        link = Link(block_id, label, to_us(now()))
        self.cache.update(
            attached_path(agent_id),
            attached_of,
            lambda old: (
                Attached(agent_id, (link,))
                if old is None
                else None
                if block_id in old.ids()
                else replace(old, links=(*old.links, link))
            ),
            attached_json,
        )

    def detach(self, agent_id: str, block_id: str) -> None:
        self.cache.update(
            attached_path(agent_id),
            attached_of,
            lambda old: (
                None
                if old is None or block_id not in old.ids()
                else replace(old, links=tuple(x for x in old.links if x.block_id != block_id))
            ),
            attached_json,
        )
        self.cache.update(
            head_path(block_id),
            self._head_of,
            lambda h: (
                None
                if h is None or agent_id not in h.agents
                else replace(h, agents=tuple(a for a in h.agents if a != agent_id))
            ),
            head_json,
        )

    # -- idempotency keys and conversation state -------------------------------------------------

    def get_request(self, key: str) -> StoredResult | None:
        return self.requests.get(key)

    def claim_request(self, claim: StoredResult, replacing: StoredResult | None = None) -> StoredResult | None:
        return self.requests.claim(claim, replacing)

    def put_request(self, result: StoredResult, claim: StoredResult | None = None) -> None:
        self.requests.put(result, claim)

    def drop_request(self, claim: StoredResult) -> None:
        self.requests.drop(claim)

    def get_conversation(self, agent_id: str, conversation_id: str) -> ContextWindow | None:
        stored = self.bucket.get(conversation_path(agent_id, conversation_id))
        return window_from_row(loads(stored.data, "conversation state")) if stored is not None else None

    def put_conversation(self, window: ContextWindow) -> None:
        self.bucket.put(conversation_path(window.agent_id, window.conversation_id), dumps(window_row(window)))

    # -- upkeep ---------------------------------------------------------------------------------

    def tidy(self) -> dict[str, int]:
        """``tidy_block`` for every block (``tiermem optimize``); returns the totals."""
        total: dict[str, int] = {
            "segments merged": 0,
            "orphan segments deleted": 0,
            "idempotency records moved": self.move_old_requests(),
        }
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
            for seg in segments.orphans(
                segments.listed_segments(self.bucket, block_id), found[0].sealed, self.grace_seconds
            ):
                self.bucket.delete(seg.path)
                deleted += 1
            for seg in segments.stale_bases(
                segments.listed_bases(self.bucket, block_id), found[0].base, self.grace_seconds
            ):
                self.bucket.delete(seg.path)
                deleted += 1
            return {"segments merged": merged, "orphan segments deleted": deleted}
        finally:
            self._upkeep.release()

    # -- whole tables (backup, restore, migration, doctor) -----------------------------------------

    def all_rows(self, table: str) -> list[CoreRow]:
        return object_rows.all_rows(self.bucket, table)

    def merge_rows(self, table: str, key: str, rows: Sequence[CoreRow], *, fill_gaps: bool = False) -> int:
        try:
            done = object_rows.merge_rows(self.bucket, table, rows)
            if fill_gaps and table == "block_history":  # versions a history lacks below its newest (forgotten here)
                for block_id, versions in object_rows.between(self.bucket, rows).items():
                    done += self.restore_versions(block_id, versions)
            return done
        finally:
            self.cache.forget_all()

    def schema_fields(self, table: str) -> list[str]:
        return list(FIELDS[object_rows.check_table(table)])

    def describe(self) -> str:
        return f"objects under {self.bucket.uri}/core (one per block, conditional PUTs)"

    def close(self) -> None:
        self.bucket.close()


def _same_version(stored: Block, previous: Block) -> bool:
    """Whether ``stored`` is the version ``previous`` was read at: the same number and commit time."""
    return stored.version == previous.version and to_us(stored.updated_at) == to_us(previous.updated_at)
