"""The HTTP server's connections (``tiermem serve`` over sse/http, ``tiermem ui``): uvicorn, bounded.

uvicorn's h11 protocol waits for a request's headers as long as the client likes, so connections that send half a
request and stop (slowloris) are held for ever, and enough of them use up the process's open files. Here:

- ``http_header_timeout``: a connection whose request line and headers are not complete this many seconds after it
  opened, or after the first byte of its next request, gets 408 and is closed (a body, once the headers are in, is
  the app's to read; ``max_request_bytes`` bounds it);
- ``http_max_connections``: a connection beyond this many open ones gets 503 and is closed at once, so the open
  files stay well inside the limit;
- when the limit on open files is reached all the same, the event loop's "socket.accept() out of system resource"
  (a traceback for every attempt, thousands a second) is logged once per minute, with how many were left out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    import socket

log = logging.getLogger(__name__)

ACCEPT_ERROR = "socket.accept() out of system resource"  # asyncio's message (selector_events._accept_connection)
QUIET_SECONDS = 60.0  # one log line per this many seconds for a burst of refusals or accept errors


def _answer(status: int, reason: str, text: str) -> bytes:
    body = json.dumps({"error": text}).encode()
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


def http_protocol(header_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline for a request's headers and a cap on open connections."""
    busy = _answer(503, "Service Unavailable", "Too many open connections; try again shortly.")
    late = _answer(408, "Request Timeout", f"The request's headers did not arrive within {header_timeout:g} s.")
    refusals = Burst()

    class Bounded(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
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
            self._arm()  # a connection that sends nothing is held no longer than one that sends half a request

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

        def _watch(self) -> None:
            """A deadline while a request's headers are under way (some of it received, the headers not complete);
            none once they are (the app has the request) or while the connection idles between requests (uvicorn's
            keep-alive timeout closes it)."""
            started = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
            if not started:
                self._disarm()
            elif self._header_timer is None:
                self._arm()

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            self.transport.write(late)
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


def config(app: Any, *, host: str, port: int, header_timeout: float, max_connections: int, **more: Any) -> Any:
    """The ``uvicorn.Config`` of tiermem's HTTP servers: no log config of uvicorn's, no access log, a 5 s keep-alive,
    and the bounded protocol above (``more``: other uvicorn settings)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_keep_alive=5,
        http=http_protocol(header_timeout, max_connections),
        **more,
    )
