"""Clean exit for ``tiermem serve``: on SIGINT or SIGTERM, finish the requests in flight, then stop at once.

Hosts stop a stdio server with SIGINT, then SIGTERM (Claude Code); an HTTP server gets either from a terminal or a
service manager. The first signal closes the doors (new MCP requests and hooks are refused with a clear error), waits
for the requests under way to finish and their answers to go out, and ends the process. Every write a client got an
answer for is committed before that answer is sent, so nothing acknowledged is lost; work that no one is waiting for
(background upkeep, a model still loading) is abandoned: LanceDB and SQLite commit atomically, so it leaves nothing
half-written. A second signal ends the process at once.

The process ends with ``os._exit``: interpreter shutdown would wait for the stdin reader thread, which a host that
keeps the pipe open never lets finish.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..base.errors import ShuttingDownError

log = logging.getLogger(__name__)

# After an MCP request finished: time for the transport to write its answer out (hooks answer before they finish; an
# idle server stops at once). Claude Code sends SIGTERM 0.1 s after SIGINT.
FLUSH_SECONDS = 0.03
MAX_DRAIN_SECONDS = 120.0  # the longest the first signal waits for requests in flight (an agent turn can be long)


class Shutdown:
    def __init__(self, *, drain_seconds: float = MAX_DRAIN_SECONDS) -> None:
        self.drain_seconds = drain_seconds
        self._busy = 0
        self._cond = threading.Condition()
        self.stopping = threading.Event()
        self._closers: list[Callable[[], None]] = []
        self._signalled_at = 0.0
        self._last_done = 0.0  # when the latest request finished (monotonic)

    def install(self) -> None:
        """Handle SIGINT and SIGTERM in this process (call from the main thread)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def keep_signals(self, server: Any) -> Any:
        """``server`` (a ``uvicorn.Server``) without its own SIGINT/SIGTERM handling, so these stay in charge: uvicorn
        would wait for open event streams to end, up to its graceful-shutdown timeout."""

        @contextmanager
        def ours() -> Iterator[None]:
            yield

        server.capture_signals = ours
        return server

    def on_stop(self, close: Callable[[], None]) -> None:
        """Run ``close`` when the first signal arrives (stop accepting: the hook listener)."""
        self._closers.append(close)

    @contextmanager
    def request(self) -> Iterator[None]:
        """Count one request in flight (one that writes its own answer before it ends: a hook); refused
        (``ShuttingDownError``) once the server is stopping."""
        self.enter()
        try:
            yield
        finally:
            self.leave(answered=True)

    def enter(self) -> None:
        with self._cond:
            if self.stopping.is_set():
                raise ShuttingDownError(
                    "tiermem is shutting down, so this request was not run; send it again when the server is back."
                )
            self._busy += 1

    def leave(self, *, answered: bool = False) -> None:
        """``answered``: the request's answer is already written (else the transport writes it just after)."""
        with self._cond:
            if not answered:
                self._last_done = time.monotonic()
            self._busy -= 1
            self._cond.notify_all()

    def finish(self, timeout: float) -> bool:
        """The end without a signal (the host closed stdin, the HTTP server returned): refuse new requests (a hook
        then asks another server), stop the listeners, and wait for the requests in flight, at most ``timeout`` s
        (a hook's prompt is logged after its answer); whether none is left."""
        with self._cond:
            self.stopping.set()
            busy = self._busy
        self._close()
        if busy:
            log.info("finishing %d request(s) in flight, then stopping", busy)
        return self.wait_idle(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight (at most ``timeout`` s); whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def middleware(self) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
        """MCP server middleware counting every request and notification (any transport). Once stopping, a request
        is refused with an error its client reads; a notification (``notifications/initialized`` sent just as the
        host stops the server) is dropped quietly: there is no one to answer, and raising only logs a traceback."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import INTERNAL_ERROR

        async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
            try:
                self.enter()
            except ShuttingDownError as exc:
                if ctx.request_id is None:  # a notification: nothing to answer
                    log.debug("shutting down: dropped the notification %s", ctx.method)
                    return None
                raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from None
            try:
                return await call_next(ctx)
            finally:
                self.leave()

        return middleware

    def asgi(self, app: Any) -> Any:
        """An ASGI app counting each request that is not a GET (MCP posts, the inspector's edits) as in flight; once
        stopping, such requests get 503. GET streams (SSE) are long-lived and write nothing: not counted."""

        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http" or scope.get("method") in ("GET", "HEAD"):
                await app(scope, receive, send)
                return
            try:
                self.enter()
            except ShuttingDownError as exc:
                body = str(exc).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
            try:
                await app(scope, receive, send)
            finally:
                self.leave()

        return wrapped

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._signalled_at:  # (stopping without a signal, ``finish``, this is the first: it drains as usual)
            log.warning("second %s: stopping now", signal.Signals(signum).name)
            self._close()  # (the drain's thread may not have closed the listeners yet: a hook socket left behind)
            _end(128 + signum)
        self.stopping.set()
        self._signalled_at = time.monotonic()
        with self._cond:
            idle = self._busy == 0 and self._signalled_at >= self._last_done + FLUSH_SECONDS
        if idle:  # nothing to finish: stop now, in the handler (Claude Code sends SIGTERM 0.1 s after SIGINT)
            self._close()
            log.info("%s: nothing in flight, stopped at once", signal.Signals(signum).name)
            _end(0)
        log.info("%s: finishing the requests in flight, then stopping", signal.Signals(signum).name)
        threading.Thread(target=self._drain, name="tiermem-shutdown", daemon=True).start()

    def _close(self) -> None:
        for close in self._closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing a listener must not keep the process alive
                log.exception("closing a listener failed")

    def _drain(self) -> None:
        self._close()
        done = self.wait_idle(self.drain_seconds)
        if not done:
            log.warning("%d request(s) still running after %.0f s; stopping anyway", self._busy, self.drain_seconds)
        time.sleep(max(0.0, self._last_done + FLUSH_SECONDS - time.monotonic()))
        log.info("stopped %.2f s after the signal", time.monotonic() - self._signalled_at)
        _end(0)


def _end(code: int) -> None:
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001
            pass
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)
