"""The host's own model as a ``Provider``, through MCP ``sampling/createMessage``.

Two protocol eras (see docs/MCP_SDK_NOTES.md):

- up to 2025-11-25 the server sends ``sampling/createMessage`` to the client in the middle of
  the ``agent_chat`` call and waits for the answer;
- from 2026-07-28 servers cannot send requests: ``complete`` raises :class:`NeedsInput`, the
  ``agent_chat`` tool returns an ``InputRequiredResult`` carrying the sampling request, and the
  client retries the call with the answer. Every message of the turn so far is already stored,
  so the retried call resumes the turn where it stopped (``answers`` holds the client's reply).

Clients with the ``sampling.tools`` capability get real tool definitions; others get the tools
described in the system prompt and answer with ``<tool_call>{...}</tool_call>`` blocks.

A sampling message that holds tool results holds nothing else (SEP-1577). The Messages API allows text after the
tool results of a user turn (a heartbeat, a memory-pressure alert, the user's next message after ``send_message``),
and the Anthropic provider sends it so; here that text follows as a second user message, which the Anthropic API
itself merges back into one turn. (Folding it into the tool result's content would put the user's words and the
alert's instructions where models expect untrusted tool output.) Every request is checked against the rule before
it is sent: a request that breaks it is tiermem's fault, reported as such, never blamed on the client.
"""

from __future__ import annotations

import json
import re
import uuid
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.validation import validate_tool_use_result_messages
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    SamplingMessage,
    SamplingMessageContentBlock,
    TextContent,
    Tool,
    ToolResultContent,
    ToolUseContent,
)

from ..base.errors import ProviderError
from .llm import JSON, LLMRequest, LLMResponse, ToolCall, Usage

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context


class NeedsInput(Exception):
    """Raised on 2026-07-28 connections: the client must answer ``request`` under ``key``, then retry."""

    def __init__(self, key: str, request: CreateMessageRequest) -> None:
        super().__init__(key)
        self.key = key
        self.request = request


TEXT_TOOLS = """
You can call tools. To call one, answer with one or more blocks exactly like
<tool_call>{{"name": "TOOL_NAME", "input": {{...arguments...}}}}</tool_call>
and nothing after them; the results come back in the next message. Answer without any
<tool_call> block when you are done. The tools (JSON Schema of their input):
{tools}"""
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_.-]{1,128})"')  # a malformed block's tool name, when it has one
MALFORMED = "invalid_tool_call"  # the name a malformed block that names no tool is stored under
SHAPE = '<tool_call>{"name": "TOOL_NAME", "input": {...arguments...}}</tool_call>'


