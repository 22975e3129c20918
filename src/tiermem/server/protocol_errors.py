"""Protocol errors that say what was wrong: server middleware around the SDK's handling of every request.

- A list request (``tools/list``, ``resources/list``, ``prompts/list``, ``resources/templates/list``) with a cursor:
  tiermem answers each list in one page and never hands out a ``nextCursor``, so any cursor is one it did not give:
  -32602 (the spec's SHOULD), not a first page as if the cursor were fine.
- The SDK answers a request sent before ``initialize`` and parameters that do not validate (``initialize`` without
  ``protocolVersion``, ``logging/setLevel`` with an unknown level, ``tools/call`` without a name) with a bare -32602
  "Invalid request parameters" and empty data. The same code goes out here, with a message that names the problem
  and what to send instead (the fields and what each must be; never the values sent, which are the caller's data).
- A second ``initialize`` on a connection that was initialized (stdio, one streamable-HTTP session, one SSE stream):
  -32600, and nothing changes (the SDK would answer it and switch the connection to the protocol version it names).
  The handshake happens once per connection; a client that wants another version opens a new connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from .sdk import connection_of

LISTS = frozenset({"tools/list", "resources/list", "prompts/list", "resources/templates/list"})
SDK_BARE = "Invalid request parameters"  # the SDK's message for every -32602 it raises without saying why
SHOWN = 5  # field problems a message names


def clear_errors() -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """Server middleware: invalid list cursors and a second ``initialize`` refused, and the SDK's bare -32602 errors
    explained."""

    async def middleware(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "request_id", None) is None:
            return await call_next(ctx)  # a notification: nobody to answer
        method = str(getattr(ctx, "method", ""))
        if method == "initialize" and _handshake_done(ctx):
            # refused before the SDK commits it: the SDK records an initialize's version only when the chain succeeds
            raise MCPError(
                code=INVALID_REQUEST,
                message="Invalid Request: initialize was already answered on this connection; the handshake happens "
                "once per connection, and this one keeps the protocol version it agreed. To start over (another "
                "protocol version), open a new connection (stdio: start the server again; SSE: open a new event "
                "stream; streamable HTTP: initialize without an Mcp-Session-Id header).",
                data={"method": method},
            )
        try:
            result = await call_next(ctx)
        except ValidationError as exc:
            raise MCPError(code=INVALID_PARAMS, message=invalid_params(method, exc), data=fields(exc)) from exc
        except MCPError as exc:
            if exc.error.code == INVALID_PARAMS and exc.error.message == SDK_BARE and not _initialized(ctx):
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"{method} was sent before initialize: this connection is not initialized yet. Send "
                    "initialize first (then notifications/initialized); before it only ping is answered.",
                    data={"method": method},
                ) from exc
            raise
        if method in LISTS and isinstance(ctx.params, Mapping) and ctx.params.get("cursor") is not None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Invalid cursor for {method}: tiermem answers {method} in one page and gives out no "
                "cursor, so this one is not its own. Send the request without a cursor.",
                data={"method": method},
            )
        return result

    return middleware


def invalid_params(method: str, exc: ValidationError) -> str:
    """What is wrong with a request's parameters, field by field."""
    problems = [f"{f['field']}: {f['problem']}" for f in fields(exc)]
    more = len(exc.errors()) - len(problems)
    listed = "; ".join(problems) + (f"; and {more} more" if more > 0 else "")
    return f"Invalid parameters for {method}: {listed}. Send the request with these fixed (see the MCP schema)."


def fields(exc: ValidationError) -> list[dict[str, str]]:
    """The first ``SHOWN`` problems: the field's path in the request (``params.level``) and what is wrong with it."""
    out = []
    for err in exc.errors()[:SHOWN]:
        path = ".".join(str(part) for part in err["loc"])
        out.append({"field": path or "params", "problem": str(err["msg"])})
    return out


def _handshake_done(ctx: Any) -> bool:
    """Whether the request's connection recorded an ``initialize`` already (false when the SDK keeps no such state)."""
    return getattr(connection_of(getattr(ctx, "session", None)), "client_params", None) is not None


def _initialized(ctx: Any) -> bool:
    """Whether the request's connection has been initialized (true when the SDK keeps no such state)."""
    return bool(getattr(connection_of(getattr(ctx, "session", None)), "initialize_accepted", True))
