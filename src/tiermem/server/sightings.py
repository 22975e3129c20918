"""What each client's model has seen of the blocks: the version of each block its calls last showed it.

A ``memory_rethink`` replaces a block's whole value with one the model wrote from the value it saw. When another
writer (another process, another client of this server) changed the block after that, the rethink would drop the
change without anyone being told; so the rethink is refused when the block is no longer at the version the model
last saw (``Memory.edit(seen=...)``, checked in the commit's compare-and-set), and the model is asked to view the
block again.

Seen is what a client was shown whole: by the instructions its ``initialize`` (or ``server/discover``) answer carried
(the pinned blocks they show whole: ``briefing.shown_whole``), by its tool calls (``core_memory_view``'s pinned blocks,
``memory_open``, the ``memory`` tool's view of a whole file or its edit's result, an edit's or a revert's result), by
the resources it read (``memory://core``'s pinned blocks, ``memory://blocks/<label>``) and the prompts it got
(``memory_block``, ``memory_system``): ``Sightings.saw``, with a ``mark`` taken before the read, so that a view answered
after a parallel call's commit does not take the client's record back to the version before it. A version is its number
and its commit time (``Seen``): a block deleted and made again under its id numbers from 1 again. A commit of the
client's own call counts as seen only on top of the very version the client saw, its number and its time (``watching``,
``Change.parent``): its own edit of what it saw, through a tool whose answer does not show the value (a multi-block
``memory_apply_patch``, the ``memory`` tool's rename, Letta Code's ``memory`` tool); a commit on top of another writer's
version shows it nothing of that version, and a block with no record gets none from a commit, unless the call created it
(its model wrote the value).

A client is its connection (``sdk.connection_of``) on protocol versions with a handshake, where one connection carries
all its requests; from 2026-07-28, and on stateless HTTP (``http_stateless``), a request has a connection of its own, so
the server's clients there are one (a stdio server has one client anyway; on a shared HTTP server, another client's view
then counts as seen, another process's edit never; the instructions a client gets at connect do not count there,
``connected``: they would for every client). A record keeps ``MAX_SIGHTINGS`` blocks and forgets one deleted through the
memory it watches (``_deleted``). A rethink of a block the client has no record of (shown only in a hook's context or
cut from the instructions; or by another replica behind a balancer, which keeps its own record) is refused, asking the
model to view the block first (``memory._unseen``). A call without a client is not tracked, nor one the agent loop's
model makes (``agent_calls``), even within a client's ``agent_chat``: that model is shown core memory afresh at each
step, and its edits are not the client's. Nothing here imports the domain or the store: ``tools/list`` and the handshake
need none of it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .clientlog import MODERN
from .sdk import connection_of

if TYPE_CHECKING:
    from ..base.records import Block
    from ..domain.memory import Change, Memory

# the calling client's sightings, while one of its calls runs (set in the worker thread that runs it)
Seen = tuple[int, datetime]  # a version of a block as a client saw it: its number and its commit time (``updated_at``)
_watching: ContextVar[_Record | None] = ContextVar("tiermem_seen", default=None)
_agent_model: ContextVar[bool] = ContextVar("tiermem_agent_model", default=False)  # set by ``agent_calls``
MAX_SIGHTINGS = 10_000  # blocks a client's record keeps (the ones written longest ago go first)


@contextmanager
def agent_calls() -> Iterator[None]:
    """Within: tool calls are the agent loop's model's, not the client's whose request runs the loop (untracked)."""
    token = _agent_model.set(True)
    try:
        yield
    finally:
        _agent_model.reset(token)


def _heard(change: Change) -> None:
    """A memory's listener: a block version committed by the call under way counts as seen by its client when it is
    the client's own edit on top of the very version it saw (``Change.parent``), or the block its call created (the
    model wrote its whole value); a commit on top of a version the client has not seen (another writer's), or of a
    block it has no record of, shows it nothing of the value."""
    record = _watching.get()
    if record is None or not change.block_id or change.version is None or change.updated_at is None:
        return
    if change.kind == "block_updated" and change.parent is not None:
        record.committed(change.block_id, (change.version, change.updated_at), change.parent)
    elif change.kind == "blocks_changed" and change.version == 1:
        record.created(change.block_id, (change.version, change.updated_at))


