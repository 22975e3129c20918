"""Stored messages -> Messages-API turns: always a valid request, whatever the store holds."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tiermem.agent.context import Thresholds, split_for_summary
from tiermem.agent.llm import to_api_messages
from tiermem.agent.toolcalls import Report
from tiermem.base.records import Message

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def msg(n: int, role: str, content: str = "", **payload: object) -> Message:
    return Message(
        id=f"m{n}",
        agent_id="a",
        conversation_id="c",
        seq=n,
        role=role,
        content=content,  # type: ignore[arg-type]
        created_at=T0,
        payload=json.dumps(payload) if payload else "",
    )


def call(n: int, *ids: str) -> Message:
    return msg(
        n, "assistant", "", kind="assistant", tool_calls=[{"id": i, "name": "memory_insert", "input": {}} for i in ids]
    )


def result(n: int, tool_id: str) -> Message:
    return msg(n, "tool", '{"status": "OK"}', kind="tool_result", tool_call_id=tool_id, name="memory_insert")


def test_a_tool_call_interrupted_by_a_crash_gets_an_error_result() -> None:
    turns = to_api_messages(
        [msg(1, "user", "hi"), call(2, "t1", "t2"), result(3, "t1"), msg(4, "user", "still there?")]
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    blocks = turns[2]["content"]
    assert [b["type"] for b in blocks] == ["tool_result", "tool_result", "text"]  # results first
    assert {b["tool_use_id"] for b in blocks[:2]} == {"t1", "t2"}
    missing = next(b for b in blocks if b.get("tool_use_id") == "t2")
    assert missing["is_error"] is True and "interrupted" in missing["content"]


def test_window_starting_mid_conversation_is_valid() -> None:
    # A result whose call was cut off becomes text; the first turn is always a user turn.
    turns = to_api_messages([result(1, "gone"), msg(2, "assistant", "ok"), msg(3, "user", "next")])
    assert turns[0]["role"] == "user" and turns[0]["content"][0]["type"] == "text"
    assert "[result of an earlier tool call]" in turns[0]["content"][0]["text"]
    turns = to_api_messages([msg(1, "assistant", "hello"), msg(2, "user", "hi")])
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]


def test_summary_and_heartbeats_are_user_text_and_same_roles_merge() -> None:
    turns = to_api_messages(
        [
            msg(1, "system", "Note: summary", kind="summary"),
            msg(2, "user", "a"),
            msg(3, "user", '{"type": "heartbeat"}', kind="heartbeat"),
        ]
    )
    assert len(turns) == 1 and [b["text"] for b in turns[0]["content"]] == [
        "Note: summary",
        "a",
        '{"type": "heartbeat"}',
    ]


def test_summary_cut_lands_on_an_assistant_message() -> None:
    messages = [
        msg(1, "user", "u1"),
        call(2, "t1"),
        result(3, "t1"),
        msg(4, "assistant", "a1"),
        msg(5, "user", "u2"),
        msg(6, "assistant", "a2"),
        msg(7, "user", "u3"),
    ]
    evicted, kept = split_for_summary(messages, lambda kept: len(kept) <= 4, Thresholds())
    assert kept[0].role == "assistant" and evicted + kept == messages and len(kept) <= 4
    # 40% first (3 of 7 -> index 3 is an assistant message), nothing splits a call from its result
    assert [m.id for m in kept] == ["m4", "m5", "m6", "m7"]
    evicted, kept = split_for_summary(messages, lambda kept: False, Thresholds())
    assert kept == [] and evicted == messages  # nothing fits: everything goes into the summary
    # the turn's user message is never evicted: the cut stops at it even when the rest does not fit
    evicted, kept = split_for_summary(messages, lambda kept: False, Thresholds(), pinned=messages[-1])
    assert [m.id for m in kept] == ["m7"] and evicted == messages[:-1]


def test_repeated_tool_call_ids_are_sent_unique_with_their_own_results() -> None:
    # A proxy that numbers calls per answer gives every first call the id "call_0": each call and its result still
    # reach the model, the later ones under new ids (an id must be unique in a request).
    turns = to_api_messages(
        [
            msg(1, "user", "hi"),
            call(2, "call_0"),
            msg(3, "tool", "first", kind="tool_result", tool_call_id="call_0"),
            call(4, "call_0", "call_1"),
            msg(5, "tool", "second", kind="tool_result", tool_call_id="call_0"),
            msg(6, "tool", "third", kind="tool_result", tool_call_id="call_1"),
            call(7, "call_0"),  # a crash before its result: answered with an error, not with an earlier result
            msg(8, "user", "again"),
            call(9, "call_0_2"),  # a stored id that a new one must not take
            msg(10, "tool", "fourth", kind="tool_result", tool_call_id="call_0_2"),
        ]
    )
    uses = [b for t in turns for b in t["content"] if b["type"] == "tool_use"]
    ids = [b["id"] for b in uses]
    assert len(uses) == 5 and len(set(ids)) == 5 and ids[0] == "call_0" and ids[4] == "call_0_2"
    answers = {b["tool_use_id"]: b for t in turns for b in t["content"] if b["type"] == "tool_result"}
    assert [answers[i]["content"] for i in ids[:3]] == ["first", "second", "third"]
    assert answers[ids[3]]["is_error"] is True and "interrupted" in answers[ids[3]]["content"]
    assert answers[ids[4]]["content"] == "fourth"
    assert not any("[result of an earlier tool call]" in json.dumps(t) for t in turns)


def test_a_resumed_turn_reports_each_repeated_id_call_with_its_own_result() -> None:
    ok, failed = json.dumps({"status": "OK", "message": "done"}), json.dumps({"status": "Failed", "message": "no"})
    report = Report.from_messages(
        [
            call(1, "call_0"),
            msg(2, "tool", failed, kind="tool_result", tool_call_id="call_0"),
            call(3, "call_0"),
            msg(4, "tool", ok, kind="tool_result", tool_call_id="call_0"),
        ]
    )
    assert [(s["status"], s["result"]) for s in report.steps] == [("Failed", "no"), ("OK", "done")]
