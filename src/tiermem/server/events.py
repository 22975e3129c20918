"""Resumable streamable-HTTP streams: the SSE events a server sent, kept so a client can pick up after a drop.

With an event store the SDK sends each POST's SSE stream a priming event (an id, empty data, and the
``retry`` interval; SEP-1699, protocol 2025-11-25 and later) and numbers every event; a client that
reconnects with ``Last-Event-ID`` gets what it missed. ``EventLog`` keeps the last ``max_events`` events of
this process, none older than ``max_age`` seconds, in memory: HTTP sessions live in one process, and so do their
streams; a client reconnects within ``RETRY_MS``, so a few minutes of events is ample.

Every session has its own ``SessionEvents`` (``sdk.event_store_per_session`` hands each new session one): the SDK's
stream id is the JSON-RPC request id, which every client numbers from 1, so a store shared by sessions would replay
one client's answers to another client that resumes its own stream with the same request id. A session's events are
found only through its own store, and its event ids are counted per session (they tell nothing of other sessions).
All sessions share one budget of events, so many sessions keep no more than one busy one would.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage

RETRY_MS = 1000  # how long a client waits before reconnecting to a dropped stream
MAX_EVENTS = 1_000  # events kept for replay, every session's together (oldest dropped first)
MAX_AGE = 300.0  # seconds an event is kept


class EventLog:
    """The bounded, in-process record of every session's events; ``session()`` gives one session its store."""

    def __init__(self, max_events: int = MAX_EVENTS, max_age: float = MAX_AGE) -> None:
        if max_events < 1 or max_age <= 0:
            raise ValueError("max_events must be at least 1 and max_age positive")
        self._max = max_events
        self._max_age = max_age
        # (session number, event id) -> (stream id, message, when stored)
        self._events: OrderedDict[tuple[int, EventId], tuple[StreamId, JSONRPCMessage | None, float]] = OrderedDict()
        self._sessions = itertools.count(1)
        self._lock = threading.Lock()

    def session(self) -> SessionEvents:
        """A new session's event store."""
        with self._lock:
            return SessionEvents(self, next(self._sessions))

    def _add(self, key: tuple[int, EventId], stream_id: StreamId, message: JSONRPCMessage | None) -> None:
        with self._lock:
            stamp = time.monotonic()
            self._events[key] = (stream_id, message, stamp)
            while len(self._events) > self._max or next(iter(self._events.values()))[2] < stamp - self._max_age:
                self._events.popitem(last=False)

    def _after(self, key: tuple[int, EventId]) -> tuple[StreamId, list[tuple[EventId, JSONRPCMessage]]] | None:
        """The stream of event ``key`` and its session's messages on that stream after it; None if it is unknown."""
        with self._lock:
            if key not in self._events:
                return None
            stream_id = self._events[key][0]
            after = False
            missed: list[tuple[EventId, JSONRPCMessage]] = []
            for (session, event_id), (stream, message, _) in self._events.items():
                if (session, event_id) == key:
                    after = True
                elif after and session == key[0] and stream == stream_id and message is not None:
                    missed.append((event_id, message))
        return stream_id, missed

    @property
    def size(self) -> int:
        """Events kept now, every session's."""
        return len(self._events)


class SessionEvents(EventStore):
    """One session's events in the shared log: event ids are ``<stream id>:<sequence in this session>``."""

    def __init__(self, log: EventLog, session: int) -> None:
        self._log = log
        self._session = session
        self._seq = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = f"{stream_id}:{next(self._seq)}"
        self._log._add((self._session, event_id), stream_id, message)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send this session's events of ``last_event_id``'s stream that came after it; None if this session has no
        such event (never sent, dropped, or another session's)."""
        found = self._log._after((self._session, last_event_id))
        if found is None:
            return None
        stream_id, missed = found
        for event_id, message in missed:
            await send_callback(EventMessage(message, event_id))
        return stream_id
