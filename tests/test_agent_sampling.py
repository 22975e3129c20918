"""The agent loop on the host's own model: MCP sampling through a real client that answers
``sampling/createMessage``, on both protocol eras (2026-07-28 input-required round trips, and
server-initiated requests up to 2025-11-25)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp import types as t

from tiermem.agent.service import register_agent_chat
from tiermem.base.config import Settings

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio


def build(settings: Settings, **over: Any):  # type: ignore[no-untyped-def]
    s = settings.model_copy(update={"agent_loop": True, "llm_provider": "sampling", **over})
    server = serve_in_process(s)
    register_agent_chat(server, s)
    return server


class Host:
    """A scripted host model: each answer is text or a list of (tool, input) calls."""

    def __init__(self, *answers: str | list[tuple[str, dict[str, Any]]]) -> None:
        self.answers = list(answers)
        self.requests: list[t.CreateMessageRequestParams] = []

    async def __call__(self, context: Any, params: t.CreateMessageRequestParams) -> Any:
        self.requests.append(params)
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            if params.tools is None:
                return t.CreateMessageResult(
                    role="assistant", content=t.TextContent(type="text", text=answer), model="host-model"
                )
            return t.CreateMessageResultWithTools(
                role="assistant",
                content=[t.TextContent(type="text", text=answer)],
                model="host-model",
                stop_reason="endTurn",
            )
        calls = [
            t.ToolUseContent(type="tool_use", id=f"call_{len(self.requests)}_{i}", name=n, input=a)
            for i, (n, a) in enumerate(answer)
        ]
        return t.CreateMessageResultWithTools(
            role="assistant", content=calls, model="host-model", stop_reason="toolUse"
        )


TOOLS = t.SamplingCapability(tools=t.SamplingToolsCapability())


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_sampling_turn_with_tools_on_both_eras(settings: Settings, mode: str) -> None:
    host = Host([("memory_insert", {"label": "human", "new_str": "Prefers Rust"})], "Got it: Rust.")
    async with Client(build(settings), mode=mode, sampling_callback=host, sampling_capabilities=TOOLS, cache=None) as c:
        result = await c.call_tool("agent_chat", {"message": "I prefer Rust"})
        assert not result.is_error, text_of(result)
        assert text_of(result) == "Got it: Rust."
        info = result.structured_content
        assert info["memory_edits"] == ["human"] and info["stop_reason"] == "end_turn"
        human = await c.read_resource("memory://blocks/human")
        assert "Prefers Rust" in human.contents[0].text
    first, second = host.requests
    assert "<memory_blocks>" in (first.system_prompt or "")
    assert first.tools and "memory_insert" in {x.name for x in first.tools}
    # The second request replays the tool call and carries its wrapped result.
    replay = second.messages[-1].content_as_list
    assert replay[0].type == "tool_result" and json.loads(replay[0].content[0].text)["status"] == "OK"
    assert second.messages[-2].role == "assistant" and second.messages[-2].content_as_list[0].type == "tool_use"


async def test_sampling_without_tool_support_uses_text_tool_calls(settings: Settings) -> None:
    host = Host(
        '<tool_call>{"name": "core_memory_append", "input": {"label": "human", "content": "Has a dog"}}</tool_call>',
        "Noted the dog.",
    )
    async with Client(build(settings), sampling_callback=host, cache=None) as c:
        result = await c.call_tool("agent_chat", {"message": "I have a dog"})
        assert text_of(result) == "Noted the dog."
        human = await c.read_resource("memory://blocks/human")
        assert "Has a dog" in human.contents[0].text
    assert host.requests[0].tools is None and "<tool_call>" in (host.requests[0].system_prompt or "")
    assert "Tool result:" in host.requests[1].messages[-1].content_as_list[0].text


async def test_client_without_sampling_gets_a_clear_error(settings: Settings) -> None:
    async with Client(build(settings), cache=None) as c:
        result = await c.call_tool("agent_chat", {"message": "hello"})
    assert result.is_error and "does not support sampling" in text_of(result)
    assert "ANTHROPIC_API_KEY" in text_of(result)
