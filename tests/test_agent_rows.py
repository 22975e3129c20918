"""What the agent loop writes to recall itself: answers, results and summaries longer than one tool argument may be,
rows the model could not tell apart (repeated tool-call ids), memgpt replies, and what conversation_search finds of
the loop's own rows. Real MCP server and client, a loopback server speaking the Anthropic Messages API."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from tiermem.base.config import Settings

from . import fake_anthropic as fa
from .conftest import text_of
from .test_agent import agent_settings, build, chat, fake  # noqa: F401  (``fake`` is a fixture)

pytestmark = pytest.mark.anyio

MOST = 20_000  # max_content_chars in these tests: what one tool argument (the user's message) may carry


def _rule(i: int) -> str:
    """A long markdown table rule: dense text, 64 characters to a token."""
    return f"table {i}:\n| a | b |\n|" + "=" * (MOST - 100) + "|"


async def test_a_failing_summariser_never_breaks_the_conversation(settings: Settings, fake: fa.FakeAnthropic) -> None:
    # The fallback transcript is window // 10 tokens: of dense text, more characters than a stored message may hold.
    # It is cut to fit, and every turn is answered while the summariser keeps failing.
    s = agent_settings(
        settings,
        fake,
        context_window=7000,
        max_tokens=1024,
        max_content_chars=MOST,
        tools=["minimal"],
        system="You are a test agent.",
    )
    fake.summaries.extend([fa.error(400, "summaries refused")] * 40)
    async with Client(build(s), cache=None) as c:
        summarised = 0
        for i in range(40):
            fake.add(fa.text(f"reply {i}"))
            reply, info, is_error = await chat(c, _rule(i))
            assert not is_error and reply == f"reply {i}", info.get("error")
            summarised += info["summarised"]
            if summarised >= 2:
                break
        assert summarised >= 2, "the summariser never ran twice"
        first = fake.turn_requests()[-1]["messages"][0]["content"][0]["text"]
        assert "The summariser failed" in first and "summaries refused" in first and "(truncated;" in first
        assert len(first) <= MOST


async def test_a_reply_longer_than_one_argument_reaches_the_user_and_recall_whole(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    # A 64,000-token answer is some 250,000 characters: far more than max_content_chars, which bounds what one tool
    # argument may carry. The reply is the user's, and recall keeps all of it.
    essay = "Essay. " + " ".join(f"paragraph{i} of the long essay" for i in range(MOST // 10)) + " THE-END"
    assert len(essay) > 2 * MOST
    fake.add(fa.text(essay), fa.text("short"))
    s = agent_settings(settings, fake, max_content_chars=MOST, tools=["minimal"])
    server = build(s)
    async with Client(server, cache=None) as c:
        reply, info, is_error = await chat(c, "write me a long essay")
        assert not is_error and reply == essay, info.get("error")
        reply, _, _ = await chat(c, "thanks")
        assert reply == "short"
        assert essay in json.dumps(fake.turn_requests()[-1]["messages"])  # the model sees its whole answer again
        found = await c.call_tool("conversation_search", {"query": "THE-END paragraph1", "roles": ["assistant"]})
        assert "paragraph1 of the long essay" in text_of(found)
    memory, agent_id = server.runtime.handle.get()
    stored = [m.content for m in memory.archive.rows.messages_since(agent_id, "default", 0) if m.role == "assistant"]
    assert essay in stored


async def test_memgpt_two_send_messages_in_one_answer_reach_the_user_as_recall_keeps_them(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    fake.add(fa.tools([("send_message", {"message": "First part."}), ("send_message", {"message": "Second part."})]))
    server = build(agent_settings(settings, fake, agent_type="memgpt", tools=["minimal"]))
    async with Client(server, cache=None) as c:
        reply, info, is_error = await chat(c, "tell me two things")
        assert not is_error and reply == "First part.\n\nSecond part." and info["stop_reason"] == "end_turn"
    memory, agent_id = server.runtime.handle.get()
    stored = [m.content for m in memory.archive.rows.messages_since(agent_id, "default", 0) if m.role == "assistant"]
    assert stored == [reply]


def test_a_fallback_summary_quotes_at_most_error_chars_of_the_summarisers_error() -> None:
    from tiermem.agent.context import ERROR_CHARS, fallback_summary

    long_error = "overloaded " * 100  # 1,100 characters
    text = fallback_summary([], long_error, max_tokens=1000, max_chars=100_000)
    quoted = text[text.index("(") + 1 : text.index("); transcript")]
    assert len(quoted) == ERROR_CHARS and quoted.endswith("...")
    assert fallback_summary([], "timed out", 1000, 100_000).startswith("[The summariser failed (timed out);")
