"""Many users on one server: an MCP server per agent that signed-in users use, all over one opened memory.

Under OAuth, ``netguard.Guard`` decides which agent a request may use (from its access token's subject and groups:
the user's own agent, or a shared one asked for with ``?agent=``; ``process/oauth.py``) and puts its name in
``scope["tiermem.agent"]``. ``TenantApps`` hands the request to that agent's own MCP server (its sessions, resources,
subscriptions, notifications and idempotency locks), built on first use. Two agents' servers share only the opened
``Memory``, which every call reaches through its server's agent id: a session id, a subscription or a notification of
one is unknown to another ("Session not found", as for any unknown session). Requests without a principal (static
tokens) go to the default server, the served ``agent``, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import anyio

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..process.netguard import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


class TenantApps:
    """ASGI: requests with ``scope["tiermem.agent"]`` go to that agent's app (``build(agent)``, a Starlette app whose
    lifespan runs here, started on first use and ended with the server's); the others to ``default``."""

    def __init__(self, default: ASGIApp, build: Callable[[str], Any]) -> None:
        self.default = default
        self._build = build
        self._apps: dict[str, ASGIApp] = {}
        self._closed: list[anyio.Event] = []
        self._group: TaskGroup | None = None
        self._stopping: anyio.Event | None = None
        self._lock: anyio.Lock | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        agent = scope.get("tiermem.agent")
        if agent is None:
            await self.default(scope, receive, send)
            return
        app = self._apps.get(agent)
        if app is None:
            app = await self._start(agent)
        await app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        stopping = anyio.Event()

        async def sent(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                stopping.set()  # the agents' servers end their sessions before the process is told it may exit
                for closed in list(self._closed):
                    await closed.wait()
            await send(message)

        async with anyio.create_task_group() as group:
            self._group, self._stopping, self._lock = group, stopping, anyio.Lock()
            try:
                await self.default(scope, receive, sent)
            finally:
                stopping.set()

    async def _start(self, agent: str) -> ASGIApp:
        if self._group is None or self._lock is None:
            raise RuntimeError("TenantApps serves only under its lifespan (uvicorn runs it)")
        async with self._lock:
            app = self._apps.get(agent)
            if app is not None:
                return app
            app = cast("ASGIApp", self._build(agent))
            started, closed = anyio.Event(), anyio.Event()
            self._closed.append(closed)
            self._group.start_soon(self._run, app, started, closed)
            await started.wait()
            self._apps[agent] = app
            log.info("serving agent %r for its signed-in users", agent)
            return app

    async def _run(self, app: Any, started: anyio.Event, closed: anyio.Event) -> None:
        assert self._stopping is not None
        try:
            async with app.router.lifespan_context(app):
                started.set()
                await self._stopping.wait()
        finally:
            started.set()
            closed.set()