class SamplingProvider:
    name = "sampling"

    def __init__(
        self, ctx: Context[Any, Any], *, answers: Mapping[str, object] | None = None, max_tokens: int | None = None
    ) -> None:
        self._ctx = ctx
        caps = getattr(ctx, "client_capabilities", None)
        sampling = getattr(caps, "sampling", None) if caps is not None else None
        if sampling is None:
            raise ProviderError(
                "This MCP client does not support sampling (sampling/createMessage), so the agent loop cannot use the "
                'host\'s model. Use a client that supports sampling, or set llm_provider = "anthropic" with '
                "ANTHROPIC_API_KEY."
            )
        self.native_tools = getattr(sampling, "tools", None) is not None
        session = getattr(ctx, "session", None)
        self._direct = bool(getattr(session, "can_send_request", False))
        self.answers = dict(answers or {})
        self._max_tokens = max_tokens

    async def complete(self, request: LLMRequest) -> LLMResponse:
        messages, system, tools = self._render(request)
        params = CreateMessageRequestParams(
            messages=messages,
            max_tokens=self._max_tokens or request.max_tokens,
            system_prompt=system,
            tools=tools,
        )
        if request.key in self.answers:
            return self._parse(self.answers.pop(request.key))
        check_tool_messages(messages)
        if not self._direct:
            raise NeedsInput(request.key, CreateMessageRequest(params=params))
        try:
            with warnings.catch_warnings():  # deprecated from 2026-07-28; this path serves older clients only
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                result = await self._ctx.session.create_message(
                    messages,
                    max_tokens=params.max_tokens,
                    system_prompt=system,
                    tools=tools,
                    related_request_id=getattr(self._ctx, "request_id", None),
                )
        except Exception as exc:  # the client's error reaches us as an MCP error; name it for the model/user
            raise ProviderError(f"The MCP client's sampling request failed: {exc}") from exc
        return self._parse(result)

    # -- conversion --------------------------------------------------------------

    def _render(self, request: LLMRequest) -> tuple[list[SamplingMessage], str, list[Tool] | None]:
        system = request.system
        tools: list[Tool] | None = None
        if request.tools and self.native_tools:
            tools = [Tool(name=t.name, description=t.description, input_schema=t.input_schema) for t in request.tools]
        elif request.tools:
            listing = "\n".join(
                f"- {t.name}: {t.description.splitlines()[0] if t.description else ''}\n  {json.dumps(t.input_schema)}"
                for t in request.tools
            )
            system = system + "\n" + TEXT_TOOLS.format(tools=listing)
        out: list[SamplingMessage] = []
        for m in request.messages:
            blocks: list[SamplingMessageContentBlock] = []
            results: list[ToolResultContent] = []
            for b in m["content"]:
                if b["type"] == "text":
                    blocks.append(TextContent(type="text", text=b["text"]))
                elif b["type"] == "tool_use":
                    if self.native_tools:
                        blocks.append(ToolUseContent(type="tool_use", id=b["id"], name=b["name"], input=b["input"]))
                    else:
                        call = json.dumps({"name": b["name"], "input": b["input"]})
                        blocks.append(TextContent(type="text", text=f"<tool_call>{call}</tool_call>"))
                elif b["type"] == "tool_result":
                    if self.native_tools:
                        results.append(
                            ToolResultContent(
                                type="tool_result",
                                tool_use_id=b["tool_use_id"],
                                content=[TextContent(type="text", text=b["content"])],
                                is_error=b["is_error"] or None,
                            )
                        )
                    else:
                        blocks.append(TextContent(type="text", text=f"Tool result: {b['content']}"))
            if results:  # the results alone in one message; the turn's text in a second user message after it
                out.append(SamplingMessage(role=m["role"], content=list(results) if len(results) != 1 else results[0]))
                if not blocks:
                    continue
            out.append(SamplingMessage(role=m["role"], content=blocks if len(blocks) != 1 else blocks[0]))
        return out, system, tools

    def _parse(self, result: object) -> LLMResponse:
        if isinstance(result, dict):  # an answer echoed through request_state / input_responses
            result = _validate(result)
        if not isinstance(result, CreateMessageResult | CreateMessageResultWithTools):
            raise ProviderError(
                f"The MCP client answered the sampling request with {type(result).__name__}, not a message."
            )
        content = result.content if isinstance(result.content, list) else [result.content]
        text = "".join(getattr(b, "text", "") for b in content if getattr(b, "type", "") == "text")
        calls = [ToolCall(b.id, b.name, dict(b.input)) for b in content if isinstance(b, ToolUseContent)]
        if not self.native_tools and not calls:
            calls = [text_call(raw) for raw in _CALL.findall(text)]
            if calls:
                text = _CALL.sub("", text).strip()
        stop = "tool_use" if calls else "end_turn"
        return LLMResponse(text=text, tool_calls=tuple(calls), stop_reason=stop, usage=Usage(), model=result.model)


def text_call(raw: str) -> ToolCall:
    """One ``<tool_call>`` block's call. A block that is not a JSON object with a ``name`` and an object ``input``
    is a failed call (``ToolCall.error``: it is not run, and its result tells the model what was wrong), as a call
    to a tool that does not exist is: never the user's reply, never an error of the turn."""
    ident = f"call_{uuid.uuid4().hex[:12]}"
    quoted = raw.strip()
    quoted = quoted if len(quoted) <= 200 else quoted[:200] + "..."
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        named = _NAME.search(raw)
        return ToolCall(
            ident,
            named.group(1) if named else MALFORMED,
            {},
            error=f"Your <tool_call> block is not valid JSON ({exc}): {quoted}. Nothing was run. Write the call "
            f"again as one JSON object, {SHAPE}, with double-quoted names and no trailing commas.",
        )
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return ToolCall(
            ident,
            MALFORMED,
            {},
            error=f"Your <tool_call> block names no tool: {quoted}. Nothing was run. Write the call again as {SHAPE}.",
        )
    arguments = value.get("input")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCall(
            ident,
            value["name"],
            {},
            error=f'The "input" of your call to {value["name"]} is {type(arguments).__name__}, not an object of '
            f"arguments: {quoted}. Nothing was run. Write the call again as {SHAPE}, its arguments by name.",
        )
    return ToolCall(ident, value["name"], arguments)


def check_tool_messages(messages: list[SamplingMessage]) -> None:
    """Every message of ``messages`` obeys the sampling tool-use rule (SEP-1577), as the SDK checks the last one
    before sending: results alone in their message, answering exactly the calls of the message before."""
    for end in range(1, len(messages) + 1):
        try:
            validate_tool_use_result_messages(messages[max(0, end - 2) : end])  # it reads the last two alone
        except ValueError as exc:
            raise ProviderError(
                f"tiermem built an invalid sampling request (message {end} of {len(messages)}: {exc}); nothing was "
                "sent to the client. This is a bug in tiermem, not in the MCP client: please report it."
            ) from exc


def _validate(data: JSON) -> CreateMessageResult | CreateMessageResultWithTools:
    try:
        return CreateMessageResultWithTools.model_validate(data)
    except Exception:  # noqa: BLE001 - try the narrower shape next
        return CreateMessageResult.model_validate(data)
