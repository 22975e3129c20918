"""Sittings as documents: grouping turns, BM25 ranks, the index kept up to date with a real store as turns arrive
(one by one, from another process's archive, after deletions, in a store written before), and the ranker's feature."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tiermem.base.records import Found
from tiermem.domain.memory import Memory
from tiermem.domain.search.query import analyse, terms
from tiermem.domain.search.ranking import DEFAULT_RANKER, FEATURES, Candidate, Context, features
from tiermem.domain.search.sittings import SittingCache, SittingIndex, SittingRanks

from .conftest import memory_over

T0 = datetime(2023, 5, 1, 10, tzinfo=UTC)


def us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def row(content: str, minutes: float, seq: int, conversation: str = "c") -> dict[str, Any]:
    return {
        "content": content,
        "conversation_id": conversation,
        "created_us": us(T0 + timedelta(minutes=minutes)),
        "seq": seq,
    }


def test_turns_less_than_an_hour_apart_are_one_sitting_per_conversation() -> None:
    index = SittingIndex()
    assert index.add(
        [
            row("We went to the pride parade", 0, 1),
            row("It was so colourful", 30, 2),
            row("Later that evening we ate", 85, 3),
            row("The parade again", 10, 4, "other"),
            row("A guitar lesson", 300, 5),
        ]
    )
    assert [(s.conversation, len(s.tf) > 0) for s in index.sittings] == [("c", True), ("other", True), ("c", True)]
    assert index.rows == 5 and index.newest_seq == 5
    # 85 minutes is 55 after the previous turn: the same sitting; 300 is a new one
    assert index.sitting_of("c", us(T0 + timedelta(minutes=85))) == 0
    assert index.sitting_of("c", us(T0 + timedelta(minutes=300))) == 2
    assert index.sitting_of("other", us(T0 + timedelta(minutes=10))) == 1
    assert index.sitting_of("nobody", us(T0)) is None
    assert terms("The Parade, and THE guitar") == ["parade", "guitar"]  # lower-cased, stopwords left out


def test_sittings_rank_by_bm25_and_unmatched_ones_are_left_out() -> None:
    index = SittingIndex()
    index.add(
        [
            row("We went to the pride parade", 0, 1),
            row("The parade was colourful, a great parade", 5, 2),
            row("I bought a guitar", 200, 3),
            row("Parade tickets were cheap", 400, 4),
        ]
    )
    ranks = index.ranks("What was the parade like?")
    assert ranks == {0: 1, 2: 2}  # the sitting with three mentions first; the guitar sitting matched nothing
    assert index.ranks("the and of") == {} and SittingIndex().ranks("parade") == {}
    found = SittingRanks(index, ranks)
    assert found.rank_of("c", us(T0 + timedelta(minutes=5))) == 1
    assert found.rank_of("c", us(T0 + timedelta(minutes=200))) is None and found.rank_of("c", None) is None


def test_a_turn_older_than_its_conversations_last_sitting_is_refused_whole() -> None:
    index = SittingIndex()
    index.add([row("first", 0, 1), row("second", 200, 2)])
    assert not index.add([row("third", 210, 3), row("late arrival", 100, 4)])
    assert index.rows == 2 and len(index.sittings) == 2  # nothing of the refused batch was added


@dataclass
class FakeTable:
    """The two reads the cache makes, over a list; counts how many turns each read returned."""

    rows: list[dict[str, Any]]
    read_rows: int = 0

    def count(self) -> int:
        return len(self.rows)

    def read(self, seq_from: int | None) -> list[dict[str, Any]]:
        out = sorted(
            (r for r in self.rows if seq_from is None or r["seq"] >= seq_from),
            key=lambda r: (r["created_us"], r["seq"]),
        )
        self.read_rows += len(out)
        return out


def test_the_cache_reads_only_new_turns_and_rebuilds_when_the_count_does_not_add_up() -> None:
    table = FakeTable([row("parade", 0, 1), row("guitar", 5, 2)])
    cache = SittingCache()
    index = cache.refresh("a", 1, table.count, table.read)
    assert index is not None and index.rows == 2 and table.read_rows == 2
    assert cache.refresh("a", 1, table.count, table.read) is index and table.read_rows == 2  # same version: no read
    table.rows.append(row("parade later", 300, 3))
    index = cache.refresh("a", 2, table.count, table.read)
    assert index is not None and index.rows == 3 and table.read_rows == 3  # only the new turn was read
    del table.rows[0]
    table.rows.append(row("drums", 310, 4))  # one gone, one new: the count alone would not tell
    index = cache.refresh("a", 3, table.count, table.read)
    assert index is not None and index.rows == 3 and index.ranks("parade") == {1: 1}  # rebuilt from the table
    table.rows.append(row("written late by another process", 305, 0))  # an older seq: missed by seq_from
    index = cache.refresh("a", 4, table.count, table.read)
    assert index is not None and index.rows == 4 and index.ranks("process") != {}


def test_turns_logged_here_are_taken_without_reading_unless_the_table_gained_others() -> None:
    table = FakeTable([row("parade", 0, 1)])
    cache = SittingCache()
    cache.refresh("a", 1, table.count, table.read)
    read_before = table.read_rows
    mine = row("guitar lesson", 5, 2)
    table.rows.append(mine)
    cache.logged("a", [mine])  # stored by this process: the refresh takes it from here
    index = cache.refresh("a", 2, table.count, table.read)
    assert index is not None and index.rows == 2 and index.ranks("guitar") == {0: 1}
    assert table.read_rows == read_before  # nothing read back
    theirs, also_mine = row("drums by another process", 7, 3), row("violin", 8, 4)
    table.rows += [theirs, also_mine]
    cache.logged("a", [also_mine])  # the table gained one more turn than this process logged: it is read
    index = cache.refresh("a", 3, table.count, table.read)
    assert index is not None and index.rows == 4 and index.ranks("drums") != {}
    assert table.read_rows == read_before + 2
    cache.logged("a", [row("forgotten", 9, 5)])
    cache.forget("a")  # e.g. turns forgotten: what was logged is not trusted, the table is read
    table.rows.append(row("cello", 9, 6))
    index = cache.refresh("a", 4, table.count, table.read)
    assert index is not None and index.rows == 5 and index.ranks("forgotten") == {}


def stamp(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def sitting_rank(memory: Memory, agent: str, query: str, content: str) -> int | None:
    pool = memory.archive.candidates("messages", agent, query)
    assert pool.context.sittings is not None
    hit = next(c for c in pool.candidates if c.content == content)
    return pool.context.sittings.rank_of(hit.found.conversation_id, hit.found.created_us)


def test_turns_logged_one_by_one_reach_the_sitting_index(memory: Memory) -> None:
    agent = memory.ensure_agent("live").id
    log = memory.archive.log_messages
    log(agent, [{"role": "user", "content": "I took up the violin this spring", "timestamp": stamp(0)}])
    log(agent, [{"role": "assistant", "content": "How are the lessons going?", "timestamp": stamp(2)}])
    assert sitting_rank(memory, agent, "violin lessons", "How are the lessons going?") == 1
    # a second sitting, turn by turn, that talks about the violin more: it takes the first place as it grows
    log(agent, [{"role": "user", "content": "Violin recital tonight, violin solo!", "timestamp": stamp(600)}])
    log(agent, [{"role": "assistant", "content": "Good luck with the violin.", "timestamp": stamp(601)}])
    assert sitting_rank(memory, agent, "violin", "Good luck with the violin.") == 1
    assert sitting_rank(memory, agent, "violin", "How are the lessons going?") == 2


def test_a_store_written_before_and_another_processs_turns_are_indexed(memory: Memory) -> None:
    agent = memory.ensure_agent("old").id
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "We adopted a cat named Miso", "timestamp": stamp(0)},
            {"role": "user", "content": "She sleeps all day", "timestamp": stamp(1)},
        ],
    )
    other = memory_over(memory.archive.store)  # a second archive (as another process, or the next start) on the store
    assert sitting_rank(other, agent, "cat Miso", "She sleeps all day") == 1
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "Miso the cat chased a mouse", "timestamp": stamp(500)},
            {"role": "user", "content": "cat cat cat", "timestamp": stamp(501)},
        ],
    )
    assert sitting_rank(other, agent, "cat", "cat cat cat") == 1  # the other archive's turns were read
    assert sitting_rank(other, agent, "cat", "She sleeps all day") == 2
    memory.archive.rows.delete_agent_data(agent)
    memory.archive.log_messages(agent, [{"role": "user", "content": "A new cat story", "timestamp": stamp(900)}])
    pool = other.archive.candidates("messages", agent, "cat")
    assert pool.context.sittings is not None
    assert [c.content for c in pool.candidates] == ["A new cat story"]
    assert (
        pool.context.sittings.rank_of(pool.candidates[0].found.conversation_id, pool.candidates[0].found.created_us)
        == 1
    )  # rebuilt: one sitting left


def test_the_first_turn_of_a_sitting_opens_it_even_when_its_turns_share_a_timestamp() -> None:
    index = SittingIndex()
    index.add(
        [
            row("Guess what, I adopted a cat!", 0, 1),
            row("Wow, what is its name?", 0, 2),
            row("Miso", 0, 3),
            row("I ran a marathon last week", 200, 4),
            row("How was it?", 201, 5),
        ]
    )
    at = us(T0)
    assert [index.opens("c", at, seq) for seq in (1, 2, 3)] == [True, False, False]  # one timestamp, three turns
    assert index.opens("c", us(T0 + timedelta(minutes=200)), 4) and not index.opens(
        "c", us(T0 + timedelta(minutes=201)), 5
    )
    assert not index.opens("c", at, None) and not index.opens("nobody", at, 1)
    index.add([row("Back again: the cat learnt a trick", 900, 6)])  # a turn logged later opens a new sitting
    assert index.opens("c", us(T0 + timedelta(minutes=900)), 6)
    found = SittingRanks(index, {})
    assert found.opens("c", at, 1) and not found.opens("c", None, 1)


def test_the_opens_feature_marks_the_turn_that_opened_its_sitting(memory: Memory) -> None:
    agent = memory.ensure_agent("opens").id
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "Since we last talked I adopted a cat called Miso", "timestamp": stamp(0)},
            {"role": "assistant", "content": "A cat! What is Miso like?", "timestamp": stamp(0)},
            {"role": "user", "content": "Miso the cat sleeps all day", "timestamp": stamp(0)},
        ],
    )
    pool = memory.archive.candidates("messages", agent, "cat Miso")
    col = FEATURES.index("opens")
    opened = {
        c.content[:5]: row[col] for c, row in zip(pool.candidates, features(pool.query, pool.candidates, pool.context))
    }
    assert opened == {"Since": 1.0, "A cat": 0.0, "Miso ": 0.0}
    # archival passages have no sittings: no row opens one
    memory.archive.insert(agent, "The cat is called Miso.")
    passages = memory.archive.candidates("passages", agent, "cat")
    assert [row[col] for row in features(passages.query, passages.candidates, passages.context)] == [0.0]
    assert DEFAULT_RANKER.weights[col] > 0  # fitted: a sitting's first turn is likelier what a question looks for


def test_passages_have_no_sittings(memory: Memory) -> None:
    agent = memory.ensure_agent("arch").id
    memory.archive.insert(agent, "The cat is called Miso.")
    assert memory.archive.candidates("passages", agent, "cat").context.sittings is None


class Ranks:
    def __init__(self, ranks: dict[str, int]) -> None:
        self.ranks = ranks

    def rank_of(self, conversation: str | None, created_us: int | None) -> int | None:
        return self.ranks.get(str(conversation))

    def opens(self, conversation: str | None, created_us: int | None, seq: int | None) -> bool:
        return False

    def position(self, conversation: str | None, created_us: int | None, seq: int | None) -> tuple[int, int] | None:
        return None


def two(content: str) -> list[Candidate]:
    """The same turn in two conversations ("a" sorts first by id, so a tie puts the "b" one second)."""
    return [
        Candidate(
            id=k,
            content=content,
            found=Found(id=k, content=content, created_us=0, conversation_id=conv),
            vector_rank=1,
            fts_rank=1,
            cosine=0.5,
            bm25=1.0,
        )
        for k, conv in (("a", "elsewhere"), ("b", "parade"))
    ]


def test_the_sitting_feature_and_the_shipped_ranker_lift_a_turn_whose_sitting_matches() -> None:
    context = Context(sittings=Ranks({"parade": 1, "elsewhere": 7}))
    cands = two("It was so colourful!")
    col = FEATURES.index("sitting")
    parade = analyse("What was the parade like?")
    assert [r[col] for r in features(parade, cands, context)] == pytest.approx([0.1, 0.25])
    # without a sitting index (archival passages) every row gets the best sitting's value: their order is left alone
    assert [r[col] for r in features(parade, [replace(cands[0], fts_rank=None), cands[1]])] == [
        0.25,
        0.25,
    ]
    # a question about several things: their evidence is spread over sittings, the feature stays 0
    assert [r[col] for r in features(analyse("How many parades has Caroline been to?"), cands, context)] == [0.0, 0.0]
    assert [c.id for c, _ in DEFAULT_RANKER.rank(parade, cands, context)] == ["b", "a"]


def test_word_forms_meet_in_the_sitting_index() -> None:
    from tiermem.domain.search.sittings import stem

    for forms in (
        ("vacationed", "vacation", "vacations"),
        ("dancing", "danced", "dance", "dances"),
        ("studies", "studied", "study"),
        ("stopped", "stop", "stops"),
        ("families", "family"),
    ):
        assert len({stem(w) for w in forms}) == 1, forms
    assert stem("was") == "was" and stem("2023") == "2023" and stem("class") == "class"
    index = SittingIndex()
    index.add([row("We spent a vacation in Florida", 0, 1), row("I bought a guitar", 200, 2)])
    assert index.ranks("What states has Maria vacationed at?") == {0: 1}  # no word form in common but the stem


def test_recall_candidates_keep_deep_ranks_and_take_the_best_sittings_deeper_turns(memory: Memory) -> None:
    """The legs read 100 rows: a candidate keeps its rank in a leg that ranks it past the pool of 40, and a turn of
    the query's best sitting that no leg ranks within 40 is a candidate all the same (``pool.pooled``)."""
    agent = memory.ensure_agent("deep").id
    fillers = [
        {"role": "user", "content": f"lighthouse keeper log entry {n}", "timestamp": stamp(1440 * (n + 1))}
        for n in range(60)
    ]
    walk = [
        {"role": "user", "content": text, "timestamp": stamp(1440 * 70 + n)}
        for n, text in enumerate(
            [
                "We walked to the lighthouse",
                "lighthouse lighthouse views",
                "Tea afterwards was lovely",
                "It was so windy up there",
            ]
        )
    ]
    memory.archive.log_messages(agent, fillers + walk)
    pool = memory.archive.candidates("messages", agent, "lighthouse")
    windy = next(c for c in pool.candidates if c.content == "It was so windy up there")
    assert windy.fts_rank is None and windy.vector_rank is not None and windy.vector_rank > 40
    assert pool.context.sittings is not None
    assert pool.context.sittings.rank_of(windy.found.conversation_id, windy.found.created_us) == 1
    assert any(
        c.fts_rank is not None and c.fts_rank <= 40 and c.vector_rank is not None and c.vector_rank > 40
        for c in pool.candidates
    )  # the deeper rank is kept, not dropped as "not found"
    outside = [c for c in pool.candidates if min(c.fts_rank or 999, c.vector_rank or 999) > 40]
    assert outside and all(
        pool.context.sittings.rank_of(c.found.conversation_id, c.found.created_us) == 1 for c in outside
    )  # nothing past 40 in both legs but the best sitting's turns
    hits = memory.archive.conversation_search(agent, "lighthouse", limit=10).hits
    assert [h.id for h in hits] == [
        c.id for c, _ in memory.archive.kinds["messages"].ranker.rank(pool.query, pool.candidates, pool.context)
    ][:10]  # the search ranks the same pool


