"""Auto-recall's pieces on their own: a turn logged once however often its hook fires at once, and the context added
to a prompt (``render``) within its size, the best memory never dropped for worse ones.

The hook path end to end (socket, server, real embedding model) is in ``tests/test_hooks.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ConfigError
from tiermem.domain import autorecall
from tiermem.domain.autorecall import Recalled
from tiermem.domain.memory import Memory


@pytest.fixture
def memory(tmp_path: Path) -> tuple[Memory, str]:
    from tiermem.domain.factory import open_memory

    m = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    return m, m.ensure_agent("default").id


def test_callers_of_one_key_run_one_at_a_time_however_they_come_and_go() -> None:
    """The key's lock stays while a woken waiter has not taken it yet: a caller arriving then waits on the same lock
    (it used to make a fresh one and run beside the waiter)."""
    inside, most, guard = 0, 0, threading.Lock()
    start = threading.Barrier(6)

    def caller() -> None:
        nonlocal inside, most
        start.wait()
        for _ in range(300):
            with autorecall._lock("session:turn:user:digest"):
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0)  # let the others run while this one holds the key
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=caller) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 1
    assert "session:turn:user:digest" not in autorecall._locks  # the last one out removed it


def test_a_turn_fired_many_times_at_once_is_logged_once(memory: tuple[Memory, str]) -> None:
    m, agent = memory
    start = threading.Barrier(8)
    results: list[bool] = []

    def fire() -> None:
        start.wait()
        results.append(autorecall.log_turn(m, agent, session="s", turn="t1", role="user", content="yes"))

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False] * 7 + [True]
    assert [(x.role, x.content) for x in m.archive.rows.messages_of(agent) if x.conversation_id == "s"] == [
        ("user", "yes")
    ]
    assert not autorecall._locks


def test_an_empty_turn_is_skipped_not_stored_nor_refused(memory: tuple[Memory, str]) -> None:
    """A host may report an empty reply: the capture path skips it (conversation_log, for a model, refuses one)."""
    m, agent = memory
    assert autorecall.log_turn(m, agent, session="e", turn="t1", role="assistant", content="") is False
    assert autorecall.log_turn(m, agent, session="e", turn="t2", role="user", content=" \n\t") is False
    assert autorecall.log_turn(m, agent, session="e", turn="t3", role="user", content="\u200b\ufeff\n") is False
    assert [x for x in m.archive.rows.messages_of(agent) if x.conversation_id == "e"] == []


def test_empty_turns_stored_before_they_were_refused_are_never_found(memory: tuple[Memory, str]) -> None:
    """Turns with no text (stored before conversation_log refused them, or brought by an import: a Letta tool-call
    turn) come back from no search: not conversation_search, not as a found turn's neighbour, not auto-recall."""
    m, agent = memory
    blanks = ["", "   ", "\n\t "]
    turns = [{"role": "user", "content": text, "conversation_id": "old"} for text in blanks]
    turns.insert(1, {"role": "assistant", "content": "Ada drinks green tea every morning.", "conversation_id": "old"})
    m.archive.log_messages(agent, turns)  # the archive stores what it is given (Memory's tools refuse blanks)
    for links in (False, True):
        hits = m.archive.conversation_search(agent, "what does Ada drink", limit=10, links=links).hits
        assert [h.content for h in hits] == ["Ada drinks green tea every morning."], (links, hits)
    found = autorecall.recall(
        m,
        agent,
        "What does Ada drink in the morning?",
        session="new",
        settings=autorecall.RecallSettings(threshold=0.0, limit=10, max_chars=10_000),
    )
    assert [r.content for r in found] == ["Ada drinks green tea every morning."]


ALL = autorecall.RecallSettings(threshold=0.0, limit=10, max_chars=10_000)  # every hit the searches return


def test_small_talk_neither_triggers_nor_is_recalled(memory: tuple[Memory, str]) -> None:
    """docs/hosts.md: a prompt unrelated to what is stored gets nothing. Small talk ("thanks", "ok continue") asks
    for nothing, and an earlier session's small talk is no memory, even for a prompt that asks something."""
    m, agent = memory
    said = ["ok", "thanks!", "continue", "yes please", "looks great, go ahead", "Caroline: thank you so much!"]
    m.archive.log_messages(agent, [{"role": "user", "content": text, "conversation_id": "old"} for text in said])
    m.archive.log_messages(
        agent, [{"role": "user", "content": "The parser lives in src/parse.py.", "conversation_id": "old"}]
    )
    for prompt in ("thanks", "thanks!", "ok continue", "go ahead", "Great, thanks!", "ok"):
        assert autorecall.recall(m, agent, prompt, session="new", settings=ALL) == [], prompt
    found = [
        r.content for r in autorecall.recall(m, agent, "ok, where is the parser? thanks", session="new", settings=ALL)
    ]
    assert "The parser lives in src/parse.py." in found and not set(found) & set(said)
    assert autorecall.says_something("perfect, ship it") and not autorecall.says_something("Mel: ok, go ahead!")


QUESTIONS = [
    "what did we agree on?",
    "Did we agree to that?",
    "what was agreed?",
    "who is she?",
    "what did he do after that?",
    "where was I?",
    "who am I?",
    "how did it go?",
    "what did you do?",
    "is that correct?",
    "what about now?",
    "what did we agree on",
    "Caroline: so what was agreed?",
]


