"""``tiermem serve``: the server process. Opens the memory in the background, then serves stdio, SSE or HTTP.

Over SSE/HTTP every request needs a bearer token: the configured ones (``auth_tokens``, ``--tokens-file``),
the one given with ``--token`` / ``TIERMEM_HTTP_TOKEN``, or, when none is configured, a random secret made for
this run and printed once on stderr with the memory inspector's link (as ``tiermem ui`` does). The port is
bound before anything says "listening", so a busy port is a clear error.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import gcpause
from ..base.errors import ConfigError
from ..domain.factory import check_data_dir, check_model, open_memory

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..base.config import Settings
    from ..domain.memory import Memory
    from ..process.netguard import Token
    from ..process.shutdown import Shutdown
    from ..server.runtime import MemoryHandle

log = logging.getLogger("tiermem")

SETTLE_SECONDS = 15.0  # at exit, the longest a server waits for each background opening to finish


def _tell_archive_wait(waited: float | None) -> None:
    """Tell the client of the call that waits for the archive when the wait starts (None) and when it ends."""
    from ..server.clientlog import client_log

    if waited is None:
        client_log("info", "waiting for the recall/archival store and the embedding model to open")
    else:
        client_log("info", f"recall/archival store and embedding model open after {waited:.1f} s")


def server_memory(settings: Settings) -> Callable[[], tuple[Memory, str]]:
    """What a server opens (in its ``MemoryHandle``): the memory, lazily, and its agent's id. The server is the one
    command that creates a missing agent (besides ``agents create``); it says so on stderr."""

    def factory() -> tuple[Memory, str]:
        # Block tools answer as soon as the core state is open; recall and archival wait for the archive, which
        # starts opening once the client has the handshake's answer (MemoryHandle.answered), or when first needed.
        memory = open_memory(settings, lazy=True, archive_now=False, on_archive_wait=_tell_archive_wait)
        # a passage deleted by a tool is not stored again from Claude Code's auto memory (the sync's state is local)
        from ..interop.auto_memory_admin import guard_deletions

        guard_deletions(memory, settings.resolved_data_dir())
        agent = memory.core.find_agent(settings.agent)
        if agent is None:
            # an agent whose memory is a synced directory starts with that directory's blocks, not the defaults
            agent = memory.ensure_agent(settings.agent, blocks=() if settings.sync else None)
            log.info(
                "created agent %r %s (it did not exist in %s)",
                settings.agent,
                f"with no blocks: the synced directory {settings.sync} brings them"
                if settings.sync
                else "with the default blocks",
                settings.store_uri(),
            )
        memory.warm(agent.id)  # its first search (a tool call, an auto-recall hook) finds its sittings built
        return memory, agent.id

    return factory


# Where tokens are explained, for an installed tiermem too (no docs/ beside it): the command that writes a server
# configuration with one, and the section of the documentation (docs/security.md; tests/test_transports.py)
TOKENS_DOC = (
    "`tiermem config http` prints a server configuration with a fresh token; tokens files are in the documentation, "
    "'Security and privacy', section 'Running on a network'"
)


def apply_log_level(level: str) -> None:
    """The ``log_level`` setting on stderr: tiermem's own lines at that level (DEBUG adds tiermem's debug lines, not
    the libraries': those can quote whole requests), and below it nothing of anyone's (WARNING, ERROR)."""
    logging.getLogger("tiermem").setLevel(level)
    if logging.getLevelName(level) > logging.INFO:
        logging.getLogger().setLevel(level)


def serve(settings: Settings) -> None:
    from ..process.hookserver import HookListener
    from ..process.shutdown import Shutdown
    from ..server.app import build_server
    from ..server.registry import published_tools
    from ..server.runtime import MemoryHandle

    at_terminal = settings.transport == "stdio" and _stdin_is_terminal()  # a person typed it, no host started it
    apply_log_level(settings.log_level)
    keep_heap(settings)
    tokens, secret = http_tokens(settings) if settings.transport != "stdio" else ([], None)
    check_bind(settings)
    check_stateless(settings)
    tools = published_tools(settings)  # an unknown or empty `tools`: refused before the data directory is made
    check_model(settings)  # and a model no embedder has, or one a new store could not load
    check_data_dir(settings)  # an unusable data directory: exit with the reason, before a host sees a healthy server
    sock = None
    if settings.transport != "stdio":
        from ..process.netguard import listen_socket

        sock = listen_socket(settings.host, settings.port)  # before any "listening": a busy port is a clear error

    handle = MemoryHandle(server_memory(settings), agent=settings.agent)
    extensions = []
    if settings.mcp_apps:
        from ..ui.mcp_app import blocks_app

        extensions.append(blocks_app())
    stop = Shutdown()  # SIGINT/SIGTERM: finish the requests in flight, then end the process
    stop.on_stop(partial(close_uses, handle))  # the uses counted and not yet written (the process ends with _exit)
    hooks = HookListener(  # host hooks ask this process
        handle, settings, tools, stop, sync=_auto_memory_sync(handle, settings)
    )
    if hooks.start() is not None:
        stop.on_stop(hooks.close)
    server = build_server(handle, settings, extensions=extensions, middleware=[stop.middleware()], tools=tools)
    if settings.agent_loop:
        from ..agent.service import register_agent_chat

        register_agent_chat(server, settings)
    stop.install()
    log.info("tiermem serving agent %r over %s (data: %s)", settings.agent, settings.transport, settings.store_uri())
    if at_terminal:
        log.info(NO_HOST)
    live = _live_sync(handle, settings)
    if live is not None:
        stop.on_stop(lambda: live.stop(timeout=1.5))  # a sync under way finishes its files before the process ends
    try:
        if sock is None:
            import anyio

            from ..server.app import run_stdio

            anyio.run(run_stdio, server)
        else:
            gcpause.release()  # many clients, no one handshake: the start is over once the server listens
            _run_http(server, handle, settings, tokens, secret, sock, stop)
    finally:
        # The host closed stdin (or the HTTP server returned) with no signal: the hooks answered already may still be
        # logging their turn (a prompt is logged after its answer), so wait for them as the signal's path does.
        if not stop.finish(SETTLE_SECONDS):
            log.warning("requests still running after %.0f s; stopping anyway", SETTLE_SECONDS)
        hooks.close()
        if live is not None:
            live.stop()
        # Let background openings finish before the interpreter shuts down (see Memory.settle).
        opened = handle.settle(SETTLE_SECONDS)
        if opened is not None:
            opened[0].settle(SETTLE_SECONDS)
        close_uses(handle)


NO_HOST = (
    "stdin is a terminal: `tiermem serve` speaks MCP over stdio (JSON-RPC on stdin and stdout) and is meant to be "
    "started by an MCP host, which sends its requests there. Connect a host: `tiermem setup claude-code` (or codex, "
    "gemini, opencode), or `tiermem config HOST` for the others. The memory opens, and a missing agent is created, "
    "at the host's first request. Ctrl-C stops"
)


def _stdin_is_terminal() -> bool:
    """Whether a person started ``serve`` at a terminal (stdio with no host): stdin is a TTY."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # stdin closed
        return False