def test_a_question_about_several_things_takes_deeper_turns_of_its_three_best_sittings() -> None:
    from tiermem.domain.search.pool import pooled

    def cand(cid: str, conversation: str, vector_rank: int | None, fts_rank: int | None) -> Candidate:
        return Candidate(
            id=cid,
            content=cid,
            vector_rank=vector_rank,
            fts_rank=fts_rank,
            found=Found(id=cid, content=cid, created_us=0, conversation_id=conversation),
        )

    cands = [
        cand("top", "s9", 3, None),
        cand("deep-best", "s1", 70, None),
        cand("deep-third", "s3", None, 55),
        cand("deep-fourth", "s4", 90, 80),
        cand("deep-none", "s0", 41, 41),
    ]
    context = Context(sittings=Ranks({"s1": 1, "s3": 3, "s4": 4, "s9": 9}))
    assert [c.id for c in pooled(analyse("What did Tim cook?"), cands, 40, context)] == ["top", "deep-best"]
    several = analyse("What has Tim cooked?")
    assert [c.id for c in pooled(several, cands, 40, context)] == ["top", "deep-best", "deep-third"]
    assert [c.id for c in pooled(several, cands, 40, Context())] == ["top"]  # passages: no sittings


def test_a_turns_place_in_its_sitting_follows_the_log_order() -> None:
    index = SittingIndex()
    index.add(
        [
            row("Where did you go?", 0, 10),
            row("To Rome", 0, 11),
            row("Nice!", 0, 12),
            row("Back home now", 300, 13),
            row("A turn without a known log order", 301, None),
        ]
    )  # type: ignore[arg-type]
    at = us(T0)
    assert [index.position("c", at, seq) for seq in (10, 11, 12)] == [(0, 0), (0, 1), (0, 2)]  # one timestamp
    assert index.position("c", us(T0 + timedelta(minutes=300)), 13) == (1, 0)
    assert index.position("c", at, 13) is None and index.position("c", at, None) is None  # not that sitting's turn
    assert index.position("nobody", at, 10) is None
    late = SittingIndex()  # log order not increasing with time (a turn logged later with an earlier timestamp)
    late.add([row("first", 0, 5), row("second", 1, 3), row("third", 2, 4)])
    assert [late.position("c", us(T0 + timedelta(minutes=m)), seq) for m, seq in ((0, 5), (1, 3), (2, 4))] == [
        (0, 0),
        (0, 1),
        (0, 2),
    ]
    assert (
        SittingRanks(index, {}).position("c", at, 11) == (0, 1)
        and SittingRanks(index, {}).position("c", None, 11) is None
    )


