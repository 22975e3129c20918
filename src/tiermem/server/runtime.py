"""What the MCP layer runs on: the opened ``Memory`` and agent id, and how a request reaches them.

Answer first, load later. ``MemoryHandle`` opens the memory in a background thread. Under the server's
lifespan (``lifespan``) that thread starts as soon as the client has the answer to its handshake
(``first_answer`` reports it), so ``initialize`` and ``tools/list`` never wait for, or compete with,
that work. A tool call waits for the opening, at most ``MemoryHandle.timeout`` seconds, and gets a
clear error if it failed. The server's memory opens in two stages (``factory.open_memory(lazy=True)``):
the core state (blocks, agents: SQLite) first, then the archive (lancedb, pyarrow, onnxruntime...) in a
second thread, so block tools answer without waiting for the archive; recall and archival calls wait for it.

Tools are module-level functions: ``runtime_of(ctx)`` finds the ``Runtime`` in the request's
lifespan context (or, for a tool the agent loop calls in process without a request, on the server).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

import anyio

from ..base import gcpause
from ..base.background import OPEN_TIMEOUT, Opening
from ..base.errors import NotFoundError, TiermemError
from .clientlog import client_log
from .sightings import Sightings

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from ..base.records import Block
    from ..domain.memory import Memory

log = logging.getLogger(__name__)
FILE_TOOLS = frozenset({"open_files", "grep_files", "semantic_search_files"})  # published with a folder attached
T = TypeVar("T")
P = ParamSpec("P")
RECHECK_SECONDS = 5.0  # object storage: how often a call checks that the served agent still exists (a request)


class MemoryHandle(Opening["tuple[Memory, str]"]):
    """Opens the memory and the agent once, off the event loop; every caller waits for that one opening.

    The opening's second stage, the archive, starts once the client has the handshake's answer (``answered``),
    whichever comes first of the two: ``initialize`` reads core memory for its instructions, and the archive's
    imports (lancedb, pyarrow, the model) would compete with that answer for the interpreter.
    """

    def __init__(
        self, factory: Callable[[], tuple[Memory, str]], *, timeout: float = OPEN_TIMEOUT, agent: str | None = None
    ) -> None:
        super().__init__(self._open, thread_name="tiermem-open", timeout=timeout)
        self._factory = factory
        self._guard_answer = threading.Lock()
        self._answered = False
        self._memory: Memory | None = None
        self.agent = agent  # the served agent's name: found again by it when its id is gone (``live_id``)
        self._rebound: str | None = None  # the id of the agent of that name made after the one opened was deleted
        self._checked = float("-inf")  # when ``live_id`` last looked the agent up (where that costs a request)

    def _open(self) -> tuple[Memory, str]:
        opened = self._factory()
        with self._guard_answer:
            self._memory = opened[0]
            answered = self._answered
        if answered:
            opened[0].open_archive()
        return opened

    def get(self) -> tuple[Memory, str]:
        """The memory and the served agent's id: the one opened, or the one ``live_id`` found since."""
        memory, agent_id = super().get()
        return memory, self._rebound or agent_id

    def live(self) -> tuple[Memory, str]:
        """``get``, the agent's id checked (``live_id``; blocks: call it in a worker thread)."""
        memory, _ = self.get()
        return memory, self.live_id(memory)

    def live_id(self, memory: Memory) -> str:
        """The served agent's id, checked: the one in use while its agent exists; when another process deleted it,
        the id of the agent of the same name made since (used from then on), or a ``NotFoundError`` naming the agent
        and what to do. (Reads of the core's cached agents: ``Memory.read_now`` can run it; on object storage, where
        a look-up is a request, it looks at most once every ``RECHECK_SECONDS``.)"""
        _, agent_id = self.get()
        if self.agent is None:
            return agent_id
        if not memory.watch_cheap:  # object storage: a look-up is a request; at most one per RECHECK_SECONDS
            if time.monotonic() - self._checked < RECHECK_SECONDS:
                return agent_id
            self._checked = time.monotonic()
        try:
            memory.core.get_agent(agent_id)
            return agent_id
        except NotFoundError:
            pass  # deleted: its name may have an agent again
        found = memory.core.find_agent(self.agent)
        if found is None:
            raise NotFoundError(
                f"Agent {self.agent!r}, which this server serves, was deleted (by `tiermem agents delete` or another "
                f"process), so nothing was read or written. Make it again with `tiermem agents create {self.agent}` "
                "(this server then uses it), or restart the server (it creates the agent with the default blocks)."
            )
        log.info("agent %r was deleted and made again; serving the new one (%s)", self.agent, found.id)
        self._rebound = found.id
        return found.id

    def answered(self) -> None:
        """The client has the handshake's answer: the archive may open now (at once if the memory is open, else
        as soon as it is). Does not start the opening itself."""
        with self._guard_answer:
            if self._answered:
                return
            self._answered = True
            memory = self._memory
        if memory is not None:
            memory.open_archive()


class Listener(Protocol):
    """Hears about committed changes (the server's ``Notifier``)."""

    def bind(self, memory: Memory, agent_id: str) -> None: ...

    def flush(self, ctx: Context[Any, Any] | None) -> Awaitable[None]: ...

    def note_files_attached(self, attached: bool) -> None: ...


