"""``recontext`` reads again, under the lock forgetting holds, the turns each batch's contexts are made from: over a
long run of turns passing the context on (tool results) each turn is read again about once, not once a batch (the
whole run so far each batch: quadratic), and a turn forgotten or edited between two batches still keeps its context
from being written stale."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiermem.base.config import Settings
from tiermem.domain import keyword_context
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.keyword_context import recontext
from tiermem.store import KEYWORD_CONTEXT

from .test_keyword_context import SECRET, _as_logged_before, _texts

BATCH = 10  # rows a batch here: a run of a few hundred turns spans tens of batches
HEARTBEAT = json.dumps({"type": "heartbeat", "reason": "tool asked", "time": "now"})


def _logged(memory: Any, tools: int, *, first: str = "When does my ferry leave?", at: int = -1) -> str:
    """A question (``first``), ``tools`` tool results (the one at ``at`` a heartbeat instead), then an answer, as an
    older tiermem stored them (each keyword text holding the turn just before it); the agent's id."""
    agent = memory.ensure_agent("default").id
    turns = [
        {"role": "user", "content": first},
        *(
            {"role": "user", "content": HEARTBEAT} if i == at else {"role": "tool", "content": f'{{"result": {i}}}'}
            for i in range(tools)
        ),
        {"role": "assistant", "content": "It leaves at dawn."},
    ]
    memory.archive.log_messages(agent, turns)
    _as_logged_before(memory, agent)
    return agent


def _by_content(memory: Any, agent: str) -> dict[str, dict[str, Any]]:
    return {r["content"]: r for r in memory.archive.rows.turns() if r["agent_id"] == agent}


def test_a_long_run_of_tool_results_is_read_again_about_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of n tool results in batches of b: the turns read again under the lock are about n (each batch's own
    and the one its first context is made from), where reading the run so far each batch read about n²/2b."""
    monkeypatch.setattr(keyword_context, "BATCH", BATCH)
    memory = open_memory(settings)
    n = 300
    agent = _logged(memory, n)
    rows = memory.archive.rows
    read, asked = rows.turns_now, []

    def counted(ids: list[str]) -> list[dict[str, Any]]:
        found = read(ids)
        asked.append(len(found))
        return found

    monkeypatch.setattr(rows, "turns_now", counted)
    written = recontext(memory.archive)
    assert written == n  # every turn after the first result, and the answer
    batches = -(-n // BATCH)
    assert len(asked) == batches
    assert sum(asked) <= n + 3 * batches, asked  # the run so far each batch: 4,710 here
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == "1"
    assert "ferry" in _texts(memory, agent)["It leaves at dawn."]


def _after_batch(monkeypatch: pytest.MonkeyPatch, rows: Any, then: Any) -> None:
    """Run ``then`` once, after recontext's first batch is written and its lock let go (another process's turn)."""
    write, done = rows.set_keyword_texts, []

    def written(ids: Any, text_of: Any) -> int:
        n = write(ids, text_of)
        done.append(n)
        return n

    exclusive = rows.rewriting_texts

    def lock() -> Any:
        if len(done) == 1:
            done.append(-1)
            then()
        return exclusive()

    monkeypatch.setattr(rows, "set_keyword_texts", written)
    monkeypatch.setattr(rows, "rewriting_texts", lock)


def test_the_turn_a_run_is_made_from_forgotten_between_two_batches_is_not_written_back(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question a run of tool results follows is forgotten after the run's first batch is written: the later
    batches' turns keep the text the forget gave them (no word of the question), and the store stays unmarked."""
    monkeypatch.setattr(keyword_context, "BATCH", BATCH)
    memory = open_memory(settings)
    agent = _logged(memory, 5 * BATCH, first=SECRET)
    rows = memory.archive.rows
    secret_id = _by_content(memory, agent)[SECRET]["id"]
    _after_batch(monkeypatch, rows, lambda: forget(memory, Target(kind="message", agent_id=agent, ref=secret_id)))
    recontext(memory.archive)
    assert not [c for c, t in _texts(memory, agent).items() if "Wobbleton" in t]
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == ""


def test_a_turn_of_a_run_edited_between_two_batches_keeps_the_turns_after_it_as_they_were(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn in a run that said nothing (a heartbeat) is rewritten (a redaction's rewrite) after the run's first batch
    is written and read again, so that it says something: the turns after it no longer take their context from the
    question, so none is written with it; they are left as they were, and the store stays unmarked."""
    monkeypatch.setattr(keyword_context, "BATCH", BATCH)
    memory = open_memory(settings)
    at = BATCH // 2  # read again under the lock with the first batch (the run its contexts are made from), then edited
    agent = _logged(memory, 5 * BATCH, at=at)
    rows = memory.archive.rows
    before = _by_content(memory, agent)
    order = sorted(before.values(), key=lambda r: r["seq"])
    edited = order[1 + at]
    assert edited["content"] == HEARTBEAT
    stored = {r["id"]: r for r in rows.rows_where("messages", None)}

    def edit() -> None:
        rows.rewrite_rows("messages", [{**stored[edited["id"]], "content": "I found the timetable."}])

    _after_batch(monkeypatch, rows, edit)
    recontext(memory.archive)
    texts = {r["id"]: r["text"] for r in rows.rows_where("messages", None)}
    later = [r["id"] for r in order[2 + BATCH :]]  # the turns of the batches after the first
    assert later and all(texts[i] == stored[i]["text"] for i in later)  # none written (with the question)
    assert memory.archive.store.conn.meta()[KEYWORD_CONTEXT] == ""