def test_a_deeper_row_logged_within_two_turns_of_a_pooled_one_joins_the_pool() -> None:
    """What was said just before or after a match (the question a turn answers, the answer to it) is a candidate
    even when no leg ranks it within the pool, if a leg ranks it within LEG_DEPTH (``pool.pooled``)."""
    from tiermem.domain.search.pool import NEIGHBOURS, pooled

    index = SittingIndex()
    index.add([row(f"turn {seq}", 0, seq) for seq in range(1, 9)] + [row("later", 300, 9)])

    def cand(cid: str, seq: int, vector_rank: int | None, fts_rank: int | None, minutes: int = 0) -> Candidate:
        at = us(T0 + timedelta(minutes=minutes))
        return Candidate(
            id=cid,
            content=cid,
            vector_rank=vector_rank,
            fts_rank=fts_rank,
            found=Found(id=cid, content=cid, created_us=at, conversation_id="c", seq=seq),
        )

    cands = [
        cand("match", 4, 2, None),
        cand("just-before", 3, 60, None),
        cand("two-after", 6, None, 80),
        cand("three-after", 7, 90, 95),
        cand("next-sitting", 9, 45, None, 300),
        cand("far-before", 1, 41, 41),
    ]
    assert NEIGHBOURS == 2
    context = Context(sittings=SittingRanks(index, {}))  # no sitting matches the query: only the neighbours join
    where = analyse("Where did Tim go?")
    assert [c.id for c in pooled(where, cands, 40, context)] == ["match", "just-before", "two-after"]
    assert [c.id for c in pooled(where, cands, 40, Context())] == ["match"]  # passages: no sittings


