"""Resumable streamable-HTTP streams: the SSE events a server sent, kept so a client can pick up after a drop.

With an event store the SDK sends each POST's SSE stream a priming event (an id, empty data, and the
``retry`` interval; SEP-1699, protocol 2025-11-25 and later) and numbers every event; a client that
reconnects with ``Last-Event-ID`` gets what it missed. ``MemoryEventStore`` keeps the last
``max_events`` events of this process, none older than ``max_age`` seconds, in memory: HTTP sessions live in
one process, and so do their streams; a client reconnects within ``RETRY_MS``, so a few minutes of events is ample.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage

RETRY_MS = 1000  # how long a client waits before reconnecting to a dropped stream
MAX_EVENTS = 1_000  # events kept for replay (oldest dropped first); an older stream is not resumable
MAX_AGE = 300.0  # seconds an event is kept


class MemoryEventStore(EventStore):
    """A bounded, in-process event store: event ids are ``<stream id>:<sequence>``."""

    def __init__(self, max_events: int = MAX_EVENTS, max_age: float = MAX_AGE) -> None:
        if max_events < 1 or max_age <= 0:
            raise ValueError("max_events must be at least 1 and max_age positive")
        self._max = max_events
        self._max_age = max_age
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None, float]] = OrderedDict()
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        with self._lock:
            event_id = f"{stream_id}:{next(self._seq)}"
            stamp = time.monotonic()
            self._events[event_id] = (stream_id, message, stamp)
            while len(self._events) > self._max or next(iter(self._events.values()))[2] < stamp - self._max_age:
                self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send the events of ``last_event_id``'s stream that came after it; None if that id is unknown (or dropped)."""
        with self._lock:
            if last_event_id not in self._events:
                return None
            stream_id = self._events[last_event_id][0]
            after = False
            missed: list[tuple[EventId, JSONRPCMessage]] = []
            for event_id, (stream, message, _) in self._events.items():
                if event_id == last_event_id:
                    after = True
                elif after and stream == stream_id and message is not None:
                    missed.append((event_id, message))
        for event_id, message in missed:
            await send_callback(EventMessage(message, event_id))
        return stream_id

    @property
    def size(self) -> int:
        """Events kept now (not ``__len__``: the SDK tests the store for truth, and an empty store must count)."""
        return len(self._events)
