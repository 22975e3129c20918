"""CORS for the network transports' allowed origins (browser-based MCP hosts), used by ``netguard.Guard``.

A page of an allowed origin may call the MCP endpoint: its preflight (``OPTIONS`` with ``Access-Control-Request-Method``,
sent without a token) is answered here, and every answer to it (401 and 403 included) names that origin and exposes
the headers an MCP client must read: ``Mcp-Session-Id`` (the SDKs' CORS advice), ``WWW-Authenticate`` (where the
authorization server is). The allowed origin is echoed, never ``*``; no credentials (cookies) are allowed, since the
token travels in ``Authorization``. Whether an origin is allowed is the guard's decision (others get 403).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

METHODS = b"GET, POST, DELETE, OPTIONS"
# what a browser-based MCP host sends: the token, JSON, the session and protocol headers, Last-Event-ID to resume
REQUEST_HEADERS = b"authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id"
EXPOSED_HEADERS = b"mcp-session-id, mcp-protocol-version, www-authenticate"
MAX_AGE = b"3600"  # seconds a browser may reuse a preflight's answer (browsers cap it lower: Chromium at 2 hours)


def is_preflight(method: str, headers: Mapping[str, str]) -> bool:
    return method == "OPTIONS" and "access-control-request-method" in headers


async def preflight(send: Send, origin: str) -> None:
    """The answer to a CORS preflight from the allowed ``origin``: 204 with what it may send."""
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", METHODS),
        (b"access-control-allow-headers", REQUEST_HEADERS),
        (b"access-control-max-age", MAX_AGE),
        (b"vary", b"origin"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def with_cors(send: Send, origin: str) -> Send:
    """``send`` adding to the answer's headers what lets a page of the allowed ``origin`` read it."""
    cors = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSED_HEADERS),
        (b"vary", b"origin"),
    ]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *cors]}
        await send(message)

    return sending
