"""``tiermem optimize`` writes anew the keyword texts an earlier tiermem gave the turns after a tool call (the turn
just before them: a tool's result), from their conversation's turns (``keyword_context.recontext``); rows already
right stay as they are, and a second run writes nothing."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pyarrow as pa

from tiermem.base.config import Settings
from tiermem.base.records import from_us
from tiermem.domain import keyword_context, maintenance
from tiermem.domain.archive import shape_message
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget
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


SECRET = "my bank PIN is Wobbleton 4417"


def test_a_turn_forgotten_while_recontext_runs_is_not_written_back(settings: Settings) -> None:
    """Another process forgets a turn after recontext read the turns and before it writes: the turns after it keep
    the text the forget gave them, and the store stays unmarked (the next run looks at them again)."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    turns = [("user", SECRET, {"kind": "user"}), *TURNS[1:4]]
    memory.archive.log_messages(agent, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in turns])
    _as_logged_before(memory, agent)
    secret_id = next(r["id"] for r in memory.archive.rows.turns() if r["content"] == SECRET)
    rows = memory.archive.rows
    read = rows.turns

    def read_then_forgotten() -> list[dict[str, Any]]:
        turns = read()
        forget(memory, Target(kind="message", agent_id=agent, ref=secret_id))  # meanwhile, elsewhere
        assert not [c for c, t in _texts(memory, agent).items() if "Wobbleton" in t]
        return turns

    rows.turns = read_then_forgotten  # type: ignore[method-assign]
    recontext(memory.archive)
    assert not [c for c, t in _texts(memory, agent).items() if "Wobbleton" in t]
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == ""
    del rows.turns
    recontext(memory.archive)  # the next run: every turn as it is stored now
    assert not [c for c, t in _texts(memory, agent).items() if "Wobbleton" in t]
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"


def test_rows_already_right_keep_the_date_they_were_written_with(settings: Settings) -> None:
    """log_messages writes a turn's date in its timestamp's own offset (late on 1 January in New York is 2 January
    in UTC); recontext neither rewrites such rows nor moves their date."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    when = "2024-01-01T23:30:00-05:00"
    memory.archive.log_messages(
        agent, [{"role": r, "content": c, "payload": json.dumps(p), "timestamp": when} for r, c, p in TURNS]
    )
    logged = _texts(memory, agent)
    assert logged["It leaves at dawn."].startswith("01 January 2024.")
    memory.archive.store.conn.set_meta(KEYWORD_CONTEXT, "")  # a store created before schema 3 carries no mark
    assert recontext(memory.archive) == 0
    assert _texts(memory, agent) == logged
    # as an earlier tiermem logged them, in the same offset: the answer holding the result
    rows = sorted(memory.archive.rows.rows_where("messages", Filter(agent_id=agent)), key=lambda r: r["seq"])
    previous = ""
    for r in rows:
        r["text"] = shape_message(r["content"], datetime.fromisoformat(when), previous)
        previous = r["content"]
    memory.archive.store.rows.upsert_rows("messages", "id", rows)
    memory.archive.store.conn.set_meta(KEYWORD_CONTEXT, "")
    assert "Zanzibar" in _texts(memory, agent)["It leaves at dawn."]
    assert recontext(memory.archive) == 2  # the tool's result and the answer after it
    assert _texts(memory, agent) == logged


def test_rows_an_older_tiermem_writes_after_the_mark_are_written_anew(settings: Settings) -> None:
    """A server of schema version 2 still running after the migration writes its turns the old way (the answer
    holding the tool's result, no plumbing column): tiermem optimize finds them by that column and runs recontext
    again."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.log_messages(agent, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in TURNS])
    logged = _texts(memory, agent)
    maintenance.optimize(memory)
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"
    table = memory.archive.store.conn.tables["messages"]
    old = [r for r in memory.archive.rows.rows_where("messages", Filter(agent_id=agent)) if r["seq"] >= 1]
    schema = table.schema.remove(table.schema.get_field_index("plumbing"))
    memory.archive.rows.forget("messages", Filter(ids=tuple(r["id"] for r in old)))
    previous = ""
    for r in sorted(old, key=lambda r: r["seq"]):  # as the older tiermem logs them
        r.pop("plumbing")
        r["text"] = shape_message(r["content"], from_us(r["created_us"]), previous)
        previous = r["content"]
    table.add(pa.Table.from_pylist(old, schema=schema))
    assert "Zanzibar" in _texts(memory, agent)["It leaves at dawn."]
    maintenance.optimize(memory)
    assert _texts(memory, agent) == logged
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"


def test_doctor_names_the_keyword_texts_optimize_has_not_rebuilt(settings: Settings) -> None:
    from tiermem.domain.keyword_context import unrebuilt

    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.log_messages(agent, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in TURNS])
    assert unrebuilt(memory.archive) == 0
    _as_logged_before(memory, agent)
    assert unrebuilt(memory.archive) == 2  # the answer after the tool call (holding its result), and the result
    checks: list[tuple[str, bool, str, str]] = []

    def check(name: str, ok: bool, detail: str, fix: str = "") -> None:
        checks.append((name, ok, detail, fix))

    keyword_context.check_contexts(memory, check)
    assert checks == [
        (
            "keyword context",
            False,
            "2 message(s) stored by an older tiermem have a keyword text made from the turn just before them (a tool's"
            " result, a turn that said nothing), not the last thing said: a keyword search finds them for words only a"
            " tool's result held",
            "run `tiermem optimize` (it writes their keyword text anew)",
        )
    ]
    maintenance.optimize(memory)
    checks.clear()
    keyword_context.check_contexts(memory, check)
    assert [c[:2] for c in checks] == [("keyword context", True)]


