"""``tiermem serve`` with OAuth: the resource server built from the settings (``process/oauth.py`` checks tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..base.config import Settings
    from ..domain.memory import Memory
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


def tenants(handle: MemoryHandle, settings: Settings, stop: Shutdown) -> Callable[[str], ASGIApp]:
    """``build_http_app``'s ``tenants``: the MCP server of each agent signed-in users use, on the served memory."""
    from ..server.app import build_server, transport_app
    from ..server.runtime import MemoryHandle

    settings = settings.model_copy(update={"sync": None})  # a synced MemFS directory is the served agent's alone

    def build(agent: str) -> ASGIApp:
        def opened() -> tuple[Memory, str]:
            memory, _served = handle.get()  # one memory for every agent; each server reaches it by its agent's id
            return memory, memory.ensure_agent(agent).id  # a user's own agent is created on first use

        extensions: list[Any] = []
        if settings.mcp_apps:
            from ..ui.mcp_app import blocks_app

            extensions.append(blocks_app())
        server = build_server(MemoryHandle(opened), settings, extensions=extensions, middleware=[stop.middleware()])
        return cast("ASGIApp", transport_app(server, settings))

    return build


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
