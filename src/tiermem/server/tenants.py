"""Many users on one server: an MCP server per agent that signed-in users use, all over one opened memory.

Under OAuth, ``netguard.Guard`` decides which agent a request may use (from its access token's subject and groups:
the user's own agent, or a shared one asked for with ``?agent=``; ``process/oauth.py``) and puts its name in
``scope["tiermem.agent"]``. ``TenantApps`` hands the request to that agent's own MCP server (its sessions, resources,
subscriptions, notifications and idempotency locks), built on first use. Two agents' servers share only the opened
``Memory``, which every call reaches through its server's agent id: a session id, a subscription or a notification of
one is unknown to another ("Session not found", as for any unknown session). Requests without a principal (static
tokens) go to the default server, the served ``agent``, as before. An agent's server built before the agent was deleted
(the inspector's delete, in this process: ``retired``) is stopped at the next request for it and built anew, so its
clients reconnect to a fresh agent instead of the deleted agent's id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..process.netguard import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


IDLE_SECONDS = 30 * 60.0  # an agent's server unused this long is stopped (the SDK ends idle sessions after as long)


class Builder(Protocol):
    """Builds each agent's app (``cli.oauth.TenantServers``) and says which were built for an agent deleted since."""

    def __call__(self, agent: str) -> Any: ...

    def retired(self, agent: str) -> bool:
        """Whether the app built for ``agent`` serves an agent deleted since (then it is built anew). Called on every
        request for a running app: no I/O."""
        ...


@dataclass
class _Tenant:
    app: ASGIApp
    stop: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    busy: int = 0  # requests in flight (an open stream of notifications is one)
    used: float = field(default_factory=time.monotonic)  # when the last request ended


class TenantApps:
    """ASGI: requests with ``scope["tiermem.agent"]`` go to that agent's app (``build(agent)``, a Starlette app whose
    lifespan runs here, started on first use and ended with the server's, or once no request has used it for
    ``idle_seconds``: a server is ~0.5 MB, and users come and go); the others to ``default``."""

    def __init__(
        self,
        default: ASGIApp,
        build: Callable[[str], Any],
        *,
        idle_seconds: float = IDLE_SECONDS,
        retired: Callable[[str], bool] | None = None,
    ) -> None:
        """``retired(agent)``: whether ``agent``'s running app serves an agent deleted since it was built (``Builder``);
        such an app is stopped, its sessions with it, and built anew for the request."""
        self.default = default
        self._build = build
        self._retired = retired
        self._idle_seconds = idle_seconds
        self._tenants: dict[str, _Tenant] = {}
        self._closing: list[_Tenant] = []  # stopped, their lifespans still ending
        self._group: TaskGroup | None = None
        self._lock: anyio.Lock | None = None

    @property
    def serving(self) -> list[str]:
        """The agents whose servers run now."""
        return sorted(self._tenants)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        agent = scope.get("tiermem.agent")
        if agent is None:
            await self.default(scope, receive, send)
            return
        tenant = self._tenants.get(agent)
        if tenant is not None and self._retired is not None and self._retired(agent):
            self._stop(agent, tenant)  # its agent was deleted: its sessions end, the next one gets a fresh agent
            log.info("stopped the server of agent %r (the agent was deleted); the next request starts it again", agent)
            tenant = None
        if tenant is None:
            tenant = await self._start(agent)
        tenant.busy += 1  # no await since it was found: an eviction cannot come in between
        try:
            await tenant.app(scope, receive, send)
        finally:
            tenant.busy -= 1
            tenant.used = time.monotonic()

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sent(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self._stop_all()  # the agents' servers end their sessions before the process may exit
            await send(message)

        async with anyio.create_task_group() as group:
            self._group, self._lock = group, anyio.Lock()
            try:
                await self.default(scope, receive, sent)
            finally:
                await self._stop_all()

    async def _stop_all(self) -> None:
        for tenant in [*self._tenants.values(), *self._closing]:
            tenant.stop.set()
        for tenant in [*self._tenants.values(), *self._closing]:
            await tenant.closed.wait()

    async def _start(self, agent: str) -> _Tenant:
        if self._group is None or self._lock is None:
            raise RuntimeError("TenantApps serves only under its lifespan (uvicorn runs it)")
        async with self._lock:
            tenant = self._tenants.get(agent)
            if tenant is not None:
                return tenant
            self._evict_idle()
            tenant = _Tenant(cast("ASGIApp", self._build(agent)))
            started = anyio.Event()
            self._group.start_soon(self._run, tenant, started)
            await started.wait()
            self._tenants[agent] = tenant
            log.info("serving agent %r for its signed-in users", agent)
            return tenant

    def _evict_idle(self) -> None:
        """Stop the servers no request has used for ``idle_seconds`` (none with a request or stream open)."""
        now = time.monotonic()
        self._closing = [t for t in self._closing if not t.closed.is_set()]
        for agent, tenant in list(self._tenants.items()):
            if tenant.busy == 0 and now - tenant.used >= self._idle_seconds:
                self._stop(agent, tenant)
                log.info("stopped the server of agent %r (idle); the next request starts it again", agent)

    def _stop(self, agent: str, tenant: _Tenant) -> None:
        if self._tenants.get(agent) is tenant:
            del self._tenants[agent]
        tenant.stop.set()
        self._closing.append(tenant)

    async def _run(self, tenant: _Tenant, started: anyio.Event) -> None:
        app: Any = tenant.app
        try:
            async with app.router.lifespan_context(app):
                started.set()
                await tenant.stop.wait()
        finally:
            started.set()
            tenant.closed.set()
