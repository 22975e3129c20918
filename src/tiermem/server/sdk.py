"""The MCP SDK's private parts tiermem relies on, and the only module that touches them.

The SDK offers no public hook for these; each is re-checked on every ``mcp`` upgrade (``tests/test_server.py``,
``tests/test_transports.py`` and ``tests/test_notify.py`` exercise every one), and ``tests/test_layers.py`` fails if
another module reaches for one:

- a client's connection: the per-request session object changes between requests, its ``_connection`` does not
  (legacy subscriptions and ``logging/setLevel`` levels are kept per connection);
- the low-level server under ``MCPServer``: request handlers the high-level API does not register
  (``resources/subscribe``, ``subscriptions/listen``, ``completion/complete`` with its request context,
  ``logging/setLevel``, ``server/discover``), the SDK's own ``server/discover`` answer, and the notification options
  a handshake-era client is told;
- the tool manager: a tool's published schema, and a manager that registers the tools on first use;
- the context streams the SDK's runner reads, and stdin claimed as the SDK's stdio transport claims it, for a stdio
  loop that reads stdin itself (``stdio_lines``: it answers a line the SDK's parser would drop or misread);
- the streamable-HTTP session manager's admission of a new session: each session gets its own event store (the SDK
  hands every session the one store it was given, and a shared store would replay one session's events to another);
- the names of the transports' loggers, which log session ids (at DEBUG, INFO and WARNING): ``quiet_session_ids`` takes the
  ids out of those lines (a session id lets whoever holds the token that opened it use the session).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp.server.mcpserver import MCPServer


def connection_of(session: Any) -> Any:
    """The client's connection behind a request's session: stable across its requests (the session itself if the
    SDK keeps none)."""
    return getattr(session, "_connection", session)


def lowlevel(server: MCPServer[Any]) -> Any:
    """The low-level server under ``server``."""
    return server._lowlevel_server


def add_request_handler(
    server: MCPServer[Any], method: str, params: type[Any], handler: Callable[[Any, Any], Awaitable[Any]]
) -> None:
    """Answer ``method`` with ``handler(ctx, params)`` (the low-level server's registry)."""
    lowlevel(server).add_request_handler(method, params, handler)


def advertise(server: MCPServer[Any], options: NotificationOptions) -> None:
    """Tell handshake-era clients the notifications ``options`` names in the ``initialize`` answer."""
    low = lowlevel(server)
    low.create_initialization_options = functools.partial(low.create_initialization_options, options)


async def sdk_discover(server: MCPServer[Any], ctx: Any, params: Any) -> Any:
    """The SDK's own ``server/discover`` answer (tiermem's handler amends it)."""
    return await lowlevel(server)._handle_discover(ctx, params)


def tool_manager(server: MCPServer[Any]) -> Any:
    """The server's tool manager (tools and their published schemas)."""
    return server._tool_manager


def set_tool_manager(server: MCPServer[Any], manager: Any) -> None:
    server._tool_manager = manager


def schema_changed(tool: Any) -> None:
    """Forget a tool's cached output schema after its metadata was tidied (a ``cached_property``)."""
    tool.__dict__.pop("output_schema", None)


def event_store_per_session(server: MCPServer[Any], new_store: Callable[[], Any]) -> None:
    """Give every streamable-HTTP session ``server`` admits from now on its own event store, ``new_store()``.

    The session manager reads its ``event_store`` when it admits a session (under its creation lock, before the
    session serves anything), so setting it just before each admission scopes the store to that session."""
    manager = server.session_manager
    admit = manager._admit_session

    def admit_with_own_store(requestor: Any) -> Any:
        manager.event_store = new_store()
        return admit(requestor)

    manager._admit_session = admit_with_own_store  # type: ignore[method-assign]


def context_streams(size: int) -> tuple[Any, Any]:
    """A (send, receive) pair of the stream type the SDK's server runner reads."""
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    pair: tuple[Any, Any] = create_context_streams[SessionMessage | Exception](size)
    return pair


@contextmanager
def claimed_stdin() -> Iterator[Any]:
    """The process's stdin claimed as the SDK's stdio transport claims it (fd 0 points at the null device meanwhile:
    a child process reads end of file, not the client's messages; restored at the end): an async file of its lines,
    read as UTF-8 (undecodable bytes replaced)."""
    import sys

    import anyio
    from mcp.server import stdio

    buffer, release = stdio._claim_fd(0, sys.stdin, "rb", stdio._open_stdin_diversion)
    try:
        yield anyio.wrap_file(stdio._UnownedTextWrapper(buffer, encoding="utf-8", errors="replace"))
    finally:
        if release is not None:
            release()


class NoLines:
    """Stdin for the SDK's stdio transport when tiermem reads the real one itself: no line at all."""

    def __aiter__(self) -> NoLines:
        return self

    async def __anext__(self) -> str:
        raise StopAsyncIteration


TRANSPORT_LOGGERS = ("mcp.server.streamable_http_manager", "mcp.server.streamable_http", "mcp.server.sse")
SESSION_ID = re.compile(r"\b[0-9a-fA-F]{32}\b|\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")


class _NoSessionIds(logging.Filter):
    """Session ids out of the SDK transports' lines, at every level (``Created new transport with session ID: ...``
    at INFO, SSE's ``Created new session with ID: ...`` at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if SESSION_ID.search(text):
            record.msg, record.args = SESSION_ID.sub("<session id>", text), None
        return True


def quiet_session_ids() -> None:
    """Take session ids out of what the SDK's HTTP transports log (once per process)."""
    for name in TRANSPORT_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoSessionIds) for f in logger.filters):
            logger.addFilter(_NoSessionIds())
