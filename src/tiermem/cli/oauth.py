"""``tiermem serve`` with OAuth: the resource server built from the settings (``process/oauth.py`` checks tokens)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Change, Memory
    from ..process.netguard import ASGIApp
    from ..process.oauth import ResourceServer
    from ..process.shutdown import Shutdown
    from ..server.runtime import MemoryHandle


def resource_server(settings: Settings) -> ResourceServer | None:
    """The OAuth resource server the settings describe (``oauth_issuer`` and ``public_url``), None when OAuth is off;
    a ConfigError for half or unsafe settings."""
    if settings.transport == "stdio" or not (settings.oauth_issuer or settings.public_url):
        return None
    from ..process.oauth import ResourceServer
    from ..process.oauth_settings import from_settings

    oauth = from_settings(
        issuer=settings.oauth_issuer,
        public_url=settings.public_url,
        path="/sse" if settings.transport == "sse" else "/mcp",
        audience=settings.oauth_audience,
        algorithms=settings.oauth_algorithms,
        introspect=settings.oauth_introspect,
        client_id=settings.oauth_client_id,
        client_secret=settings.oauth_client_secret,
        groups_claim=settings.oauth_groups_claim,
        shared_agents=settings.oauth_shared_agents,
    )
    return ResourceServer(oauth) if oauth is not None else None


class TenantServers:
    """``build_http_app``'s ``tenants``: the MCP server of each agent signed-in users use, on the served memory.

    Each server resolves its agent once (``ensure_agent``: a user's own agent is created on first use). An agent
    deleted in this process (the inspector) is heard (``Memory``'s ``agent_deleted`` change): its server is
    ``retired``, so ``TenantApps`` builds it anew and its clients reconnect to a fresh agent, never the deleted id
    (whose writes ``Memory.check_live`` refuses meanwhile, in any process).
    """

    def __init__(self, handle: MemoryHandle, settings: Settings, stop: Shutdown) -> None:
        self._handle = handle
        self._settings = settings.model_copy(update={"sync": None})  # a synced MemFS directory is the served agent's
        self._stop = stop
        self._guard = threading.Lock()
        self._ids: dict[str, str] = {}  # agent name -> the id its server opened
        self._deleted: set[str] = set()  # ids of served agents deleted since their server opened them
        self._heard: Memory | None = None

    def __call__(self, agent: str) -> ASGIApp:
        from ..server.app import build_server, transport_app
        from ..server.runtime import MemoryHandle

        def opened() -> tuple[Memory, str]:
            memory, _served = self._handle.get()  # one memory for every agent; each server reaches it by its agent's id
            self._listen(memory)
            agent_id = memory.ensure_agent(agent).id  # a user's own agent is created on first use
            with self._guard:
                self._ids[agent] = agent_id
                self._deleted.discard(agent_id)
            return memory, agent_id

        extensions: list[Any] = []
        if self._settings.mcp_apps:
            from ..ui.mcp_app import blocks_app

            extensions.append(blocks_app())
        server = build_server(
            MemoryHandle(opened, agent=agent),
            self._settings,
            extensions=extensions,
            middleware=[self._stop.middleware()],
        )
        return cast("ASGIApp", transport_app(server, self._settings))

    def retired(self, agent: str) -> bool:
        """Whether ``agent``'s server serves an agent deleted since it opened it (asked once: True once)."""
        with self._guard:
            agent_id = self._ids.get(agent)
            if agent_id is None or agent_id not in self._deleted:
                return False
            self._deleted.discard(agent_id)
            del self._ids[agent]
            return True

    def _listen(self, memory: Memory) -> None:
        with self._guard:
            if self._heard is memory:
                return
            self._heard = memory
        memory.subscribe(self._changed)

    def _changed(self, change: Change) -> None:
        if change.kind != "agent_deleted":
            return
        with self._guard:
            served = set(self._ids.values())
            self._deleted.update(i for i in change.agent_ids if i in served)


def public_hosts(settings: Settings) -> list[str]:
    """The Host header values a request through ``public_url`` carries (with and without the default port)."""
    if not settings.public_url:
        return []
    parts = urlsplit(settings.public_url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return [host, f"{host}:{port}"]
