"""The one tool-calling loop, shared by the agent loop (``loop.py``) and the sleep-time agent (``sleeptime.py``).

Each step asks the model (``Provider``), runs the tool calls of its answer through a ``ToolHost`` (the server's
own tools, in process) or a built-in tool the loop answers itself (``send_message``, ``memory_finish_edits``),
and hands every message to an ``Exchange``, which keeps the conversation: the agent loop writes it to recall as
it happens, the sleep-time agent keeps it in a list. The loop stops when the model answers without a tool call,
when a built-in tool ends the run, at ``max_steps``, or (``memgpt`` style) when no call asked for a heartbeat and
none failed. The ``Report`` (steps, edited blocks, token usage) is built the same way for both.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..base.records import Message
from ..server.registry import SEND_MESSAGE as SEND_MESSAGE_NAME
from ..server.registry import edited_labels
from .llm import (
    JSON,
    REPLIES,
    LLMRequest,
    LLMResponse,
    Provider,
    ToolCall,
    ToolSpec,
    Usage,
    pair_results,
    payload,
)
from .toolhost import ToolHost

Style = Literal["letta_v1", "memgpt"]
HEARTBEAT = "[This is an automated system message hidden from the user] Function called using request_heartbeat=true, returning control"
HEARTBEAT_FAILED = "[This is an automated system message hidden from the user] Function call failed, returning control"
SEND_MESSAGE = ToolSpec(
    SEND_MESSAGE_NAME,
    "Sends a message to the human user. This ends your turn: the message is your reply.",
    {
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "Message contents. All unicode (including emojis) are supported.",
            }
        },
        "required": ["message"],
    },
)
REQUEST_HEARTBEAT = {
    "type": "boolean",
    "description": "Request an immediate heartbeat after the function runs. Set to true if you want to send a follow-up "
    "message or run a follow-up function; false ends your turn.",
}


@dataclass(frozen=True)
class Answer:
    """What a built-in tool answers: the result text, whether it failed, and the run's reply if it ends the run."""

    text: str
    is_error: bool = False
    ends: bool = False
    reply: str | None = None


Builtin = Callable[[JSON], Answer]


class Exchange(Protocol):
    """Where a run keeps its conversation with the model."""

    async def request(self, step: int) -> LLMRequest:
        """The request for step ``step`` (the exchange may summarise or warn first)."""
        ...

    async def assistant(self, response: LLMResponse) -> None:
        """Keep the model's answer (its text and tool calls)."""
        ...

    async def result(self, call: ToolCall, text: str, is_error: bool) -> None:
        """Keep one tool call's result (called once per call, in order, right after the call)."""
        ...

    async def heartbeat(self, reason: str) -> None:
        """Keep a ``memgpt`` heartbeat (the loop goes on after it)."""
        ...


@dataclass
class Report:
    """The steps a run took (one per tool call), the blocks it edited, its token usage and a notice when its last
    answer is not a complete reply."""

    steps: list[JSON] = field(default_factory=list)
    memory_edits: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    dialect: str = "anthropic"  # the memory_tool_dialect whose tools the run called (how their arguments name blocks)
    notice: str = ""  # why the last answer is not a complete reply: cut at max_tokens, a refusal, empty

    def add_usage(self, usage: Usage) -> None:
        self.usage = self.usage + usage

    def add_call(self, name: str, arguments: Mapping[str, object] | None, ok: bool, message: str) -> None:
        self.steps.append(
            {"tool": name, "input": arguments, "status": "OK" if ok else "Failed", "result": message[:500]}
        )
        if ok:
            self.memory_edits += [
                x for x in edited_labels(name, arguments or {}, self.dialect) if x not in self.memory_edits
            ]

    @classmethod
    def from_messages(cls, messages: Sequence[Message], dialect: str = "anthropic") -> Report:
        """The report of stored messages (the layout in ``llm.py``): a resumed turn starts from its earlier steps."""
        payloads = [payload(x) for x in messages]
        sent, results = pair_results(messages, payloads)  # each call's result, as the model is shown it
        report = cls(dialect=dialect)
        for n, (x, p) in enumerate(zip(messages, payloads, strict=True)):
            if x.role != "assistant" and p.get("kind") != "summary":  # a summary keeps the summariser's usage
                continue
            u = p.get("usage") or {}
            report.add_usage(Usage(**{k: int(u.get(k, 0)) for k in Usage.__dataclass_fields__}))
            for k, call in enumerate(p.get("tool_calls") or []):
                res = results.get(sent.get((n, k), ""))
                body = json.loads(res["content"]) if res is not None else {"status": "Failed", "message": "no result"}
                report.add_call(
                    call["name"], call.get("input"), body.get("status") == "OK", str(body.get("message", ""))
                )
        return report


