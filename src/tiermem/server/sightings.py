"""What each client's model has seen of the blocks: the version of each block its calls last showed it.

A ``memory_rethink`` replaces a block's whole value with one the model wrote from the value it saw. When another
writer (another process, another client of this server) changed the block after that, the rethink would drop the
change without anyone being told; so the rethink is refused when the block is no longer at the version the model
last saw (``Memory.edit(seen=...)``, checked in the commit's compare-and-set), and the model is asked to view the
block again.

Seen is what a client's tool calls showed (``core_memory_view``, ``memory_open``, the ``memory`` tool's view of a
file, an edit's or a revert's result: ``Sightings.saw``) and what its own calls committed (any edit tool's:
``watching`` records the commits of the call it wraps). A client is its connection (``sdk.connection_of``) on
protocol versions with a handshake, where one connection carries all its requests; from 2026-07-28 a request has a connection of its own and names no session,
so the server's clients are one (a stdio server has one client anyway; on a shared HTTP server, another client's
edit then counts as seen, another process's never). A block the client was never shown through a call (only in
the instructions, a resource, a hook's context) has no version here: its rethink replaces the value as the server
reads it. A call without a client is not tracked, nor one the agent loop's model makes (``agent_calls``), even
within a client's ``agent_chat``: that model is shown core memory afresh at each step, and its edits are not the
client's. Nothing here imports the domain
or the store: ``tools/list`` and the handshake need none of it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .clientlog import MODERN
from .sdk import connection_of

if TYPE_CHECKING:
    from ..base.records import Block
    from ..domain.memory import Change, Memory

Seen = dict[str, int]  # block id -> the version the client was last shown (or committed)

# the calling client's sightings, while one of its calls runs (set in the worker thread that runs it)
_watching: ContextVar[Seen | None] = ContextVar("tiermem_seen", default=None)
_agent_model: ContextVar[bool] = ContextVar("tiermem_agent_model", default=False)  # set by ``agent_calls``


@contextmanager
def agent_calls() -> Iterator[None]:
    """Within: tool calls are the agent loop's model's, not the client's whose request runs the loop (untracked)."""
    token = _agent_model.set(True)
    try:
        yield
    finally:
        _agent_model.reset(token)


def _heard(change: Change) -> None:
    """A memory's listener: a block version committed by the call under way counts as seen by its client."""
    seen = _watching.get()
    if seen is not None and change.kind == "block_updated" and change.block_id and change.version is not None:
        seen[change.block_id] = change.version


class _Sessionless:
    """The one client of every request without a session (protocol 2026-07-28 and later)."""


class Sightings:
    """The ``Seen`` of each client, dropped with its connection."""

    def __init__(self) -> None:
        self._by_client: weakref.WeakKeyDictionary[object, Seen] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._sessionless = _Sessionless()

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
        return client

    def of(self, ctx: Any) -> Seen | None:
        """The calling client's sightings (None: a call without a client, not tracked)."""
        client = self._client(ctx)
        if client is None:
            return None
        with self._lock:
            return self._by_client.setdefault(client, {})

    def saw(self, ctx: Any, blocks: Iterable[Block]) -> None:
        """The calling client was shown ``blocks`` (as they are now)."""
        seen = self.of(ctx)
        if seen is not None:
            for block in blocks:
                seen[block.id] = block.version

    @contextmanager
    def watching(self, ctx: Any, memory: Memory) -> Iterator[None]:
        """Within: the blocks ``memory`` commits count as seen by the calling client (run it in the thread that
        runs the call)."""
        memory.subscribe(_heard)  # once per memory
        token = _watching.set(self.of(ctx))
        try:
            yield
        finally:
            _watching.reset(token)