def test_doctors_look_at_an_unmarked_store_holds_one_batch_of_rows(settings: Settings) -> None:
    """``unrebuilt`` on an unmarked store scans the messages a batch at a time and keeps little of each: at most a
    part of the contents as Python text at once (it read every turn's content in one list, then the keyword texts of
    half of them), and the count it gives is the one comparing every turn's text with ``contexts`` gives."""
    import tracemalloc

    from tiermem.domain.keyword_context import contexts, unrebuilt, written_on

    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    tool = TURNS[2][2]
    for part in range(8):
        exchanges = [
            [("user", f"question {part}.{n}?", {"kind": "user"}), ("assistant", "", SEARCH), ("tool", RESULT, tool)]
            + [("assistant", f"answer {part}.{n}", {"kind": "assistant"})]
            for n in range(125)
        ]
        turns = [
            {"role": r, "content": c, "payload": json.dumps(p), "conversation_id": f"c{part}"}
            for e in exchanges
            for r, c, p in e
        ]
        memory.archive.log_messages(agent, turns)
    # the results made long (~16,000 characters, as a web page's text), their keyword texts as they were
    tools = [r for r in memory.archive.rows.rows_where("messages", Filter(agent_id=agent)) if r["role"] == "tool"]
    long = json.dumps({"status": "OK", "message": "Stone Town ferry timetable " * 600})
    memory.archive.store.rows.upsert_rows("messages", "id", [{**r, "content": long} for r in tools])
    other = memory.create_agent("other").id
    memory.archive.log_messages(other, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in TURNS])
    _as_logged_before(memory, other)  # two rows stale, and the store unmarked
    rows = memory.archive.rows
    wanted = contexts(rows.turns())  # the count as it was made: every turn and text read whole
    expected = sum(
        r["text"] != shape_message(r["content"], written_on(r), wanted[r["id"]].text)
        for r in rows.keyword_texts(list(wanted))
    )
    assert expected == 1000 + 2  # the results (their texts hold the short one) and ``other``'s two
    held = sum(len(r["content"]) for r in rows.turns())  # every turn's content: ~16 MB

    tracemalloc.start()
    try:
        assert unrebuilt(memory.archive) == expected
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < held / 2, (peak, held)  # a batch or two of rows (~a third); every content and more before