class _Record:
    """One client's sightings: ``versions``, the version of each block (by id) it last saw, with the time that version
    was committed (``Seen``: a block deleted and made again under its id, as the default agent's blocks are, numbers
    its versions from 1 again, so a number alone could name another block's value), and when each was written (a tick
    of its ``Sightings``' clock), so that a view answered late never replaces a later sighting."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.versions: dict[str, Seen] = {}  # read without the lock by the commit's check (one dict.get)
        self._written: dict[str, int] = {}
        self._clock = clock
        self._lock = threading.Lock()

    def saw(self, block_id: str, seen: Seen, since: int) -> None:
        """The client was shown version ``seen`` of the block, read after tick ``since``. A version below the recorded
        one replaces it only when the read began after that record was written: versions only grow, so the block went
        back meanwhile (a backup restored with ``--replace`` rolls a block back to its earlier versions, a block made
        again under its id starts from 1); otherwise the read was answered before a later commit the record already
        holds (parallel calls), and is dropped."""
        with self._lock:
            known = self.versions.get(block_id)
            if known is None or seen[0] >= known[0] or since > self._written[block_id]:
                self._write(block_id, seen)

    def committed(self, block_id: str, seen: Seen, parent: Seen) -> None:
        """The client's call committed version ``seen`` on top of version ``parent``: seen when the client had seen
        that very version (its number and its commit time: another block made again under the id, or the block rolled
        back and edited again, may have reached the number the client saw with a value it never saw)."""
        with self._lock:
            if self.versions.get(block_id) == parent:
                self._write(block_id, seen)

    def created(self, block_id: str, seen: Seen) -> None:
        """The client's call created the block (its first version, ``seen``), with a value the model wrote."""
        with self._lock:
            self._write(block_id, seen)

    def forget(self, block_id: str) -> None:
        """The block was deleted (or detached): its sighting goes (a block made again under its id is another one)."""
        with self._lock:
            self._written.pop(block_id, None)
            self.versions.pop(block_id, None)

    def _write(self, block_id: str, seen: Seen) -> None:
        """Record ``seen`` (under the lock); past ``MAX_SIGHTINGS`` blocks, the one written longest ago goes: its next
        rethink is refused once, showing the block."""
        self.versions[block_id] = seen
        self._written.pop(block_id, None)
        self._written[block_id] = self._clock()
        while len(self._written) > MAX_SIGHTINGS:
            oldest = next(iter(self._written))
            del self._written[oldest]
            self.versions.pop(oldest, None)


class Request:
    """A request's own context (what middleware and request handlers get: ``initialize``, ``server/discover``) as a
    tool's context holds it, for ``Sightings``."""

    def __init__(self, request_context: Any) -> None:
        self.request_context = request_context


class _Sessionless:
    """The one client of every request without a session (protocol 2026-07-28 and later)."""


class Sightings:
    """The ``_Record`` of each client, dropped with its connection."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[object, _Record] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._sessionless = _Sessionless()
        self._ticks = itertools.count(1)

    def mark(self) -> int:
        """Now, as the sightings' clock counts: take it before a call that shows blocks, for ``saw``."""
        with self._lock:
            return next(self._ticks)

    def _client(self, ctx: Any) -> object | None:
        if ctx is None or _agent_model.get():
            return None
        try:
            session = ctx.request_context.session
        except ValueError:  # a tool called in process (the agent loop) has no client session of its own
            return None
        if getattr(session, "protocol_version", None) in MODERN:  # a connection per request: no client to tell
            return self._sessionless
        client: object = connection_of(session)
        if not getattr(client, "has_standalone_channel", True):  # stateless HTTP: a connection per POST, as above
            return self._sessionless
        return client

    def _record(self, ctx: Any) -> _Record | None:
        client = self._client(ctx)
        if client is None:
            return None
        with self._lock:
            record = self._by_client.get(client)
            if record is None:
                record = self._by_client[client] = _Record(self.mark)
            return record

    def of(self, ctx: Any) -> Mapping[str, Seen] | None:
        """The calling client's sightings, block id -> the version it saw and that version's commit time (None: a call
        without a client, not tracked)."""
        record = self._record(ctx)
        return None if record is None else record.versions

    def saw(self, ctx: Any, blocks: Iterable[Block], since: int) -> None:
        """The calling client was shown ``blocks`` as a call read them, after ``since`` (``mark``, taken before the
        call)."""
        record = self._record(ctx)
        if record is not None:
            for block in blocks:
                record.saw(block.id, (block.version, block.updated_at), since)

    def connected(self, ctx: Any, blocks: Iterable[Block], since: int) -> None:
        """The instructions a client got as it connected (``initialize``, ``server/discover``) showed it ``blocks``:
        seen by that connection's client (as ``saw``), not by the sessionless one: every client's connect would
        count for all (another client connecting would make a stale rethink pass)."""
        if self._client(ctx) is not self._sessionless:
            self.saw(ctx, blocks, since)

    @contextmanager
    def watching(self, ctx: Any, memory: Memory) -> Iterator[None]:
        """Within: the blocks ``memory`` commits on top of a version the calling client saw count as seen by it (run
        it in the thread that runs the call)."""
        memory.subscribe(_heard)  # once per memory
        memory.subscribe(self._deleted)
        token = _watching.set(self._record(ctx))
        try:
            yield
        finally:
            _watching.reset(token)

    def _deleted(self, change: Change) -> None:
        """A memory's listener: a block deleted (or detached from an agent) leaves every client's record."""
        if change.kind == "blocks_changed" and change.block_id and change.version is None:
            with self._lock:
                records = list(self._by_client.values())
            for record in records:
                record.forget(change.block_id)