def close_uses(handle: MemoryHandle) -> None:
    """Write the uses this server counted and has not written yet (``domain/uses.py``); uses counted later (a
    request still finishing) are written as they come."""
    opened = handle.settle(0)
    if opened is not None:
        opened[0].uses.close()


def _live_sync(handle: MemoryHandle, settings: Settings) -> Any:
    """With the `sync` setting: a thread that keeps that MemFS directory and the served agent in step."""
    if settings.sync is None:
        return None
    from ..base.errors import ValidationError
    from ..interop.letta_code import LiveSync
    from ..interop.memfs import check_root
    from ..interop.memfs_sync import recorded_agent

    root = settings.sync.expanduser()
    try:
        check_root(root)  # a file, or a missing parent: refused now, not in the sync thread's log
    except ValidationError as exc:
        raise ConfigError(f"sync = {str(root)!r}: {exc}") from exc
    other = recorded_agent(root) if root.is_dir() else None
    if other not in (None, settings.agent):
        raise ConfigError(
            f"{root} is synced with tiermem agent {other!r}, not {settings.agent!r}: serve that agent "
            f"(--agent {other}), or sync another directory."
        )
    live = LiveSync(
        handle, settings.agent, root, settings.sync_seconds, data_dir=settings.resolved_data_dir().resolve()
    )
    live.start()
    return live