def test_deleting_an_agent_drops_this_processs_copies_of_its_turns(memory: Memory) -> None:
    agent = memory.ensure_agent("going").id
    memory.archive.log_messages(agent, [{"role": "user", "content": "my locker code is in the blue notebook"}])
    assert memory.archive._sittings._logged.get(agent)  # kept for the next search's sitting refresh
    memory.delete_agent(agent)
    assert agent not in memory.archive._sittings._logged
    assert not [key for key in memory.archive._last_turn if key[0] == agent]


def test_forgetting_a_turn_leaves_no_word_of_it_in_the_sitting_index(memory: Memory) -> None:
    from tiermem.domain.forgetting import Target, forget

    agent = memory.ensure_agent("private").id
    said = memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "the locker combination is kept in zanzibar notebook"},
            {"role": "assistant", "content": "noted, about the notebook"},
        ],
    )
    before = memory.archive.candidates("messages", agent, "zanzibar notebook").context.sittings
    assert before is not None and before.index.df["zanzibar"] == 1  # the index counts the word
    forget(memory, Target("message", agent, said[0].id))
    assert agent not in memory.archive._sittings._agents  # gone at once, not at the agent's next search
    after = memory.archive.candidates("messages", agent, "zanzibar notebook").context.sittings
    assert after is not None and after.index is not before.index  # rebuilt from what the table still holds
    assert "zanzibar" not in after.index.df and after.index.rows == 1
    assert after.index.df["notebook"] == 1
