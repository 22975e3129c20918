"""Log messages to the MCP client (``notifications/message``) while the server works on its request.

``client_log(level, message)`` writes to the Python log (stderr, as before) and, when called while
a request is being served (on the event loop or in its worker thread), sends the message to that
request's client too, if the client asked for that level:

- clients on handshake-era protocol versions choose the level with ``logging/setLevel``
  (``ClientLevels``, in the connection's state; until they do, ``warning`` and above reach them);
- clients on 2026-07-28 opt in per request (``_meta`` ``io.modelcontextprotocol/logLevel``); the SDK
  drops what they did not ask for.

Long work that runs inside a request (waiting for the store and the embedding model to open,
large inserts) reports through here. Nothing is imported from the SDK at run time.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.from_thread
import anyio.lowlevel

from .sdk import connection_of

Level = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
LEVELS: tuple[Level, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
PY_LEVEL = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
DEFAULT_LEVEL: Level = "warning"
MODERN = ("2026-07-28",)  # protocol versions where log delivery is a per-request opt-in (mcp_types.version)

log = logging.getLogger("tiermem")


@dataclass
class _Sink:
    session: Any
    minimum: Level
    token: Any
    loop_thread: int
    pending: list[tuple[Level, str, str]] = field(default_factory=list)

    def wants(self, level: Level) -> bool:
        return LEVELS.index(level) >= LEVELS.index(self.minimum)


_sink: ContextVar[_Sink | None] = ContextVar("tiermem_client_log", default=None)


def client_log(level: Level, message: str, *, logger: str = "tiermem") -> None:
    """Log ``message`` to stderr and, inside a request, to the client (if it asked for ``level``)."""
    logging.getLogger(logger).log(PY_LEVEL[level], "%s", message)
    sink = _sink.get()
    if sink is None or not sink.wants(level):
        return
    if threading.get_ident() == sink.loop_thread:
        sink.pending.append((level, message, logger))  # sent by the middleware before the response
        return
    try:
        anyio.from_thread.run(_send, sink, level, message, logger, token=sink.token)
    except Exception as exc:  # the client is gone or the loop stopped: the stderr line above is the record
        log.debug("log message not delivered to the client: %s", exc)


async def _send(sink: _Sink, level: Level, message: str, logger: str) -> None:
    with warnings.catch_warnings():  # deprecated at 2026-07-28, still how both eras deliver it
        warnings.filterwarnings("ignore", message="The logging capability is deprecated")
        sending = sink.session.send_log_message(level=level, data=message, logger=logger)
    await sending


class ClientLevels:
    """The level each handshake-era client chose with ``logging/setLevel``, kept in its connection's ``state`` (the
    SDK's per-connection scratch space): it lasts across the connection's requests and goes with the connection, so
    a closed connection is not kept alive by the level it chose."""

    KEY = "tiermem.log_level"

    @staticmethod
    def _state(session: Any) -> dict[str, Any] | None:
        state = getattr(connection_of(session), "state", None)  # stable across requests
        return state if isinstance(state, dict) else None

    def set(self, session: Any, level: Level) -> None:
        state = self._state(session)
        if state is None:  # the SDK keeps no per-connection state: a changed SDK, tests/test_paths.py says so
            raise TypeError(f"no per-connection state to keep the log level in on {type(session).__name__}")
        state[self.KEY] = level

    def get(self, session: Any) -> Level:
        state = self._state(session)
        level: Level = state.get(self.KEY, DEFAULT_LEVEL) if state is not None else DEFAULT_LEVEL
        return level

    def middleware(self) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
        """Server middleware: while a request is served, ``client_log`` reaches its client."""

        async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
            session = getattr(ctx, "session", None)
            if session is None or getattr(ctx, "request_id", None) is None:
                return await call_next(ctx)  # a notification: nobody to answer
            modern = getattr(ctx, "protocol_version", "") in MODERN
            sink = _Sink(
                session, "debug" if modern else self.get(session), anyio.lowlevel.current_token(), threading.get_ident()
            )
            reset = _sink.set(sink)
            try:
                result = await call_next(ctx)
            finally:
                _sink.reset(reset)
                for level, message, logger in sink.pending:
                    try:
                        await _send(sink, level, message, logger)
                    except Exception as exc:  # the client is gone
                        log.debug("log message not delivered to the client: %s", exc)
            return result

        return middleware
