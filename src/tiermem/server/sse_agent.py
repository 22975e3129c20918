"""Shared agents over SSE: the message endpoint the stream hands out carries the stream's ``?agent=``.

Under OAuth a client picks a shared agent by adding ``?agent=NAME`` to the server URL; ``netguard.Guard`` checks the
token may use it and ``tenants.TenantApps`` hands the request to that agent's server. Over SSE the client opens
``/sse?agent=NAME`` and then POSTs its messages to the URL of the stream's first event (``endpoint``), which the SDK
builds as ``/messages/?session_id=...`` (``mcp/server/sse.py``, no way to add a parameter): without the agent, those
POSTs would go to the user's own agent's server, which does not know the session. ``CarryAgent`` appends
``&agent=NAME`` to that event's data, so every POST is checked by the guard and reaches the same agent's server as
the stream. It changes nothing else: other events, other responses, and streams opened without ``?agent=`` (the
user's own agent, static tokens) pass through untouched.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

if TYPE_CHECKING:
    from ..process.netguard import ASGIApp, Message, Receive, Scope, Send

# the SDK's first event: "event: endpoint" then its "data: <path>?session_id=<hex>" line (sse_starlette's separators)
ENDPOINT_EVENT = re.compile(rb"^event: ?endpoint(?:\r\n|\r|\n)data: ?[^\r\n]*", re.MULTILINE)


class CarryAgent:
    """ASGI middleware for the SDK's SSE app: a stream opened with ``?agent=`` (and let through by the guard, which
    put the agent in ``scope["tiermem.agent"]``) hands out a message endpoint with ``&agent=<that agent>``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent = _asked_agent(scope)
        if agent is None:
            await self.app(scope, receive, send)
            return
        suffix = b"&agent=" + quote(agent, safe="").encode("ascii")
        streaming = False
        pending = True  # until the endpoint event went by (it is the first; rewrite it once)

        async def sent(message: Message) -> None:
            nonlocal streaming, pending
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            elif streaming and pending and message["type"] == "http.response.body":
                body = message.get("body", b"")
                rewritten, found = ENDPOINT_EVENT.subn(lambda m: m.group(0) + suffix, body, count=1)
                if found:
                    pending = False
                    message = {**message, "body": rewritten}
            await send(message)

        await self.app(scope, receive, sent)


def _asked_agent(scope: Scope) -> str | None:
    """The agent of a GET that asked for one with ``?agent=`` and was let through to it, else None."""
    if scope.get("type") != "http" or scope.get("method") != "GET":
        return None
    agent = scope.get("tiermem.agent")
    if not agent:
        return None
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return str(agent) if (query.get("agent") or [""])[0] else None


def carry_agent(app: Any) -> Any:
    """The SDK's SSE Starlette app with ``CarryAgent`` added (still a Starlette app: ``TenantApps`` runs its
    lifespan through ``app.router``)."""
    app.add_middleware(CarryAgent)
    return app
