"""The agent loop on the host's own model: MCP sampling through a real client that answers
``sampling/createMessage``, on both protocol eras (2026-07-28 input-required round trips, and
server-initiated requests up to 2025-11-25)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp import types as t
from mcp.server.validation import validate_tool_use_result_messages

from tiermem.agent.context import WARNING
from tiermem.agent.sampling_provider import check_tool_messages
from tiermem.agent.service import register_agent_chat
from tiermem.base.config import Settings
from tiermem.base.errors import ProviderError
from tiermem.domain.tokens import count_tokens

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio


def build(settings: Settings, **over: Any):  # type: ignore[no-untyped-def]
    s = settings.model_copy(update={"agent_loop": True, "llm_provider": "sampling", **over})
    server = serve_in_process(s)
    register_agent_chat(server, s)
    return server


class Host:
    """A scripted host model: each answer is text, a list of (tool, input) calls, or a function of the request
    that returns one. Every request it gets must be a valid one (the SDK's own SEP-1577 check, on every message)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[t.CreateMessageRequestParams] = []

    async def __call__(self, context: Any, params: t.CreateMessageRequestParams) -> Any:
        self.requests.append(params)
        for end in range(1, len(params.messages) + 1):  # every message obeys SEP-1577, not only the last
            validate_tool_use_result_messages(params.messages[:end])
        answer = self.answers.pop(0)
        if callable(answer):
            answer = answer(params)
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


async def test_a_malformed_text_tool_call_is_a_failed_call_the_model_sees(settings: Settings) -> None:
    # A block that is not JSON (a trailing comma), one whose input is text: each is answered as a failed call that
    # says what was wrong, nothing is run, and the model goes on (never the user's reply, never a failed turn).
    host = Host(
        '<tool_call>{"name": "archival_memory_insert", "input": {"content": "cat is Miso",}}</tool_call>',
        '<tool_call>{"name": "archival_memory_insert", "input": "cat is Miso"}</tool_call>',
        '<tool_call>{"input": {"content": "cat is Miso"}}</tool_call>',
        '<tool_call>{"name": "archival_memory_insert", "input": {"content": "cat is Miso"}}</tool_call>',
        "Saved: your cat is Miso.",
    )
    async with Client(build(settings), sampling_callback=host, cache=None) as c:
        result = await c.call_tool("agent_chat", {"message": "my cat is Miso"})
        assert not result.is_error and text_of(result) == "Saved: your cat is Miso.", text_of(result)
        steps = (result.structured_content or {})["steps"]
        assert [(x["tool"], x["status"]) for x in steps] == [("archival_memory_insert", "Failed")] * 2 + [
            ("invalid_tool_call", "Failed"),
            ("archival_memory_insert", "OK"),
        ]
        assert steps[0]["result"].startswith("Your <tool_call> block is not valid JSON (Expecting property name")
        assert steps[1]["result"].startswith('The "input" of your call to archival_memory_insert is str, not an object')
        assert steps[2]["result"].startswith("Your <tool_call> block names no tool")
        found = await c.call_tool("archival_memory_search", {"query": "Miso"})
        assert text_of(found).count("cat is Miso") == 1  # the malformed calls were not run
    told = host.requests[1].messages[-1].content_as_list[0].text
    assert (
        told.startswith("Tool result: ")
        and "not valid JSON" in json.loads(told.removeprefix("Tool result: "))["message"]
    )


def _answer(*content: t.TextContent | t.ToolUseContent) -> dict[str, Any]:
    stop = "toolUse" if any(isinstance(b, t.ToolUseContent) for b in content) else "endTurn"
    result = t.CreateMessageResultWithTools(
        role="assistant", model="host-model", stop_reason=stop, content=list(content)
    )
    return result.model_dump(by_alias=True, exclude_none=True)


async def test_an_earlier_round_sent_again_runs_nothing_again(settings: Settings) -> None:
    # A client retrying after a lost response sends an earlier round's request_state and answer again: the step it
    # answers is stored, so it is neither logged nor run twice; the turn goes on from the store (the client is asked
    # for the step the turn is at), and a turn already over gives its stored result.
    insert = t.ToolUseContent(type="tool_use", id="call_1", name="archival_memory_insert", input={"content": "Fact 1"})
    done = t.TextContent(type="text", text="done")
    server = build(settings)
    async with Client(server, sampling_callback=Host(), sampling_capabilities=TOOLS, cache=None) as c:

        async def call(state: Any = None, **answers: Any) -> Any:
            return await c.session.call_tool(
                "agent_chat",
                {"message": "remember"},
                allow_input_required=True,
                input_responses=answers or None,
                request_state=state,
            )

        r1 = await call()
        (key1,) = r1.input_requests
        r2 = await call(r1.request_state, **{key1: _answer(insert)})
        (key2,) = r2.input_requests
        again = await call(r1.request_state, **{key1: _answer(insert)})  # round 1 once more
        assert isinstance(again, t.InputRequiredResult) and list(again.input_requests) == [key2]
        r3 = await call(r2.request_state, **{key2: _answer(done)})
        assert isinstance(r3, t.CallToolResult) and text_of(r3) == "done"
        last = await call(r2.request_state, **{key2: _answer(done)})  # the last round once more
        assert isinstance(last, t.CallToolResult) and text_of(last) == "done" and not last.is_error
        assert last.structured_content is not None and r3.structured_content is not None
        assert last.structured_content["steps"] == r3.structured_content["steps"]
        assert [x["tool"] for x in last.structured_content["steps"]] == ["archival_memory_insert"]
        found = await c.call_tool("archival_memory_search", {"query": "Fact 1"})
        assert json.loads(text_of(found))["count"] == 1  # inserted once
    memory, agent_id = server.runtime.handle.get()
    roles = [m.role for m in memory.archive.rows.messages_since(agent_id, "default", 0)]
    assert roles == ["user", "assistant", "tool", "assistant"]


class Rounds:
    """One agent_chat turn on a 2026-07-28 connection, driven round by round: ``call(state, key=answer)``."""

    def __init__(self, client: Client, message: str = "remember") -> None:
        self.client, self.message = client, message

    async def call(self, state: Any = None, **answers: Any) -> Any:
        return await self.client.session.call_tool(
            "agent_chat",
            {"message": self.message},
            allow_input_required=True,
            input_responses=answers or None,
            request_state=state,
        )


INSERT = t.ToolUseContent(type="tool_use", id="call_1", name="archival_memory_insert", input={"content": "Fact 1"})


@pytest.mark.parametrize("role", ["user", "assistant"])
async def test_rows_logged_between_rounds_are_not_the_turn_s(settings: Settings, role: str) -> None:
    # Between sampling rounds the turn holds no lock: conversation_log may add rows to its conversation. They are not
    # the turn's steps: the next round is neither refused (a user row) nor taken for a replay whose reply is the
    # logged row's text (an assistant row).
    server = build(settings)
    async with Client(server, sampling_callback=Host(), sampling_capabilities=TOOLS, cache=None) as c:
        turn = Rounds(c)
        r1 = await turn.call()
        (key1,) = r1.input_requests
        r2 = await turn.call(r1.request_state, **{key1: _answer(INSERT)})
        (key2,) = r2.input_requests
        logged = await c.call_tool(
            "conversation_log", {"messages": [{"role": role, "content": "an aside", "conversation_id": "default"}]}
        )
        assert not logged.is_error, text_of(logged)
        again = t.ToolUseContent(type="tool_use", id="call_2", name="core_memory_view", input={})
        r3 = await turn.call(r2.request_state, **{key2: _answer(again)})
        assert isinstance(r3, t.InputRequiredResult), text_of(r3)
        (key3,) = r3.input_requests
        r4 = await turn.call(r3.request_state, **{key3: _answer(t.TextContent(type="text", text="done"))})
        assert isinstance(r4, t.CallToolResult) and not r4.is_error, text_of(r4)
        assert text_of(r4) == "done"
        assert r4.structured_content is not None
        assert [x["tool"] for x in r4.structured_content["steps"]] == ["archival_memory_insert", "core_memory_view"]
    memory, agent_id = server.runtime.handle.get()
    roles = [m.role for m in memory.archive.rows.messages_since(agent_id, "default", 0)]
    assert roles == ["user", "assistant", "tool", role, "assistant", "tool", "assistant"]


async def test_two_turns_in_one_conversation_between_rounds_keep_their_own_steps(settings: Settings) -> None:
    # Two agent_chat turns of one conversation, their rounds interleaved: each counts only its own steps.
    server = build(settings)
    async with Client(server, sampling_callback=Host(), sampling_capabilities=TOOLS, cache=None) as c:
        a, b = Rounds(c, "first"), Rounds(c, "second")
        a1 = await a.call()
        (ka1,) = a1.input_requests
        a2 = await a.call(a1.request_state, **{ka1: _answer(INSERT)})
        (ka2,) = a2.input_requests
        b1 = await b.call()
        (kb1,) = b1.input_requests
        b2 = await b.call(b1.request_state, **{kb1: _answer(t.TextContent(type="text", text="B done"))})
        assert isinstance(b2, t.CallToolResult) and text_of(b2) == "B done"
        a3 = await a.call(a2.request_state, **{ka2: _answer(t.TextContent(type="text", text="A done"))})
        assert isinstance(a3, t.CallToolResult) and not a3.is_error, text_of(a3)
        assert text_of(a3) == "A done"
        again = await a.call(a2.request_state, **{ka2: _answer(t.TextContent(type="text", text="A done"))})
        assert isinstance(again, t.CallToolResult) and text_of(again) == "A done"  # a replay: the stored result
    memory, agent_id = server.runtime.handle.get()
    contents = [m.content for m in memory.archive.rows.messages_since(agent_id, "default", 0) if m.role != "tool"]
    assert contents == ["first", "", "second", "B done", "A done"]


async def test_a_replayed_last_round_gives_the_turn_s_notice(settings: Settings) -> None:
    # The last round sent again gives the result the turn gave, its notice (here: an empty reply) included.
    server = build(settings)
    async with Client(server, sampling_callback=Host(), sampling_capabilities=TOOLS, cache=None) as c:
        turn = Rounds(c)
        r1 = await turn.call()
        (key1,) = r1.input_requests
        r2 = await turn.call(r1.request_state, **{key1: _answer(INSERT)})
        (key2,) = r2.input_requests
        empty = _answer(t.TextContent(type="text", text=""))
        r3 = await turn.call(r2.request_state, **{key2: empty})
        again = await turn.call(r2.request_state, **{key2: empty})
        assert isinstance(r3, t.CallToolResult) and isinstance(again, t.CallToolResult)
        assert r3.structured_content is not None and "empty reply" in r3.structured_content["notice"]
        assert again.structured_content == r3.structured_content
        assert text_of(again) == text_of(r3)


async def test_client_without_sampling_gets_a_clear_error(settings: Settings) -> None:
    async with Client(build(settings), cache=None) as c:
        result = await c.call_tool("agent_chat", {"message": "hello"})
    assert result.is_error and "does not support sampling" in text_of(result)
    assert "ANTHROPIC_API_KEY" in text_of(result)


async def test_heartbeat_and_alert_after_a_tool_result_keep_requests_valid(settings: Settings) -> None:
    # A memgpt agent asks for a heartbeat, and its tool call fills the window past warn_at: the user turn after the
    # tool result holds the result, the heartbeat and the memory-pressure alert. Sampling forbids text beside tool
    # results, so the texts follow in a user message of their own; the next turn (after send_message's result) too.
    window = 14000

    def big_insert(params: t.CreateMessageRequestParams) -> list[tuple[str, dict[str, Any]]]:
        tools = json.dumps([[x.name, x.description, x.input_schema] for x in params.tools or []])
        used = count_tokens((params.system_prompt or "") + tools + str(params.messages))
        # With the tool result and the loop's safety factor (1.15) the prompt lands at ~82% of the window: past
        # warn_at (75%), short of summarize_at (90%) on the next turn too.
        words = " ".join(["pebble"] * ((int(window * 0.66) - used) // count_tokens(" pebble")))
        return [("archival_memory_insert", {"content": words, "request_heartbeat": True})]

    host = Host(
        big_insert,
        [("send_message", {"message": "Saved."})],
        [("send_message", {"message": "Hello again."})],
    )
    s = {"agent_type": "memgpt", "tools": ["minimal"], "context_window": window, "system": "You are a test agent."}
    async with Client(build(settings, **s), mode="legacy", sampling_callback=host, sampling_capabilities=TOOLS) as c:
        first = await c.call_tool("agent_chat", {"message": "Keep these notes", "conversation_id": "hb"})
        assert not first.is_error and text_of(first) == "Saved.", text_of(first)
        second = await c.call_tool("agent_chat", {"message": "Hi", "conversation_id": "hb"})
        assert not second.is_error and text_of(second) == "Hello again.", text_of(second)
    results, texts = (m.content_as_list for m in host.requests[1].messages[-2:])
    assert [b.type for b in results] == ["tool_result"] and json.loads(results[0].content[0].text)["status"] == "OK"
    heartbeat, alert = (b.text for b in texts)
    assert json.loads(heartbeat)["type"] == "heartbeat" and alert == WARNING
    # The next turn: send_message's result in its own message, then the user's message.
    results, texts = (m.content_as_list for m in host.requests[2].messages[-2:])
    assert [b.type for b in results] == ["tool_result"] and [b.text for b in texts] == ["Hi"]


def test_an_invalid_sampling_request_is_named_as_tiermem_s_fault() -> None:
    use = t.SamplingMessage(role="assistant", content=t.ToolUseContent(type="tool_use", id="a", name="x", input={}))
    mixed = t.SamplingMessage(
        role="user",
        content=[
            t.ToolResultContent(type="tool_result", tool_use_id="a", content=[]),
            t.TextContent(type="text", text="and more"),
        ],
    )
    later = t.SamplingMessage(role="user", content=t.TextContent(type="text", text="hi"))
    with pytest.raises(ProviderError, match=r"bug in tiermem, not in the MCP client") as info:
        check_tool_messages(
            [t.SamplingMessage(role="user", content=t.TextContent(type="text", text="go")), use, mixed, later]
        )
    assert "message 3 of 4" in str(info.value)
