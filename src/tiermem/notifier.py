"""Resource change notifications: the ``Notifier`` and the legacy ``resources/subscribe`` handlers.

Memory reports each committed change to ``Notifier`` (``bind``); ``flush``, run after every tool call by
``Runtime.call``, tells the client of that call (``notifications/resources/updated`` and ``list_changed``) and every
legacy subscriber. With ``watch_seconds`` set, a thread polls the store while anyone subscribes, so edits made by
other processes (replicas on one bucket) are notified too.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.lowlevel.server import NotificationOptions
from mcp.types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken
    from mcp.server.mcpserver import Context, MCPServer

    from .memory import Change, Memory
    from .runtime import MemoryHandle

log = logging.getLogger(__name__)

CORE_URI = "memory://core"
BLOCK_URI = "memory://blocks/{label}"


class Notifier:
    """Fans memory changes out to legacy ``resources/subscribe`` sessions and ``subscriptions/listen``."""

    def __init__(self, handle: MemoryHandle | None = None, watch_seconds: float = 0.0) -> None:
        self._pending: deque[Change] = deque()
        self._subscribers: dict[str, list[Any]] = {}  # uri -> client connections (legacy protocol)
        self._cleanup: set[int] = set()  # ids of connections whose close already drops their subscriptions
        self._agent_id: str | None = None
        self._handle = handle
        self._watch_seconds = watch_seconds
        self._watching = False

    def _watch(self, token: EventLoopToken) -> None:
        """Poll the store for edits made by other processes (replicas on one bucket) while anyone subscribes.

        A subscriber learns of another replica's edit within about ``watch_seconds`` plus one read.
        """
        assert self._handle is not None
        seen: dict[str, int] | None = None
        while True:
            time.sleep(self._watch_seconds)
            if not any(self._subscribers.values()):
                seen = None
                continue
            try:
                memory, agent_id = self._handle.get()
                current = {b.label: b.version for b in memory.blocks(agent_id)}
            except Exception as exc:  # a failed poll is retried at the next tick, never fatal
                log.debug("watch: could not read blocks: %s", exc)
                continue
            if seen is not None and current != seen:
                changed = [label for label, v in current.items() if seen.get(label) != v]
                try:
                    anyio.from_thread.run(self._publish_remote, changed, set(current) != set(seen), token=token)
                except Exception as exc:  # the event loop is gone: the server is stopping
                    log.debug("watch: stopped: %s", exc)
                    return
            seen = current

    async def _publish_remote(self, labels: list[str], list_changed: bool) -> None:
        if list_changed:
            await self._publish_list_changed(None)
        for label in labels:
            await self._publish_updated(BLOCK_URI.format(label=label), None)
        if labels or list_changed:
            await self._publish_updated(CORE_URI, None)

    def bind(self, memory: Memory, agent_id: str) -> None:
        if self._agent_id is None:
            self._agent_id = agent_id
            memory.subscribe(self._pending.append)

    @staticmethod
    def _channel(session: Any) -> Any:
        """The client's connection: stable across requests, unlike the per-request session object.

        The SDK keeps it private on the session; fall back to the session itself.
        """
        return getattr(session, "_connection", session)

    def subscribe(self, uri: str, session: Any) -> None:
        channels = self._subscribers.setdefault(uri, [])
        channel = self._channel(session)
        if channel not in channels:
            channels.append(channel)
        # Forget the client's subscriptions when its connection closes (the SDK unwinds the connection's exit
        # stack then), instead of holding the connection until a notification to it fails.
        stack = getattr(channel, "exit_stack", None)
        if stack is not None and id(channel) not in self._cleanup:
            self._cleanup.add(id(channel))
            stack.callback(self._forget, channel)
        if self._handle is not None and self._watch_seconds > 0 and not self._watching:
            self._watching = True
            token = anyio.lowlevel.current_token()
            threading.Thread(target=self._watch, args=(token,), name="tiermem-watch", daemon=True).start()

    def unsubscribe(self, uri: str, session: Any) -> None:
        channels = self._subscribers.get(uri, [])
        channel = self._channel(session)
        if channel in channels:
            channels.remove(channel)
        if not channels:
            self._subscribers.pop(uri, None)

    def _forget(self, channel: Any) -> None:
        """Drop every subscription of a closed connection."""
        self._cleanup.discard(id(channel))
        for uri in list(self._subscribers):
            channels = [c for c in self._subscribers[uri] if c is not channel]
            if channels:
                self._subscribers[uri] = channels
            else:
                del self._subscribers[uri]

    def subscriptions(self) -> int:
        """Open subscriptions (a connection subscribed to two URIs counts twice)."""
        return sum(len(channels) for channels in self._subscribers.values())

    async def flush(self, ctx: Context[Any, Any] | None) -> None:
        while self._pending:
            change = self._pending.popleft()
            if self._agent_id not in change.agent_ids:
                continue
            if change.kind == "block_updated" and change.label:
                for uri in (BLOCK_URI.format(label=change.label), CORE_URI):
                    await self._publish_updated(uri, ctx)
            else:
                await self._publish_list_changed(ctx)
                await self._publish_updated(CORE_URI, ctx)

    async def _publish_updated(self, uri: str, ctx: Context[Any, Any] | None) -> None:
        if ctx is not None:
            await ctx.notify_resource_updated(uri)
        for channel in list(self._subscribers.get(uri, ())):
            try:
                await channel.send_resource_updated(uri)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._forget(channel)  # that client is gone

    async def _publish_list_changed(self, ctx: Context[Any, Any] | None) -> None:
        if ctx is not None:
            await ctx.notify_resources_changed()
        channels = {id(c): c for group in self._subscribers.values() for c in group}
        if ctx is not None:
            try:
                channel = self._channel(ctx.request_context.session)
                channels[id(channel)] = channel
            except ValueError:
                pass  # a tool called in process (the agent loop) has no client session of its own
        for channel in channels.values():
            try:
                await channel.send_resource_list_changed()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # that client is gone; nothing to tell it


def register_legacy_subscriptions(server: MCPServer[Any], notifier: Notifier) -> None:
    """``resources/subscribe`` for clients on protocol versions before 2026-07-28."""
    low = server._lowlevel_server  # the SDK exposes no public hook for these two methods

    async def on_subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        notifier.subscribe(str(params.uri), ctx.session)  # any URI: a block may be created after the subscription
        return EmptyResult()

    async def on_unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        notifier.unsubscribe(str(params.uri), ctx.session)
        return EmptyResult()

    low.add_request_handler("resources/subscribe", SubscribeRequestParams, on_subscribe)
    low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)
    # Advertise listChanged to legacy clients as the 2026-07-28 era does (it derives them from subscriptions/listen).
    original = low.create_initialization_options
    low.create_initialization_options = functools.partial(  # type: ignore[method-assign]
        original, NotificationOptions(resources_changed=True, tools_changed=True, prompts_changed=True)
    )