def _run_http(
    server: Any,
    handle: MemoryHandle,
    settings: Settings,
    tokens: list[Token],
    secret: str | None,
    sock: Any,
    stop: Shutdown,
) -> None:
    from ..process import connections
    from ..process.netguard import shown_host, url_host
    from ..server.app import build_http_app
    from ..ui.launch import http_mount
    from .oauth import TenantServers, public_hosts, resource_server

    oauth = resource_server(settings)
    public = public_hosts(settings)
    app = build_http_app(
        server,
        settings,
        tokens,
        ui=http_mount(handle, settings),
        oauth=oauth,
        public_hosts=public,
        tenants=TenantServers(handle, settings, stop) if oauth is not None else None,
    )
    app = stop.asgi(app)
    port = int(sock.getsockname()[1])
    shown = shown_host(settings.host)
    path = "/sse" if settings.transport == "sse" else "/mcp"
    log.info(
        "listening on http://%s:%d%s, memory inspector at /ui (%d bearer token(s))",
        url_host(settings.host),
        port,
        path,
        len(tokens),
    )
    if settings.host.strip("[]") in ("0.0.0.0", "::"):
        _say_allowed_hosts(settings, list(public))
    if secret is not None:
        sys.stderr.write(
            f"tiermem: no bearer tokens are configured, so this run made a secret; clients send "
            f"`Authorization: Bearer {secret}`\n"
            f"tiermem: memory inspector: http://{shown}:{port}/ui/#token={secret}\n"
            f"tiermem: (choose the secret with TIERMEM_HTTP_TOKEN, or configure tokens: {TOKENS_DOC})\n"
        )
        sys.stderr.flush()
    config = connections.config(
        app,
        host=settings.host,
        port=port,
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        max_connections=settings.http_max_connections,
    )
    stop.keep_signals(connections.Server(config)).run(sockets=[sock])  # SIGINT/SIGTERM stay with ``stop``


def keep_heap(settings: Settings) -> None:
    """A serving process's heap settings, before LanceDB's and onnxruntime's threads exist: fewer malloc arenas,
    a fixed mmap threshold, Arrow's buffers from the same heap, and freed heap memory handed back after bursts of
    calls (memtrim.py)."""
    from ..base.memtrim import HeapKeeper, fix_mmap_threshold, limit_arenas

    # pyarrow's default pool is its bundled jemalloc: a second heap that the settings below do not
    # reach; the system pool allocates from glibc's (measured -3.5 MB resident). Arrow's own variable still wins.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    limit_arenas(settings.malloc_arenas)
    fix_mmap_threshold(settings.malloc_mmap_threshold_kb << 10)
    if settings.heap_trim_seconds > 0 and not HeapKeeper(settings.heap_trim_seconds).start():
        log.debug("malloc_trim is not available here (not glibc): freed heap memory is not handed back")


