"""Wiring for the CLI: ``tiermem ui`` (its own loopback server) and ``/ui`` on ``tiermem serve``'s HTTP transport."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import sys
import threading
import webbrowser
from pathlib import Path
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
        served_memory,
        default_agent=settings.agent,
        watch_seconds=settings.watch_seconds,
        serving=settings.agent,
        data_dir=None if settings.uri else settings.resolved_data_dir(),
    )
    return mount(build_ui_app(inspector))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])


def build_ui_server(settings: Settings, *, port: int) -> tuple[Any, str]:
    """(ASGI app, URL with its session token) for ``tiermem ui``: the inspector only, loopback only."""
    from ..domain.factory import open_memory
    from ..process.netguard import Guard, default_allowed_hosts, is_loopback, make_tokens, shown_host
    from .app import Inspector, build_ui_app, ui_only

    if not is_loopback(settings.host):
        raise ConfigError(
            f"`tiermem ui` serves on loopback only (127.0.0.1), not {settings.host}; to reach the "
            "inspector from elsewhere, run `tiermem serve --transport http` with bearer tokens and open /ui."
        )
    memory = open_memory(settings)
    from ..interop.auto_memory_admin import guard_deletions

    guard_deletions(memory, settings.resolved_data_dir())  # a passage deleted here: not stored again from auto memory
    memory.named_agent(settings.agent)
    # A fresh secret per run: other local users and web pages cannot use the inspector without the URL.
    session = secrets.token_urlsafe(32)
    tokens = make_tokens([{"token": session, "agents": ["*"], "name": "ui-session"}], "tiermem ui")

    def opened_memory() -> Memory:
        return memory

    inspector = Inspector(
        opened_memory,
        default_agent=settings.agent,
        watch_seconds=settings.watch_seconds,
        data_dir=None if settings.uri else settings.resolved_data_dir(),
    )
    hosts = default_allowed_hosts(settings.host, port)
    app = Guard(
        ui_only(build_ui_app(inspector)),
        agent=settings.agent,
        tokens=tokens,
        allowed_hosts=hosts + settings.allowed_hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + settings.allowed_origins,
        max_body_bytes=settings.max_request_bytes,
        ui_prefix="/ui",
        public_paths=frozenset({"/", "/favicon.ico"}),  # the redirect to the page, and no icon: nothing of memory
    )
    return app, f"http://{shown_host(settings.host)}:{port}/ui/#token={session}"


REDIRECT_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={url}"><title>tiermem memory inspector</title></head>
<body><p><a href="{url}">Open the tiermem memory inspector</a></p></body></html>
"""


def redirect_page(url: str) -> Path:
    """A page that sends the browser on to ``url``, written 0600 in a new directory of its own (0700): the browser
    is given this file, not the URL, since a program's command line is visible to every local user (``ps``) and the
    URL carries the session's secret. The caller removes the directory when the inspector stops."""
    import html
    import tempfile

    page = Path(tempfile.mkdtemp(prefix="tiermem-ui-")) / "open.html"
    with open(os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
        f.write(REDIRECT_PAGE.format(url=html.escape(url, quote=True)))
    return page


def run_ui(settings: Settings, *, port: int | None, open_browser: bool) -> int:
    import shutil

    from ..process.netguard import listen_socket

    port = port if port else free_port(settings.host)
    # a busy --port is a clear error, before anything is printed (`tiermem ui` reads no `port` setting)
    sock = listen_socket(settings.host, port, choose="--port, or leave --port out for a free one")
    app, url = build_ui_server(settings, port=port)
    print(f"tiermem memory inspector: {url}", flush=True)
    print("(the link carries this session's secret; press Ctrl+C to stop)", file=sys.stderr, flush=True)
    page = redirect_page(url) if open_browser else None
    if page is not None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _stop)  # uvicorn raises the SIGTERM it caught again once it has stopped
        threading.Timer(0.5, webbrowser.open, args=(page.as_uri(),)).start()
    try:
        _serve(app, settings, port, sock)
    finally:
        if page is not None:
            try:
                shutil.rmtree(page.parent)  # the page's own directory: nothing else is in it
            except OSError as exc:
                log.warning("could not remove the inspector's opening page %s: %s", page, exc)
    return 0


def _stop(signum: int, _frame: object) -> None:
    """SIGTERM as an exception, so the opening page is removed on the way out (the default action ends the process
    at once); the exit status is the usual one of a process ended by it."""
    raise SystemExit(128 + signum)


def _serve(app: Any, settings: Settings, port: int, sock: socket.socket) -> None:
    from ..process import connections

    config = connections.config(
        app,
        host=settings.host.strip("[]"),
        port=port,
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        max_connections=settings.http_max_connections,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    connections.Server(config).run(sockets=[sock])
