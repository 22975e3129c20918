"""JSON-RPC messages the SDK misreads, found before it reads them, on stdio (``stdio_lines``), streamable HTTP and
the deprecated SSE transport's ``/messages`` (``screened``).

The SDK reads a request whose ``id`` is not a string or an integer (null, true, 1.5, an object) as a notification,
dropping the ``id``: it is never answered. A message of the wrong shape (``params`` not an object, a numeric
``method``, ``jsonrpc`` other than "2.0", a batch) fails its validation as a whole: over stdio that was -32600 with
``id`` null although the ``id`` could be read, over HTTP a 400 with -32602 and pydantic's dump of the message, values
and all. ``misread`` says what is wrong instead, in tiermem's words:

- a batch (a JSON array): -32600, ``id`` null: tiermem takes one message at a time (batches were part of protocol
  2025-03-26 only, and no client tiermem knows sends them);
- an ``id`` that is not a string or an integer: -32600, ``id`` null (no client could match another id);
- ``jsonrpc`` other than "2.0", a ``method`` that is not text: -32600 with the request's ``id``;
- ``params`` that is not an object: -32602 with the request's ``id``;
- anything else that is no JSON-RPC message: -32600, ``id`` null.

The answer names the problem and what to send instead, never the values sent (they are the caller's data). A
notification (no ``id``) is never answered: only logged.

``no_refused_sessions``: a streamable-HTTP request that opens no session (the SDK refused it: 406, 415, 400...) is
answered without a session id.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp.types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, jsonrpc_message_adapter
from pydantic import ValidationError

if TYPE_CHECKING:
    from ..process.netguard import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Verdict:
    """What is wrong with a message (``what``, for the log) and the error that answers it (None: nobody to answer)."""

    answer: JSONRPCError | None
    what: str


def readable_id(message: dict[str, Any]) -> int | str | None:
    """The message's ``id`` when a client could match it: an integer (not a boolean) or text that is valid Unicode."""
    ident = message.get("id")
    if isinstance(ident, bool) or not isinstance(ident, int | str):
        return None
    if isinstance(ident, str) and SURROGATE.search(ident):
        return None
    return ident


def misread(message: Any, *, one_by_one: str) -> Verdict | None:
    """What is wrong with the parsed JSON ``message`` that the SDK would misread or refuse without saying why; None
    when it is a JSON-RPC message the SDK reads as it is. ``one_by_one``: how to send messages one at a time on
    this transport (the advice for a batch and a non-message)."""
    if isinstance(message, list):
        what = "Invalid Request: a JSON-RPC batch (an array of messages)"
        return refused(None, INVALID_REQUEST, f"{what}; tiermem does not take batches. Send {one_by_one}.", what)
    if not isinstance(message, dict):
        return _not_a_message(one_by_one)
    if "method" not in message:
        try:
            jsonrpc_message_adapter.validate_python(message, by_name=False)  # a response (small, rare)
        except ValidationError:
            return _not_a_message(one_by_one)
        return None
    ident = readable_id(message)
    answered = "id" in message  # a request; without an id, a notification: never answered
    if answered and ident is None:
        what = "Invalid Request: id is not a string or an integer"
        advice = " (null, true or false, a fraction, an object or an array is not). Send the request with one."
        return refused(None, INVALID_REQUEST, what + advice, what, answered)
    if message.get("jsonrpc") != "2.0":
        what = 'Invalid Request: jsonrpc is not "2.0"'
        return refused(ident, INVALID_REQUEST, f'{what}. Send "jsonrpc": "2.0" in every message.', what, answered)
    if not isinstance(message["method"], str):
        what = "Invalid Request: method is not a string"
        advice = '. Send the method\'s name as text, e.g. "tools/list".'
        return refused(ident, INVALID_REQUEST, what + advice, what, answered)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        what = f"Invalid params: params of {message['method']} is not an object"
        advice = ". MCP's parameters are named: send params as an object (or leave it out)."
        return refused(ident, INVALID_PARAMS, what + advice, what, answered)
    return None


def _not_json() -> Verdict:
    what = "Parse error: the body is not JSON"
    return refused(None, PARSE_ERROR, f"{what}. Send {HTTP_ONE_BY_ONE}, as JSON.", what)


def _not_a_message(one_by_one: str) -> Verdict:
    what = "Invalid Request: not a JSON-RPC 2.0 message"
    return refused(None, INVALID_REQUEST, f"{what}. Send {one_by_one}.", what)


def refused(ident: int | str | None, code: int, message: str, what: str, answered: bool = True) -> Verdict:
    error = JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))
    return Verdict(error if answered else None, what)


HTTP_ONE_BY_ONE = "one JSON-RPC message per POST"


def screened(app: ASGIApp, path: str = "/mcp", *, parse_errors: bool = False) -> ASGIApp:
    """ASGI: a POST to the endpoint ``path`` (streamable HTTP's, or SSE's ``/messages``) whose body ``misread``
    refuses gets HTTP 400 with its JSON-RPC error (also for a notification: an HTTP request is answered); anything
    else goes on to ``app`` unchanged. A body that is not JSON goes on too (streamable HTTP's SDK answers -32700),
    unless ``parse_errors``: then it gets HTTP 400 with -32700 here (SSE's SDK answers a plain-text 400).

    The whole body is parsed, as the SDK parses it (a member repeated anywhere, after ``params`` too, is read as its
    last value, as the SDK reads it): a few microseconds for the usual body of a few kilobytes, about a third of the
    SDK's own parse and validation of a long one (it is bounded by ``max_request_bytes``, in ``netguard.Guard``)."""
    import pydantic_core

    from ..process.netguard import replay_body

    async def screen(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path", "").rstrip("/") != path:
            await app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        try:
            verdict = (
                misread(pydantic_core.from_json(body), one_by_one=HTTP_ONE_BY_ONE) if body or parse_errors else None
            )
        except ValueError:
            verdict = _not_json() if parse_errors else None  # else the SDK's -32700
        if verdict is None:
            await app(scope, replay_body(body, receive), send)
            return
        answer = verdict.answer or JSONRPCError(
            jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=verdict.what + ".")
        )
        log.warning("http: %s; answered %s", verdict.what, answer.error.code)
        payload = answer.model_dump_json(by_alias=True, exclude_unset=True).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return screen


SESSION_HEADER = b"mcp-session-id"


def no_refused_sessions(app: ASGIApp, path: str = "/mcp") -> ASGIApp:
    """ASGI: a request to streamable HTTP's endpoint ``path`` that names no session and that the SDK refuses (406 for
    an Accept header without both types, 415 for another content type, 400 for a first request that is not
    ``initialize``...) is answered without an ``Mcp-Session-Id``. The SDK opens a session for every such request and
    discards it when its answer is an error, but the answer still carried its id, as if a session had been opened (a
    client that kept it got 404 next). A request that names a session, or one the SDK accepts, goes through as is."""

    async def opening(scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("path", "").rstrip("/") != path
            or any(name == SESSION_HEADER for name, _ in scope.get("headers", ()))
        ):
            await app(scope, receive, send)
            return

        async def send_refusal_without_session(message: Message) -> None:
            if message["type"] == "http.response.start" and int(message.get("status", 200)) >= 400:
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != SESSION_HEADER]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_refusal_without_session)

    return opening