def _say_allowed_hosts(settings: Settings, public: list[str]) -> None:
    """Bound to every interface: which ``Host`` values are answered (DNS-rebinding protection), so that the 403 a
    client on another machine gets for this machine's address is no surprise."""
    from ..process.netguard import default_allowed_hosts

    extra = settings.allowed_hosts + public
    allowed = ", ".join(default_allowed_hosts(settings.host, settings.port) + extra)
    (log.info if extra else log.warning)(
        "bound to every interface (%s), but only requests whose Host header is one of %s are answered; others get "
        "403 (DNS-rebinding protection). Add the names clients use, such as this machine's address with the port "
        "(192.168.1.20:%d), to allowed_hosts",
        settings.host,
        allowed,
        settings.port,
    )


def configured_tokens(settings: Settings) -> list[Token]:
    """The tokens the settings name (inline, tokens file, ``http_token``); placeholders are refused."""
    from ..process.netguard import load_tokens_file, make_tokens, warn_if_readable

    tokens = make_tokens(settings.auth_tokens, "auth_tokens")
    if settings.auth_tokens_file is not None:
        warn_if_readable(settings.auth_tokens_file)
        tokens += load_tokens_file(settings.auth_tokens_file)
    if settings.http_token is not None:
        tokens += make_tokens(
            [{"token": settings.http_token, "agents": ["*"], "name": "http-token"}], "--token / TIERMEM_HTTP_TOKEN"
        )
    return tokens


def http_tokens(settings: Settings) -> tuple[list[Token], str | None]:
    """(every token the server accepts, this run's secret when none was configured and one was made)."""
    from ..process.netguard import secret_token

    tokens = configured_tokens(settings)
    if tokens or (settings.oauth_issuer and settings.public_url):
        return tokens, None  # under OAuth no run secret: a token printed in a log would bypass it
    secret = secrets.token_urlsafe(32)
    return [secret_token(secret, "run-secret")], secret


def check_bind(settings: Settings) -> None:
    from ..process.netguard import is_loopback
    from .oauth import resource_server

    oauth = resource_server(settings)  # half or unsafe OAuth settings: refused before anything listens
    if (
        settings.transport != "stdio"
        and not is_loopback(settings.host)
        and not configured_tokens(settings)
        and not oauth
    ):
        raise ConfigError(
            f"Refusing to serve on {settings.host} without authentication configured: anyone who can reach that "
            "address could try to read and change your memory. Configure bearer tokens (auth_tokens, --tokens-file "
            "or TIERMEM_HTTP_TOKEN) or OAuth (oauth_issuer and public_url), or bind to 127.0.0.1 (the default). "
            f"Tokens: {TOKENS_DOC}."
        )


def check_stateless(settings: Settings) -> None:
    """``http_stateless`` is streamable HTTP's alone: an SSE connection is a session by design (stdio ignores it)."""
    if settings.http_stateless and settings.transport == "sse":
        raise ConfigError(
            'http_stateless = true (TIERMEM_HTTP_STATELESS) needs transport "http": the SSE transport keeps a session '
            "on one connection. Serve with --transport http (streamable HTTP at /mcp), or set http_stateless = false."
        )


def _auto_memory_sync(handle: MemoryHandle, settings: Settings) -> Callable[[object], object]:
    """Claude Code's auto memory kept in step with this memory (``interop.auto_memory``), when setup recorded its
    folders; given a hook's working directory."""
    from ..interop import auto_memory, auto_memory_earlier

    home = auto_memory.directory(settings.resolved_data_dir(), settings.agent)
    if (home / auto_memory.SOURCES).exists() or auto_memory_earlier.left_by_earlier(home):
        if (wrong := auto_memory_earlier.pointed(home, Path.home())) is not None:
            log.warning("auto memory: %s; %s", wrong, auto_memory_earlier.RERUN)

    def sync(cwd: object) -> object:
        if auto_memory_earlier.left_by_earlier(home):  # set up by tiermem 0.1.0: taken over, as setup would
            memory, agent_id = handle.get()
            auto_memory_earlier.take_over(memory, agent_id, home, Path.home())
        if not (home / auto_memory.SOURCES).exists():
            return None
        memory, agent_id = handle.live()
        return auto_memory.sync(memory, agent_id, home, cwd)

    return sync
