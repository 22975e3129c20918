"""The built-in agent loop through the real MCP server and a real client, against a loopback
server that speaks the Anthropic Messages API (the real ``anthropic`` client talks to it)."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tiermem.agent.service import register_agent_chat
from tiermem.base.config import Settings, load_settings
from tiermem.domain import blocks as b

from . import fake_anthropic as fa
from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with fa.FakeAnthropic() as server:
        yield server


def agent_settings(base: Settings, fake: fa.FakeAnthropic, **over: Any) -> Settings:
    values = {
        "agent_loop": True,
        "llm_provider": "anthropic",
        "anthropic_base_url": fake.url,
        "llm_max_retries": 1,
        "model": "claude-fake-1",
        **over,
    }
    return base.model_copy(update=values)


def build(settings: Settings):  # type: ignore[no-untyped-def]
    server = serve_in_process(settings)
    register_agent_chat(server, settings)
    return server


async def chat(client: Client, message: str, **kw: Any) -> tuple[str, dict[str, Any], bool]:
    result = await client.call_tool("agent_chat", {"message": message, **kw})
    return text_of(result), result.structured_content or {}, bool(result.is_error)


async def read(client: Client, uri: str) -> str:
    return "".join(getattr(c, "text", "") for c in (await client.read_resource(uri)).contents)


async def test_multi_step_turn_edits_memory_and_answers(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(
        fa.tool(
            "memory_insert", {"label": "human", "new_str": "Name: Ada. Works on compilers."}, say="Let me note that."
        ),
        fa.text("Nice to meet you, Ada!"),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, is_error = await chat(c, "Hi, I'm Ada and I work on compilers.")
        assert not is_error
        assert reply == "Nice to meet you, Ada!"
        assert info["stop_reason"] == "end_turn"
        assert info["memory_edits"] == ["human"]
        assert [s["tool"] for s in info["steps"]] == ["memory_insert"] and info["steps"][0]["status"] == "OK"
        assert info["usage"]["input_tokens"] == 200
        assert "Name: Ada. Works on compilers." in await read(c, "memory://blocks/human")

        first, second = fake.requests
        # The system prompt: the agent's system text + line-numbered core memory, cached.
        fixed, core = first["system"]  # two cached parts: the agent's system text, then core memory
        assert fixed["cache_control"] == core["cache_control"] == {"type": "ephemeral"}
        assert fixed["text"].startswith("You are a helpful assistant") and "<memory_blocks>" not in fixed["text"]
        assert "<memory_blocks>" in core["text"] and "<memory_metadata>" in core["text"] and "1→ " in core["text"]
        assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        names = [t["name"] for t in first["tools"]]
        assert "memory_insert" in names and "archival_memory_search" in names
        assert "agent_chat" not in names and "conversation_log" not in names
        assert all("idempotency_key" not in t["input_schema"].get("properties", {}) for t in first["tools"])
        assert first["messages"] == [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "Hi, I'm Ada and I work on compilers.",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            }
        ]
        # The second request carries the tool call and its wrapped result; memory changed, so the
        # system prompt was recompiled with the new block.
        result_block = second["messages"][-1]["content"][0]
        assert result_block["type"] == "tool_result"
        wrapped = json.loads(result_block["content"])
        assert wrapped["status"] == "OK" and "Name: Ada" in wrapped["message"] and wrapped["time"]
        assert "Name: Ada. Works on compilers." in second["system"][1]["text"]
        assert second["system"][0] == fixed  # the fixed part is unchanged: still a cache hit

        # Every message went to recall: the user turn, the tool call, its result, the reply.
        found = await c.call_tool("conversation_search", {"query": "compilers"})
        assert "I work on compilers" in text_of(found)
        history = await c.call_tool("memory_history", {"label": "human"})
        assert json.loads(text_of(history))["versions"][0]["actor"] == "agent"


async def test_memory_tool_edits_appear_in_the_report(settings: Settings, fake: fa.FakeAnthropic) -> None:
    """The ``memory`` tool names its block by ``path`` (``old_path`` to rename); a view edits nothing."""
    fake.add(
        fa.tools(
            [
                ("memory", {"command": "view", "path": "/memories"}),
                (
                    "memory",
                    {"command": "insert", "path": "/memories/human", "insert_line": -1, "insert_text": "Likes tea"},
                ),
                ("memory", {"command": "create", "path": "/memories/notes", "file_text": "Project: tiermem"}),
                ("memory", {"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/project"}),
            ]
        ),
        fa.text("Noted."),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, is_error = await chat(c, "I like tea; my project is tiermem.")
        assert not is_error and reply == "Noted."
        assert [s["status"] for s in info["steps"]] == ["OK"] * 4
        assert info["memory_edits"] == ["human", "notes"]
        assert "Likes tea" in await read(c, "memory://blocks/human")
        assert "Project: tiermem" in await read(c, "memory://blocks/project")


async def test_failed_tool_call_is_reported_to_the_model(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(
        fa.tool("memory_replace", {"label": "human", "old_string": "absent", "new_string": "x"}),
        fa.text("Sorry, that did not work."),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, _ = await chat(c, "Fix my name")
        assert reply == "Sorry, that did not work."
        assert info["steps"][0]["status"] == "Failed" and info["memory_edits"] == []
        wrapped = json.loads(fake.requests[1]["messages"][-1]["content"][0]["content"])
        assert wrapped["status"] == "Failed" and "absent" in wrapped["message"]
        assert fake.requests[1]["messages"][-1]["content"][0]["is_error"] is True


async def test_memgpt_style_heartbeats_and_send_message(settings: Settings, fake: fa.FakeAnthropic) -> None:
    s = agent_settings(settings, fake, agent_type="memgpt")
    fake.add(
        fa.tool("core_memory_append", {"label": "human", "content": "Likes tea", "request_heartbeat": True}),
        fa.tool("send_message", {"message": "Noted: you like tea."}),
        # second turn: no heartbeat requested, no send_message -> the turn ends without a reply
        fa.tool("core_memory_append", {"label": "human", "content": "Hates coffee", "request_heartbeat": False}),
    )
    async with Client(build(s), cache=None) as c:
        reply, info, _ = await chat(c, "I like tea")
        assert reply == "Noted: you like tea."
        assert [x["tool"] for x in info["steps"]] == ["core_memory_append", "send_message"]
        first, second = fake.requests
        schemas = {t["name"]: t["input_schema"] for t in first["tools"]}
        assert "send_message" in schemas
        assert "request_heartbeat" in schemas["core_memory_append"]["required"]
        assert "request_heartbeat" not in schemas["send_message"]["properties"]
        # The heartbeat follows the tool result, as a user message in Letta's format.
        last = second["messages"][-1]["content"]
        assert last[0]["type"] == "tool_result"
        heartbeat = json.loads(last[1]["text"])
        assert heartbeat["type"] == "heartbeat"
        assert heartbeat["reason"].endswith("Function called using request_heartbeat=true, returning control")

        reply, info, _ = await chat(c, "I hate coffee")
        assert info["stop_reason"] == "end_turn" and "without a reply" in reply
        assert len(fake.requests) == 3  # no heartbeat: no further model call
        assert "Likes tea\nHates coffee" in await read(c, "memory://blocks/human")


async def test_memgpt_send_message_reply_is_what_recall_finds(settings: Settings, fake: fa.FakeAnthropic) -> None:
    # Letta's conversation_search reads a send_message call's `message` as the assistant's text: the reply the user
    # saw is found (also with roles=["assistant"]); the model is shown its own text and call again, not the reply twice.
    s = agent_settings(settings, fake, agent_type="memgpt")
    fake.add(
        fa.tool("send_message", {"message": "Zanzibar cloves are my favourite spice."}, say="Answer warmly."),
        fa.text("ok"),
    )
    async with Client(build(s), cache=None) as c:
        reply, _, _ = await chat(c, "What spice do you like?")
        assert reply == "Zanzibar cloves are my favourite spice."
        found = await c.call_tool("conversation_search", {"query": "Zanzibar cloves", "roles": ["assistant"]})
        hits = json.loads(text_of(found))["results"]
        assert [h["content"] for h in hits] == ["Zanzibar cloves are my favourite spice."]
        await chat(c, "Thanks")
        answer = [t for t in fake.requests[1]["messages"] if t["role"] == "assistant"][0]["content"]
        assert [b.get("text") or b["input"] for b in answer] == [
            "Answer warmly.",
            {"message": "Zanzibar cloves are my favourite spice."},
        ]


async def test_memgpt_heartbeat_given_as_text_is_read_as_letta_does(settings: Settings, fake: fa.FakeAnthropic) -> None:
    # Letta reads a text request_heartbeat as true only when it says "true" (any case): "false" ends the turn.
    s = agent_settings(settings, fake, agent_type="memgpt")
    fake.add(
        fa.tool("core_memory_append", {"label": "human", "content": "Likes tea", "request_heartbeat": "TRUE"}),
        fa.tool("core_memory_append", {"label": "human", "content": "Likes cake", "request_heartbeat": "false"}),
    )
    async with Client(build(s), cache=None) as c:
        reply, info, _ = await chat(c, "I like tea and cake")
        assert [x["tool"] for x in info["steps"]] == ["core_memory_append", "core_memory_append"]
        assert len(fake.requests) == 2 and "without a reply" in reply  # no heartbeat after "false"


async def test_max_steps_bounds_the_turn(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(*[fa.tool("archival_memory_search", {"query": f"q{i}"}) for i in range(5)])
    async with Client(build(agent_settings(settings, fake, max_steps=3)), cache=None) as c:
        reply, info, is_error = await chat(c, "loop forever")
        assert info["stop_reason"] == "max_steps" and len(fake.requests) == 3 and not is_error
        assert len(info["steps"]) == 3


async def test_provider_error_mid_turn_loses_nothing(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(
        fa.tool("memory_insert", {"label": "human", "new_str": "Lives in Lyon"}),
        fa.error(529, "Overloaded"),
        fa.error(529, "Overloaded"),  # the first try and the one retry
        fa.text("I'm back."),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, is_error = await chat(c, "I live in Lyon")
        assert is_error and info["stop_reason"] == "error"
        assert "529" in info["error"] and "Overloaded" in info["error"]
        assert info["memory_edits"] == ["human"]  # the step before the failure stands
        assert "Lives in Lyon" in await read(c, "memory://blocks/human")
        # Nothing was lost: the next turn carries the whole conversation, including the failed turn.
        reply, info, is_error = await chat(c, "Are you there?")
        assert reply == "I'm back." and not is_error
        texts = json.dumps(fake.requests[-1]["messages"])
        assert "I live in Lyon" in texts and "Lives in Lyon" in texts and "Are you there?" in texts
        # Roles still alternate: the failed turn's tool result and the new message share one user turn.
        roles = [m["role"] for m in fake.requests[-1]["messages"]]
        assert all(a != b for a, b in itertools.pairwise(roles))


async def test_messages_of_failed_turns_stay_separate_and_marked(settings: Settings, fake: fa.FakeAnthropic) -> None:
    # Two turns fail before any answer; the next request keeps their messages as separate, marked paragraphs.
    fake.add(*[fa.error(500, "down")] * 4, fa.text("Sorry, I was away."))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        for text in ("My cat is Tom.", "Are you there?"):
            _, info, is_error = await chat(c, text)
            assert is_error and info["stop_reason"] == "error"
        reply, _, is_error = await chat(c, "Hello?")
        assert reply == "Sorry, I was away." and not is_error
        last = fake.requests[-1]["messages"][-1]
        assert [b["text"] for b in last["content"]] == [
            "[An earlier message from the user that got no reply.]\nMy cat is Tom.",
            "[An earlier message from the user that got no reply.]\nAre you there?",
            "Hello?",
        ]


async def test_retries_rate_limits(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(fa.error(429, "slow down"), fa.text("ok"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, _ = await chat(c, "hello")
        assert reply == "ok" and len(fake.requests) == 2


async def test_a_refused_request_is_not_retried_and_says_so(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(fa.error(400, "max_tokens: 999999 > 64000"), fa.text("not reached"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        _, info, is_error = await chat(c, "hello")
        assert is_error and len(fake.requests) == 1
        assert info["error"].startswith("The Anthropic API refused the request (400): max_tokens: 999999 > 64000.")
        assert "Retrying will not help" in info["error"] and "after retries" not in info["error"]


async def test_restart_resumes_the_conversation(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    s = agent_settings(load_settings(data_dir=tmp_path / "d", embedding_model="hashing"), fake)
    fake.add(fa.text("Hello Ada."), fa.text("You told me your name is Ada."))
    async with Client(build(s), cache=None) as c:
        await chat(c, "My name is Ada.")
    async with Client(build(s), cache=None) as c:  # a new process-equivalent: fresh server, same store
        reply, _, _ = await chat(c, "What's my name?")
    assert reply == "You told me your name is Ada."
    resumed = fake.requests[-1]["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "user"]
    assert resumed[0]["content"][0]["text"] == "My name is Ada." and resumed[1]["content"][0]["text"] == "Hello Ada."


async def test_conversations_are_separate_and_autoclear(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(fa.text("a1"), fa.text("b1"), fa.text("a2"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        await chat(c, "first in A", conversation_id="A")
        await chat(c, "first in B", conversation_id="B")
        await chat(c, "second in A", conversation_id="A")
        sent = json.dumps(fake.requests[-1]["messages"])
        assert "first in A" in sent and "first in B" not in sent

    memory, agent_id = serve_in_process(settings).runtime.handle.get()
    memory.set_agent_metadata(agent_id, {"message_buffer_autoclear": "true"})
    fake.add(fa.tool("memory_insert", {"label": "human", "new_str": "Owns a cat"}), fa.text("done"), fa.text("hi"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        await chat(c, "remember my cat", conversation_id="A")
        await chat(c, "hello again", conversation_id="A")
        last = fake.requests[-1]
        assert [m["role"] for m in last["messages"]] == ["user"]  # no history carried
        assert "Owns a cat" in last["system"][1]["text"]  # memory persists


async def test_system_prompt_larger_than_window_is_a_clear_error(settings: Settings, fake: fa.FakeAnthropic) -> None:
    async with Client(build(agent_settings(settings, fake, context_window=1000)), cache=None) as c:
        reply, info, is_error = await chat(c, "hello")
    assert is_error and info["stop_reason"] == "error"
    assert "does not fit the context window of 1000 tokens" in info["error"] and fake.requests == []


async def test_missing_api_key_is_a_clear_error(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiermem.base.errors import ConfigError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    s = settings.model_copy(update={"agent_loop": True, "llm_provider": "anthropic"})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        build(s)


def _filler(i: int) -> str:
    words = ["orchard", "lantern", "granite", "velvet", "harbor", "meadow", "copper", "thistle", "saffron", "quartz"]
    return f"Story {i}: " + " ".join(f"{words[(i + k) % 10]}{k}" for k in range(220))


async def _fill_until_summarised(c: Client, fake: fa.FakeAnthropic, limit: int = 14) -> int:
    for i in range(limit):
        fake.add(fa.text(f"reply {i}"))
        await chat(c, _filler(i))
        if len(fake.requests) != len(fake.turn_requests()):
            return i
    raise AssertionError("the summariser never ran")


async def test_summariser_evicts_oldest_and_keeps_them_searchable(settings: Settings, fake: fa.FakeAnthropic) -> None:
    s = agent_settings(settings, fake, context_window=7000, tools=["minimal"], system="You are a test agent.")
    fake.summaries.append(fa.text("The user told numbered stories about orchards and lanterns."))
    async with Client(build(s), cache=None) as c:
        last = await _fill_until_summarised(c, fake)
        # Before summarising, the model got MemGPT's memory-pressure warning (once).
        warned = [
            r for r in fake.turn_requests() if "history will soon reach its maximum length" in json.dumps(r["messages"])
        ]
        assert warned
        summary_request = next(r for r in fake.requests if r not in fake.turn_requests())
        assert "Story 0" in summary_request["messages"][0]["content"][0]["text"]
        after = fake.turn_requests()[-1]["messages"]
        first = after[0]["content"][0]["text"]
        assert first.startswith("Note: prior messages (") and "numbered stories about orchards" in first
        sent = json.dumps(after)
        assert "Story 0:" not in sent and f"Story {last}:" in sent
        assert after[1]["role"] == "assistant"  # the cut lands on an assistant message
        roles = [m["role"] for m in after]
        assert all(a != b for a, b in itertools.pairwise(roles))
        # Evicted messages stay in recall.
        found = await c.call_tool("conversation_search", {"query": "Story 0 orchard0", "limit": 10})
        assert "Story 0:" in text_of(found)
        fake.add(fa.text("ok"))
        _, info, _ = await chat(c, "short one")
        assert info["summarised"] == 0  # back under the threshold: no second summary


async def test_a_message_larger_than_the_window_is_refused_and_not_logged(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    s = agent_settings(
        settings, fake, context_window=7000, max_tokens=1024, tools=["minimal"], system="You are a test agent."
    )
    async with Client(build(s), cache=None) as c:
        fake.add(fa.text("first"))
        await chat(c, "small first message")
        _, info, is_error = await chat(c, "enormous " * 9000)
        assert is_error and info["stop_reason"] == "error" and info["error"].startswith("The message is about ")
        assert "context window of 7000 tokens" in info["error"] and "Nothing was sent or logged" in info["error"]
        assert len(fake.requests) == 1  # nothing summarised, nothing sent
        found = await c.call_tool("conversation_search", {"query": "enormous", "limit": 10})
        assert "enormous" not in text_of(found)  # nothing logged
        fake.add(fa.text("ok"))
        await chat(c, "a shorter one")
        assert "enormous" not in json.dumps(fake.requests[-1]["messages"])


async def test_the_new_message_is_never_summarised_away(settings: Settings, fake: fa.FakeAnthropic) -> None:
    # The new message fits the window but not beside the history: the history is summarised, the message kept.
    s = agent_settings(
        settings, fake, context_window=7000, max_tokens=1024, tools=["minimal"], system="You are a test agent."
    )
    fake.summaries.append(fa.text("The user told three stories.", input_tokens=7777))
    async with Client(build(s), cache=None) as c:
        for i in range(3):
            fake.add(fa.text(f"reply {i}"))
            await chat(c, _filler(i))
        fake.add(fa.text("answered"))
        reply, info, is_error = await chat(c, "enormous " * 3300 + "THE-QUESTION")
        assert not is_error and reply == "answered" and info["summarised"] == 1
        assert info["usage"]["input_tokens"] == 100 + 7777  # the summariser's call counts in the turn's usage
        sent = fake.turn_requests()[-1]["messages"]
        assert "The user told three stories." in sent[0]["content"][0]["text"]
        assert "THE-QUESTION" in json.dumps(sent) and "Story 2:" not in json.dumps(sent)


async def test_summariser_failure_falls_back_to_a_transcript(settings: Settings, fake: fa.FakeAnthropic) -> None:
    s = agent_settings(settings, fake, context_window=7000, tools=["minimal"], system="You are a test agent.")
    fake.summaries.extend([fa.error(500, "summary backend down")] * 2)
    async with Client(build(s), cache=None) as c:
        await _fill_until_summarised(c, fake)
        first = fake.turn_requests()[-1]["messages"][0]["content"][0]["text"]
        assert "The summariser failed" in first and "summary backend down" in first and "Story 0:" in first


async def test_sleeptime_agent_edits_in_background_and_can_be_reverted(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    import anyio

    s = agent_settings(settings, fake, sleeptime_frequency=2)
    fake.add(
        fa.text("t1"),
        fa.text("t2"),
        fa.tool("memory_rethink", {"label": "human", "new_memory": "Likes tea. Lives in Lyon."}),
        fa.tool("memory_finish_edits", {}),
    )
    async with Client(build(s), cache=None) as c:
        _, info, _ = await chat(c, "I like tea")
        assert info["sleeptime"] == ""
        _, info, _ = await chat(c, "I moved to Lyon")
        assert info["sleeptime"] == "started"
        with anyio.fail_after(30):
            while True:
                history = json.loads(text_of(await c.call_tool("memory_history", {"label": "human"})))["versions"]
                if history[0]["actor"] == "sleeptime":
                    break
                await anyio.sleep(0.05)
        assert history[0]["value"] == "Likes tea. Lives in Lyon."
        sleeper = fake.requests[2]
        assert sleeper["system"][0]["text"].startswith("You are the sleep-time memory agent")
        transcript = sleeper["messages"][0]["content"][0]["text"]
        assert "I like tea" in transcript and "I moved to Lyon" in transcript and "t2" in transcript
        assert {t["name"] for t in sleeper["tools"]} == {
            "memory_replace",
            "memory_insert",
            "memory_rethink",
            "memory_finish_edits",
        }
        # A sleep-time edit is history like any other: revert it.
        await c.call_tool("memory_revert", {"label": "human", "version": history[1]["version"]})
        assert await read(c, "memory://blocks/human") == history[1]["value"]


async def _sleeptime_loop(server: Any, s: Settings) -> tuple[Any, Any]:
    """An agent loop on ``server``'s agent whose every turn starts a sleep-time run (the memory tool alone), and the
    provider both use: the fake Anthropic server of ``s``."""
    import anyio

    from tiermem.agent.loop import AgentLoop, LoopSettings
    from tiermem.agent.service import anthropic_provider
    from tiermem.agent.toolhost import ServerTools

    memory, agent_id = await anyio.to_thread.run_sync(server.runtime.handle.get)
    provider = anthropic_provider(s)
    loop = AgentLoop(
        memory,
        agent_id,
        ServerTools(server),
        LoopSettings(sleeptime_frequency=1),
        sleeptime_tools=ServerTools(server, only=("memory",)),
        background_provider=provider,
    )
    return loop, provider


async def test_sleeptime_memory_tool_edits_appear_in_its_report(
    settings: Settings, fake: fa.FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    """The sleep-time agent runs the same tool-calling loop as the agent: its report names the blocks the ``memory``
    tool edited by ``path`` (``old_path`` for a rename; a view edits nothing), like the agent loop's report."""

    s = agent_settings(settings, fake)
    fake.add(
        fa.text("Noted."),
        fa.tools(
            [
                ("memory", {"command": "view", "path": "/memories"}),
                (
                    "memory",
                    {"command": "insert", "path": "/memories/human", "insert_line": -1, "insert_text": "Likes tea"},
                ),
                ("memory", {"command": "create", "path": "/memories/notes", "file_text": "Project: tiermem"}),
                ("memory", {"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/project"}),
                ("memory", {"command": "delete", "path": "/memories/absent"}),
            ]
        ),
        fa.tool("memory_finish_edits", {}),
    )
    server = build(s)
    async with Client(server, cache=None) as c:
        loop, provider = await _sleeptime_loop(server, s)
        caplog.set_level(logging.INFO, logger="tiermem.agent.loop")
        result = await loop.turn("I like tea; my project is tiermem.", provider)
        assert result.reply == "Noted." and result.memory_edits == [] and result.sleeptime == "started"
        await loop.wait_background()
        run = loop.last_sleeptime
        assert run is not None and run.stop_reason == "end_turn"
        assert [(x["tool"], x["status"]) for x in run.report.steps] == [
            *[("memory", "OK")] * 4,
            ("memory", "Failed"),
            ("memory_finish_edits", "OK"),
        ]
        assert run.report.memory_edits == ["human", "notes"]
        assert run.report.usage.input_tokens == 200  # two model calls of the scripted 100 input tokens
        # its token usage is not the turn's: it is logged when the run ends
        assert any("tokens: 200 input (0 cached), 24 output" in r.getMessage() for r in caplog.records)
        assert {t["name"] for t in fake.requests[1]["tools"]} == {"memory", "memory_finish_edits"}
        history = json.loads(text_of(await c.call_tool("memory_history", {"label": "human"})))["versions"]
        assert history[0]["actor"] == "sleeptime" and "Likes tea" in history[0]["value"]
        assert "Project: tiermem" in await read(c, "memory://blocks/project")
        # ... and it is reported with the next turn's result, as a turn's own usage is (once)
        assert result.sleeptime_usage.input_tokens == 0  # no run had ended when the first turn answered
        fake.add(fa.text("Noted too."), fa.tool("memory_finish_edits", {}))
        again = await loop.turn("I like coffee too.", provider)
        assert again.sleeptime_usage.input_tokens == 200 and again.usage.input_tokens == 100
        assert again.structured()["sleeptime_usage"]["output_tokens"] == 24
        await loop.wait_background()


