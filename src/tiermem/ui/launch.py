"""Wiring for the CLI: ``tiermem ui`` (its own loopback server) and ``/ui`` on ``tiermem serve``'s HTTP transport."""

from __future__ import annotations

import logging
import secrets
import socket
import sys
import threading
import webbrowser
from typing import TYPE_CHECKING, Any

from ..base.errors import ConfigError

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory
    from ..server.runtime import MemoryHandle

log = logging.getLogger(__name__)


def http_mount(handle: MemoryHandle, settings: Settings) -> Any:
    """The ``ui=`` argument of ``server.build_http_app``: the inspector next to ``/mcp``, on the server's memory."""
    from .app import Inspector, build_ui_app, mount

    def served_memory() -> Memory:
        """The server's memory (blocks until it is open)."""
        memory, _agent_id = handle.get()
        return memory

    inspector = Inspector(
        served_memory, default_agent=settings.agent, watch_seconds=settings.watch_seconds, serving=settings.agent
    )
    return mount(build_ui_app(inspector))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])


def build_ui_server(settings: Settings, *, port: int) -> tuple[Any, str]:
    """(ASGI app, URL with its session token) for ``tiermem ui``: the inspector only, loopback only."""
    from ..domain.factory import open_memory
    from ..process.netguard import Guard, default_allowed_hosts, is_loopback, make_tokens
    from .app import Inspector, build_ui_app, ui_only

    if not is_loopback(settings.host):
        raise ConfigError(
            f"`tiermem ui` serves on loopback only (127.0.0.1), not {settings.host}; to reach the "
            "inspector from elsewhere, run `tiermem serve --transport http` with bearer tokens and open /ui."
        )
    memory = open_memory(settings)
    memory.named_agent(settings.agent)
    # A fresh secret per run: other local users and web pages cannot use the inspector without the URL.
    session = secrets.token_urlsafe(32)
    tokens = make_tokens([{"token": session, "agents": ["*"], "name": "ui-session"}], "tiermem ui")

    def opened_memory() -> Memory:
        return memory

    inspector = Inspector(opened_memory, default_agent=settings.agent, watch_seconds=settings.watch_seconds)
    hosts = default_allowed_hosts(settings.host, port)
    app = Guard(
        ui_only(build_ui_app(inspector)),
        agent=settings.agent,
        tokens=tokens,
        allowed_hosts=hosts + settings.allowed_hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + settings.allowed_origins,
        max_body_bytes=settings.max_request_bytes,
        ui_prefix="/ui",
    )
    shown = "127.0.0.1" if settings.host in ("127.0.0.1", "localhost") else settings.host
    return app, f"http://{shown}:{port}/ui/#token={session}"


def run_ui(settings: Settings, *, port: int | None, open_browser: bool) -> int:
    import uvicorn

    from ..process.netguard import listen_socket

    port = port if port else free_port(settings.host)
    # a busy --port is a clear error, before anything is printed (`tiermem ui` reads no `port` setting)
    sock = listen_socket(settings.host, port, choose="--port, or leave --port out for a free one")
    app, url = build_ui_server(settings, port=port)
    print(f"tiermem memory inspector: {url}", flush=True)
    print("(the link carries this session's secret; press Ctrl+C to stop)", file=sys.stderr, flush=True)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    config = uvicorn.Config(
        app,
        host=settings.host.strip("[]"),
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_keep_alive=5,
        timeout_graceful_shutdown=2,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0
