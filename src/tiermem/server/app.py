"""The MCP surface: tools, resources and prompts (change notifications: ``notifier.py``).

``build_server(handle, settings)`` returns an ``MCPServer``. Tools are thin: they parse
arguments, make one call on ``Memory`` in a worker thread, and return a compact result.
The handshake never waits for storage: the server's lifespan (``runtime.lifespan``) has the
``MemoryHandle`` open the store in the background once the handshake is answered, and the
first tool call waits for it. Nothing imported here loads the storage engine or a model.

Why this module is long: it assembles the MCP surface in one place (the server class with its resources, prompts,
instructions and tools registered on demand, the HTTP app, the stdio loop), each part short; the tools,
notifications, completions and SDK seams are modules of their own.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from mcp.server.context import ServerMiddleware
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import ToolManager
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, RequestParams
from pydantic import ValidationError as ArgumentsError

from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..domain import briefing
from ..domain.blocks import is_pinned, shown_label
from .arguments import check_arguments, error_result, explain
from .clientlog import ClientLevels
from .completion import register_completions_and_logging
from .notifier import (
    BLOCK_URI,
    CORE_URI,
    FILES_URI_PREFIX,
    Notifier,  # the URIs: re-exported
    block_uri,
    register_legacy_subscriptions,
    register_tool_listeners,
    uri_labels,
)
from .protocol_errors import clear_errors
from .registry import (  # noqa: F401 (PRESETS, TOOL_GROUPS, resolve_tools: re-exported for callers and tests)
    PRESETS,
    TOOL_GROUPS,
    label_editors,
    published_tools,
    register_tools,
    resolve_tools,
    tools_for,
)
from .runtime import MemoryHandle, Runtime, first_answer, lifespan
from .sdk import (
    add_request_handler,
    context_streams,
    lowlevel,
    quiet_session_ids,
    sdk_discover,
    set_tool_manager,
    tool_manager,
)
from .sightings import Request
from .timeline_resource import register_timeline

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..base.records import Block
    from ..domain.memory import Memory
    from ..process.netguard import ASGIApp, Token, TokenAuthority
    from .tenants import Builder

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

ARCHIVAL_URI = "memory://archival"

INSTRUCTIONS_WAIT = 2.0  # seconds the instructions wait for core memory to open (SQLite: milliseconds)


# ---------------------------------------------------------------------------
# Tool groups
# ---------------------------------------------------------------------------

# TOOL_GROUPS and PRESETS derive from the registry (registry.py); re-exported here for callers and tests, with
# published_tools and resolve_tools (there so that the CLI checks the `tools` setting without the MCP SDK).


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


class ToolsOnDemand(ToolManager):
    """The SDK's tool manager, filled on first use.

    Registering the tools costs ~30 ms (the tool modules are imported, and the SDK builds a pydantic model and a
    JSON schema for each), which ``initialize`` does not need: the tools are registered when something first lists, looks up, calls or
    adds a tool (normally the client's ``tools/list`` right after the handshake), in the same order as
    before. Everything runs on the event loop thread, so no lock is needed.
    """

    def __init__(
        self, fill: Callable[[], None], *, before: ToolManager, hidden: Callable[[], frozenset[str]] | None = None
    ) -> None:
        """``before``: the manager being replaced; its tools (an extension's, added by ``MCPServer``) stay first.
        ``hidden``: the tools left out of listings now (the file tools while no folder is attached); they can still
        be called (and say what is missing)."""
        super().__init__(warn_on_duplicate_tools=before.warn_on_duplicate_tools, tools=before.list_tools())
        self._fill: Callable[[], None] | None = fill
        self._hidden = hidden

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill()

    def get_tool(self, name: str) -> Any:
        self._filled()
        return super().get_tool(name)

    def list_tools(self) -> Any:
        self._filled()
        listed = super().list_tools()
        hidden = self._hidden() if self._hidden is not None else frozenset()
        return [t for t in listed if t.name not in hidden] if hidden else listed

    def add_tool(self, *args: Any, **kwargs: Any) -> Any:
        self._filled()  # tools added later (the agent loop's) come after ours, as when we registered up front
        return super().add_tool(*args, **kwargs)

    def remove_tool(self, name: str) -> None:
        self._filled()
        super().remove_tool(name)

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        self._filled()
        return await super().call_tool(*args, **kwargs)


class TiermemServer(MCPServer[Runtime]):
    """``MCPServer`` whose resource list follows the agent's blocks at run time."""

    runtime: Runtime

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Unknown tools are a protocol error (-32602); wrong arguments a tool error that says how to call it."""
        tools = tool_manager(self)
        tool = tools.get_tool(name)
        if tool is None:
            known = ", ".join(t.name for t in tools.list_tools())
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Unknown tool: {name!r}. Tools on this server: {known}.",
                data={"tool": name},
            )
        arguments, problem = check_arguments(name, tool.parameters, arguments)  # names and kinds, no values
        if problem is None:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ArgumentsError):
                    raise
                errors = exc.__cause__.errors()
                hidden = explain(name, tool.parameters, errors, reveal=False)  # a value may be a misplaced secret
                log.info("tool %r refused its arguments: %s", name, hidden.splitlines()[0])
                return error_result(explain(name, tool.parameters, errors))  # the model is shown what it sent
        log.info("tool %r refused its arguments: %s", name, problem.splitlines()[0])
        return error_result(problem)

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        """An unknown prompt is -32602 (like an unknown resource), not a generic error."""
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Unknown prompt: {name!r}. Prompts on this server: {known}.",
                data={"prompt": name},
            )
        accepted = [a.name for a in prompt.arguments or []]
        extra = sorted(set(arguments or {}) - set(accepted))
        missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in (arguments or {})]
        if extra or missing:
            takes = f"it takes: {', '.join(accepted)}" if accepted else "it takes no arguments"
            problem = f"unknown argument(s) {extra}" if extra else f"missing argument(s) {missing}"
            raise MCPError(code=INVALID_PARAMS, message=f"Prompt {name!r}: {problem}; {takes}.", data={"prompt": name})
        return await super().get_prompt(name, arguments, context)

    async def list_resources(self) -> list[Any]:
        listed = await super().list_resources()
        try:
            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            blocks = await self.runtime.read(Memory.blocks)
        except TiermemError as exc:
            log.warning("listing block resources failed: %s", exc)
            return listed
        from mcp.types import Resource

        try:
            views = await self.runtime.read(Memory.file_views)
        except TiermemError as exc:
            log.warning("listing file resources failed: %s", exc)
            views = []
        from urllib.parse import quote

        for name, chars, is_open in views:
            listed.append(
                Resource(
                    uri=FILES_URI_PREFIX + quote(name, safe="/"),
                    name=name,
                    title=f"File: {name}",
                    description="open in core memory" if is_open else "attached, closed",
                    mime_type="text/plain",
                    _meta={"file_name": name, "open": is_open, "visible_chars": chars},
                )
            )
        for b in blocks:
            listed.append(
                Resource(
                    uri=block_uri(b.label),
                    name=b.label,
                    title=f"Core memory block: {b.label}",
                    description=b.description or None,
                    mime_type="text/plain",
                    _meta=_block_meta(b),
                )
            )
        return listed

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        text = str(uri)
        labels = uri_labels(text)  # the percent-decoded label first (as listed), then the text as written
        if labels:
            from mcp.server.lowlevel.helper_types import ReadResourceContents

            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            first: TiermemError | None = None
            since = self.runtime.sightings.mark()
            for label in labels:
                try:
                    block = await self.runtime.read(Memory.block, label)
                    break
                except TiermemError as exc:
                    first = first or exc
            else:
                raise ResourceNotFoundError(str(first)) from first
            self.runtime.sightings.saw(context, [block], since)  # the reader was shown the block whole
            contents: list[ReadResourceContents] = [
                ReadResourceContents(content=block.value, mime_type="text/plain", meta=_block_meta(block))
            ]
            return contents
        if text == CORE_URI:  # read here, not by the registered function: the reader is shown these blocks
            from mcp.server.lowlevel.helper_types import ReadResourceContents

            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            since = self.runtime.sightings.mark()
            try:
                body, blocks = await self.runtime.call(None, Memory.core_memory)
            except TiermemError as exc:
                raise ResourceError(str(exc)) from exc
            self.runtime.sightings.saw(context, [b for b in blocks if is_pinned(b)], since)  # detached: names alone
            return [ReadResourceContents(content=body, mime_type="text/plain")]
        if text.startswith(FILES_URI_PREFIX):
            from urllib.parse import unquote

            from mcp.server.lowlevel.helper_types import ReadResourceContents

            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            name = unquote(text[len(FILES_URI_PREFIX) :])
            folder, _, file = name.partition("/")
            if not folder or not file:
                raise ResourceNotFoundError(
                    f"The URI names {'a folder, not a file' if folder else 'no file'}: a file's URI is "
                    f"{FILES_URI_PREFIX}<folder>/<file>, e.g. {FILES_URI_PREFIX}docs/README.md (resources/list lists "
                    "the attached files)."
                )
            try:
                body = await self.runtime.call(None, Memory.file_text, name)
            except TiermemError as exc:
                raise ResourceNotFoundError(str(exc)) from exc
            return [ReadResourceContents(content=body, mime_type="text/plain")]
        return await super().read_resource(uri, context)


def _block_meta(block: Block) -> dict[str, str | int | bool]:
    return {
        "label": block.label,
        "description": block.description,
        "limit": block.limit,
        "chars": len(block.value),
        "read_only": block.read_only,
        "version": block.version,
        "updated_at": block.updated_at.isoformat(),
    }


def build_server(
    handle: MemoryHandle,
    settings: Settings,
    *,
    extensions: Iterable[Any] = (),
    middleware: Iterable[Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]] = (),
    tools: list[str] | None = None,
) -> TiermemServer:
    """``extensions``: MCP extensions such as the MCP Apps block view (``tiermem.ui.mcp_app``, added by the CLI);
    ``middleware``: more server middleware, outermost first (the CLI's request counting for a clean exit);
    ``tools``: ``published_tools(settings)`` when the caller worked it out already."""
    notifier = Notifier(handle, settings.watch_seconds, settings.tools_watch_seconds)
    runtime = Runtime(handle=handle, notifier=notifier)
    levels = ClientLevels()
    # checked now: a bad `tools` setting fails at start, not at tools/list
    names = published_tools(settings) if tools is None else tools
    editors = label_editors(settings.memory_tool_dialect)

    async def instruct(client: str | None, request: Any) -> str:
        """The instructions for the client named ``client``: what it can do, and core memory as it is now; the blocks
        they show whole count as seen by the client (``request``'s connection; not on a sessionless protocol, where
        every client is one: ``Sightings.connected``): its model is shown them at connect."""
        budget = briefing.budget_for(client, settings.instructions_max_chars)
        since = runtime.sightings.mark()
        blocks = await runtime.blocks_now(INSTRUCTIONS_WAIT)
        directories = await runtime.directories_now() if blocks is not None else ("", "")
        text = briefing.instructions(
            blocks, names, budget, editors=editors, dialect=settings.memory_tool_dialect, directories=directories
        )
        if blocks is not None:
            runtime.sightings.connected(Request(request), briefing.shown_whole(blocks, text), since)
        return text

    server = TiermemServer(
        name="tiermem",
        title="tiermem: tiered memory",
        instructions=briefing.instructions(
            None, names, settings.instructions_max_chars, editors=editors, dialect=settings.memory_tool_dialect
        ),
        version=_version(),
        log_level=settings.log_level,
        lifespan=lifespan,
        # plain (ctx, call_next) coroutines, which is what the SDK calls; its Protocol is invariant in the lifespan
        middleware=[
            cast("ServerMiddleware[Any]", m)
            for m in (
                *middleware,
                clear_errors(),
                first_answer(runtime),
                levels.middleware(),
                current_instructions(instruct),
            )
        ],
        extensions=list(extensions),
        subscriptions=notifier.bus,
    )
    server.runtime = runtime
    runtime.turn_ids = "memory_links" in names
    if settings.sync is not None:  # Letta Code's memory tool accepts absolute paths inside the memory directory
        runtime.memory_dir = str(settings.sync.expanduser().resolve())
    add_request_handler(server, "server/discover", RequestParams, discover(server, instruct))
    definitions = tools_for(settings.memory_tool_dialect)
    set_tool_manager(
        server,
        ToolsOnDemand(
            functools.partial(register_tools, server, definitions, names),
            before=tool_manager(server),
            hidden=runtime.hidden_file_tools,
        ),
    )
    _register_resources(server, runtime, names)
    _register_prompts(server, runtime)
    register_legacy_subscriptions(server, notifier)
    register_tool_listeners(server, notifier)
    register_completions_and_logging(server, runtime, levels, block_uri=BLOCK_URI, label_prompts=("memory_block",))
    return server


def current_instructions(
    instruct: Callable[[str | None, Any], Awaitable[str]],
) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """Server middleware: the ``initialize`` answer carries instructions rendered for that client, with core memory
    as it is at that moment (the SDK would send the text fixed when the server was built)."""

    async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await call_next(ctx)
        if getattr(ctx, "method", "") == "initialize" and isinstance(result, dict):
            info = (ctx.params or {}).get("clientInfo") or {}
            result["instructions"] = await instruct(info.get("name") if isinstance(info, dict) else None, ctx)
        return result

    return middleware


def discover(server: TiermemServer, instruct: Callable[[str | None, Any], Awaitable[str]]) -> Any:
    """The ``server/discover`` handler (protocol 2026-07-28): the SDK's answer with instructions rendered now, marked
    stale at once (``ttlMs`` 0) and private to the caller, so a client that asks again gets current core memory."""
    from mcp.types import DiscoverResult

    async def handle(ctx: Any, params: Any) -> DiscoverResult:
        result: DiscoverResult = await sdk_discover(server, ctx, params)
        client = ctx.session.client_params
        text = await instruct(client.client_info.name if client is not None else None, ctx)
        return result.model_copy(update={"instructions": text, "ttl_ms": 0, "cache_scope": "private"})

    return handle


def build_http_app(
    server: TiermemServer,
    settings: Settings,
    tokens: list[Token],
    *,
    ui: Callable[[ASGIApp], ASGIApp] | None = None,
    oauth: TokenAuthority | None = None,
    public_hosts: Iterable[str] = (),
    tenants: Builder | None = None,
) -> ASGIApp:
    """The SSE or streamable-HTTP ASGI app behind ``netguard.Guard`` (auth, Host/Origin, body size) and
    ``wire_checks.screened`` (a message the SDK would misread is answered as over stdio).

    ``ui`` (from ``tiermem.ui``, passed by the CLI) wraps the app to serve the memory inspector under ``/ui``;
    ``oauth`` (``process.oauth.ResourceServer``, built by the CLI from ``oauth_issuer`` and ``public_url``) accepts
    that issuer's access tokens too; ``public_hosts``: the Host values of ``public_url``, allowed like the local ones;
    ``tenants`` (``cli.oauth.TenantServers``): under OAuth, the app of each agent signed-in users use (``TenantApps``),
    built anew once its agent is deleted.
    """
    from ..process.netguard import Guard, default_allowed_hosts

    quiet_session_ids()
    app = transport_app(server, settings)
    if tenants is not None:
        from .tenants import TenantApps

        app = TenantApps(app, tenants, retired=tenants.retired)
    from .wire_checks import no_refused_sessions, screened

    # a body the SDK would misread (an id it drops, a batch...) is answered here; SSE's SDK answers a body that is not
    # JSON with a plain-text 400, so that one is answered here too (-32700); a refused request names no session
    sse = settings.transport == "sse"
    app = screened(app, "/messages", parse_errors=True) if sse else screened(no_refused_sessions(app))
    if ui is not None:
        app = ui(app)
    origins = [f"http://{h}" for h in default_allowed_hosts(settings.host, settings.port)]
    return Guard(
        app,
        agent=settings.agent,
        tokens=tokens,
        allowed_hosts=default_allowed_hosts(settings.host, settings.port) + settings.allowed_hosts + list(public_hosts),
        allowed_origins=origins + settings.allowed_origins,
        max_body_bytes=settings.max_request_bytes,
        ui_prefix="/ui" if ui is not None else None,
        oauth=oauth,
        read_only_tools=read_only_tools(),
        principal=static_principal,
    )


@functools.lru_cache(maxsize=1024)
def static_principal(token: Token) -> tuple[Any, Any]:
    """``scope["user"]`` and ``scope["auth"]`` for a request with a static token, as the SDK's bearer middleware
    sets them for an OAuth one: the SDK's transports bind a session to the principal that opened it (client id,
    issuer, subject), so another token cannot use, or delete, a session this one opened. The principal names the
    token's ``owner`` (made from its digest), never the token. Made once per token, not per request."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from starlette.authentication import AuthCredentials

    access = AccessToken(
        token="",
        client_id=f"tiermem-static-token:{token.owner}",
        scopes=[],
        subject=token.owner,
        claims={"iss": "tiermem:static-tokens"},
    )
    return AuthenticatedUser(access), AuthCredentials([])


def transport_app(server: TiermemServer, settings: Settings) -> Any:
    """The server's SSE or streamable-HTTP Starlette app (Host, Origin and auth are the guard's: checked before);
    with ``http_stateless``, streamable HTTP without sessions (the per-agent apps of ``cli.oauth.TenantServers`` too)."""
    from mcp.server.transport_security import TransportSecuritySettings

    checked_by_guard = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    if settings.transport == "sse":
        from .sse_agent import carry_agent  # the endpoint handed out keeps the stream's ?agent= (shared agents)

        return carry_agent(
            server.sse_app(
                transport_security=checked_by_guard,
                host=settings.host,
                max_request_body_size=settings.max_request_bytes,
            )
        )
    from .events import RETRY_MS, EventLog
    from .sdk import event_store_per_session

    stateless = settings.http_stateless  # every POST stands alone (no session id): there is no stream to resume
    events = EventLog()
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=checked_by_guard,
        host=settings.host,
        max_request_body_size=settings.max_request_bytes,
        stateless_http=stateless,
        event_store=None if stateless else events.session(),
        retry_interval=None if stateless else RETRY_MS,
    )
    if not stateless:  # a session resumes only its own streams (request ids repeat across sessions)
        event_store_per_session(server, events.session)
    return app


def read_only_tools() -> frozenset[str]:
    """The tools that change nothing (annotated read-only): an OAuth token with the read scope alone may call these."""
    from .registry import LETTA_CODE_TOOLS, TOOLS

    return frozenset(d.name for d in (*TOOLS, *LETTA_CODE_TOOLS) if d.annotations.read_only_hint)


def _version() -> str:
    from .. import __version__

    return __version__


def archival_description(tools: Iterable[str]) -> str:
    """memory://archival's description: how to go through the passages with the tools this server publishes."""
    tools = set(tools)
    how = (
        "; page through them with archival_memory_list"
        if "archival_memory_list" in tools
        else "; find them with archival_memory_search"
        if "archival_memory_search" in tools
        else ""
    )
    return f"How many archival passages and which tags exist{how}."


def _register_resources(server: TiermemServer, runtime: Runtime, tools: Iterable[str]) -> None:
    @server.resource(
        CORE_URI,
        name="core_memory",
        title="Core memory",
        description="Your core memory blocks rendered as in Letta, with <memory_metadata>. Read it at the start of a conversation.",
        mime_type="text/plain",
    )
    async def core() -> str:
        return await _render(runtime)

    @server.resource(
        BLOCK_URI,
        name="block",
        title="Core memory block",
        description="One core memory block's value; its metadata (limit, chars, read_only, description, version) is in _meta.",
        mime_type="text/plain",
    )
    async def block(label: str) -> str:  # reads are served by TiermemServer.read_resource
        raise ResourceNotFoundError(f"No memory block with label {shown_label(label)}.")

    @server.resource(
        ARCHIVAL_URI,
        name="archival_summary",
        title="Archival memory summary",
        description=archival_description(tools),
        mime_type="application/json",
    )
    async def archival() -> str:
        def summary(m: Memory, a: str) -> dict[str, int | list[str]]:
            recall, passages, tags = m.archive.counts(a)
            return {"passages": passages, "messages": recall, "tags": tags}

        return json.dumps(await _read(runtime, summary))

    register_timeline(server, runtime)  # memory://timeline and memory://timeline/{period}


async def _render(runtime: Runtime, *, line_numbers: bool = False) -> str:
    from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

    return await _read(runtime, Memory.render_core, line_numbers=line_numbers)


async def _read(
    runtime: Runtime, op: Callable[Concatenate[Memory, str, P], T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """A resource read: our errors reach the client as resource errors with their message."""
    try:
        return await runtime.call(None, op, *args, **kwargs)
    except TiermemError as exc:
        raise ResourceError(str(exc)) from exc


def _register_prompts(server: TiermemServer, runtime: Runtime) -> None:
    @server.prompt(
        name="memory_system",
        title="Memory system prompt",
        description="MemGPT-style instructions for the memory tools followed by your rendered core memory.",
    )
    async def memory_system(ctx: Context[Any, Any]) -> str:
        try:
            from ..domain.blocks import render_block
            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            since = runtime.sightings.mark()
            blocks = await runtime.call(None, Memory.blocks)  # read before the prompt: no later version than it shows
            text = await runtime.call(None, Memory.system_prompt)
        except TiermemError as exc:  # the store cannot be read: say why, as a protocol error with our message
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from exc
        # the blocks it shows whole, as read: the model the prompt is given to has seen them
        runtime.sightings.saw(ctx, [b for b in blocks if is_pinned(b) and render_block(b) in text], since)
        return text

    @server.prompt(
        name="memory_block",
        title="One memory block",
        description="One memory block (pinned or detached) with its description and limits, to review or edit it.",
    )
    async def memory_block(label: str, ctx: Context[Any, Any]) -> str:
        from ..domain.blocks import render_block
        from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

        since = runtime.sightings.mark()
        try:
            block = await runtime.read(Memory.block, label)
        except (NotFoundError, ValidationError) as exc:  # a label the agent lacks: the caller's mistake, no traceback
            log.warning("prompts/get memory_block: %s", exc)
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        except TiermemError as exc:  # the store cannot be read: say why
            raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from exc
        runtime.sightings.saw(ctx, [block], since)  # shown whole to the model the prompt is given to
        return (
            f"Memory block {block.label!r} (version {block.version}). Edit it with memory_replace, "
            f"memory_insert or memory_rethink using label={block.label!r}.\n\n" + render_block(block)
        )


async def run_stdio(server: TiermemServer) -> None:
    """Serve over stdin/stdout like ``MCPServer.run_stdio_async``, but read stdin here (``stdio_lines.pump``): a line
    the SDK's parser would drop or misread (not JSON, not a JSON-RPC message, a batch, an id it cannot answer) gets
    a JSON-RPC error that says what was wrong, and a warning on stderr, and the server reads on."""
    import anyio
    from mcp.server.stdio import stdio_server

    from .sdk import NoLines, claimed_stdin
    from .stdio_lines import pump

    low = lowlevel(server)
    with claimed_stdin() as lines:
        async with stdio_server(stdin=cast(Any, NoLines())) as (_, write):
            forward, messages = context_streams(0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, lines, forward, write)
                await low.run(messages, write, low.create_initialization_options())
                tg.cancel_scope.cancel()
