"""What the MCP layer runs on: the opened ``Memory`` and agent id, and how a request reaches them.

Answer first, load later. ``MemoryHandle`` opens the store and the embedder (lancedb, pyarrow,
onnxruntime...) in a background thread. Under the server's lifespan (``lifespan``) that thread
starts as soon as the client has the answer to its handshake (``first_answer`` reports it), so
``initialize`` and ``tools/list`` never wait for, or compete with, those imports. A tool call waits
for the opening, at most ``MemoryHandle.timeout`` seconds, and gets a clear error if it failed.

Tools are module-level functions: ``runtime_of(ctx)`` finds the ``Runtime`` in the request's
lifespan context (or, for a tool the agent loop calls in process without a request, on the server).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from .clientlog import client_log
from .errors import StoreError, TiermemError

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from .memory import Memory

log = logging.getLogger(__name__)
T = TypeVar("T")

OPEN_TIMEOUT = 120.0  # seconds a call waits for the store to open (a migration or a slow disk can take a while)


class MemoryHandle:
    """Opens the store and the agent once, off the event loop; every caller waits for that one opening."""

    def __init__(self, factory: Callable[[], tuple[Memory, str]], *, timeout: float = OPEN_TIMEOUT) -> None:
        self.timeout = timeout
        self._factory = factory
        self._done = threading.Event()
        self._started = False
        self._guard = threading.Lock()
        self._value: tuple[Memory, str] | None = None
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._started

    @property
    def ready(self) -> bool:
        """True once the opening has finished (opened or failed)."""
        return self._done.is_set()

    def start(self) -> None:
        """Start opening in the background (once; later calls do nothing)."""
        with self._guard:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._build, name="tiermem-open", daemon=True).start()

    def _build(self) -> None:
        try:
            self._value = self._factory()
        except BaseException as exc:  # kept and reported to every caller, never dropped
            log.error("could not open memory: %s", exc)
            self._error = exc
        finally:
            self._done.set()

    def get(self) -> tuple[Memory, str]:
        """The opened memory and agent id; starts the opening if nobody has yet. Blocks (call it in a thread)."""
        self.start()
        if not self._done.wait(self.timeout):
            raise StoreError(
                f"tiermem is still opening its memory store after {self.timeout:.0f} s; try the call again in a "
                "moment. If this keeps happening, run `tiermem doctor` on the data directory."
            )
        if isinstance(self._error, TiermemError):
            raise self._error  # already says what to do
        if self._error is not None:
            raise StoreError(
                f"tiermem could not open its memory store ({type(self._error).__name__}: {self._error}). "
                "Fix the cause (see the server's log), then restart the server; `tiermem doctor` checks the setup."
            ) from self._error
        assert self._value is not None
        return self._value


class Listener(Protocol):
    """Hears about committed changes (the server's ``Notifier``)."""

    def bind(self, memory: Memory, agent_id: str) -> None: ...

    def flush(self, ctx: Context[Any, Any] | None) -> Awaitable[None]: ...


@dataclass
class Runtime:
    """What every tool needs: the memory handle and the change listener."""

    handle: MemoryHandle
    notifier: Listener
    open_after_first_answer: bool = field(default=False, init=False)  # set by ``lifespan``

    async def call(self, ctx: Context[Any, Any] | None, fn: Callable[[Memory, str], T]) -> T:
        """Run ``fn(memory, agent_id)`` in a worker thread, then publish the changes it made."""

        def work() -> T:
            if not self.handle.ready:
                client_log("info", "waiting for the memory store and the embedding model to open")
                started = time.monotonic()
                self.handle.get()
                client_log("info", f"memory store open after {time.monotonic() - started:.1f} s")
            memory, agent_id = self.handle.get()
            self.notifier.bind(memory, agent_id)
            return fn(memory, agent_id)

        try:
            return await anyio.to_thread.run_sync(work)
        finally:
            await self.notifier.flush(ctx)

    def mark_answered(self, method: str) -> None:
        """The client has the answer it needs before anything else: start opening, if the lifespan asked for it."""
        if self.open_after_first_answer and not self.handle.started:
            log.debug("handshake answered (%s); opening the memory store in the background", method)
            self.handle.start()


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
        raise TypeError("tiermem tools run only on a server made by tiermem.server.build_server")
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