@dataclass
class Runtime:
    """What every tool needs: the memory handle and the change listener."""

    handle: MemoryHandle
    notifier: Listener
    open_after_first_answer: bool = field(default=False, init=False)  # set by ``lifespan``
    memory_dir: str | None = None  # the synced MemFS directory (setting `sync`), if any
    # recall hits carry their ids: only when ``memory_links`` is published, the one tool that takes a turn's id (an id
    # costs ~30 tokens a hit, a quarter of a short turn's result: not spent where nothing can use it)
    turn_ids: bool = False
    # the block versions each client's model has seen: a rethink written from an older one is refused (sightings.py)
    sightings: Sightings = field(default_factory=Sightings, init=False)

    async def call(
        self,
        ctx: Context[Any, Any] | None,
        op: Callable[Concatenate[Memory, str, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run the domain operation ``op(memory, agent_id, *args, **kwargs)`` (a ``Memory`` method, or a function
        taking the memory and the agent id) in a worker thread, then publish the changes it made."""

        def work() -> T:
            if not self.handle.ready:
                client_log("info", "waiting for the memory store and the embedding model to open")
                started = time.monotonic()
                self.handle.get()
                client_log("info", f"memory store open after {time.monotonic() - started:.1f} s")
            memory, agent_id = self.handle.live()
            self.notifier.bind(memory, agent_id)
            with self.sightings.watching(ctx, memory):
                return op(memory, agent_id, *args, **kwargs)

        try:
            return await anyio.to_thread.run_sync(work)
        finally:
            # shielded: the worker thread cannot be stopped, so a cancelled request's change may be committed; its
            # listeners are told of it all the same (cancelled, the flush would drop the change it took from the queue)
            with anyio.CancelScope(shield=True):
                await self.notifier.flush(ctx)

    async def read(self, op: Callable[Concatenate[Memory, str, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """A read of blocks or agents: answered on the event loop when the memory is open and its core cache is
        current and free (``Memory.read_now``: no I/O, no waiting), which saves the worker-thread hand-off;
        otherwise exactly like ``call``."""
        if self.handle.ready:
            memory, _ = self.handle.get()  # open (or failed: raises its error at once)
            live = memory.read_now(functools.partial(self.handle.live_id, memory))
            if live is not None:
                self.notifier.bind(memory, live[0])
                done = memory.read_now(functools.partial(op, memory, live[0], *args, **kwargs))
                if done is not None:
                    return done[0]
        return await self.call(None, op, *args, **kwargs)

    async def blocks_now(self, wait: float) -> list[Block] | None:
        """The agent's blocks for what the client is told before it asks (the instructions): starts the opening if
        nobody has, waits at most ``wait`` s for the core state (the archive keeps opening behind it); None when the
        memory is not open by then or cannot be read (the reason is logged)."""
        self.handle.start()
        if not self.handle.ready:
            await anyio.to_thread.run_sync(self.handle.settle, wait)
        if not self.handle.ready:
            log.info("core memory is not open after %.1f s; the instructions say where to read it", wait)
            return None
        try:
            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            return await self.read(Memory.blocks)
        except TiermemError as exc:
            log.warning("could not read core memory for the instructions: %s", exc)
            return None

    async def directories_now(self) -> tuple[str, str]:
        """The agent's ``<directories>`` for the instructions, in full and in short (("", "") when unreadable)."""
        try:
            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            return await self.read(Memory.directory_texts)
        except TiermemError as exc:
            log.warning("could not read the agent's folders for the instructions: %s", exc)
            return "", ""

    def hidden_file_tools(self) -> frozenset[str]:
        """The file tools while the agent has no folder attached (none hidden while that is not known yet)."""
        if not self.handle.ready:
            return frozenset()
        try:
            memory, agent_id = self.handle.get()
            attached = memory.files.has_folders(agent_id)
        except TiermemError as exc:
            log.debug("could not read the agent's folders for the tool list: %s", exc)
            return frozenset()
        self.notifier.note_files_attached(attached)
        return frozenset() if attached else FILE_TOOLS

    def mark_answered(self, method: str) -> None:
        """The client has the answer it needs before anything else: start opening, if the lifespan asked for it, and
        end the garbage collector's hold of the process's start (``gcpause``; nothing if there is none)."""
        gcpause.release()
        if self.open_after_first_answer and not self.handle.started:
            log.debug("handshake answered (%s); opening the memory store in the background", method)
            self.handle.start()
        self.handle.answered()


def runtime_of(ctx: Context[Any, Any]) -> Runtime:
    """The ``Runtime`` of the server handling ``ctx``: from the lifespan context, else from the server."""
    try:
        state = ctx.request_context.lifespan_context
    except ValueError:  # a tool the agent loop calls in process has no request of its own
        state = None
    if isinstance(state, Runtime):
        return state
    runtime = getattr(ctx.mcp_server, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise TypeError("tiermem tools run only on a server made by tiermem.server.app.build_server")
    return runtime


@asynccontextmanager
async def lifespan(server: Any) -> AsyncIterator[Runtime]:
    """The server's lifespan: yields its ``Runtime``, which opens the memory once the first answer is out.

    (No task group here: an exception from the serving loop would come out wrapped in an ExceptionGroup.)
    """
    runtime: Runtime = server.runtime
    runtime.open_after_first_answer = True
    yield runtime


def first_answer(runtime: Runtime) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """Server middleware: tells ``runtime`` when the client has the answer to its handshake.

    That is ``notifications/initialized`` (the client has our ``initialize`` result), or, for a
    client that skips the handshake (protocol 2026-07-28), the end of its first request.
    """

    async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        method = getattr(ctx, "method", "")
        try:
            return await call_next(ctx)
        finally:
            if method != "initialize":
                runtime.mark_answered(method)

    return middleware
