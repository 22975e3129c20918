"""Rows recall search leaves out, as Letta's conversation_search does (``MessageManager._extract_message_text``,
``LettaCoreToolExecutor.conversation_search``): the model's own answers calling conversation_search, and the
heartbeats of the memgpt style, whoever wrote them (the agent loop, a Letta import, a store of any age). They stay in
the log: the loop's history still replays them."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from tiermem.agent.llm import MODEL_TEXT, to_api_messages
from tiermem.base.config import Settings
from tiermem.base.records import Message, now
from tiermem.domain.autorecall import RecallSettings, recall
from tiermem.domain.memory import Memory
from tiermem.interop import af_export, letta_messages
from tiermem.interop.commands import run_import

from . import fake_anthropic as fa
from .conftest import text_of
from .test_agent import agent_settings, build, chat, fake  # noqa: F401  (``fake`` is a fixture)
from .test_interop import FIXTURES, mem  # noqa: F401  (``mem`` is a fixture)

pytestmark = pytest.mark.anyio

ROLES = ["user", "assistant", "system"]


async def test_the_models_own_conversation_searches_are_not_found(settings: Settings, fake: fa.FakeAnthropic) -> None:
    fake.add(
        fa.tool("conversation_search", {"query": "lighthouse keeper"}, say="Looking up the lighthouse keeper."),
        fa.text("I could not find the lighthouse keeper."),
        fa.text("ok"),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        reply, _, _ = await chat(c, "Who was the lighthouse keeper?")
        assert reply == "I could not find the lighthouse keeper."
        found = await c.call_tool("conversation_search", {"query": "Looking up the lighthouse keeper", "roles": ROLES})
        contents = [h["content"] for h in json.loads(text_of(found))["results"]]
        # the user's question and the final answer are found; the answer that searched is not
        assert "Who was the lighthouse keeper?" in contents and "I could not find the lighthouse keeper." in contents
        assert "Looking up the lighthouse keeper." not in contents
        # the model is still shown its own text and call on the next turn
        await chat(c, "Thanks")
        answers = [t for t in fake.turn_requests()[-1]["messages"] if t["role"] == "assistant"]
        assert [b.get("text") or b.get("input") for b in answers[0]["content"]] == [
            "Looking up the lighthouse keeper.",
            {"query": "lighthouse keeper"},
        ]


async def test_heartbeats_are_not_found_and_stay_in_the_history(settings: Settings, fake: fa.FakeAnthropic) -> None:
    s = agent_settings(settings, fake, agent_type="memgpt")
    fake.add(
        fa.tool("core_memory_append", {"label": "human", "content": "Likes tea", "request_heartbeat": True}),
        fa.tool("send_message", {"message": "Noted: you like tea."}),
        fa.tool("send_message", {"message": "Bye."}),
    )
    async with Client(build(s), cache=None) as c:
        await chat(c, "I like tea")
        query = {"query": "heartbeat Function called using request_heartbeat returning control", "limit": 10}
        for roles in (None, ["user"]):
            found = await c.call_tool("conversation_search", {**query, **({"roles": roles} if roles else {})})
            contents = [h["content"] for h in json.loads(text_of(found))["results"]]
            assert contents and not any('"heartbeat"' in x for x in contents), contents
        await chat(c, "Bye")
        users = [b for t in fake.turn_requests()[-1]["messages"] if t["role"] == "user" for b in t["content"]]
        assert any(json.loads(b["text"]).get("type") == "heartbeat" for b in users if b.get("text", "")[:1] == "{")


def test_imported_heartbeats_are_not_found_by_search_links_or_auto_recall(mem: Memory) -> None:  # noqa: F811
    # A Letta file's heartbeats (JSON, indented as Letta writes them) are rows like any imported before this rule:
    # the rule reads the text, so rows of any age are left out.
    report = run_import(
        mem, FIXTURES / "memgpt_agent_with_convo_v1.af", fmt="af", agent="default", rename=None, replace=False
    )
    agent = mem.get_agent(report["imported"][0])
    stored = mem.archive.rows.messages_of(agent.id)
    beats = [m for m in stored if json.loads(m.payload or "{}").get("kind") == "heartbeat"]
    assert len(beats) == 4
    query = "automated system message hidden from the user: function called using request_heartbeat, returning control"
    for links in (False, True):  # with links: a hit's sitting neighbours follow it (linked_to set)
        hits = mem.archive.conversation_search(agent.id, query, limit=20, links=links).hits
        assert hits and not [h for h in hits if "heartbeat" in h.content]
        assert not links or any(h.linked_to for h in hits)
    knobs = RecallSettings(threshold=0.0, limit=20, max_chars=100_000, scope="all")
    recalled = recall(mem, agent.id, query, session="another-session", settings=knobs)
    assert recalled and not [r for r in recalled if "heartbeat" in r.content]


def test_an_imported_conversation_search_call_keeps_its_text_aside_and_exports_it_back() -> None:
    letta = {
        "id": "message-1",
        "role": "assistant",
        "created_at": "2025-03-23T20:12:43+00:00",
        "content": [{"type": "text", "text": "Let me look for the lighthouse keeper."}],
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "conversation_search", "arguments": '{"query": "lighthouse keeper"}'},
            }
        ],
    }
    row = letta_messages.message_row(letta, 0, "a")
    assert row is not None and row["content"] == ""
    assert json.loads(row["payload"])[MODEL_TEXT] == "Let me look for the lighthouse keeper."
    stored = Message("message-1", "agent-x", "default", 1, "assistant", row["content"], now(), row["payload"])
    turn = next(t for t in to_api_messages([stored]) if t["role"] == "assistant")
    assert turn["content"][0] == {"type": "text", "text": "Let me look for the lighthouse keeper."}
    out = af_export._letta_message(stored)
    assert out["content"] == [{"type": "text", "text": "Let me look for the lighthouse keeper."}]
    assert out["tool_calls"][0]["function"]["name"] == "conversation_search"


async def test_a_replayed_round_that_searched_and_replied_gives_the_reply(settings: Settings) -> None:
    # One memgpt answer calls conversation_search and send_message: recall keeps no content for it (Letta's search
    # leaves it out), and the round sent again still gives the reply the turn gave, read from its calls.
    from mcp import types as t

    from .test_agent_sampling import TOOLS, Host, Rounds, _answer
    from .test_agent_sampling import build as sampling_build

    both = _answer(
        t.TextContent(type="text", text="Checking the keeper."),
        t.ToolUseContent(type="tool_use", id="c1", name="conversation_search", input={"query": "lighthouse keeper"}),
        t.ToolUseContent(type="tool_use", id="c2", name="send_message", input={"message": "The keeper is Ada."}),
    )
    server = sampling_build(settings, agent_type="memgpt", tools=["minimal"])
    async with Client(server, sampling_callback=Host(), sampling_capabilities=TOOLS, cache=None) as c:
        turn = Rounds(c, "Who keeps the lighthouse?")
        r1 = await turn.call()
        (key1,) = r1.input_requests
        r2 = await turn.call(r1.request_state, **{key1: both})
        again = await turn.call(r1.request_state, **{key1: both})
        assert isinstance(r2, t.CallToolResult) and isinstance(again, t.CallToolResult)
        assert text_of(r2) == text_of(again) == "The keeper is Ada."
        found = await c.call_tool("conversation_search", {"query": "Checking the keeper", "roles": ROLES})
        assert "Checking the keeper." not in [h["content"] for h in json.loads(text_of(found))["results"]]


def _found(result) -> list[dict]:  # type: ignore[no-untyped-def]
    return list(json.loads(text_of(result))["results"])


async def test_tool_searches_find_real_tool_results_not_the_loops_own(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    # A memgpt turn searching recall, storing a fact and replying: with roles=["tool"] the search finds the store's
    # result, not the results of conversation_search (the loop's own searches) or send_message (plumbing).
    s = agent_settings(settings, fake, agent_type="memgpt")
    fake.add(
        fa.tool("conversation_search", {"query": "Quillfeather lighthouse", "request_heartbeat": True}),
        fa.tool("archival_memory_insert", {"content": "Quillfeather keeps the lighthouse", "request_heartbeat": True}),
        fa.tool("send_message", {"message": "Quillfeather keeps the lighthouse, noted."}),
    )
    async with Client(build(s), cache=None) as c:
        await chat(c, "Quillfeather keeps the lighthouse on Skerry Rock.")
        said = []
        for query in ("Quillfeather lighthouse Skerry Rock", "status OK message", "Sent message successfully"):
            hits = _found(await c.call_tool("conversation_search", {"query": query, "roles": ["tool"], "limit": 20}))
            assert all(h["role"] == "tool" for h in hits)
            said += [json.loads(h["content"])["message"] for h in hits]
        assert said and all('"chunks": 1' in m for m in said), said  # archival_memory_insert's result, found


def test_rows_logged_before_the_rule_are_left_out_by_their_payload(mem: Memory) -> None:  # noqa: F811
    # Rows as the agent loop stored them before: an answer calling conversation_search with its text, the search's
    # result and a send_message result. Their payloads say what they are, so searches leave them out, and so do a
    # hit's linked turns; a real tool result and the user's words stay found.
    agent = mem.ensure_agent("default")
    call = {"kind": "assistant", "tool_calls": [{"id": "c1", "name": "conversation_search", "input": {"query": "x"}}]}
    rows = [
        ("user", "Where does Quillfeather keep the lantern oil?", {"kind": "user"}),
        ("assistant", "Searching for Quillfeather lantern oil.", call),
        ("tool", '{"status": "OK", "message": "Quillfeather lantern oil: shed"}', _result("conversation_search")),
        ("tool", '{"status": "OK", "message": "Quillfeather lantern oil stocked"}', _result("archival_memory_search")),
        ("tool", '{"status": "OK", "message": "Sent message successfully."}', _result("send_message")),
        ("assistant", "Quillfeather keeps the lantern oil in the shed.", {"kind": "assistant", "tool_calls": []}),
    ]
    mem.archive.log_messages(agent.id, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in rows])
    hidden = {rows[1][1], rows[2][1], rows[4][1]}
    query = "Quillfeather lantern oil searching sent message successfully"
    for roles in (None, ["assistant"], ["tool"], ["user", "assistant", "tool"]):
        for links in (False, True):
            hits = mem.archive.conversation_search(agent.id, query, roles=roles, limit=10, links=links).hits
            contents = {h.content for h in hits}
            assert contents and not contents & hidden, (roles, links, contents)
    tools = mem.archive.conversation_search(agent.id, query, roles=["tool"], limit=10).hits
    assert [h.content for h in tools] == [rows[3][1]]


def _result(tool: str) -> dict[str, object]:
    return {"kind": "tool_result", "tool_call_id": "c1", "name": tool, "is_error": False}


async def test_searches_without_roles_read_user_and_assistant_turns(settings: Settings) -> None:
    # Letta's conversation_search takes user, assistant and tool; the loop's summaries (role system) stand for turns
    # recall keeps whole, so a search without roles reads the turns, and roles=["system"] still finds a summary.
    from .conftest import serve_in_process

    summary = "Summary of the evicted turns: Quillfeather moved the lantern oil to the boathouse."
    rows = [("user", "Quillfeather moved the lantern oil to the boathouse."), ("system", summary)]
    query = {"query": "Quillfeather lantern oil boathouse summary", "limit": 10}
    async with Client(serve_in_process(settings), cache=None) as c:
        logged = await c.call_tool("conversation_log", {"messages": [{"role": r, "content": t} for r, t in rows]})
        assert not logged.is_error, text_of(logged)
        default = _found(await c.call_tool("conversation_search", query))
        assert [h["role"] for h in default] == ["user"]
        asked = _found(await c.call_tool("conversation_search", {**query, "roles": ["system"]}))
        assert [h["content"] for h in asked] == [summary]


async def test_an_answer_after_a_tool_result_is_not_found_by_the_results_words(
    settings: Settings, fake: fa.FakeAnthropic
) -> None:
    # A turn is indexed for keywords with the turn before it; a tool result is no such turn: the answer after an
    # archival search is not found by keywords for a word only the search's result held.
    fake.add(
        fa.tool("archival_memory_search", {"query": "lantern oil"}, say="Let me check."),
        fa.text("It is under the tarp in the shed."),
    )
    async with Client(build(agent_settings(settings, fake)), cache=None) as c:
        stored = await c.call_tool(
            "archival_memory_insert", {"content": "The lantern oil is under the Zanzibarine tarp."}
        )
        assert not stored.is_error, text_of(stored)
        await chat(c, "Where is the lantern oil?")
        query = {"query": "Zanzibarine", "roles": ["assistant"], "limit": 10}
        hits = {h["content"]: h for h in _found(await c.call_tool("conversation_search", query))}
        answer = hits.get("It is under the tarp in the shed.")
        assert answer is None or answer["ranking"]["fts_rank"] is None, answer
        tools = _found(await c.call_tool("conversation_search", {**query, "roles": ["tool"]}))
        assert [h["ranking"]["fts_rank"] for h in tools] == [1]  # the result itself is found by the word


@pytest.mark.parametrize("restarted", [False, True])
def test_a_tool_result_gives_the_next_turn_no_keywords(mem: Memory, restarted: bool) -> None:  # noqa: F811
    # The turn before an answer is read from the store when this process has not seen the conversation (restarted).
    agent = mem.ensure_agent("default")
    result = '{"status": "OK", "message": "The lantern oil is under the Zanzibarine tarp."}'
    mem.archive.log_messages(agent.id, [{"role": "user", "content": "Where is the oil?"}])
    mem.archive.log_messages(agent.id, [{"role": "tool", "content": result}])
    if restarted:
        mem.archive.forget_turns(agent.id)
    mem.archive.log_messages(agent.id, [{"role": "assistant", "content": "Under the tarp."}])
    mem.archive.log_messages(agent.id, [{"role": "user", "content": "Thanks, Zanzibarine it is."}])
    hits = mem.archive.conversation_search(agent.id, "Zanzibarine", roles=["assistant", "tool"], limit=10).hits
    assert {h.content: h.fts_rank is not None for h in hits} == {result: True, "Under the tarp.": False}


def test_tool_searches_reach_real_results_past_more_of_the_loops_own_than_a_leg_reads(mem: Memory) -> None:  # noqa: F811
    # More send_message and conversation_search results than each leg reads (``LEG_DEPTH``), all holding the words
    # asked for, beside three real tool results: the store leaves the loop's own out before the legs rank, so every
    # real one is found. Payloads as the loop and a Letta import write them (", ": json.dumps), and written compactly.
    from tiermem.domain.search.pool import LEG_DEPTH

    agent = mem.ensure_agent("default")
    compact = {"separators": (",", ":")}
    rows = [
        ("tool", '{"status": "OK", "message": "Sent message successfully: rain forecast"}', _result("send_message"))
        for _ in range(LEG_DEPTH)
    ]
    rows += [
        (
            "tool",
            '{"status": "OK", "message": "Showing results: rain forecast, rain forecast"}',
            json.dumps(_result("conversation_search") | {"letta": {"name": "conversation_search"}}, **compact),  # type: ignore[arg-type]
        )
        for _ in range(LEG_DEPTH)
    ]
    real = [
        '{"status": "OK", "message": "Weather for Porto: rain forecast tomorrow"}',
        '{"status": "OK", "message": "Calendar: dentist on Thursday, rain forecast"}',
        '{"status": "OK", "message": "Sent message successfully."}',  # a tool of another name: a real result
    ]
    rows += [
        ("tool", c, _result(t)) for c, t in zip(real, ("web_search", "calendar", "send_message_later"), strict=True)
    ]
    stored = [{"role": r, "content": c, "payload": p if isinstance(p, str) else json.dumps(p)} for r, c, p in rows]
    mem.archive.log_messages(agent.id, stored)
    for query in ("rain forecast", "sent message successfully", "dentist"):
        hits = mem.archive.conversation_search(agent.id, query, roles=["tool"], limit=5).hits
        assert sorted(h.content for h in hits) == sorted(real), query
    both = mem.archive.conversation_search(agent.id, "rain forecast", roles=["user", "tool"], limit=5).hits
    assert sorted(h.content for h in both) == sorted(real)


def test_the_legs_read_whether_a_row_is_plumbing_not_its_payload(mem: Memory) -> None:  # noqa: F811
    # The payload (a Letta import's holds the whole original message) stays in the store: a leg reads a flag computed
    # there, true of the loop's plumbing alone.
    from dataclasses import fields

    from tiermem.base.records import Found
    from tiermem.store import Filter

    agent = mem.ensure_agent("default")
    call = {"kind": "assistant", "tool_calls": [{"id": "c1", "name": "conversation_search", "input": {"query": "x"}}]}
    other = {
        "kind": "assistant",
        "tool_calls": [{"id": "c2", "name": "web_search", "input": {"q": "conversation_search"}}],
    }
    rows = [
        ("user", "Quillfeather asked about conversation_search", {"kind": "user", "name": "conversation_search"}),
        ("assistant", "Quillfeather searching", call),
        ("assistant", "Quillfeather browsing", other),
        ("tool", "Quillfeather search result", _result("conversation_search")),
        ("tool", "Quillfeather web result", _result("web_search")),
        ("tool", "Quillfeather no payload", None),
    ]
    logged = [{"role": r, "content": c, "payload": json.dumps(p) if p else ""} for r, c, p in rows]
    mem.archive.log_messages(agent.id, logged)
    found = mem.archive.store.search.text_search("messages", "Quillfeather", Filter(agent_id=agent.id), 10)
    assert "payload" not in {f.name for f in fields(Found)}
    assert {f.content for f in found if f.plumbing} == {"Quillfeather searching", "Quillfeather search result"}
    assert len(found) == len(rows)


_HEARTBEAT = '{"type": "heartbeat", "reason": "[This is an automated system message hidden from the user]"}'


@pytest.mark.parametrize("restarted", [False, True])
@pytest.mark.parametrize("said_with_the_call", ["", "Let me check."])
def test_an_answer_after_a_tool_result_holds_the_last_thing_said_before_it(
    mem: Memory,  # noqa: F811
    restarted: bool,
    said_with_the_call: str,
) -> None:
    # user -> the answer calling a tool (nothing said, or a few words) -> its result -> a heartbeat -> the answer: the
    # answer's keyword text holds what was said last before the tool ran (the question, or the words said with the
    # call), in one batch or logged turn by turn by a process that has not seen the conversation (restarted).
    agent = mem.ensure_agent("default").id
    question = "Where did Quillfeather leave the lantern oil?"
    turns = [
        ("user", question),
        ("assistant", said_with_the_call),
        ("tool", '{"status": "OK", "message": "The oil is under the Zanzibarine tarp."}'),
        ("user", _HEARTBEAT),
        ("assistant", "Under the tarp in the shed."),
    ]
    if restarted:
        for role, content in turns:
            mem.archive.forget_turns(agent)
            mem.archive.log_messages(agent, [{"role": role, "content": content}])
    else:
        mem.archive.log_messages(agent, [{"role": r, "content": c} for r, c in turns])
    texts = {r["content"]: r["text"] for r in mem.archive.rows.backup_rows("messages", vectors=False)}
    answer = texts["Under the tarp in the shed."]
    assert (said_with_the_call or question) in answer and "Zanzibarine" not in answer and "heartbeat" not in answer
    hits = mem.archive.conversation_search(agent, said_with_the_call or "Quillfeather", roles=["assistant"]).hits
    assert "Under the tarp in the shed." in {h.content for h in hits if h.fts_rank is not None}


def test_forgetting_a_question_rewrites_the_answer_after_a_tool_result_with_the_turn_before_it(mem: Memory) -> None:  # noqa: F811
    from tiermem.domain.forgetting import Target, forget

    agent = mem.ensure_agent("default").id
    turns = [
        ("user", "Good morning, Ada."),
        ("user", "Where did Quillfeather leave the lantern oil?"),
        ("assistant", ""),
        ("tool", '{"status": "OK", "message": "The oil is under the tarp."}'),
        ("assistant", "Under the tarp in the shed."),
    ]
    logged = mem.archive.log_messages(agent, [{"role": r, "content": c} for r, c in turns])
    forget(mem, Target("message", agent, logged[1].id))
    texts = {r["content"]: r["text"] for r in mem.archive.rows.backup_rows("messages", vectors=False)}
    answer = texts["Under the tarp in the shed."]
    assert "Quillfeather" not in answer and "Good morning, Ada." in answer