class ToolLoop:
    """One run of steps. ``step``, ``reply`` and ``report`` stay readable after an exception (a provider error)."""

    def __init__(
        self,
        provider: Provider,
        host: ToolHost,
        exchange: Exchange,
        *,
        max_steps: int,
        style: Style = "letta_v1",
        builtins: Mapping[str, Builtin] | None = None,
        step: int = 0,
        report: Report | None = None,
    ) -> None:
        self.provider = provider
        self.host = host
        self.exchange = exchange
        self.max_steps = max_steps
        self.style = style
        self.builtins = dict(builtins or {})
        self.step = step
        self.reply = ""
        self.report = report or Report()

    async def run(self) -> Literal["end_turn", "max_steps", "max_tokens", "refusal"]:
        """How the run stopped: ``max_tokens`` (the last answer was cut, ``report.notice`` says so) and ``refusal``
        (the model declined) are the model's own stop reasons for an answer without tool calls."""
        while True:
            if self.step >= self.max_steps:
                return "max_steps"
            request = await self.exchange.request(self.step)
            response = await self.provider.complete(request)
            self.step += 1
            self.report.add_usage(response.usage)
            await self.exchange.assistant(response)
            if not response.tool_calls:
                self.reply = response.text
                return self._final(response, request.max_tokens)
            # an answer cut at max_tokens may have cut its last call's arguments: that call is answered, not run
            cut = response.tool_calls[-1] if response.stop_reason == "max_tokens" else None
            if not await self._calls(response.tool_calls, cut=cut, max_tokens=request.max_tokens):
                return "end_turn"

    def _final(self, response: LLMResponse, max_tokens: int) -> Literal["end_turn", "max_tokens", "refusal"]:
        """The stop reason of the run's last answer, with a notice in the report when it is not a complete reply."""
        self.report.notice = notice_of(response.stop_reason, response.text, max_tokens)
        if response.stop_reason == "max_tokens":
            return "max_tokens"
        if response.stop_reason == "refusal":
            return "refusal"
        return "end_turn"

    async def _calls(self, calls: Iterable[ToolCall], *, cut: ToolCall | None = None, max_tokens: int = 0) -> bool:
        """Run one answer's tool calls in order; whether the run goes on. ``cut``: the call an answer cut at
        ``max_tokens`` ended in (its arguments may be incomplete): it is not run, its result says why."""
        memgpt = self.style == "memgpt"
        go_on, ended, failed = not memgpt, False, False
        replies: list[str] = []  # every send_message of the answer: the user gets them all, as recall keeps them
        for call in calls:
            args = dict(call.input)
            heartbeat = heartbeat_requested(args.pop("request_heartbeat", False)) if memgpt else False
            builtin = self.builtins.get(call.name)
            if call.error:
                text, is_error = call.error, True
            elif call is cut:
                text, is_error = (
                    f"Your answer was cut at max_tokens ({max_tokens} tokens) inside this call to {call.name}, so its "
                    "arguments may be incomplete; it was not run. Call it again, with shorter arguments if they were "
                    "long.",
                    True,
                )
            elif builtin is not None:
                answer = builtin(args)
                text, is_error = answer.text, answer.is_error
                if answer.ends:
                    ended = True
                    if answer.reply is not None:
                        replies.append(answer.reply)
                        self.reply = REPLIES.join(replies)
            else:
                text, is_error = await self.host.call(call.name, args)
            await self.exchange.result(call, text, is_error)
            self.report.add_call(call.name, call.input, not is_error, text)
            failed = failed or is_error
            go_on = go_on or heartbeat
        if ended:
            return False
        if not memgpt:
            return True
        if not (go_on or failed):
            return False
        await self.exchange.heartbeat(HEARTBEAT_FAILED if failed and not go_on else HEARTBEAT)
        return True


def notice_of(stop_reason: str, text: str, max_tokens: int) -> str:
    """Why a final answer (one without tool calls) is not a complete reply ("" when it is): cut at ``max_tokens``,
    a refusal, or empty."""
    if stop_reason == "max_tokens":
        return (
            f"The reply was cut at max_tokens ({max_tokens} tokens); raise it with the max_tokens setting "
            "(TIERMEM_MAX_TOKENS) or ask for a shorter answer."
        )
    if stop_reason == "refusal":
        return "The model declined to answer (stop reason: refusal)."
    if not text.strip():
        return f"The model answered with an empty reply (stop reason: {stop_reason})."
    return ""


def heartbeat_requested(value: object) -> bool:
    """Letta's reading of ``request_heartbeat``: a boolean as it is, text true only when it says "true" (any case),
    anything else by its truth (models without structured output sometimes send ``"false"`` as text)."""
    if isinstance(value, str):
        return value.lower() == "true"
    return bool(value)


def memgpt_specs(specs: Iterable[ToolSpec]) -> list[ToolSpec]:
    """The ``memgpt`` style's tools: each takes ``request_heartbeat``, and ``send_message`` is added."""
    out = []
    for spec in [*specs, SEND_MESSAGE]:
        schema = copy.deepcopy(spec.input_schema)
        if spec.name != SEND_MESSAGE.name:
            schema.setdefault("properties", {})["request_heartbeat"] = REQUEST_HEARTBEAT
            schema["required"] = [*schema.get("required", []), "request_heartbeat"]
        out.append(ToolSpec(spec.name, spec.description, schema))
    return out


def send_message(arguments: JSON) -> Answer:
    """The ``memgpt`` style's ``send_message``: its message is the turn's reply and ends the turn."""
    message = arguments.get("message")
    if not isinstance(message, str):
        return Answer("send_message needs `message` as text.", is_error=True)
    return Answer("Sent message successfully.", ends=True, reply=message)
