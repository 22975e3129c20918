"""The search room's pure parts: the query's analysis (``search.query.Query``, made once per search) and the profile of
each searchable kind (``search.kinds.Kind``)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from tiermem.base.records import Found
from tiermem.domain.blocks import Rethink
from tiermem.domain.memory import Memory
from tiermem.domain.search.kinds import FILE_CHUNKS, KINDS, MESSAGES, PASSAGES
from tiermem.domain.search.pool import LEG_DEPTH, MIN_POOL, pool_size
from tiermem.domain.search.query import Query, analyse, needs_clock, speaker_of, subject_of
from tiermem.domain.search.ranking import (
    DEFAULT_CALIBRATION,
    DEFAULT_RANKER,
    FEATURES,
    PASSAGE_CALIBRATION,
    PASSAGE_RANKER,
    SITTING_K,
    UNDATED_PASSAGE_CALIBRATION,
    Candidate,
    Context,
    features,
    stated,
    stated_time,
)
from tiermem.domain.search.timeexpr import Period

CLOCK = datetime(2023, 10, 1, 12, tzinfo=UTC)


def test_the_analysis_holds_every_field_of_a_query() -> None:
    q = analyse("When did Caroline go camping last week?", CLOCK, ["Caroline", "Melanie"])
    assert q.text == "When did Caroline go camping last week?" and q.clock == CLOCK
    assert q.names == frozenset({"Caroline", "Melanie"}) and q.focused == "When did go camping last week?"
    assert q.words == frozenset({"when", "did", "caroline", "go", "camping", "last", "week"})
    assert q.terms == frozenset({"caroline", "go", "camping", "last", "week"})  # stopwords left out
    assert q.periods == (
        Period(datetime(2023, 9, 18, tzinfo=UTC), datetime(2023, 9, 25, tzinfo=UTC)),
    )  # the week before the clock's
    assert q.asks_when and not q.asks_several


def test_what_a_query_asks() -> None:
    several = analyse("What books has John read?")
    assert several.asks_several and not several.asks_when and several.periods == ()
    assert analyse("How many times did Tim go to the beach?").asks_several
    assert not analyse("What did Tim cook on Friday?").asks_several
    dated = analyse("What did Maria do in June 2023?")
    assert dated.periods == (Period(datetime(2023, 6, 1, tzinfo=UTC), datetime(2023, 7, 1, tzinfo=UTC)),)
    assert not needs_clock("What did Maria do in June 2023?") and needs_clock("What did Maria do yesterday?")


def test_naming_sets_the_names_and_the_focused_text_only() -> None:
    q = analyse("What did Caroline's friend paint?")
    assert q.names == frozenset() and q.focused == q.text
    named = q.naming({"Caroline"})
    assert named.focused == "What did friend paint?" and named.names == frozenset({"Caroline"})
    assert dataclasses.replace(named, names=q.names, focused=q.focused) == q  # nothing else changed
    assert named.naming({"Caroline"}) is named
    assert analyse("Caroline").naming({"Caroline"}).focused == "Caroline"  # nothing else to search for: kept
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.text = "other"  # type: ignore[misc]


def test_each_kind_has_one_profile() -> None:
    assert set(KINDS) == {"messages", "passages", "file_chunks"} and all(k.table == t for t, k in KINDS.items())
    # recall's turns: deep legs, speakers' labels, roles' names and sittings
    assert MESSAGES.deep and MESSAGES.speakers and MESSAGES.turns
    assert MESSAGES.depth(pool_size(10)) == LEG_DEPTH and MESSAGES.depth(4 * LEG_DEPTH) == 4 * LEG_DEPTH
    # passages: the pool's depth, speakers' labels learnt (a fact may be written "Name: ..."), no turns
    assert not PASSAGES.deep and PASSAGES.speakers and not PASSAGES.turns
    assert PASSAGES.depth(pool_size(10)) == MIN_POOL
    # file chunks: like passages, but a file has no speakers; ranked as turns are, as are passages stating no date
    assert not FILE_CHUNKS.deep and not FILE_CHUNKS.speakers and not FILE_CHUNKS.turns
    assert FILE_CHUNKS.ranker == DEFAULT_RANKER and MESSAGES.calibration == DEFAULT_CALIBRATION
    assert PASSAGES.ranker == PASSAGE_RANKER and PASSAGE_RANKER.undated == DEFAULT_RANKER
    assert PASSAGE_CALIBRATION.undated == UNDATED_PASSAGE_CALIBRATION
    # passages: facts, with their own calibration, placed in time by the date they open with
    assert PASSAGES.stated and PASSAGES.subjects and PASSAGES.calibration == PASSAGE_CALIBRATION
    assert not MESSAGES.stated and not FILE_CHUNKS.stated and FILE_CHUNKS.calibration == DEFAULT_CALIBRATION
    assert not MESSAGES.subjects and not FILE_CHUNKS.subjects


def test_whom_a_fact_is_about() -> None:
    assert subject_of("On 8 May 2023: John's favourite book is Dune.") == "John"
    assert subject_of("Caroline went to a support group.") == "Caroline"
    assert subject_of("On 8 May 2023: The group meets weekly.") is None  # a stopword is nobody
    assert speaker_of("On 8 May 2023: Caroline went") is None  # a date before a colon is no speaker either
    assert speaker_of("Caroline: I went") == "Caroline"
    fact = Candidate("f", "On 8 May 2023: John got a dog.", Found("f", "x", created_us=0))
    speaker = FEATURES.index("speaker")
    asked = analyse("What pet did John get?")
    assert [row[speaker] for row in features(asked, [fact], Context(subjects=True))] == [1.0]
    assert [row[speaker] for row in features(asked, [fact], Context())] == [0.0]  # turns: only a label counts


def us(*day: int) -> int:
    return int(datetime(*day, tzinfo=UTC).timestamp() * 1_000_000)


def test_a_passage_is_placed_in_time_by_the_date_it_opens_with() -> None:
    assert stated_time("On 8 May 2023: Audrey got new collars for her dogs.") == us(2023, 5, 8)
    assert stated_time("On Wednesday, 13 September 2023: a talk") == us(2023, 9, 13)
    assert stated_time("2023-05-08: the release") == us(2023, 5, 8)
    assert stated_time("Audrey got new collars on 8 May 2023.") is None  # not at its start
    assert stated_time("Note: buy milk") is None and stated_time("no colon at all") is None
    written = us(2024, 1, 2)
    fact = Candidate("p", "On 8 May 2023: Audrey got new collars.", Found("p", "x", created_us=written))
    plain = Candidate("q", "Audrey likes dogs.", Found("q", "x", created_us=written))
    dated, same = stated([fact, plain])
    assert dated.stated_us == us(2023, 5, 8) and dated.time_us == us(2023, 5, 8) and dated.found.created_us == written
    assert same is plain and same.time_us == written
    date = FEATURES.index("date")
    asked = analyse("What did Audrey buy in May 2023?", datetime(2024, 1, 2, tzinfo=UTC))
    assert [row[date] for row in features(asked, [dated, same])] == [1.0, 0.0]
    assert [row[date] for row in features(asked, [fact, plain])] == [0.0, 0.0]  # by when it was written


def test_a_facts_sitting_is_its_date_ranked_among_the_pools_dates() -> None:
    def fact(i: str, text: str) -> Candidate:
        return Candidate(i, text, Found(i, text, created_us=us(2024, 1, 2)))

    facts = stated(
        [
            fact("a", "On 8 May 2023: Caroline went to a pride parade."),
            fact("b", "On 8 May 2023: The parade was in the city centre and very crowded."),
            fact("c", "On 9 June 2023: Caroline painted a sunset."),
            fact("d", "On 1 July 2023: Melanie bought new shoes."),
        ]
    )
    sitting = FEATURES.index("sitting")
    rows = features(analyse("Where was the parade Caroline went to?"), facts, Context(subjects=True))
    # the 8 May facts share a date that says "parade" twice: its group ranks first; the painting's date shares only the
    # name; the shoes' date shares no word (0)
    assert [row[sitting] for row in rows] == [1 / (SITTING_K + 1)] * 2 + [1 / (SITTING_K + 2), 0.0]
    several = features(analyse("How many parades has Caroline been to?"), facts, Context(subjects=True))
    assert [row[sitting] for row in several] == [0.0] * 4  # a question about several things: weighed apart
    # rows that state no date (turns; notes) keep the one value for all, as without a sitting index
    plain = [fact("e", "Caroline went to a pride parade."), fact("f", "Melanie bought new shoes.")]
    asked = analyse("Where was the parade?")
    assert [row[sitting] for row in features(asked, plain)] == [1 / (SITTING_K + 1)] * 2
    # a pool of undated passages is ranked and calibrated as before, by the turn ranker and its passage calibration
    assert PASSAGE_RANKER.rank(asked, plain) == DEFAULT_RANKER.rank(asked, plain)
    scored = DEFAULT_RANKER.rank(asked, plain)
    assert PASSAGE_CALIBRATION.relevance(asked, plain, scored) == UNDATED_PASSAGE_CALIBRATION.relevance(
        asked, plain, scored
    )
    assert PASSAGE_RANKER.rank(asked, facts) != DEFAULT_RANKER.rank(asked, facts)


def test_an_archive_searches_each_kind_by_its_profile(memory: Memory) -> None:
    agent = memory.ensure_agent("kinds").id
    memory.archive.log_messages(agent, [{"role": "user", "content": "Caroline: my cat is called Miso"}])
    memory.archive.insert(agent, "Caroline's cat is called Miso", ["pets"])
    assert memory.archive.kinds == KINDS
    turn = memory.archive.conversation_search(agent, "cat", limit=1).hits[0]
    fact = memory.archive.search(agent, "cat", top_k=1).hits[0]
    assert turn.role == "user" and turn.conversation_id == "default" and turn.tags == ()
    assert fact.role is None and fact.conversation_id is None and fact.tags == ("pets",)
    memory.archive.insert(agent, "On 8 May 2023: Caroline adopted a second cat.", None)
    dated = memory.archive.search(agent, "Which cat did Caroline adopt in May 2023?", top_k=1).hits[0]
    assert dated.content.startswith("On 8 May 2023") and dated.created_at.year >= 2025  # shown as written
    pool = memory.archive.candidates("messages", agent, "What is Caroline's cat called?")
    assert isinstance(pool.query, Query) and pool.query.names == frozenset({"Caroline"})
    assert pool.query.focused == "What is cat called?" and pool.context.sittings is not None
    assert memory.archive.candidates("passages", agent, "cat").context.sittings is None
    # the names the agent's blocks give are left out of the vector's query of every kind with speakers
    memory.edit(agent, "human", Rethink("The user's name is Melanie."))
    facts = memory.archive.candidates("passages", agent, "What does Melanie paint?")
    assert "Melanie" in facts.query.names and facts.query.focused == "What does paint?"
    assert facts.context.speakers == {} and facts.context.subjects  # no roles: passages are not turns
    files = memory.archive.candidates("file_chunks", "tiermem-files", "What does Melanie paint?")
    assert files.query.names == frozenset() and files.query.focused == "What does Melanie paint?"


def test_yesterday_is_the_agents_yesterday(memory: Memory) -> None:
    """An agent in Los Angeles: the dinner logged on its 6th (03:00 UTC on the 7th) is yesterday's when asked on its
    7th, not the one logged on its 5th (the 6th in UTC)."""
    from tiermem.domain.memory import TIMEZONE_KEY

    agent = memory.ensure_agent("la").id
    memory.set_agent_metadata(agent, {TIMEZONE_KEY: "America/Los_Angeles"})
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "Dinner tonight: pizza at Tony's.", "timestamp": "2026-12-05T17:30:00-08:00"},
            {"role": "user", "content": "Dinner tonight: ramen at Ippudo.", "timestamp": "2026-12-06T19:00:00-08:00"},
            {"role": "user", "content": "Morning! Starting the parser.", "timestamp": "2026-12-07T03:00:00-08:00"},
        ],
    )
    for asked in ("dinner yesterday", "dinner on December 6"):
        hits = memory.conversation_search(agent, asked, roles=None, limit=2, start_date=None, end_date=None).hits
        assert hits[0].content == "Dinner tonight: ramen at Ippudo.", asked
