"""The HTTP server's connections (``tiermem serve`` over sse/http, ``tiermem ui``): uvicorn, bounded.

uvicorn's h11 protocol waits for a request as long as the client likes, so connections that send half a request and
stop, or trickle it a byte at a time (slowloris), are held for ever, and enough of them use up the process's open
files. Here:

- ``http_header_timeout``: a connection whose request line and headers are not complete this many seconds after it
  opened, or after the first byte of its next request, gets 408 and is closed;
- ``http_body_timeout``: a request whose body is not complete this many seconds after the request began gets 408
  (when nothing was answered yet) and is closed, however the bytes trickle in (``max_request_bytes`` bounds its size);
- a request answered before its body arrived (401, 403, 413, 404: the app did not read it) is closed once answered,
  not kept open while the rest of the body comes, so a client without a token cannot hold a connection either;
- ``http_max_connections``: a connection beyond this many open ones gets 503 and is closed at once, so the open
  files stay well inside the limit;
- when the limit on open files is reached all the same, the event loop's "socket.accept() out of system resource"
  (a traceback for every attempt, thousands a second) is logged once per minute, with how many were left out;
- nothing is upgraded to WebSocket, whichever WebSocket library is installed: a handshake is a plain HTTP request,
  which the guard refuses (``netguard.Guard``); the event loop is asyncio's even where uvloop is installed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .netguard import error_body

if TYPE_CHECKING:
    import socket

log = logging.getLogger(__name__)

ACCEPT_ERROR = "socket.accept() out of system resource"  # asyncio's message (selector_events._accept_connection)
QUIET_SECONDS = 60.0  # one log line per this many seconds for a burst of refusals or accept errors


def _answer(status: int, reason: str, text: str) -> bytes:
    body = error_body(text)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class Burst:
    """Log a repeated event once per ``QUIET_SECONDS``, saying how many were not logged since."""

    def __init__(self) -> None:
        self.last = -math.inf
        self.unlogged = 0

    def due(self) -> int | None:
        """The number of events not logged since the last line, when this one is to be logged; else None."""
        now = time.monotonic()
        if now - self.last < QUIET_SECONDS:
            self.unlogged += 1
            return None
        self.last, unlogged, self.unlogged = now, self.unlogged, 0
        return unlogged


def http_protocol(header_timeout: float, body_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with deadlines for a request's headers and body and a cap on open connections."""
    busy = _answer(503, "Service Unavailable", "Too many open connections; try again shortly.")
    late = _answer(408, "Request Timeout", f"The request's headers did not arrive within {header_timeout:g} s.")
    slow = _answer(408, "Request Timeout", f"The request's body did not arrive within {body_timeout:g} s.")
    refusals = Burst()

    class Bounded(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _waiting: str | None = None  # "headers" or "body": what the running deadline is for
        _began = 0.0  # the loop's time when the current request began (or the connection opened)
        _refused = False

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.connections) >= max_connections:
                self._refused = True
                unlogged = refusals.due()
                if unlogged is not None:
                    log.warning(
                        "refusing new connections: %d are open (http_max_connections)%s",
                        len(self.connections),
                        f"; {unlogged} more refused since the last such line" if unlogged else "",
                    )
                assert isinstance(transport, asyncio.WriteTransport)
                transport.write(busy)
                transport.close()
                return
            super().connection_made(transport)  # type: ignore[arg-type]
            self._wait_for("headers")  # a connection that sends nothing is held no longer than one that sends half

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def _should_upgrade(self) -> bool:
            """Never: nothing here speaks WebSocket, so a handshake goes on as the plain HTTP request it also is (the
            guard answers it 403), without uvicorn's warnings about a missing WebSocket library."""
            return False

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            # answered before the body was all read (a 401, 403 or 413 of the guard, a 404): the rest is not wanted,
            # and waiting for it would let a client that trickles it hold the connection (looked at before uvicorn
            # goes on to a pipelined request, whose body may be under way in turn)
            unread = self.conn.their_state is h11.SEND_BODY
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if unread:
                self._disarm()
                self.transport.close()
                return
            self._watch()

        def _watch(self) -> None:
            """A deadline while a request is under way: for its headers (some of it received, the headers not
            complete), then for its body (the headers in, the body not complete); none while the request is answered
            or the connection idles between requests (uvicorn's keep-alive timeout closes it)."""
            state = self.conn.their_state
            if state is h11.IDLE and self.conn.trailing_data[0]:
                self._wait_for("headers")
            elif state is h11.SEND_BODY:
                self._wait_for("body")
            else:
                self._disarm()

        def _wait_for(self, part: str) -> None:
            if self._waiting == part:
                return
            if self._waiting is None:  # a request begins (the body's deadline counts from then too)
                self._began = self.loop.time()
            self._disarm()
            self._waiting = part
            if part == "headers":
                self._timer = self.loop.call_at(self._began + header_timeout, self._headers_too_slow)
            else:
                self._timer = self.loop.call_at(self._began + body_timeout, self._body_too_slow)

        def _disarm(self) -> None:
            self._waiting = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_too_slow(self) -> None:
            self._timer, self._waiting = None, None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            self.transport.write(late)
            self.transport.close()

        def _body_too_slow(self) -> None:
            self._timer, self._waiting = None, None
            if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_started:
                self.transport.write(slow)
            if cycle is not None:  # the app reads a disconnect and sends nothing more (as once the connection is lost)
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.close()

    return Bounded


class AcceptErrors:
    """The event loop's exception handler: asyncio reports every failed ``accept()`` once the process's open files
    run out, with a traceback, thousands a second; this logs one line per ``QUIET_SECONDS`` instead. Anything else
    goes to the loop's default handler."""

    def __init__(self) -> None:
        self.burst = Burst()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_ERROR:
            loop.default_exception_handler(context)
            return
        unlogged = self.burst.due()
        if unlogged is not None:
            log.error(
                "cannot accept connections: %s. The process's limit on open files (`ulimit -n`) is reached; lower "
                "http_max_connections or raise the limit%s",
                context.get("exception"),
                f" ({unlogged} more such errors since the last line)" if unlogged else "",
            )


class Server(uvicorn.Server):
    """``uvicorn.Server`` with ``AcceptErrors`` as its event loop's exception handler."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(AcceptErrors())
        await super().serve(sockets=sockets)


def config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
    **more: Any,
) -> Any:
    """The ``uvicorn.Config`` of tiermem's HTTP servers: no log config of uvicorn's, no access log, a 5 s keep-alive,
    the bounded protocol above, no WebSocket protocol and asyncio's event loop (not uvloop, where installed: the
    accept errors above are asyncio's) (``more``: other uvicorn settings)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_keep_alive=5,
        http=http_protocol(header_timeout, body_timeout, max_connections),
        ws="none",
        loop="asyncio",
        **more,
    )
