"""``tiermem optimize`` writes anew the keyword texts an earlier tiermem gave the turns after a tool call (the turn
just before them: a tool's result), from their conversation's turns (``keyword_context.recontext``); rows already
right stay as they are, and a second run writes nothing."""

from __future__ import annotations

import json
from typing import Any

from tiermem.base.config import Settings
from tiermem.base.records import from_us
from tiermem.domain import maintenance
from tiermem.domain.archive import shape_message
from tiermem.domain.factory import open_memory
from tiermem.domain.keyword_context import recontext
from tiermem.store import KEYWORD_CONTEXT, Filter

RESULT = json.dumps({"status": "OK", "message": "Zanzibar ferry timetable: boats leave at dawn from Stone Town"})
SEARCH = {"kind": "assistant", "tool_calls": [{"id": "c1", "name": "web_search", "input": {"q": "ferry"}}]}
TURNS: list[tuple[str, str, dict[str, Any]]] = [
    ("user", "When does my ferry to the island leave?", {"kind": "user"}),
    ("assistant", "", SEARCH),  # the call said nothing
    ("tool", RESULT, {"kind": "tool_result", "tool_call_id": "c1", "name": "web_search", "is_error": False}),
    ("assistant", "It leaves at dawn.", {"kind": "assistant"}),
    ("user", "Thanks, I will pack tonight.", {"kind": "user"}),
    ("assistant", "Safe travels!", {"kind": "assistant"}),
]


def _as_logged_before(memory: Any, agent: str) -> dict[str, str]:
    """The agent's messages as a tiermem before schema 3 stored them: each keyword text holding the turn just before
    it, whatever it was (the tool's result too), and the store unmarked; their texts by content."""
    rows = sorted(memory.archive.rows.rows_where("messages", Filter(agent_id=agent)), key=lambda r: r["seq"])
    previous = ""
    for r in rows:
        r["text"] = shape_message(r["content"], from_us(r["created_us"]), previous)
        previous = r["content"]
    memory.archive.store.rows.upsert_rows("messages", "id", rows)
    memory.archive.store.conn.set_meta(KEYWORD_CONTEXT, "")
    return _texts(memory, agent)


def _texts(memory: Any, agent: str) -> dict[str, str]:
    return {r["content"]: r["text"] for r in memory.archive.rows.rows_where("messages", Filter(agent_id=agent))}


def _answers_found(memory: Any, agent: str, query: str) -> list[str]:
    hits = memory.archive.conversation_search(agent, query, roles=["assistant"], limit=5).hits
    return [h.content for h in hits if h.fts_rank is not None]


def test_optimize_writes_anew_the_keyword_texts_that_hold_a_tools_result(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.log_messages(agent, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in TURNS])
    logged = _texts(memory, agent)  # as this tiermem writes them: the answer holds the question, not the result
    assert "Zanzibar" not in logged["It leaves at dawn."] and "ferry" in logged["It leaves at dawn."]
    old = _as_logged_before(memory, agent)
    assert "Zanzibar" in old["It leaves at dawn."]
    memory.archive.store.indexes.optimize()
    assert "It leaves at dawn." in _answers_found(memory, agent, "Zanzibar Stone Town")  # found for the result's words

    lines = maintenance.optimize(memory)
    assert any(line.startswith("messages: ") and "keyword text written anew (no tool result)" in line for line in lines)
    assert _texts(memory, agent) == logged  # every row as this tiermem writes it
    right = [c for c in logged if old[c] == logged[c]]  # rows the earlier tiermem got right: not written again
    assert set(right) >= {"When does my ferry to the island leave?", "Thanks, I will pack tonight.", "Safe travels!"}
    assert "It leaves at dawn." not in _answers_found(memory, agent, "Zanzibar Stone Town")
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"

    # again: nothing to write, marked or not (the texts are compared, not rewritten)
    assert not any("no tool result" in line for line in maintenance.optimize(memory))
    memory.archive.store.conn.set_meta(KEYWORD_CONTEXT, "")
    assert recontext(memory.archive) == 0
    assert _texts(memory, agent) == logged


def test_a_new_store_is_marked_and_recontext_reads_nothing(settings: Settings) -> None:
    memory = open_memory(settings)
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"
    assert recontext(memory.archive) == 0