def test_a_question_is_never_small_talk(memory: tuple[Memory, str]) -> None:
    """A question asks for a memory, whatever its words: it ends with a question mark or opens with a question word
    ("what", "did", "is" ...). Small talk is a text of small-talk words and stopwords alone, with one of the former
    at least (a text of stopwords alone is not: "and then")."""
    for question in QUESTIONS:
        assert autorecall.says_something(question), question
    for small in ("ok", "thanks!", "yes", "ok, go ahead", "great, carry on", "perfect, thank you so much"):
        assert not autorecall.says_something(small), small
    assert autorecall.says_something("and then") and autorecall.says_something("right now, again: done")
    assert not autorecall.says_something("!!!") and not autorecall.says_something("?")
    m, agent = memory
    m.archive.log_messages(
        agent,
        [{"role": "user", "content": "We agreed to ship the release on Friday.", "conversation_id": "old"}],
    )
    found = autorecall.recall(m, agent, "what did we agree on?", session="new", settings=ALL)
    assert [r.content for r in found] == ["We agreed to ship the release on Friday."]


def test_memories_saying_the_same_are_recalled_once(memory: tuple[Memory, str]) -> None:
    m, agent = memory
    m.archive.insert(agent, "The user is allergic to peanuts.")
    m.archive.insert(agent, "The user is allergic to peanuts.")
    m.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "the user is allergic to peanuts", "conversation_id": "a"},
            {"role": "user", "content": "Peanuts make me sick.", "conversation_id": "b"},
        ],
    )
    found = autorecall.recall(m, agent, "Can I eat peanuts?", session="new", settings=ALL)
    texts = [r.content for r in found]
    assert sorted(texts) == ["Peanuts make me sick.", "The user is allergic to peanuts."] or sorted(texts) == [
        "Peanuts make me sick.",
        "the user is allergic to peanuts",
    ]
    assert found == sorted(found, key=lambda r: -r.relevance)


def recalled(n: int, chars: int, *, source: str = "archival", relevance: float = 0.5) -> Recalled:
    return Recalled(
        id=f"passage-{n}",
        source=source,
        content=f"memory {n} " + "x" * (chars - len(f"memory {n} ")),  # type: ignore[arg-type]
        created_at=datetime(2026, 11, 24, tzinfo=UTC),
        relevance=relevance,
        role="user",
    )


@pytest.mark.parametrize("max_chars", [500, 501, 777, 1000, 1003, 4000])
def test_the_context_with_its_note_stays_within_max_chars(max_chars: int) -> None:
    for sizes in ([150] * 12, [60] * 50, [300, 300, 300], [10] * 5 + [2000] * 5, [1000] * 9):
        memories = [recalled(i, size, relevance=0.9 - i / 100) for i, size in enumerate(sizes)]
        text = autorecall.render(memories, max_chars)
        assert 0 < len(text) <= max_chars, (sizes, len(text))
        lines = text.split("\n")
        shown = [line for line in lines if line.startswith("<tiermem_memory ")]
        assert shown and all(f"memory {i} " in line for i, line in enumerate(shown))  # best first, none skipped
        if len(shown) < len(sizes):
            assert lines[-1] == (
                f"({len(sizes) - len(shown)} more not shown: search for them with "
                "archival_memory_search or conversation_search.)"
            )
        else:
            assert "more not shown" not in text


def test_a_best_memory_too_long_to_fit_is_shown_cut_with_its_id_not_dropped_for_worse_ones() -> None:
    best = recalled(0, 6000, relevance=0.9)
    worse = [recalled(i, 100, relevance=0.3) for i in (1, 2)]
    text = autorecall.render([best, *worse], 1000)
    assert len(text) <= 1000
    head, first, note = text.split("\n")
    assert head == autorecall.HEAD
    assert first.startswith(
        '<tiermem_memory source="archival" id="passage-0" saved="2026-11-24" relevance="0.90" cut="first '
    )
    kept = int(first.split('cut="first ')[1].split(" ")[0])
    assert 'of 6000 chars; id passage-0; archival_memory_search finds it whole">memory 0 xxx' in first
    assert first.endswith("x" * (kept - len("memory 0 ")) + "…</tiermem_memory>") and len(text) >= 995  # room used
    assert note.startswith("(2 more not shown")  # the worse ones are not shown in its place
    alone = autorecall.render([recalled(0, 9000, source="recall")], 500)
    assert len(alone) <= 500 and 'cut="first' in alone and "id passage-0; conversation_search finds it" in alone
    assert "more not shown" not in alone


@pytest.mark.parametrize("source", ["archival", "recall"])
@pytest.mark.parametrize("count", [1, 2, 5, 50])
def test_the_floor_always_shows_the_best_memory_with_real_ids(source: str, count: int) -> None:
    """At ``max_chars`` 500 (the config's floor) and up, the best of long memories with real ids (UUIDs: a passage's or
    turn's id, a Claude Code session) is shown, cut, and the others are counted in the note: a full note that would
    leave it too little room gives way to a short one."""
    kind = "passage" if source == "archival" else "message"
    memories = [
        Recalled(
            id=f"{kind}-{uuid.uuid4()}",
            source=source,  # type: ignore[arg-type]
            content=f"My cat Felix number {i} likes " + "tuna and salmon " * 25,
            created_at=datetime(2026, 11, 24, tzinfo=UTC),
            relevance=0.22,
            role="assistant",
            conversation_id=str(uuid.uuid4()),
        )
        for i in range(count)
    ]
    for max_chars in (500, 510, 522, 530, 600):
        composed = autorecall.compose(memories, max_chars)
        assert 0 < len(composed.text) <= max_chars, max_chars
        assert composed.shown == memories[:1] and "Felix number 0 likes tuna" in composed.text
        if count > 1:
            assert composed.text.split("\n")[-1].startswith(f"({count - 1} more not shown"), composed.text


def test_max_chars_below_the_floor_that_shows_a_cut_memory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="auto_recall_max_chars"):
        load_settings(data_dir=tmp_path, auto_recall_max_chars=499)
    assert load_settings(data_dir=tmp_path, auto_recall_max_chars=500).auto_recall_max_chars == 500
