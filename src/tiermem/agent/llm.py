"""What the loop and the LLM providers exchange: requests, responses, tool calls, and the
conversion of stored messages into the Messages-API layout (user/assistant turns of content
blocks) that both providers start from.

Stored message layout (``Message.payload`` is JSON text; shared with ``interop``):

- user:      ``{"kind": "user"}``; heartbeats and system alerts are role user with kind
  ``heartbeat`` / ``system_alert``
- assistant: ``{"kind": "assistant", "tool_calls": [{"id", "name", "input"}]}``; content is
  the visible text (may be empty)
- tool:      ``{"kind": "tool_result", "tool_call_id", "name", "is_error"}``; content is the
  wrapped result ``{"status", "message", "time"}``
- system:    ``{"kind": "summary"}``: what the summariser wrote for evicted messages
- user / assistant logged by a host's hook: ``{"kind": role, "host": "codex"}`` (the host that reported it)
- any role, imported from a Letta agent file: ``"letta"`` holds the file's message (exported back as it
  was; the loop does not read it)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

from ..base.records import Message

JSON = dict[str, Any]  # a JSON object: a tool's arguments and schema, a stored message's payload


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JSON


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str  # the wrapped result {"status", "message"[, "time"]} as JSON text
    is_error: bool


Block = TextBlock | ToolUseBlock | ToolResultBlock


class Turn(TypedDict):
    """One Messages-API turn: what both providers start from."""

    role: Literal["user", "assistant"]
    content: list[Block]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: JSON


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Every token of the prompt, cached or not (the provider's own count of the context)."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: JSON


@dataclass(frozen=True)
class LLMRequest:
    """One model call. ``system`` is stable between memory edits (it is cached by the provider)."""

    system: str
    messages: list[Turn]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    # ``system[:stable_prefix]`` never changes for an agent (its system text); the rest (core
    # memory) changes when memory does. The Anthropic provider caches both parts separately.
    stable_prefix: int = 0
    # Unique per (turn, step): the sampling provider uses it as the input-request key.
    key: str = "llm"
    purpose: str = "turn"  # "turn" | "summary" | "sleeptime"


@dataclass(frozen=True)
class LLMResponse:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str = ""


class Provider(Protocol):
    """A language model behind the Messages-API shape. Raises ``ProviderError`` on failure."""

    name: str

    async def complete(self, request: LLMRequest) -> LLMResponse: ...


def payload(message: Message) -> JSON:
    if not message.payload:
        return {"kind": "user" if message.role == "user" else message.role}
    try:
        value = json.loads(message.payload)
    except json.JSONDecodeError:
        return {"kind": message.role}
    return value if isinstance(value, dict) else {"kind": message.role}


def to_api_messages(messages: Sequence[Message]) -> list[Turn]:
    """Stored messages as alternating user/assistant turns of content blocks, always valid for the API:
    consecutive same-role messages merged, tool results first in their turn, a tool call whose result
    was never stored (a crash mid-step) answered with an error result, and a user turn first."""
    turns: list[Turn] = []

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    for m in messages:
        p = payload(m)
        kind = p.get("kind")
        if m.role == "assistant":
            blocks: list[Block] = [{"type": "text", "text": m.content}] if m.content.strip() else []
            for call in p.get("tool_calls") or []:
                blocks.append(
                    {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call.get("input") or {}}
                )
            add("assistant", blocks)
        elif m.role == "tool" or kind == "tool_result":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": p.get("tool_call_id", ""),
                        "content": m.content,
                        "is_error": bool(p.get("is_error")),
                    }
                ],
            )
        elif m.content.strip():
            add("user", [{"type": "text", "text": m.content}])
    _repair(turns)
    return turns


def _repair(turns: list[Turn]) -> None:
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        wanted = [b["id"] for b in turn["content"] if b["type"] == "tool_use"]
        if not wanted:
            continue
        if i + 1 >= len(turns) or turns[i + 1]["role"] != "user":
            turns.insert(i + 1, {"role": "user", "content": []})
        following = turns[i + 1]["content"]
        have = {b["tool_use_id"] for b in following if b["type"] == "tool_result"}
        missing: list[Block] = [
            {
                "type": "tool_result",
                "tool_use_id": tid,
                "is_error": True,
                "content": json.dumps(
                    {"status": "Failed", "message": "The tool call was interrupted before it returned.", "time": ""}
                ),
            }
            for tid in wanted
            if tid not in have
        ]
        following[:0] = missing
    # A tool result whose call is not in the window (cut off) becomes plain text.
    calls = {b["id"] for t in turns if t["role"] == "assistant" for b in t["content"] if b["type"] == "tool_use"}
    for turn in turns:
        if turn["role"] == "user":
            turn["content"] = [
                _orphan(b) if b["type"] == "tool_result" and b["tool_use_id"] not in calls else b
                for b in turn["content"]
            ]
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(The conversation continues.)"}]})


def _orphan(block: ToolResultBlock) -> TextBlock:
    return {"type": "text", "text": f"[result of an earlier tool call] {block['content']}"}
