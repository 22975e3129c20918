"""The agent loop when the model's API misbehaves: a prompt refused as too long, malformed answers, a failed
sleep-time run; real MCP server and client, a loopback server speaking the Anthropic Messages API."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import anyio
import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.base.errors import ConflictError

from . import fake_anthropic as fa
from .test_agent import agent_settings, build, chat, fake, read  # noqa: F401  (``fake`` is a fixture)

pytestmark = pytest.mark.anyio

TOO_LONG = "prompt is too long: 60000 tokens > 20000 maximum"


async def test_a_prompt_refused_as_too_long_is_summarised_and_retried_and_the_count_kept(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    s = agent_settings(
        settings, fake, context_window=20000, max_tokens=1024, tools=["minimal"], system="You are a test agent."
    )
    fake.add(fa.text("one"), fa.text("two"), fa.error(400, TOO_LONG), fa.text("answered", input_tokens=900_000))
    fake.summaries.append(fa.text("The user said hello twice."))
    server = build(s)
    async with Client(server, cache=None) as c:
        await chat(c, "hello one")
        await chat(c, "hello two")
        reply, info, is_error = await chat(c, "and a third")
        assert not is_error and reply == "answered" and info["summarised"] == 1
        retried = fake.turn_requests()[-1]["messages"]
        assert "The user said hello twice." in retried[0]["content"][0]["text"]
        assert "hello one" not in json.dumps(retried) and "and a third" in json.dumps(retried)
    memory, agent_id = server.runtime.handle.get()
    # The calibrated factor (the model counts far more than tiktoken here: the cap, 3.0 x 1.02) is kept per model.
    assert memory.core.get_agent(agent_id).metadata["token_factor.claude-fake-1"] == "3.06"
    sent = len(fake.requests)
    async with Client(build(s), cache=None) as c:  # a new process-equivalent starts calibrated
        _, info, is_error = await chat(c, "enormous " * 6000)
        assert is_error and info["error"].startswith("The message is about ")  # fits at x1.15, not at x3.06
        assert len(fake.requests) == sent


async def test_a_prompt_still_too_long_after_summarising_is_a_clear_error(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    s = agent_settings(settings, fake, tools=["minimal"], system="You are a test agent.")
    fake.add(fa.error(400, TOO_LONG))  # nothing earlier to summarise
    async with Client(build(s), cache=None) as c:
        _, info, is_error = await chat(c, "hello")
        assert is_error and info["stop_reason"] == "error"
        assert "only this turn's messages are left" in info["error"] and len(fake.requests) == 1


@pytest.mark.parametrize("body", [b"{not json", b'{"type": "message"}'], ids=["not-json", "no-content"])
async def test_a_malformed_answer_is_a_provider_error(settings: Settings, fake: fa.FakeAnthropic, body: bytes) -> None:
    fake.add(fa.raw(200, body), fa.text("back again"))
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, info, is_error = await chat(c, "hello")
        assert is_error and info["stop_reason"] == "error"
        assert info["error"].startswith("The Anthropic API (or a proxy in front of it) answered with a malformed")
        reply, info, is_error = await chat(c, "again")
        assert reply == "back again" and not is_error


async def test_a_failed_sleeptime_run_is_logged(
    settings: Settings, fake: fa.FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    s = agent_settings(settings, fake, sleeptime_frequency=1)
    fake.add(fa.text("t1"), fa.raw(200, b"{not json"))
    caplog.set_level(logging.WARNING, logger="tiermem.agent.loop")
    async with Client(build(s), cache=None) as c:
        _, info, _ = await chat(c, "I like tea")
        assert info["sleeptime"] == "started"
        with anyio.fail_after(30):
            while not any("sleep-time agent failed" in r.getMessage() for r in caplog.records):
                await anyio.sleep(0.05)
    failed = next(r.getMessage() for r in caplog.records if "sleep-time agent failed" in r.getMessage())
    assert "malformed" in failed


async def test_a_system_prompt_too_large_logs_nothing(settings: Settings, fake: fa.FakeAnthropic) -> None:
    server = build(agent_settings(settings, fake, context_window=1000))
    async with Client(server, cache=None) as c:
        for _ in range(2):
            _, info, is_error = await chat(c, "hello there")
            assert is_error and "does not fit the context window of 1000 tokens" in info["error"]
            assert info["error"].endswith("Nothing was sent or logged.")
    memory, agent_id = server.runtime.handle.get()
    assert memory.archive.rows.messages_since(agent_id, "default", 0) == [] and fake.requests == []
    assert memory.context_window(agent_id, "default").turns == 0


def _stopped(content: list[dict[str, object]], stop: str) -> dict[str, object]:
    message = fa.text("x")
    message["content"], message["stop_reason"] = content, stop
    return message


async def test_a_cut_refused_or_empty_reply_says_so(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(
        _stopped([{"type": "text", "text": "The capital of Fra"}], "max_tokens"),
        _stopped([], "refusal"),
        _stopped([], "end_turn"),
        fa.text("ok"),
    )
    async with Client(build(agent_settings(settings, fake, max_tokens=1000)), cache=None) as c:
        reply, info, is_error = await chat(c, "q1")
        assert info["stop_reason"] == "max_tokens" and not is_error
        assert reply.startswith("The capital of Fra\n\n(The reply was cut at max_tokens (1000 tokens)")
        assert "max_tokens" in info["notice"]
        reply, info, _ = await chat(c, "q2")
        assert info["stop_reason"] == "refusal" and reply == "(The model declined to answer (stop reason: refusal).)"
        reply, info, _ = await chat(c, "q3")
        assert info["stop_reason"] == "end_turn" and "empty reply" in reply and "empty reply" in info["notice"]
        reply, info, _ = await chat(c, "q4")
        assert reply == "ok" and info["notice"] == ""
    # The messages no reply answered stay their own blocks, each marked so.
    last = fake.turn_requests()[-1]["messages"][-1]["content"]
    assert [b["text"] for b in last] == [
        "[An earlier message from the user that got no reply.]\nq2",
        "[An earlier message from the user that got no reply.]\nq3",
        "q4",
    ]
    assert not fake.invalid


async def test_a_tool_call_cut_at_max_tokens_is_answered_not_run(settings: Settings, fake: fa.FakeAnthropic) -> None:
    """An answer cut at max_tokens may end inside its last call's arguments: that call is not run (its arguments may
    be half of what the model meant); its result says why, and the model goes on."""
    cut = fa.tool("memory_insert", {"label": "human", "new_str": "Name: Ada. Works on compi"})
    cut["stop_reason"] = "max_tokens"
    fake.add(cut, fa.text("Noted."))
    async with Client(build(agent_settings(settings, fake, max_tokens=1000)), cache=None) as c:
        reply, info, is_error = await chat(c, "I'm Ada; I work on compilers.")
        assert reply == "Noted." and not is_error and info["memory_edits"] == []
        assert "Works on compi" not in await read(c, "memory://blocks/human")
    result = fake.turn_requests()[-1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert "cut at max_tokens (1000 tokens) inside this call to memory_insert" in json.dumps(result)
    assert not fake.invalid


async def test_a_turn_waits_for_another_process_turn_in_its_conversation(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    # Another process's turn is this test holding the conversation's lock file, as a `tiermem chat` would.
    from tiermem.agent.service import anthropic_provider, make_loop, turn_lock_dir
    from tiermem.agent.turnlock import lock_path
    from tiermem.base.files import locked_unless_held

    s = agent_settings(settings, fake)
    fake.add(fa.text("first"), fa.text("after"))
    server = build(s)
    async with Client(server, cache=None) as c:
        await chat(c, "hello")  # opens the store; the agent exists
        memory, agent_id = server.runtime.handle.get()
        directory = turn_lock_dir(s)
        assert directory is not None
        path = lock_path(directory, agent_id, "default")
        with locked_unless_held(path, "pid 4242, turn started earlier") as holder:
            assert holder is None
            waiting = make_loop(memory, agent_id, server, s)
            waiting.settings = replace(waiting.settings, turn_lock_wait=0.5)
            provider = anthropic_provider(s)
            with pytest.raises(ConflictError, match=r"Another process \(pid 4242, turn started earlier\) is running"):
                await waiting.turn("while the other runs", provider)
        assert len(fake.requests) == 1  # nothing was sent meanwhile
        reply, _, _ = await chat(c, "after it finished")
        assert reply == "after"
    assert "while the other runs" not in json.dumps(fake.requests[-1]["messages"])  # nor logged


async def test_the_request_timeout_is_a_setting(settings: Settings, fake: fa.FakeAnthropic) -> None:
    answered = threading.Event()  # set when the test is done: the slow answer never comes in time

    def slow(body: dict[str, object]) -> dict[str, object]:
        answered.wait(30)
        return fa.text("too late")

    fake.add(slow)
    try:
        async with Client(
            build(agent_settings(settings, fake, anthropic_timeout=0.5, llm_max_retries=0)), cache=None
        ) as c:
            _, info, is_error = await chat(c, "hello")
            assert is_error and info["stop_reason"] == "error" and "timed out" in info["error"]
    finally:
        answered.set()