async def test_sleeptime_usage_is_reported_to_the_conversation_that_started_the_run(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    """One loop serves every agent_chat caller of a server: a sleep-time run's tokens are reported with the next result
    of the conversation whose turn started it, never with another conversation's (another client's)."""

    s = agent_settings(settings, fake)
    server = build(s)
    async with Client(server, cache=None):
        loop, provider = await _sleeptime_loop(server, s)
        fake.add(fa.text("Noted."), fa.tool("memory_finish_edits", {}))
        first = await loop.turn("I like tea.", provider, "alice-thread")
        await loop.wait_background()  # alice's sleep-time run ended
        fake.add(fa.text("Hi Bob."), fa.tool("memory_finish_edits", {}))
        bob = await loop.turn("hello", provider, "bob-thread")
        assert first.sleeptime_usage.input_tokens == 0 and bob.sleeptime_usage.input_tokens == 0  # alice's run
        await loop.wait_background()
        fake.add(fa.text("Yes."), fa.tool("memory_finish_edits", {}))
        again = await loop.turn("still there?", provider, "alice-thread")
        assert again.sleeptime_usage.input_tokens == 100  # her first turn's run (bob's is his)
        await loop.wait_background()
        fake.add(fa.text("Bye."), fa.tool("memory_finish_edits", {}))
        bob_again = await loop.turn("bye", provider, "bob-thread")
        assert bob_again.sleeptime_usage.input_tokens == 100  # his first turn's run, reported once
        await loop.wait_background()


async def test_messages_logged_by_others_between_turns_reach_the_model(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    """The loop keeps its window in memory between turns; any other write to recall must invalidate it."""
    fake.add(fa.text("r1"), fa.text("r2"), fa.text("r3"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        await chat(c, "turn one")
        await chat(c, "turn two")
        assert json.dumps(fake.requests[-1]["messages"]).count("turn one") == 1
        await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": "logged by the host"}]})
        await chat(c, "turn three")
        sent = json.dumps(fake.requests[-1]["messages"])
        assert "logged by the host" in sent and "turn one" in sent and sent.count("turn three") == 1


async def test_the_agent_models_rethink_is_its_own_not_the_clients(settings: Settings, fake: fa.FakeAnthropic) -> None:
    """The client's model saw ``human`` at one version; another process edits it; the agent loop's model, shown core
    memory afresh, rewrites it within the client's agent_chat: its rethink is not refused for what the client saw,
    and its edit does not count as seen by the client, whose own rethink from its old view is refused."""
    fake.add(fa.tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea."}), fa.text("Done."))
    server = build(agent_settings(settings, fake))
    other, agent = serve_in_process(settings).runtime.handle.get()  # another process's handle on the same store
    async with Client(server, cache=None) as c:
        assert not (await c.call_tool("core_memory_view", {})).is_error
        other.edit(agent, "human", b.Append("Likes tea."))
        reply, info, is_error = await chat(c, "Tidy my block.")
        assert not is_error and info["steps"][0]["status"] == "OK", info
        r = await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert other.block(agent, "human").value == "Name: Ada\nLikes tea."
