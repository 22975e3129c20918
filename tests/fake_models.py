"""Fake model APIs on loopback for the host tests: what Codex CLI, Gemini CLI and opencode talk to.

One small HTTP server records every request and answers in the wire format the host expects, streamed or not:

- ``responses``: the OpenAI Responses API (``POST /v1/responses``, SSE events), Codex CLI;
- ``gemini``: the Gemini API (``models/M:generateContent`` and ``:streamGenerateContent?alt=sse``), Gemini CLI;
- ``chat``: OpenAI-compatible chat completions (``POST /v1/chat/completions``, SSE chunks), opencode.

A test scripts the model's turns: each main-turn request is answered with the next ``Turn`` (tool calls, then
text); a request beyond the script gets a plain "done" text. The host's side requests (Gemini's router
classification, title generation, ...) are answered with text and kept apart (``turns`` holds the main ones).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Dialect = Literal["responses", "gemini", "chat"]
_ids = itertools.count(1)


@dataclass
class Turn:
    """One scripted model turn: tool calls (name as the host names the tool, arguments), then text."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    text: str = ""


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    main: bool  # a turn of the conversation (not a router or title request)


class FakeModel:
    def __init__(self, dialect: Dialect, script: list[Turn] | None = None) -> None:
        self.dialect = dialect
        self.script: deque[Turn] = deque(script or [])
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # model lists and the like: an empty answer
                self._send(200, {"data": [], "models": []})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"raw": raw.decode("utf-8", "replace")}
                status, headers, payload = fake._answer(self.path, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _send(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The bodies of the main-turn requests, in order."""
        return [s.body for s in self.requests if s.main]

    # -- answering ------------------------------------------------------------------------

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        main = self._is_main(path, body)
        with self._lock:
            self.requests.append(Seen(path, body, main))
            turn = (
                (self.script.popleft() if self.script else Turn(text="done")) if main else Turn(text=self._side(path))
            )
        stream = body.get("stream") is True or "stream" in path.lower()
        if self.dialect == "responses":
            return _sse(_responses_events(turn))
        if self.dialect == "gemini":
            reply = _gemini_reply(turn)
            return _sse([reply]) if stream else (200, {"content-type": "application/json"}, json.dumps(reply).encode())
        if stream:
            return _sse([*_chat_chunks(turn), "[DONE]"])
        return 200, {"content-type": "application/json"}, json.dumps(_chat_reply(turn)).encode()

    def _is_main(self, path: str, body: dict[str, Any]) -> bool:
        if self.dialect == "gemini":  # the router's classification asks for JSON, with no tools
            config = body.get("generationConfig") or {}
            return config.get("responseMimeType") != "application/json" and "countTokens" not in path
        if self.dialect == "chat":  # opencode's title request has no tools
            return bool(body.get("tools"))
        return True

    def _side(self, path: str) -> str:
        if self.dialect == "gemini":
            return json.dumps({"reasoning": "simple", "model_choice": "flash"})
        return "Title"


def _sse(events: list[Any]) -> tuple[int, dict[str, str], bytes]:
    lines = []
    for event in events:
        if isinstance(event, str):
            lines.append(f"data: {event}\n\n")
        elif isinstance(event, tuple):
            lines.append(f"event: {event[0]}\ndata: {json.dumps(event[1])}\n\n")
        else:
            lines.append(f"data: {json.dumps(event)}\n\n")
    return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, "".join(lines).encode()


def _responses_events(turn: Turn) -> list[Any]:
    rid = f"resp_{next(_ids)}"
    items: list[dict[str, Any]] = []
    for name, args in turn.calls:
        call = {
            "type": "function_call",
            "id": f"fc_{next(_ids)}",
            "call_id": f"call_{next(_ids)}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        if name.startswith("mcp__") and name.count("__") >= 2:  # a tool of a namespace (Codex: one per MCP server)
            namespace, _, tool = name.rpartition("__")
            call.update(name=tool, namespace=namespace)
        items.append(call)
    if turn.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{next(_ids)}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    events: list[Any] = [("response.created", {"type": "response.created", "response": {"id": rid}})]
    for n, item in enumerate(items):
        events.append(
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": n, "item": item})
        )
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    events.append(
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {"id": rid, "status": "completed", "output": items, "usage": usage},
            },
        )
    )
    return events


def _gemini_reply(turn: Turn) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"functionCall": {"name": name, "args": args}} for name, args in turn.calls]
    if turn.text:
        parts.append({"text": turn.text})
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
        "modelVersion": "gemini-fake",
    }


def _chat_chunks(turn: Turn) -> list[Any]:
    cid = f"chatcmpl-{next(_ids)}"
    base = {"id": cid, "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
    chunks: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    for n, (name, args) in enumerate(turn.calls):
        call = {
            "index": n,
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    if turn.text:
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": turn.text}}]})
    finish = "tool_calls" if turn.calls else "stop"
    chunks.append(
        {
            **base,
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }
    )
    return chunks


def _chat_reply(turn: Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in turn.calls
        ]
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }
