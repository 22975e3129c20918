"""A real HTTP server on loopback that speaks the Anthropic Messages API wire format.

It replays scripted responses in order and records every request body, so tests drive the
real ``anthropic`` client (through ``base_url``) without network access. Summarisation
requests (recognised by their system prompt) are answered from a separate script. A request
with ``"stream": true`` (Claude Code sends those) gets the same message as server-sent events;
``default`` answers requests when the script is empty (a host that makes a variable number of calls).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable
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


Scripted = dict[str, Any] | tuple[int, dict[str, Any]] | Callable[[dict[str, Any]], Any]


class FakeAnthropic:
    def __init__(self, default: Scripted | None = None) -> None:
        self.default = default
        self.script: deque[Scripted] = deque()
        self.summaries: deque[Scripted] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
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

    def _next(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            queue = self.summaries if _is_summary(body) and self.summaries else self.script
            if queue:
                item = queue.popleft()
            elif self.default is not None:
                item = self.default
            else:
                return error(500, "the fake server's script is exhausted")
        if callable(item):
            item = item(body)
        if isinstance(item, tuple):
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
                    status, payload = fake._next(body)
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
