"""A real HTTP server on loopback that speaks the Anthropic Messages API wire format.

It replays scripted responses in order and records every request body, so tests drive the
real ``anthropic`` client (through ``base_url``) without network access. Summarisation
requests (recognised by their system prompt) are answered from a separate script. A request
with ``"stream": true`` (Claude Code sends those) gets the same message as server-sent events;
``default`` answers requests when the script is empty (a host that makes a variable number of calls).
``raw(status, body)`` answers with those bytes as they are (a malformed answer: not JSON, or JSON without the
Messages API's fields).

Like the real API, it refuses (400 ``invalid_request_error``) a request whose messages break the Messages API's
rules (``problems``): the first message from the user, roles alternating, no empty content or text block, every
``tool_use`` answered exactly once by a ``tool_result`` in the very next user turn, and every ``tool_result``
answering a ``tool_use`` of the turn just before it. Refused requests are kept in ``invalid``.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


def text(reply: str, *, input_tokens: int = 100) -> dict[str, Any]:
    return _message([{"type": "text", "text": reply}], "end_turn", input_tokens)


def tool(name: str, args: dict[str, Any], *, say: str = "", input_tokens: int = 100) -> dict[str, Any]:
    return tools([(name, args)], say=say, input_tokens=input_tokens)


def tools(calls: list[tuple[str, dict[str, Any]]], *, say: str = "", input_tokens: int = 100) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    content += [{"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": n, "input": a} for n, a in calls]
    return _message(content, "tool_use", input_tokens)


def error(status: int, message: str = "scripted failure") -> tuple[int, dict[str, Any]]:
    kind = {429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error"}.get(status, "api_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


@dataclass(frozen=True)
class Raw:
    status: int
    body: bytes


def raw(status: int, body: bytes) -> Raw:
    return Raw(status, body)


def _message(content: list[dict[str, Any]], stop: str, input_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake-1",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 12,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    }


Scripted = dict[str, Any] | tuple[int, dict[str, Any]] | Raw | Callable[[dict[str, Any]], Any]


class _Server(ThreadingHTTPServer):
    """A client that hung up before its answer was written (a test's timeout, a cancelled turn) is no error here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError | ConnectionResetError):
            return
        super().handle_error(request, client_address)


class FakeAnthropic:
    def __init__(self, default: Scripted | None = None) -> None:
        self.default = default
        self.script: deque[Scripted] = deque()
        self.summaries: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.invalid: list[tuple[dict[str, Any], list[str]]] = []  # refused requests and what was wrong
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, *items: Scripted) -> None:
        self.script.extend(items)

    def turn_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if not _is_summary(r)]

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | Raw:
        with self._lock:
            self.requests.append(body)
            wrong = problems(body)
            if wrong:
                self.invalid.append((body, wrong))
                return error(400, "invalid request (fake server): " + "; ".join(wrong))
            queue = self.summaries if _is_summary(body) and self.summaries else self.script
            if queue:
                item = queue.popleft()
            elif self.default is not None:
                item = self.default
            else:
                return error(500, "the fake server's script is exhausted")
        if callable(item):
            item = item(body)
        if isinstance(item, tuple | Raw):
            return item
        return 200, item

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path.split("?", 1)[0].rstrip("/") != "/v1/messages":
                    status, payload = error(404, f"unknown path {self.path}")
                else:
                    answer = fake._next(body)
                    if isinstance(answer, Raw):
                        self.send_response(answer.status)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(answer.body)))
                        self.end_headers()
                        self.wfile.write(answer.body)
                        return
                    status, payload = answer
                streamed = status == 200 and body.get("stream") is True
                data = _events(payload) if streamed else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "text/event-stream" if streamed else "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("retry-after-ms", "5")  # scripted 429/5xx: retry quickly
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _events(message: dict[str, Any]) -> bytes:
    """``message`` as the Messages API streams it: message_start, one start/delta/stop per content block, the end."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _is_summary(body: dict[str, Any]) -> bool:
    system = body.get("system")
    text_ = system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [])
    return text_.startswith("You summarise a conversation")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def problems(body: dict[str, Any]) -> list[str]:
    """What the real Messages API would refuse in a request's messages (empty when it is valid)."""
    out: list[str] = []
    msgs = body.get("messages") or []
    if msgs and msgs[0]["role"] != "user":
        out.append("the first message is not from the user")
    for i, m in enumerate(msgs):
        content = _blocks(m)
        if i and msgs[i - 1]["role"] == m["role"]:
            out.append(f"messages.{i}: two {m['role']} messages in a row")
        if not content:
            out.append(f"messages.{i}: empty content")
        for b in content:
            if b.get("type") == "text" and not str(b.get("text", "")).strip():
                out.append(f"messages.{i}: empty text block")
        if m["role"] == "assistant":
            uses = [b["id"] for b in content if b.get("type") == "tool_use"]
            after = _blocks(msgs[i + 1]) if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user" else []
            answers = [b.get("tool_use_id") for b in after if b.get("type") == "tool_result"]
            for u in uses:
                if answers.count(u) != 1:
                    out.append(f"messages.{i}: tool_use {u} answered {answers.count(u)} times in the next message")
        else:
            before = {b.get("id") for b in _blocks(msgs[i - 1]) if b.get("type") == "tool_use"} if i else set()
            kinds = [b.get("type") for b in content]
            last_result = max((k for k, kind in enumerate(kinds) if kind == "tool_result"), default=0)
            if any(kind != "tool_result" for kind in kinds[:last_result]):
                out.append(f"messages.{i}: a tool_result after other content (tool results come first)")
            for b in content:
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in before:
                    out.append(
                        f"messages.{i}: tool_result {b.get('tool_use_id')} answers no tool_use of the message before"
                    )
    return out
