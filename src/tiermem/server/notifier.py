"""Resource change notifications: the ``Notifier`` and the ``resources/subscribe`` / ``subscriptions/listen`` handlers.

Memory reports each committed change to ``Notifier`` (``bind``); ``flush``, run after every tool call by
``Runtime.call``, tells every listener (``subscriptions/listen`` streams through the server's ``bus``, legacy
``resources/subscribe`` sessions, and the calling client's list_changed).

Other processes' edits (another host's stdio server on the same data directory, a replica on one bucket) are
found by a watch thread that runs while anyone subscribes. It polls the core state's ``change_token`` (SQLite:
``PRAGMA data_version``, every 50 ms; object storage: the table versions, every ``watch_seconds``) and re-reads
the block versions only when the token moved. A subscription is answered only after the watch has its
baseline (the token and the block versions at that moment), so an edit made right after subscribing is
never folded into the baseline.

A client that subscribes to nothing (most hosts) is still told when another process attaches the agent's first
folder or detaches its last (``tools/list_changed``: the file tools appear or go): every connection that listed the
tools (``register_tool_listeners``) keeps the watch running in a cheaper mode while no one subscribes, which polls
the token every ``TOOLS_POLL_SECONDS`` (object storage: every ``tools_watch_seconds``, the agents' listing alone)
and reads only whether a folder is attached, when the token moved. On object storage the watches of one memory (a
multi-user server's tenants) share one look at the token (``Memory.change_token``'s ``max_age``: ``_token_age``), and
a client that lists the tools does not make the watch look at once. The watch thread ends once no one listens (and
starts again at the next listener); it holds the notifier only during a tick, so it never keeps a stopped server's
notifier, and with it the notifier's listener on a shared memory, alive.

Why this module is long: one ``Notifier`` holds the listeners, the queue of this process's changes and the watch
over other processes' (its baseline, its two polling modes, its failures); split, each part would reach into the
others' state under one lock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import weakref
import zlib
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.types import (
    EmptyResult,
    PaginatedRequestParams,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)

from ..core.protocol import LOCAL_POLL_SECONDS
from .sdk import add_request_handler, advertise, connection_of, lowlevel

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.subscriptions import ServerEvent

    from ..domain.memory import Change, Memory
    from .runtime import MemoryHandle

log = logging.getLogger(__name__)

CORE_URI = "memory://core"
BLOCK_URI = "memory://blocks/{label}"
BLOCK_URI_PREFIX = BLOCK_URI.split("{", 1)[0]
FILES_KEY = "\x00files"  # in the watch's versions: the agent's folders and file views (never a block label)
FILES_URI_PREFIX = "memory://files/"  # memory://files/<folder>/<file>: a file as the agent sees it
# While only clients that listed the tools watch (no subscription): how often the change token is polled. The file
# tools appear or go at a folder's attach or detach, rare and not urgent; an idle server's poll costs next to nothing
# on SQLite (``PRAGMA data_version``), three listings on object storage (hence the longer period there).
TOOLS_POLL_SECONDS = 1.0
TOOLS_POLL_OFF_SECONDS = 60.0  # object storage with ``tools_watch_seconds`` = 0: the tools-only watch only waits
# After a failed poll the watch waits its period, at most a second and at least this long: a failure that comes back
# at once (an unexpected error, a period of 0) never makes it spin
FAILED_POLL_MIN_SECONDS = 0.25


def block_uri(label: str) -> str:
    """A block's resource URI: its label percent-encoded (RFC 3986) with each ``/`` kept, so ``system/human`` stays
    ``memory://blocks/system/human`` while a space, ``?``, ``#``, ``%`` or a non-ASCII letter cannot turn part of the
    label into a query, a fragment or an escape when a client parses the URI."""
    return BLOCK_URI_PREFIX + quote(label, safe="/", errors="surrogatepass")


def uri_labels(uri: str) -> list[str]:
    """The labels a block URI may name, in the order to try them: the percent-decoded one (what ``block_uri``
    published), then the text as written when it differs (a client that put a label with a space or a ``%`` into the
    URI without encoding it). Empty for a URI that is not a block's. Escapes that decode to no text (``%FF``: not
    UTF-8) leave only the text as written: a read names that label, and a subscription to it hears of no block (the
    decoding error would have reached the client as an internal error, and every block change's notification)."""
    if not uri.startswith(BLOCK_URI_PREFIX):
        return []
    raw = uri[len(BLOCK_URI_PREFIX) :]
    try:
        decoded = unquote(raw, errors="surrogatepass")  # a label's lone surrogate comes back as block_uri wrote it
    except UnicodeDecodeError:
        return [raw]
    return [decoded] if decoded == raw else [decoded, raw]


class ListenerBus(InMemorySubscriptionBus):
    """The server's ``subscriptions/listen`` bus; it counts its open streams, so the watch runs only while one is open."""

    def __init__(self) -> None:
        super().__init__()
        self.open_streams = 0
        # listen requests whose baseline is taken but whose stream is not subscribed yet: the watch counts them as
        # listening, so it does not go idle (dropping that baseline) in between
        self.arriving = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.open_streams += 1
        self.arriving = max(0, self.arriving - 1)
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self.open_streams -= 1
            unsubscribe()

        return release


class Notifier:
    """Fans memory changes out to ``subscriptions/listen`` streams and legacy ``resources/subscribe`` sessions."""

    def __init__(
        self, handle: MemoryHandle | None = None, watch_seconds: float = 0.0, tools_watch_seconds: float = 5.0
    ) -> None:
        self._pending: deque[Change] = deque()
        self._subscribers: dict[str, list[Any]] = {}  # uri -> client connections (legacy protocol)
        # file URIs open listen streams asked for -> how many streams: a file's update is published to the bus by URI
        # (a stream receives only the URIs it asked for; the bus cannot say which those are)
        self._listened_files: Counter[str] = Counter()
        self._cleanup: set[int] = set()  # ids of connections whose close already drops their subscriptions
        self._tool_clients: dict[int, Any] = {}  # id -> connection, of the clients that listed the tools (still open)
        self._tools_token: object = None  # the change token at the watch's last look at the folders (tools only)
        self._nudge = threading.Event()  # ends the watch's sleep early (a subscriber arrived)
        self._failure: str | None = None  # the watch's last failure, logged once until it changes or the watch reads
        self._hear: Callable[[Change], None] | None = None  # the listener ``bind`` gave the memory
        self._bind_lock = threading.Lock()
        self._agent_id: str | None = None
        self._handle = handle
        self._watch_seconds = watch_seconds
        self._tools_watch_seconds = tools_watch_seconds  # object storage, while only clients that listed tools watch
        self.bus = ListenerBus()  # the server's subscriptions/listen bus (build_server passes it to MCPServer)
        # The watch: its baseline (change token and block versions) and the thread that compares against it.
        self._watch_lock = threading.Lock()
        self._baseline: tuple[object, dict[str, int]] | None = None
        self._loop: EventLoopToken | None = None
        self._watching = False  # a watch thread runs (set and cleared under ``_run_lock``)
        self._run_lock = threading.Lock()
        self.remote_changes = 0  # other processes' changes published (for tests and benchmarks)
        self._had_folders: bool | None = None  # whether the client was last shown the file tools (None: not known)
        # each attached file's version as its resource shows it (name -> file id and content digest) at the last look
        # (None: not looked yet: every subscribed file is taken for changed); a file's subscribers hear of its changes only
        self._file_versions: dict[str, tuple[str, str]] | None = None
        self._files_lock = threading.Lock()

    # -- watching other processes' edits ---------------------------------------------------------

    def _listening(self) -> bool:
        return self.bus.open_streams > 0 or self.bus.arriving > 0 or any(self._subscribers.values())

    def _can_watch(self) -> bool:
        return self._handle is not None and self._watch_seconds > 0

    def _start_watch(self, *, now: bool = True) -> None:
        """Make sure a watch thread runs (one ends once no one listens: ``_watch_tick``), and with ``now`` end its
        sleep (a subscriber waits for its first look). Called after the caller made itself a listener, so a thread
        ending meanwhile has seen it and left ``_watching`` set, or has not and left it cleared: either way someone
        watches."""
        with self._run_lock:
            if not self._watching:
                self._watching = True
                threading.Thread(target=_watch, args=(weakref.ref(self),), name="tiermem-watch", daemon=True).start()
        if now:
            self._nudge.set()

    def hear_tools(self, session: Any) -> None:
        """The client of ``session`` listed the tools: it is told when another process's change makes the file tools
        appear or go (the watch runs, in its cheaper mode while no one subscribes, until its connection closes)."""
        channel = self._channel(session)
        if id(channel) in self._tool_clients:
            return
        stack = getattr(channel, "exit_stack", None)
        if stack is None or not hasattr(channel, "send_tool_list_changed"):
            return  # a connection that cannot be told later (or whose end would go unnoticed)
        self._tool_clients[id(channel)] = channel
        self._on_close(channel)
        if self._can_watch():
            self._loop = anyio.lowlevel.current_token()
            self._start_watch(now=False)  # not urgent: its client was just shown the tools as they are

    async def watch_from_now(self) -> None:
        """Take the watch's baseline now, before the caller answers its client's subscription, and make sure the
        watch runs. Without a way to watch (no store, ``watch_seconds`` = 0) it does nothing."""
        if not self._can_watch():
            return
        self._loop = anyio.lowlevel.current_token()
        if self._baseline is None:
            try:
                await anyio.to_thread.run_sync(self._take_baseline)
            except Exception as exc:  # the store failed to open: the subscription stands, the watch retries
                log.warning("watch: could not read the blocks to watch: %s", exc)
        self._start_watch()

    def _take_baseline(self) -> None:
        assert self._handle is not None
        memory, agent_id = self._handle.get()
        with self._watch_lock:
            if self._baseline is None:
                token = memory.change_token(self._token_age(memory, self._watch_seconds))  # before the versions
                self._baseline = (token, _versions(memory, agent_id))

    def _watch_tick(self) -> bool:
        """One tick of the watch: compare the store with the baseline while anyone listens and publish what other
        processes changed; while only clients that listed the tools watch, look only at whether a folder is attached
        (``_watch_tools``). False when the watch ends: no one listens (``_start_watch`` starts it again), or the
        event loop is gone."""
        assert self._handle is not None
        with self._watch_lock:
            listening = self._listening()
            if not listening:
                self._baseline = None  # the next subscriber takes a new one
        if not listening and not self._tool_clients:
            with self._run_lock:
                if not self._listening() and not self._tool_clients:
                    self._watching = False
                    return False
            return True
        if not listening:
            return self._watch_tools()
        try:
            memory, agent_id = self._handle.get()
            self._sleep(min(LOCAL_POLL_SECONDS, self._watch_seconds) if memory.watch_cheap else self._watch_seconds)
            if self._baseline is None:
                self._take_baseline()
                return True
            token = memory.change_token(self._token_age(memory, self._watch_seconds))
            if token == self._baseline[0]:
                return True
            agent_id = self._handle.live_id(memory)  # the agent of the served name made again, if it was
            current = _versions(memory, agent_id)
        except Exception as exc:  # a failed poll is retried at the next tick, never fatal
            self._failed("could not read the blocks", exc)
            _pause_after_failure(self._watch_seconds)
            return True
        self._read_again()
        with self._watch_lock:
            if self._baseline is None:
                return True
            seen = self._baseline[1]
            self._baseline = (token, current)
        changed = [label for label, v in current.items() if seen.get(label) != v]
        list_changed = set(current) != set(seen)
        if not (changed or list_changed) or self._loop is None:
            return True
        self.remote_changes += 1
        return self._publish_from_watch(self._publish_remote, changed, list_changed)

    def _publish_from_watch(self, publish: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> bool:
        """Run ``publish(*args)`` on the server's event loop from the watch thread; False once the loop is gone (the
        watch ends: ``_stopped``). One failed delivery never ends the watch."""
        try:
            anyio.from_thread.run(publish, *args, token=self._loop)
        except RuntimeError as exc:  # the event loop is gone: the server is stopping
            log.debug("watch: stopped: %s", exc)
            return self._stopped()
        except asyncio.CancelledError:  # the loop cancelled the publish (it is stopping): the next tick tells
            log.debug("watch: a publish was cancelled on the event loop")
        except Exception as exc:
            log.warning("watch: could not publish a change: %s", exc)
        return True

    def _stopped(self) -> bool:
        """The event loop is gone: this watch ends (a listener of a later loop starts another)."""
        with self._run_lock:
            self._watching = False
        return False

    @staticmethod
    def _token_age(memory: Memory, period: float) -> float:
        """How old a change token polled every ``period`` may be (``Memory.change_token``): on object storage, where
        a poll is three listings, half the period, so the watches of a multi-user server's tenants share one poll
        (at most two per period in all, each seen within one and a half periods); none on SQLite, where it costs
        next to nothing (and where the watch follows it every ``LOCAL_POLL_SECONDS``)."""
        return 0.0 if memory.watch_cheap else period / 2

    def _failed(self, what: str, exc: Exception) -> None:
        """Log a failed poll once per distinct failure (a deleted agent's fails every tick while it is gone)."""
        text = f"{what}: {exc}"
        if text == self._failure:
            log.debug("watch: %s", text)
            return
        self._failure = text
        log.warning("watch: %s (retried at each tick; logged again only if the failure changes)", text)

    def _read_again(self) -> None:
        if self._failure is not None:
            log.info("watch: reading again after: %s", self._failure)
            self._failure = None

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until a subscriber arrives (``_nudge``)."""
        self._nudge.wait(seconds)
        self._nudge.clear()

    def _watch_tools(self) -> bool:
        """One tick of the watch while only clients that listed the tools watch: when the change token moved, whether
        the agent has a folder now; its clients are told if that changed. False once the event loop is gone."""
        assert self._handle is not None
        if not self._handle.started:  # the watch never starts the opening (the server starts it when it is time)
            self._sleep(TOOLS_POLL_SECONDS)
            return True
        try:
            memory, agent_id = self._handle.get()
            period = TOOLS_POLL_SECONDS if memory.watch_cheap else self._tools_watch_seconds
            self._sleep(period or TOOLS_POLL_OFF_SECONDS)
            if self._listening() or not period:
                return True  # a subscriber came meanwhile: the full watch takes over (or this check is off)
            token = memory.change_token(self._token_age(memory, period), agents_only=True)
            if token == self._tools_token:
                return True
            attached = memory.files.has_folders(self._handle.live_id(memory))
        except Exception as exc:  # a failed poll is retried at the next tick, never fatal
            self._failed("could not read the agent's folders", exc)
            _pause_after_failure(self._tools_watch_seconds)
            return True
        self._read_again()
        self._tools_token = token
        if self._loop is None:
            return True
        return self._publish_from_watch(self._publish_tools_if, attached)

    async def _publish_tools_if(self, attached: bool) -> None:
        """Tell the clients the tool list changed if whether a folder is attached differs from what they were shown."""
        if attached != self._had_folders and self._had_folders is not None:
            self.remote_changes += 1
            await self._publish_tools_changed(None)
        self._had_folders = attached

    async def _publish_remote(self, labels: list[str], list_changed: bool) -> None:
        if FILES_KEY in labels:
            labels = [label for label in labels if label != FILES_KEY]
            await self._publish_files(None)
        if list_changed:
            await self._publish_list_changed(None)
        for label in labels:
            await self._publish_block(label, None)
        if labels or list_changed:
            await self._publish_updated(CORE_URI, None)

    def _own_edit(self, change: Change) -> None:
        """This process committed ``change``: a block edit's version goes into the watch's baseline, which it announces
        itself (``flush``). Else the watch took the block for changed at its next re-read: on SQLite, where this
        process's commits do not move the change token, at another process's edit of any block; on object storage,
        where they do, at once (announcing the edit twice)."""
        label, version = change.label, change.version
        if change.kind != "block_updated" or label is None or version is None:
            return
        with self._watch_lock:
            if self._baseline is not None and self._baseline[1].get(label, version) < version:
                token, seen = self._baseline
                self._baseline = (token, {**seen, label: version})

    def bind(self, memory: Memory, agent_id: str) -> None:
        """Hear ``memory``'s changes of ``agent_id``, the served agent (called with each request's): when the server
        moves to another id (its agent deleted and made again by name: ``MemoryHandle.live_id``), the changes of that
        one from then on. The memory holds only a weak reference to this notifier: a server stopped (an idle tenant's)
        is not kept alive by it, and its listener leaves at the next change."""
        if agent_id == self._agent_id:
            return
        with self._bind_lock:  # requests' worker threads bind at once
            if agent_id == self._agent_id:
                return
            if self._hear is not None:
                memory.unsubscribe(self._hear)
            self._hear = _listener(weakref.ref(self), agent_id, memory)
            memory.subscribe(self._hear)
            self._agent_id = agent_id

    @staticmethod
    def _channel(session: Any) -> Any:
        """The client's connection: stable across requests, unlike the per-request session object."""
        return connection_of(session)

    async def subscribe(self, uri: str, session: Any) -> None:
        """A legacy ``resources/subscribe``: answered once the watch has its baseline."""
        channels = self._subscribers.setdefault(uri, [])
        channel = self._channel(session)
        if channel not in channels:
            channels.append(channel)
        self._on_close(channel)
        if uri.startswith(FILES_URI_PREFIX):
            await self.files_from_now()
        await self.watch_from_now()

    def _on_close(self, channel: Any) -> None:
        """Forget the client's subscriptions when its connection closes (the SDK unwinds the connection's exit stack
        then), instead of holding the connection until a notification to it fails."""
        stack = getattr(channel, "exit_stack", None)
        if stack is not None and id(channel) not in self._cleanup:
            self._cleanup.add(id(channel))
            stack.callback(self._forget, channel)

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
        if self._tool_clients.pop(id(channel), None) is not None and not self._tool_clients:
            self._nudge.set()  # the watch ends now if no one else listens, not after its current sleep
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
                await self._publish_block(change.label, ctx)
                await self._publish_updated(CORE_URI, ctx)
            elif change.kind == "files_changed":
                await self._publish_files(ctx)
            else:
                await self._publish_list_changed(ctx)
                await self._publish_updated(CORE_URI, ctx)

    async def _publish_files(self, ctx: Context[Any, Any] | None) -> None:
        """The agent's folders or file views changed: core memory was updated, the list of file resources may have
        changed, the file tools appear or go when the first folder comes or the last goes (``tools/list_changed``),
        and each subscribed file resource whose content changed (or that came or went) was updated. Opening, closing
        or scrolling a file changes core memory, not the file's resource: its subscribers are not told."""
        attached, changed = await anyio.to_thread.run_sync(self._files_changed)
        if attached != self._had_folders and self._had_folders is not None:
            await self._publish_tools_changed(ctx)
        self._had_folders = attached
        await self._publish_list_changed(ctx)
        await self._publish_updated(CORE_URI, ctx)
        for uri in changed:
            await self._publish_updated(uri, ctx)  # to listen streams (the bus) and legacy subscribers

    async def files_from_now(self) -> None:
        """Take the files' versions now (if no look was taken yet), before the caller answers its client's subscription
        to a file: its first change is then told only if it changes that file. A failed read leaves it to the first
        change (every subscribed file is told then)."""
        if self._file_versions is not None or self._handle is None:
            return
        try:
            await anyio.to_thread.run_sync(functools.partial(self._files_changed, baseline=True))
        except Exception as exc:  # the store failed to open: the subscription stands
            log.warning("could not read the agent's files to watch: %s", exc)

    def _files_changed(self, *, baseline: bool = False) -> tuple[bool, list[str]]:
        """Whether the agent has a folder attached, and which subscribed file resources changed since the last look
        (their file's content, or the file came or went); this look is the next one's baseline. The subscribed URIs
        are taken after the files are read, under the lock: a file subscribed by then is in this look, so the change
        of it this look takes in is told now, never taken for the baseline unseen. With no file subscribed no look is
        kept, unless ``baseline`` (a subscription is coming)."""
        if self._handle is None:
            return False, []
        with self._files_lock:
            memory, agent_id = self._handle.get()
            files = memory.files.seen(agent_id)
            uris = self._subscribed_files()
            if not uris and not baseline:
                self._file_versions = None  # the next subscriber to a file takes a new one
                return bool(files.folders), []
            now = {v.name: (v.file_id, v.sha256) for v in files.files}
            before, self._file_versions = self._file_versions, now
        if before is None:
            return bool(files.folders), uris
        changed = []
        for uri in uris:
            name = unquote(uri[len(FILES_URI_PREFIX) :])
            if now.get(name) != before.get(name):
                changed.append(uri)
        return bool(files.folders), changed

    def _subscribed_files(self) -> list[str]:
        """The file URIs subscribed to now (legacy subscriptions and listen streams). Called from a worker thread
        while the event loop may add one: each set is copied whole first (one C-level step under the GIL)."""
        uris = {*list(self._subscribers), *list(self._listened_files)}
        return sorted(uri for uri in uris if uri.startswith(FILES_URI_PREFIX))

    def listen_files(self, uris: list[str]) -> Callable[[], None]:
        """A ``subscriptions/listen`` stream asks for these URIs: its file URIs are published at each change of the
        agent's files until the returned callable is called (the stream ended)."""
        wanted = [uri for uri in uris if uri.startswith(FILES_URI_PREFIX)]
        self._listened_files.update(wanted)
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self._listened_files.subtract(wanted)
                for uri in wanted:
                    if self._listened_files[uri] <= 0:
                        del self._listened_files[uri]

        return release

    def note_files_attached(self, attached: bool) -> None:
        """What the client was shown (``tools/list``): the file tools with a folder attached, or not."""
        self._had_folders = attached

    async def _publish_tools_changed(self, ctx: Context[Any, Any] | None) -> None:
        await self.bus.publish(ToolsListChanged())
        channels = {id(c): c for c in (*self._every_channel(ctx), *self._tool_clients.values())}
        for channel in channels.values():
            await _reached(channel.send_tool_list_changed())  # a client gone is left alone

    def _every_channel(self, ctx: Context[Any, Any] | None) -> list[Any]:
        """Every subscribed client's connection, and the calling client's (told of list changes it caused)."""
        channels = {id(c): c for group in self._subscribers.values() for c in group}
        if ctx is not None:
            try:
                channel = self._channel(ctx.request_context.session)
                channels[id(channel)] = channel
            except ValueError:
                pass  # a tool called in process (the agent loop) has no client session of its own
        return list(channels.values())

    async def _publish_updated(self, uri: str, ctx: Context[Any, Any] | None) -> None:
        await self.bus.publish(ResourceUpdated(uri=uri))
        await self._deliver(uri)

    async def _publish_block(self, label: str, ctx: Context[Any, Any] | None) -> None:
        """A block changed: its URI (``block_uri``) is published; a client that subscribed with another spelling of
        it (the label unencoded, other escapes) hears of it under the URI it subscribed with."""
        uri = block_uri(label)
        await self.bus.publish(ResourceUpdated(uri=uri))
        raw = BLOCK_URI_PREFIX + label
        if raw != uri:  # a listen stream only receives the URIs it asked for: this one reaches no one else
            await self.bus.publish(ResourceUpdated(uri=raw))
        for subscribed in [u for u in self._subscribers if label in uri_labels(u)]:
            await self._deliver(subscribed)

    async def _deliver(self, uri: str) -> None:
        """``notifications/resources/updated`` to the legacy subscribers of ``uri``."""
        for channel in list(self._subscribers.get(uri, ())):
            if not await _reached(channel.send_resource_updated(uri)):
                self._forget(channel)  # that client is gone

    async def _publish_list_changed(self, ctx: Context[Any, Any] | None) -> None:
        await self.bus.publish(ResourcesListChanged())
        for channel in self._every_channel(ctx):
            await _reached(channel.send_resource_list_changed())  # a client gone is left alone


async def _reached(sending: Awaitable[None]) -> bool:
    """Send one notification to a client's connection: False when the client is gone (its connection closed)."""
    try:
        await sending
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    return True


def _pause_after_failure(period: float) -> None:
    """The watch's wait after a failed poll (``FAILED_POLL_MIN_SECONDS``)."""
    time.sleep(max(FAILED_POLL_MIN_SECONDS, min(period, 1.0)))


def _watch(ref: weakref.ref[Notifier]) -> None:
    """The watch thread: ticks of the notifier ``ref`` until it ends them or is gone. It holds the notifier only
    during a tick, so a stopped server's (an idle tenant's) is not kept alive by it."""
    while True:
        notifier = ref()
        if notifier is None or not notifier._watch_tick():
            return
        del notifier


def _listener(ref: weakref.ref[Notifier], agent_id: str, memory: Memory) -> Callable[[Change], None]:
    """A memory listener that queues the changes of ``agent_id`` for the notifier ``ref`` while it lives (changes of
    other agents are not its business: they would pile up until its next flush), then unsubscribes itself."""

    def hear(change: Change) -> None:
        notifier = ref()
        if notifier is None:
            memory.unsubscribe(hear)
        elif agent_id in change.agent_ids:
            notifier._pending.append(change)
            notifier._own_edit(change)

    return hear


def register_legacy_subscriptions(server: MCPServer[Any], notifier: Notifier) -> None:
    """``resources/subscribe`` for clients on protocol versions before 2026-07-28, and ``subscriptions/listen`` on
    the notifier's bus (both take the watch's baseline before they answer)."""

    async def on_subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        await notifier.subscribe(str(params.uri), ctx.session)  # any URI: a block may be created after it
        return EmptyResult()

    listen = ListenHandler(notifier.bus)

    async def on_listen(ctx: Any, params: SubscriptionsListenRequestParams) -> Any:
        """``subscriptions/listen`` (2026-07-28): the watch takes its baseline before the stream is acknowledged."""
        wanted = params.notifications
        uris = [str(uri) for uri in wanted.resource_subscriptions or ()]
        if any(uri.startswith(FILES_URI_PREFIX) for uri in uris):
            await notifier.files_from_now()
        if wanted.resource_subscriptions or wanted.resources_list_changed:
            notifier.bus.arriving += 1  # listening from now on: the stream subscribes to the bus in `listen`
            await notifier.watch_from_now()
        release = notifier.listen_files(uris)
        try:
            return await listen(ctx, params)
        except MCPError:  # refused before it subscribed (no request id, too many streams)
            notifier.bus.arriving = max(0, notifier.bus.arriving - 1)
            raise
        finally:
            release()

    async def on_unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        notifier.unsubscribe(str(params.uri), ctx.session)
        return EmptyResult()

    add_request_handler(server, "resources/subscribe", SubscribeRequestParams, on_subscribe)
    add_request_handler(server, "resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)
    add_request_handler(server, "subscriptions/listen", SubscriptionsListenRequestParams, on_listen)
    # Advertise listChanged to legacy clients as the 2026-07-28 era does (it derives them from subscriptions/listen).
    advertise(server, NotificationOptions(resources_changed=True, tools_changed=True, prompts_changed=True))


def register_tool_listeners(server: MCPServer[Any], notifier: Notifier) -> None:
    """``tools/list`` also makes its client one the notifier tells when the file tools appear or go
    (``Notifier.hear_tools``), whether or not it subscribes to anything."""
    entry = lowlevel(server).get_request_handler("tools/list")
    if entry is None:
        return
    listed = entry.handler

    async def on_list_tools(ctx: Any, params: PaginatedRequestParams) -> Any:
        notifier.hear_tools(ctx.session)
        return await listed(ctx, params)

    add_request_handler(server, "tools/list", entry.params_type, on_list_tools)


def _versions(memory: Memory, agent_id: str) -> dict[str, int]:
    """Each block's version, and a digest of the agent's folders and file views as clients are shown them (not the
    views' access times, which a search of the files changes) under ``FILES_KEY``."""
    versions = {b.label: b.version for b in memory.blocks(agent_id)}
    versions[FILES_KEY] = zlib.crc32(memory.files.seen(agent_id).shown_json().encode())  # not the access times
    return versions
