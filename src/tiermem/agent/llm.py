"""What the loop and the LLM providers exchange: requests, responses, tool calls, and the
conversion of stored messages into the Messages-API layout (user/assistant turns of content
blocks) that both providers start from.

Stored message layout (``Message.payload`` is JSON text; shared with ``interop``):

- user:      ``{"kind": "user"}``; heartbeats and system alerts are role user with kind
  ``heartbeat`` / ``system_alert``
- assistant: ``{"kind": "assistant", "tool_calls": [{"id", "name", "input"}]}``; content is
  the visible text (may be empty). An answer that calls ``send_message`` (``memgpt`` style, and Letta's
  MemGPT agents) has that message as its content, what recall searches and shows, as Letta reads it;
  the answer's own text (its inner thoughts) is then ``"model_text"`` (``model_text()`` reads either)
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
from ..server.registry import SEND_MESSAGE

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
    # why the call cannot be run (a malformed one: a text-mode block that is not JSON, an input that is not an
    # object): the loop answers it with this as a failed call, without running it, and the model tries again
    error: str = ""


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


MODEL_TEXT = "model_text"  # an assistant row's own text when its content is not it (``recall_content``)
CONVERSATION_SEARCH = "conversation_search"  # the tool whose calls recall's search leaves out


REPLIES = "\n\n"  # between the messages of an answer's send_message calls, in recall and in the reply alike


def replied(calls: Sequence[JSON]) -> str | None:
    """What an answer's ``send_message`` calls (``{"name", "input"}``) say to the user, blank-line separated; None
    when it makes none with a text ``message``: the content recall keeps for the answer."""
    said = [
        message
        for c in calls
        if c.get("name") == SEND_MESSAGE
        and isinstance(c.get("input"), dict)
        and isinstance(message := c["input"].get("message"), str)
    ]
    return REPLIES.join(said) if said else None


def recall_content(text: str, calls: Sequence[JSON], *, replies: bool) -> str | None:
    """What recall keeps as the content of an answer (``text``, the model's; ``calls``: its tool calls that ran),
    the text its searches read, as Letta reads an answer (``MessageManager._extract_message_text``): nothing for an
    answer calling ``conversation_search`` (Letta's search leaves those out, so the model does not find its own
    searches: ``said`` drops an empty row from every search), else, with ``replies`` (the agent has ``send_message``),
    what its ``send_message`` calls say to the user, if any. None: the model's text itself; otherwise the model's text
    is kept in the payload under ``MODEL_TEXT`` (``model_text`` reads it back for the model and for exports)."""
    if any(c.get("name") == CONVERSATION_SEARCH for c in calls):
        return ""
    return replied(calls) if replies else None


def model_text(message: Message, p: JSON) -> str:
    """An assistant row's text as the model wrote it (``p``: its payload): its content, unless the content is
    something else (``recall_content``: its ``send_message`` reply, or nothing for a ``conversation_search`` call)."""
    own = p.get(MODEL_TEXT)
    return own if isinstance(own, str) else message.content


UNANSWERED = "[An earlier message from the user that got no reply.]\n"


def to_api_messages(messages: Sequence[Message]) -> list[Turn]:
    """Stored messages as alternating user/assistant turns of content blocks, always valid for the Messages API:
    a user turn first, roles alternating (consecutive same-role messages merged), and every tool call answered
    exactly once by a tool result in the very next user turn, tool results first in that turn.

    Stored tool results are paired with their calls by id, not by position: a result stored away from its call
    (an imported Letta conversation orders them by time) is moved right after the call, so the model keeps the
    real result; a second result for the same call is dropped; a call without a stored result (a crash mid-step)
    is answered with an error result; a result whose call is not in the window (summarised away) becomes plain
    text, so what the tool returned stays visible. Ids need not be unique in the store (a proxy that numbers calls
    per answer gives every first call ``call_0``): a result answers the call of its id in the nearest answer before
    it (``pair_results``), and a call whose id an earlier one in the request has is sent under a new id, its
    result too."""
    payloads = [payload(m) for m in messages]  # each message's JSON read once, for the passes below
    sent, results = pair_results(messages, payloads)
    turns: list[Turn] = []

    def add(role: Literal["user", "assistant"], blocks: list[Block]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    unanswered: TextBlock | None = None  # the last user message, while no assistant message followed it
    for n, (m, p) in enumerate(zip(messages, payloads, strict=True)):
        if m.role == "assistant":
            text = model_text(m, p)
            blocks: list[Block] = [{"type": "text", "text": text}] if text.strip() else []
            if blocks or p.get("tool_calls"):  # an empty answer (a refusal, an empty reply) did not answer the user
                unanswered = None
            ids = []
            for k, call in enumerate(p.get("tool_calls") or []):
                if (n, k) not in sent:
                    continue
                ids.append(sent[n, k])
                blocks.append(
                    {"type": "tool_use", "id": sent[n, k], "name": call["name"], "input": call.get("input") or {}}
                )
            add("assistant", blocks)
            if ids:  # the very next user turn answers every call of this one, in order
                add("user", [results.get(tid) or _interrupted(tid) for tid in ids])
        elif m.role == "tool" or p.get("kind") == "tool_result":
            if n not in results.paired:
                add("user", [{"type": "text", "text": f"[result of an earlier tool call] {m.content}"}])
        elif m.content.strip():
            block: TextBlock = {"type": "text", "text": m.content}
            if p.get("kind") == "user":
                # A user message the model never answered (its turn failed before the first answer) stays, as
                # its own block marked so, rather than run together with the next one.
                if unanswered is not None:
                    unanswered["text"] = UNANSWERED + unanswered["text"]
                unanswered = block
            add("user", [block])
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(The conversation continues.)"}]})
    return turns


class _Results(dict[str, ToolResultBlock]):
    """The result block of each call, by the id it is sent under; ``paired``: the positions of the stored results
    that answer a call in the window (the others are shown as text)."""

    def __init__(self) -> None:
        super().__init__()
        self.paired: set[int] = set()


def pair_results(messages: Sequence[Message], payloads: Sequence[JSON]) -> tuple[dict[tuple[int, int], str], _Results]:
    """(the id each call is sent under, by (message position, call position); each call's result block).

    A stored result answers a call of its id in the nearest assistant message before it (the first such call not
    answered yet), or when none before has that id, in the first one after it (an import ordered by time). A call is
    sent under its own id unless an earlier call of the request has it; then under that id with a suffix (``_2``...)
    that no stored id has, and its result with it."""
    sent: dict[tuple[int, int], str] = {}
    where: dict[str, list[tuple[int, int]]] = {}  # stored id -> its calls' positions, in order
    taken = {
        str(c["id"])
        for m, p in zip(messages, payloads, strict=True)
        if m.role == "assistant"
        for c in p.get("tool_calls") or []
        if "id" in c
    }
    for n, (m, p) in enumerate(zip(messages, payloads, strict=True)):
        if m.role != "assistant":
            continue
        for k, call in enumerate(p.get("tool_calls") or []):
            if "id" not in call:
                continue
            tid = str(call["id"])
            unique = tid
            if tid in where:  # repeated: a new id that no stored call has
                count = len(where[tid]) + 1
                while (unique := f"{tid}_{count}") in taken:
                    count += 1
                taken.add(unique)
            where.setdefault(tid, []).append((n, k))
            sent[n, k] = unique
    results = _Results()
    for n, (m, p) in enumerate(zip(messages, payloads, strict=True)):
        if not (m.role == "tool" or p.get("kind") == "tool_result"):
            continue
        calls = where.get(str(p.get("tool_call_id", "")), [])
        before = [c for c in calls if c[0] < n]
        if not calls:
            continue
        row = before[-1][0] if before else calls[0][0]
        open_ = [sent[c] for c in calls if c[0] == row and sent[c] not in results]
        results.paired.add(n)  # a second result for an answered call is dropped, not shown as text
        if open_:
            results[open_[0]] = {
                "type": "tool_result",
                "tool_use_id": open_[0],
                "content": m.content,
                "is_error": bool(p.get("is_error")),
            }
    return sent, results


def _interrupted(tool_use_id: str) -> ToolResultBlock:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "is_error": True,
        "content": json.dumps(
            {"status": "Failed", "message": "The tool call was interrupted before it returned.", "time": ""}
        ),
    }
