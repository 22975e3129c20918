"""The memory inspector over HTTP: a small Starlette app with the page's static files and a JSON API.

Mounted under ``/ui``: by ``tiermem ui`` (its own loopback server) and by the HTTP/SSE transports of
``tiermem serve`` (next to ``/mcp``). ``netguard.Guard`` sits in front in both cases: Host/Origin checks,
bearer tokens, body limits; it hands the token's agents to this app in ``scope["tiermem.agents"]``.

Live updates are long polls: ``GET api/changes?agent=A&since=SIG`` answers as soon as the agent's
change signature (block versions, message and passage counts) differs from ``SIG``: at once for an
edit made in this process (``Memory.subscribe``); for a block edit made by another process (a host's own
stdio server on the same data directory) when the core's change token moves (polled every 50 ms on a
local data directory, every ``watch_seconds`` on object storage); for other processes' messages and
passages within ``watch_seconds``; or after ``wait`` seconds with no change.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import anyio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..base.errors import AccessError, ConflictError, EditError, NotFoundError, TiermemError, ValidationError
from ..core.protocol import LOCAL_POLL_SECONDS
from . import api

if TYPE_CHECKING:
    from ..domain.memory import Change, Memory

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "links.js": "text/javascript; charset=utf-8",
}
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
PREFIX = "/ui"


class Inspector:
    """The app's state: how to reach ``Memory``, and a counter bumped by every change made in this process."""

    def __init__(
        self,
        get_memory: Callable[[], Memory],
        *,
        default_agent: str,
        watch_seconds: float = 2.0,
        max_wait: float = 25.0,
        serving: str | None = None,
        data_dir: Path | None = None,
    ) -> None:
        """``serving``: the agent the MCP server in this process serves (never deleted from the page); ``data_dir``:
        the local data directory (its record of directories ``tiermem sync`` keeps: a forget names them)."""
        self._get_memory = get_memory
        self.data_dir = data_dir
        self.default_agent = default_agent
        self.serving = serving
        self.watch_seconds = max(0.1, watch_seconds)
        self.max_wait = max_wait
        self.local_changes = 0
        self._subscribed: Memory | None = None

    def memory(self) -> Memory:
        """The opened memory (blocks until it is open: call in a worker thread)."""
        memory = self._get_memory()
        if self._subscribed is not memory:
            self._subscribed = memory
            memory.subscribe(self._heard)
        return memory

    def _heard(self, change: Change) -> None:
        self.local_changes += 1

    async def run(self, op: Callable[Concatenate[Memory, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``op(memory, *args, **kwargs)`` in a worker thread (it reads and writes storage); ``op`` is an operation
        of ``api`` (module api.py), so a route leads to the code that does its work."""
        return await anyio.to_thread.run_sync(functools.partial(self._apply, op, *args, **kwargs))

    def _apply(self, op: Callable[Concatenate[Memory, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return op(self.memory(), *args, **kwargs)


def build_ui_app(inspector: Inspector) -> Starlette:
    async def page(request: Request) -> Response:
        return _static("index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _error(404, f"No file {name!r} here.")
        return _static(name)

    def scope_agents(request: Request) -> Any:
        return request.scope.get("tiermem.agents")

    def agent_param(request: Request, body: dict[str, Any] | None = None) -> str:
        name = (body or {}).get("agent") or request.query_params.get("agent") or ""
        if not isinstance(name, str) or not name:
            raise ValidationError("Name the agent (agent=...).")
        api.check_access(scope_agents(request), name)
        return name

    async def agents(request: Request) -> Response:
        found = await inspector.run(api.list_agents, scope_agents(request))
        default = inspector.default_agent if api.allowed(scope_agents(request), inspector.default_agent) else None
        return JSONResponse({"agents": found, "default": default})

    async def agent(request: Request) -> Response:
        name = agent_param(request)
        return JSONResponse(await inspector.run(api.agent_view, name))

    async def changes(request: Request) -> Response:
        name = agent_param(request)
        since = request.query_params.get("since", "")
        wait = min(inspector.max_wait, max(0.0, float(request.query_params.get("wait", inspector.max_wait))))
        deadline = time.monotonic() + wait
        while True:
            seen_local = inspector.local_changes
            token, cheap, current = await inspector.run(api.watch_state, name)
            remaining = deadline - time.monotonic()
            if current != since or remaining <= 0:
                return JSONResponse({"signature": current, "changed": current != since})
            # Block edits: this process's at once, other processes' when the core's change token moves (polled every
            # 50 ms on a local data directory); messages and passages: the whole signature every watch_seconds.
            poll_until = time.monotonic() + min(inspector.watch_seconds, remaining)
            while time.monotonic() < poll_until and inspector.local_changes == seen_local:
                if await request.is_disconnected():  # the page was closed or reloaded
                    return Response(status_code=204)
                await anyio.sleep(LOCAL_POLL_SECONDS)
                if cheap and await inspector.run(api.change_token) != token:
                    break

    async def deletion_plan(request: Request) -> Response:
        name = agent_param(request)
        return JSONResponse(await inspector.run(api.deletion_plan, name))

    async def delete_agent(request: Request) -> Response:
        body = await _json(request)
        name = agent_param(request, body)
        api.check_agent_deletion(scope_agents(request))
        return JSONResponse(await inspector.run(api.delete_agent, name, body.get("confirm"), serving=inspector.serving))

    async def history(request: Request) -> Response:
        name, q = agent_param(request), request.query_params
        limit = api.whole_number(q.get("limit", 50), "limit")
        return JSONResponse(await inspector.run(api.history, name, q.get("label", ""), limit))

    async def diff(request: Request) -> Response:
        name, q = agent_param(request), request.query_params
        old, new = api.whole_number(q.get("old"), "old"), api.whole_number(q.get("new"), "new")
        return JSONResponse(await inspector.run(api.diff, name, q.get("label", ""), old, new))

    async def edit(request: Request) -> Response:
        body = await _json(request)
        name = agent_param(request, body)
        return JSONResponse(
            await inspector.run(
                api.edit_block,
                name,
                body.get("label", ""),
                body.get("value"),
                expected_version=body.get("expected_version"),
                override_read_only=body.get("override_read_only") is True,
            )
        )

    async def revert(request: Request) -> Response:
        body = await _json(request)
        name = agent_param(request, body)
        return JSONResponse(
            await inspector.run(
                api.revert,
                name,
                body.get("label", ""),
                body.get("version"),
                override_read_only=body.get("override_read_only") is True,
            )
        )

    async def search(request: Request) -> Response:
        name = agent_param(request)
        params = dict(request.query_params)
        return JSONResponse(await inspector.run(api.search, name, params))

    async def timeline(request: Request) -> Response:
        name = agent_param(request)
        return JSONResponse(await inspector.run(api.timeline, name, dict(request.query_params)))

    async def timeline_period(request: Request) -> Response:
        name = agent_param(request)
        return JSONResponse(await inspector.run(api.timeline_period, name, dict(request.query_params)))

    async def passages(request: Request) -> Response:
        name, q = agent_param(request), request.query_params
        return JSONResponse(
            await inspector.run(
                api.passages, name, offset=q.get("offset", 0), limit=q.get("limit", 50), tags=q.get("tags")
            )
        )

    async def links(request: Request) -> Response:
        name = agent_param(request)
        return JSONResponse(await inspector.run(api.links, name, request.query_params.get("id", "")))

    async def uses(request: Request) -> Response:
        return JSONResponse(await inspector.run(api.uses, agent_param(request)))

    async def forget(request: Request) -> Response:
        body = await _json(request)
        name = agent_param(request, body)
        if body.get("kind") == "agent":
            api.check_agent_deletion(scope_agents(request))
        return JSONResponse(
            await inspector.run(api.forget, name, body, serving=inspector.serving, data_dir=inspector.data_dir)
        )

    async def delete_passage(request: Request) -> Response:
        body = await _json(request)
        name = agent_param(request, body)
        return JSONResponse(await inspector.run(api.delete_passage, name, body.get("id")))

    async def folders(request: Request) -> Response:
        return JSONResponse(await inspector.run(api.folders, scope_agents(request)))

    async def folder_files(request: Request) -> Response:
        return JSONResponse(
            await inspector.run(api.folder_files, request.query_params.get("folder", ""), scope_agents(request))
        )

    async def rename_folder(request: Request) -> Response:
        body = await _json(request)
        return JSONResponse(
            await inspector.run(api.rename_folder, body.get("folder"), body.get("name"), scope_agents(request))
        )

    async def file_view(request: Request) -> Response:
        name, q = agent_param(request), request.query_params
        return JSONResponse(
            await inspector.run(api.file_view, name, q.get("folder", ""), q.get("file", ""), scope_agents(request))
        )

    async def file_search(request: Request) -> Response:
        name, q = agent_param(request), request.query_params
        return JSONResponse(
            await inspector.run(api.file_search, name, q.get("q", ""), q.get("kind", "both"), q.get("include") or None)
        )

    async def export(request: Request) -> Response:
        fmt = request.query_params.get("format", "af")
        if fmt == "jsonl":
            api.check_every_agent(scope_agents(request), "A jsonl backup")
            name = None
        else:
            name = agent_param(request)
        filename, text = await inspector.run(api.export, name, fmt)
        return Response(
            text,
            media_type="application/json" if fmt == "af" else "application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{filename}"'},
        )

    async def import_(request: Request) -> Response:
        api.check_every_agent(scope_agents(request), "An import")
        q = request.query_params
        data = await request.body()
        report = await inspector.run(
            api.import_file,
            data,
            filename=q.get("filename", "upload.json"),
            fmt=q.get("format", "auto"),
            agent=q.get("agent") or inspector.default_agent,
            rename=q.get("rename") or None,
            replace=q.get("replace") == "true",
        )
        return JSONResponse({"report": report})

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/api/agents", agents, methods=["GET"]),
        Route("/api/agent", agent, methods=["GET"]),
        Route("/api/agents/plan", deletion_plan, methods=["GET"]),
        Route("/api/agents/delete", delete_agent, methods=["POST"]),
        Route("/api/changes", changes, methods=["GET"]),
        Route("/api/history", history, methods=["GET"]),
        Route("/api/diff", diff, methods=["GET"]),
        Route("/api/edit", edit, methods=["POST"]),
        Route("/api/revert", revert, methods=["POST"]),
        Route("/api/search", search, methods=["GET"]),
        Route("/api/timeline", timeline, methods=["GET"]),
        Route("/api/timeline/period", timeline_period, methods=["GET"]),
        Route("/api/passages", passages, methods=["GET"]),
        Route("/api/uses", uses, methods=["GET"]),
        Route("/api/links", links, methods=["GET"]),
        Route("/api/passages/delete", delete_passage, methods=["POST"]),
        Route("/api/forget", forget, methods=["POST"]),
        Route("/api/folders", folders, methods=["GET"]),
        Route("/api/folders/files", folder_files, methods=["GET"]),
        Route("/api/folders/file", file_view, methods=["GET"]),
        Route("/api/folders/rename", rename_folder, methods=["POST"]),
        Route("/api/folders/search", file_search, methods=["GET"]),
        Route("/api/export", export, methods=["GET"]),
        Route("/api/import", import_, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={TiermemError: _tiermem_error, ValueError: _value_error, Exception: _unexpected},
        middleware=[Middleware(_SecurityHeaders)],
    )


class _SecurityHeaders:
    """``SECURITY_HEADERS`` on every answer of the inspector that does not set its own: the API's JSON holds memory,
    which ``no-store`` keeps out of the browser's disk cache (where it would outlive ``tiermem forget``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)


def mount(ui: Any) -> Callable[[Any], Any]:
    """A wrapper for ``server.build_http_app``: requests under ``/ui`` go to ``ui``, the rest to the MCP app."""

    def wrap(app: Any) -> Any:
        async def dispatch(scope: Any, receive: Any, send: Any) -> None:
            path = scope.get("path", "")
            if scope["type"] == "http" and path == PREFIX:  # the page's relative links need /ui/
                await RedirectResponse(PREFIX + "/", status_code=307)(scope, receive, send)
            elif scope["type"] == "http" and path.startswith(PREFIX + "/"):
                await ui({**scope, "root_path": scope.get("root_path", "") + PREFIX}, receive, send)
            else:
                await app(scope, receive, send)

        return dispatch

    return wrap


def ui_only(ui: Any) -> Any:
    """The app ``tiermem ui`` serves: the inspector under ``/ui``, a redirect to it from ``/``, and an empty
    ``/favicon.ico``."""

    async def not_here(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # nothing to start or stop
            while True:
                kind = (await receive())["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        path = scope.get("path")
        target = (
            RedirectResponse(PREFIX + "/", status_code=307)
            if path == "/"
            else Response(status_code=204)  # no icon (the page names none): not an error in the browser's console
            if path == "/favicon.ico"
            else _error(404, "Not found; the inspector is at /ui/.")
        )
        await target(scope, receive, send)

    return mount(ui)(not_here)


def _static(name: str) -> Response:
    body = resources.files(__package__).joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name])


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ValidationError("The request body must be a JSON object.") from None
    except RecursionError:
        raise ValidationError(
            "The request body nests JSON arrays or objects too deeply to read; send a flat JSON object. Nothing was "
            "changed."
        ) from None
    if not isinstance(body, dict):
        raise ValidationError("The request body must be a JSON object.")
    return body


def _error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status, headers=SECURITY_HEADERS)


async def _tiermem_error(request: Request, exc: Exception) -> Response:
    status = {AccessError: 403, NotFoundError: 404, EditError: 409, ConflictError: 409, ValidationError: 400}
    code = next((s for cls, s in status.items() if isinstance(exc, cls)), 500)
    if code == 500:
        log.error("inspector: %s", exc)
    return _error(code, str(exc))


async def _value_error(request: Request, exc: Exception) -> Response:
    return _error(400, f"Bad parameter: {exc}")


async def _unexpected(request: Request, exc: Exception) -> Response:
    """Any other error: a JSON 500 that tells nothing of the code (the traceback goes to the server's log, where the
    server re-raises it), so the page shows a message instead of a plain-text page."""
    return _error(500, "The inspector met an unexpected error; the server's log has the details.")
