"""The second-stage ranker: its features, its fusion special case, and its effect through a real store."""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tiermem.base.records import Found
from tiermem.domain.archive import Archive
from tiermem.domain.blocks import Rethink
from tiermem.domain.memory import Memory
from tiermem.domain.search.query import analyse, asks_several, speaker_of, without_names
from tiermem.domain.search.ranking import (
    DEFAULT_CALIBRATION,
    DEFAULT_RANKER,
    FEATURES,
    STEM_MATCH,
    Calibration,
    Candidate,
    Context,
    Ranker,
    clear_match,
    coverage,
    features,
    merge,
)
from tiermem.embedding.embedders import BackgroundEmbedder, HashingEmbedder
from tiermem.store import Store


def cand(
    i: str,
    content: str,
    *,
    v: int | None = None,
    f: int | None = None,
    cos: float | None = None,
    bm25: float | None = None,
) -> Candidate:
    return Candidate(
        id=i,
        content=content,
        found=Found(id=i, content=content, created_us=0),
        vector_rank=v,
        fts_rank=f,
        cosine=cos,
        bm25=bm25,
    )


def feat(
    query: str, cands: list[Candidate], name: str, context: Context | None = None, clock: datetime | None = None
) -> list[float]:
    return [row[FEATURES.index(name)] for row in features(analyse(query, clock), cands, context)]


def test_features_are_relative_to_the_pool_and_read_the_text() -> None:
    cands = [
        cand("a", "Caroline: I went to a support group yesterday, it was powerful.", v=1, f=2, cos=0.6, bm25=4.0),
        cand("b", "Melanie: Did you go to the group?", f=1, bm25=8.0),
        cand("c", "we talked", v=2, cos=0.3),
    ]
    q = "When did Caroline go to the support group?"
    assert feat(q, cands, "bm25") == [0.5, 1.0, 0.0]  # normalised by the pool's best
    assert feat(q, cands, "cosine") == pytest.approx([0.0, -0.3, -0.3])  # below the best; a row the vector leg
    # missed is counted at the pool's floor
    assert feat(q, cands, "question") == [0.0, 1.0, 0.0]
    assert feat(q, cands, "speaker") == [1.0, 0.0, 0.0]  # the query names Caroline, not Melanie
    assert feat(q, cands, "vector_rrf")[2] == pytest.approx(1 / 12) and feat(q, cands, "fts_rrf")[2] == 0.0
    lengths = feat(q, cands, "length")
    assert lengths[0] > lengths[1] > lengths[2]


def at(y: int, m: int, d: int, content: str = "x", role: str = "user") -> Candidate:
    us = int(datetime(y, m, d, 12, tzinfo=UTC).timestamp() * 1_000_000)
    key = f"{y}-{m}-{d}-{content[:8]}"
    return Candidate(id=key, content=content, found=Found(id=key, content=content, created_us=us, role=role))


def test_date_feature_reads_the_periods_the_query_names_against_the_conversations_clock() -> None:
    cands = [at(2023, 6, 10), at(2023, 7, 20), at(2023, 9, 1), at(2022, 6, 3)]
    autumn = datetime(2023, 10, 1, tzinfo=UTC)
    # "June" is the last June before the clock; the month after it counts half (people talk about it afterwards)
    assert feat("When did Melanie go camping in June?", cands, "date", clock=autumn) == [1.0, 0.5, 0.0, 0.0]
    winter = datetime(2023, 1, 5, tzinfo=UTC)
    assert feat("When did Melanie go camping in June?", cands, "date", clock=winter) == [0.0, 0.0, 0.0, 1.0]
    assert feat("camping in June 2023", cands, "date", clock=autumn) == [1.0, 0.5, 0.0, 0.0]
    assert feat("anything from 2022", cands, "date", clock=autumn) == [0.0, 0.0, 0.0, 1.0]
    assert feat("what happened last month", cands, "date", clock=autumn) == [0.0, 0.0, 1.0, 0.0]
    assert feat("camping trip", cands, "date", clock=autumn) == [0.0, 0.0, 0.0, 0.0]


def test_times_a_turn_mentions_are_read_against_its_own_date() -> None:
    """ "yesterday" written on 3 July 2023 is 2 July 2023; a "when" question favours turns that mention a time."""
    cands = [
        at(2023, 7, 3, "I signed up for a pottery class yesterday."),
        at(2023, 7, 3, "I love my pottery class."),
        at(2023, 8, 9, "We went camping last week, the kids loved it."),
    ]
    clock = datetime(2023, 10, 1, tzinfo=UTC)
    assert feat("What did Melanie do on 2 July 2023?", cands, "mentioned", clock=clock) == [1.0, 0.0, 0.0]
    august = "What did they do in the first week of August 2023?"
    assert feat(august, cands, "mentioned", clock=clock) == [0.0, 0.0, 1.0]
    assert feat("When did Melanie sign up for a pottery class?", cands, "when", clock=clock) == [1.0, 0.0, 1.0]
    assert feat("What did Melanie sign up for?", cands, "when", clock=clock) == [0.0, 0.0, 0.0]


def test_speaker_feature_reads_labels_and_the_names_of_roles() -> None:
    cands = [
        at(2023, 7, 3, "I researched adoption agencies."),
        at(2023, 7, 3, "That is great!", role="assistant"),
        at(2023, 7, 3, "Melanie: and I painted a lake.", role="assistant"),
    ]
    names = Context(speakers={"user": "Caroline", "assistant": "Melanie"})
    assert feat("What did Caroline research?", cands, "speaker", names) == [1.0, 0.0, 0.0]
    assert feat("What did Melanie paint?", cands, "speaker", names) == [0.0, 1.0, 1.0]
    assert feat("What did Caroline research?", cands, "speaker") == [0.0, 0.0, 0.0]  # roles without names
    assert (
        feat("What did Caroline Smith say?", cands, "speaker", Context(speakers={"user": "Caroline Smith"}))[0] == 1.0
    )
    assert feat("What did Caroline say?", cands, "speaker", Context(speakers={"user": "Caroline Smith"}))[0] == 1.0


def test_relevance_is_a_probability_that_grows_with_the_score_and_the_match() -> None:
    pool = [cand("a", "x", v=1, f=1, cos=0.62, bm25=9.0), cand("b", "y", v=2, cos=0.40), cand("c", "z", f=2, bm25=2.0)]
    scored = DEFAULT_RANKER.rank(analyse("q"), pool)
    relevance = DEFAULT_CALIBRATION.relevance(analyse("q"), pool, scored)
    assert all(0.0 <= p <= 1.0 for p in relevance) and relevance[0] == max(relevance)
    weak = [cand("a", "x", v=1, f=1, cos=0.22, bm25=1.0), cand("b", "y", v=2, cos=0.20), cand("c", "z", f=2, bm25=0.5)]
    # the same ranks and the same relative features, but the best match is poor: lower relevance
    assert DEFAULT_CALIBRATION.relevance(analyse("q"), weak, DEFAULT_RANKER.rank(analyse("q"), weak))[0] < relevance[0]
    assert Calibration((0.0, 0.0, 0.0, 0.0), 1e9).relevance(analyse("q"), pool, scored) == [1.0, 1.0, 1.0]  # clamped
    with pytest.raises(ValueError, match="needs 4 weights"):
        Calibration((1.0,), 0.0)


def test_relevance_grows_with_how_much_of_the_query_the_hit_contains() -> None:
    query = "What is my cat called?"  # its words: cat, called

    def top(content: str) -> float:
        pool = [cand("a", content, v=1, f=1, cos=0.45, bm25=2.0), cand("b", "Unrelated words here", v=2, cos=0.2)]
        return DEFAULT_CALIBRATION.relevance(analyse(query), pool, DEFAULT_RANKER.rank(analyse(query), pool))[0]

    assert coverage(analyse(query), cand("a", "My cat is called Miso"), Context()) == 1.0
    assert coverage(analyse(query), cand("a", "The cat sleeps all day"), Context()) == 0.5
    assert top("My cat is called Miso") > top("The cat sleeps all day") > top("Miso sleeps all day")
    # a speaker's name counts as said by that speaker's turn, and is not asked of anyone else's
    asks = "What did Caroline paint?"
    roles = Context(speakers={"user": "Caroline", "assistant": "Melanie"})
    by = Candidate(
        id="t", content="I painted a lake", found=Found(id="t", content="I painted a lake", created_us=0, role="user")
    )
    assert coverage(analyse(asks), by, roles) == 0.75  # caroline (the speaker) 1, paint ("painted": its stem) 1/2
    drew = Candidate(
        id="d", content="I drew a lake", found=Found(id="d", content="I drew a lake", created_us=0, role="user")
    )
    assert coverage(analyse(asks), drew, roles) == 0.5  # caroline yes, paint no
    other = Candidate(
        id="u",
        content="I paint every day",
        found=Found(id="u", content="I paint every day", created_us=0, role="assistant"),
    )
    assert coverage(analyse(asks), other, roles) == 1.0  # paint; Caroline is left out: not this turn's speaker
    assert coverage(analyse(asks), cand("n", "Caroline: I paint"), Context()) == 1.0  # a named turn carries its speaker


def test_coverage_matches_words_as_the_keyword_index_does() -> None:
    """A query's word is found in a row when the keyword index would match it there: as written once accents are
    folded ("Munchen" in "München", "café" in "cafe") or in a part of a word joined by underscores (a whole word), or
    with the same stem ("peanut" in "peanuts", "cat's name" in "cats are named": STEM_MATCH). Relevance had collapsed
    for such queries (0.03 for "peanut allergy", 0.76 for "peanuts") while the keyword leg ranked the row first."""

    def share(query: str, content: str) -> float:
        return coverage(analyse(query), cand("a", content), Context())

    assert share("peanuts", "I am allergic to peanuts.") == 1.0
    assert share("peanut allergy", "I am allergic to peanuts.") == STEM_MATCH / 2  # "allergy", "allergic": two stems
    assert share("what is my cat's name?", "My cats are named Tom and Jerry.") == STEM_MATCH
    assert (
        share("when are the meetings with design?", "The meeting with the design team moved to Thursday.")
        == (1 + STEM_MATCH) / 2
    )
    assert share("Munchen", "Meine Schwester wohnt in München.") == 1.0
    assert share("München", "I moved to Munchen.") == 1.0
    assert share("cafe Hélène", "J'ai rendez-vous au cafe de Flore avec Hélène.") == 1.0
    assert share("Lodz", "We met in Łódź.") == 1.0
    assert share("retry backoff", "The key is retry_backoff_ms.") == 1.0
    assert share("Сергей", "Мой начальник Сергей Петров.") == 1.0  # other scripts are kept as they are
    assert share("dog", "My cats are named Tom and Jerry.") == 0.0


def test_a_fact_asked_in_another_inflection_or_without_accents_clears_the_recall_threshold(tmp_path: Path) -> None:
    """Through a real store and the default model: a fact asked about in another inflection ("cat's name" for "cats
    are named") or without its accents ("Munchen") is found first by both legs and clears auto_recall_threshold
    (its relevance had been 0.03, against 0.7 for the words as stored)."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("work").id
    cats, sister = "My cats are named Tom and Jerry.", "Meine Schwester wohnt in München."
    facts = [cats, sister, "I am allergic to peanuts.", "The gym opens at 6am on weekdays.", "My car is a blue Civic."]
    memory.archive.insert_many(agent, [(text, []) for text in facts])
    memory.archive.store.indexes.optimize()
    for query, fact in (("what is my cat's name?", cats), ("Munchen", sister)):
        (hit,) = memory.archival_search(
            agent, query, tags=None, tag_match_mode="any", top_k=1, start_datetime=None, end_datetime=None
        ).hits
        assert hit.content == fact and hit.fts_rank == 1
        assert hit.relevance >= settings.auto_recall_threshold, (query, hit.relevance)


def test_relevance_does_not_depend_on_how_many_rows_are_stored() -> None:
    """A raw BM25 score grows with the corpus (its IDF): the same match must not become more relevant because more
    unrelated rows are stored, or a new user's few memories would never come back."""
    q = "What is my cat called?"
    alone = [cand("a", "My cat is called Miso", v=1, f=1, cos=0.52, bm25=0.58)]
    elsewhere = Candidate(
        id="b",
        content="y",
        found=Found(id="b", content="y", created_us=0, conversation_id="another"),
        vector_rank=2,
        fts_rank=2,
        cosine=0.30,
        bm25=1.0,
    )  # not of a's sitting: only raw scores differ
    among_many = [cand("a", "My cat is called Miso", v=1, f=1, cos=0.52, bm25=9.6), elsewhere]
    assert DEFAULT_CALIBRATION.relevance(analyse(q), alone, DEFAULT_RANKER.rank(analyse(q), alone))[0] == pytest.approx(
        DEFAULT_CALIBRATION.relevance(analyse(q), among_many, DEFAULT_RANKER.rank(analyse(q), among_many))[0], rel=0.2
    )


def test_a_lone_stored_fact_is_as_relevant_as_among_many_real_rows(tmp_path: Path) -> None:
    """The real model and store: a new user's one fact comes back above auto-recall's threshold, as it does among
    100 unrelated passages; an unrelated prompt stays far below it either way."""
    from tiermem.base.config import Settings, load_settings
    from tiermem.domain.factory import open_memory

    threshold = Settings.model_fields["auto_recall_threshold"].default
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="default"))
    memory.archive.embedder.wait(None)
    fact = "Ada's cat is called Miso, a grey tabby who sleeps on the piano."
    topics = "garden kitchen train weather music holiday coffee budget meeting doctor invoice football paint river"
    alone, crowded = memory.ensure_agent("alone").id, memory.ensure_agent("crowded").id
    memory.archive.insert(alone, fact)
    words = topics.split()
    notes = [f"Note {i}: {' '.join(words[i % 14 :] + words[: i % 14])}" for i in range(100)]
    memory.archive.insert_many(crowded, [(fact, [])] + [(note, []) for note in notes])
    memory.archive.store.indexes.optimize()
    top = {agent: memory.archive.search(agent, "What is my cat called?", top_k=3).hits[0] for agent in (alone, crowded)}
    assert all(fact == hit.content and hit.relevance >= threshold for hit in top.values())
    assert top[alone].relevance == pytest.approx(top[crowded].relevance, rel=0.35)
    for agent in (alone, crowded):
        assert (
            memory.archive.search(agent, "How do I reverse a linked list in C?", top_k=3).hits[0].relevance
            < threshold / 5
        )


def test_a_clear_semantic_winner_is_not_outweighed_by_length(tmp_path: Path) -> None:
    """With no keyword match, the passage closest in meaning wins over a slightly longer, less related one."""
    cands = [
        cand("cat", "The cat sleeps on the windowsill every afternoon", v=1, cos=0.393),
        cand("dog", "Our dog Rex is due for his vaccination in May", v=2, cos=0.247),
        cand("bird", "My parrot Kiwi can whistle the national anthem", v=3, cos=0.158),
    ]
    assert DEFAULT_RANKER.rank(analyse("feline napping spot"), cands)[0][0].id == "cat"


def test_a_clear_best_match_by_meaning_is_not_lost_among_long_rows_matching_nothing(tmp_path: Path) -> None:
    """A short fact that alone matches a query sharing no word with it (cosine 0.37 against 0.22 for the next) is
    the first result, not ranked below longer rows that match nothing (the length feature had put it 6th)."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="default"))
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("work").id
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()
    shuffle = random.Random(8)
    filler = [f"fact {i}: " + " ".join(shuffle.choice(words) for _ in range(30)) for i in range(60)]
    fact = "Ada drinks green tea, never coffee."
    memory.archive.insert_many(agent, [(fact, [])] + [(text, []) for text in filler])
    memory.archive.store.indexes.optimize()
    hits = memory.archive.search(agent, "hot beverage", top_k=5).hits
    assert hits[0].content == fact and hits[0].vector_rank == 1
    assert [h.score for h in hits[1:]] == sorted((h.score for h in hits[1:]), reverse=True)


def test_only_a_clear_best_match_by_meaning_is_moved_first() -> None:
    """The vector leg's first row is moved first only when it stands out (CLEAR_MARGIN ahead of the second, and
    CLEAR_SPREAD times the second's lead over the CLEAR_DEPTH-th) and is no question; fusion rankers never move it."""
    long = " ".join(["word"] * 30)

    def pool(first: str, cosine: float, others: list[float]) -> list[Candidate]:
        rest = [cand(f"r{n}", f"{n} {long}", v=n + 2, cos=c) for n, c in enumerate(others)]
        return [cand("top", first, v=1, cos=cosine), *rest]

    flat = [0.22 - 0.001 * n for n in range(12)]
    q = analyse("hot beverage")
    assert clear_match(pool("Ada drinks green tea.", 0.37, flat)) is not None
    moved = DEFAULT_RANKER.rank(q, pool("Ada drinks green tea.", 0.37, flat))
    assert moved[0][0].id == "top"
    unmoved = dataclasses.replace(DEFAULT_RANKER, clear_first=False).rank(q, pool("Ada drinks green tea.", 0.37, flat))
    assert unmoved[0][0].id != "top"  # it is moved: by score alone it is not first
    # each row keeps its own score (the moved one's is not the first's, nor tied with it)
    assert {c.id: score for c, score in moved} == {c.id: score for c, score in unmoved}
    assert [c.id for c, _ in moved[1:]] == [c.id for c, _ in unmoved if c.id != "top"]
    assert clear_match(pool("Ada drinks green tea.", 0.30, flat)) is None  # less than CLEAR_MARGIN ahead
    spread = [0.22 - 0.02 * n for n in range(12)]  # the second leads the tenth by 0.18: the first does not stand out
    assert clear_match(pool("Ada drinks green tea.", 0.37, spread)) is None
    assert clear_match(pool("What does Ada drink?", 0.37, flat)) is None
    assert clear_match(pool("Ada drinks green tea.", 0.37, flat[:1])) is None  # fewer than three rows by meaning
    assert Ranker.legs(0.0, 1.0).rank(q, pool("Ada drinks green tea.", 0.37, flat))[0][0].id != "top"


def test_the_row_both_legs_rank_first_stays_first() -> None:
    """A short fact that both legs rank first is not put below a long passage that merely mentions the query's
    words, which both legs rank second (the length feature had outweighed the leg ranks: at top_k 1 the passage was
    the only result); a question that both legs rank first is not moved, nor a row the ranker puts ahead of it for
    something besides its length."""
    long = "Meeting notes: the appointment of a team lead, the dentist plan, the office move, the release. " * 6
    others = [cand(f"o{n}", f"other fact number {n}", v=n + 3, cos=0.3 - 0.01 * n) for n in range(6)]

    def pool(first: str) -> list[Candidate]:
        return [cand("first", first, v=1, f=1, cos=0.62, bm25=3.0), cand("long", long, v=2, f=2, cos=0.55, bm25=2.5)]

    q = analyse("dentist appointment")
    fact = pool("My dentist appointment is at 3pm on Thursday.") + others
    assert clear_match(fact) is None  # not a clear best match by meaning: 0.07 ahead
    by_score = dataclasses.replace(DEFAULT_RANKER, clear_first=False).rank(q, fact)
    assert by_score[0][0].id == "long"  # by score alone the passage is first
    moved = DEFAULT_RANKER.rank(q, fact)
    assert [c.id for c, _ in moved[:2]] == ["first", "long"]
    assert {c.id: score for c, score in moved} == {c.id: score for c, score in by_score}  # scores kept
    question = pool("When is my dentist appointment?") + others
    assert DEFAULT_RANKER.rank(q, question)[0][0].id != "first"
    split = [replace(c, fts_rank=3) if c.id == "first" else c for c in fact]  # first by meaning only
    assert DEFAULT_RANKER.rank(q, split)[0][0].id == "long"
    # a row ahead of it for what it says, not for its length (the speaker the query names), stays ahead
    said = pool("My dentist appointment is at 3pm on Thursday.")[:1] + [
        cand("said", "Caroline: the dentist appointment moved to Friday.", v=2, f=2, cos=0.55, bm25=2.5),
        *others,
    ]
    assert [c.id for c, _ in DEFAULT_RANKER.rank(analyse("When is Caroline's dentist appointment?"), said)][:2] == [
        "said",
        "first",
    ]


def test_archival_search_returns_the_fact_both_legs_rank_first_at_top_k_1(tmp_path: Path) -> None:
    """Through a real store and the default model: the fact both legs rank first is archival search's one result,
    not a long passage that mentions the same words."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="default"))
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("work").id
    notes = (
        "Meeting notes from the quarterly planning session. We discussed the time budget for the migration, the "
        "appointment of a new team lead, the dentist insurance plan changes for employees, the office move, and the "
        "schedule for the next release. Action items: Maria to draft the hiring plan, Tom to review contracts. "
    ) * 3
    fact = "My dentist appointment is at 3pm on Thursday."
    facts = [fact, notes, "I am allergic to peanuts.", "My car is a blue 2015 Honda Civic.", "The gym opens at 6am."]
    memory.archive.insert_many(agent, [(text, []) for text in facts])
    memory.archive.store.indexes.optimize()
    for query in ("dentist appointment", "dentist"):
        (hit,) = memory.archival_search(
            agent, query, tags=None, tag_match_mode="any", top_k=1, start_datetime=None, end_datetime=None
        ).hits
        assert hit.content == fact and hit.vector_rank == 1 and hit.fts_rank == 1


def test_legs_ranker_is_reciprocal_rank_fusion() -> None:
    cands = [cand("x", "one", v=1, f=9), cand("y", "two", v=3, f=1), cand("z", "three", f=2)]
    assert [c.id for c, _ in Ranker.legs(1.0, 0.0).rank(analyse("q"), cands)][:2] == ["x", "y"]
    assert [c.id for c, _ in Ranker.legs(0.0, 1.0).rank(analyse("q"), cands)] == ["y", "z", "x"]
    with pytest.raises(ValueError, match=f"needs {len(FEATURES)} weights"):
        Ranker((1.0, 2.0))


def test_merge_keeps_one_candidate_per_row_with_both_legs() -> None:
    vec = [Found(id="a", content="A", created_us=1, cosine=0.75), Found(id="b", content="B", created_us=2, cosine=0.5)]
    fts = [Found(id="b", content="B", created_us=2, bm25=3.0), Found(id="c", content="C", created_us=3, bm25=1.0)]
    got = {c.id: c for c in merge(vec, fts)}
    assert got["a"].cosine == 0.75 and got["a"].fts_rank is None
    assert (got["b"].vector_rank, got["b"].fts_rank, got["b"].bm25) == (2, 1, 3.0)
    assert got["c"].vector_rank is None and got["c"].cosine is None


def test_shipped_ranker_prefers_the_named_speakers_statement_over_a_question(tmp_path: Path) -> None:
    """Through a real store: the question that merely repeats the query's words loses to the answer."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    embedder = BackgroundEmbedder(HashingEmbedder, "hashing-384", 384, 256)
    embedder.start()
    embedder.wait(10)
    archive = Archive(store, embedder)
    turns = [
        "Melanie: Caroline, what did you research for the adoption?",
        "Caroline: I researched adoption agencies all week, found three that support LGBTQ parents and "
        "started the paperwork with one of them.",
        "Melanie: That is great news, the kids will be thrilled to hear about it.",
    ]
    agent = "agent-1"
    archive.log_messages(agent, [{"role": "user", "content": t} for t in turns])
    query = "What did Caroline research?"
    pool = archive.candidates("messages", agent, query)
    by_keywords = Ranker.legs(0.0, 1.0).rank(pool.query, pool.candidates, pool.context)
    assert by_keywords[0][0].content == turns[0]  # the keyword leg alone puts the question first...
    hits = archive.conversation_search(agent, query, limit=3).hits
    assert hits[0].content == turns[1]  # ...the shipped ranker the answer
    assert DEFAULT_RANKER.weights[FEATURES.index("question")] < 0 < DEFAULT_RANKER.weights[FEATURES.index("speaker")]


def test_without_names_leaves_the_question() -> None:
    names = ["Caroline", "Melanie", "Note"]
    assert without_names("What did Caroline research?", names) == "What did research?"
    assert without_names("What is Caroline's identity, and Melanie's?", names) == "What is identity, and ?"
    assert without_names("what did I note about Carolinexyz?", names) == "what did I note about Carolinexyz?"
    assert without_names("Caroline", names) == "Caroline"  # nothing else to search for: kept
    assert speaker_of("Caroline: I went") == "Caroline" and speaker_of("no label here") is None


def test_searches_before_and_after_speakers_are_known_agree(tmp_path: Path) -> None:
    """The first search of an agent learns its speakers from the keyword leg; later ones embed at once."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    embedder = BackgroundEmbedder(HashingEmbedder, "hashing-384", 384, 256)
    embedder.start()
    embedder.wait(10)
    turns = [
        "Caroline: I researched adoption agencies this week.",
        "Melanie: We went camping in the mountains.",
        "Caroline: The support group was powerful.",
        "Melanie: My kids loved the pottery class.",
    ]
    first = Archive(store, embedder)
    first.log_messages("a", [{"role": "user", "content": t} for t in turns])
    query = "What did Caroline research?"
    cold = [h.id for h in first.conversation_search("a", query, limit=4).hits]
    warm = [h.id for h in first.conversation_search("a", query, limit=4).hits]
    fresh = [h.id for h in Archive(store, embedder).conversation_search("a", query, limit=4).hits]
    assert cold == warm == fresh
    assert first._learn_speakers("a", []) == {"Caroline", "Melanie"}


def test_turns_logged_by_role_are_found_by_the_names_in_the_agents_blocks(memory: Memory) -> None:
    """Hosts log turns by role, without names: the ``human`` block names the user, ``persona`` the agent."""
    agent = memory.ensure_agent("roles").id
    turns = [
        ("user", "I researched adoption agencies all week and found three that I like."),
        ("assistant", "Caroline, that research sounds exhausting, Caroline! Caroline, research!"),
    ]
    memory.archive.log_messages(agent, [{"role": "user", "content": "We should paint together some day."}])
    memory.archive.log_messages(agent, [{"role": r, "content": t} for r, t in turns])
    query = "What did Caroline research?"
    memory.edit(agent, "human", Rethink("The user's name is Caroline."))
    assert memory.archive.speaker_names(agent) == {"user": "Caroline"}
    assert memory.archive.candidates("messages", agent, query).context.speakers == {"user": "Caroline"}
    named = memory.archive.conversation_search(agent, query, limit=3).hits
    memory.edit(agent, "human", Rethink("Likes tea."))  # nobody named: the role carries no name
    assert memory.archive.speaker_names(agent) == {}
    unnamed = memory.archive.conversation_search(agent, query, limit=3).hits
    assert named[0].content == turns[0][1] and unnamed[0].content == turns[1][1]
    memory.edit(agent, "persona", Rethink("I am Melanie, a painter."))
    assert memory.archive.speaker_names(agent) == {"assistant": "Melanie"}


def test_relative_times_in_a_query_read_the_conversations_clock(memory: Memory) -> None:
    """ "last week" is the week before the newest turn, however long ago that was (an imported history)."""
    agent = memory.ensure_agent("clock").id
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "We went hiking in the hills.", "timestamp": "2023-05-02T10:00:00Z"},
            {"role": "user", "content": "We went hiking by the lake.", "timestamp": "2023-06-20T10:00:00Z"},
            {"role": "user", "content": "Nothing much happened today.", "timestamp": "2023-06-28T10:00:00Z"},
        ],
    )
    query = "Where did we go hiking last week?"
    pool = memory.archive.candidates("messages", agent, query)
    assert pool.query.clock == datetime(2023, 6, 28, 10, tzinfo=UTC)
    assert memory.archive.candidates("messages", agent, "Where did we go hiking?").query.clock is None  # not read
    assert memory.archive.conversation_search(agent, query, limit=2).hits[0].content == "We went hiking by the lake."
    assert (
        memory.archive.conversation_search(agent, "Where did we go hiking in May 2023?", limit=2).hits[0].content
        == "We went hiking in the hills."
    )


def test_session_features_read_the_candidates_of_the_same_sitting() -> None:
    """A turn's sitting: the candidates of its conversation written within an hour of it."""

    def turn(i: str, minute: int, conversation: str, v: int | None = None, f: int | None = None) -> Candidate:
        us = int(datetime(2023, 7, 3, 12, tzinfo=UTC).timestamp() * 1_000_000) + minute * 60_000_000
        return Candidate(
            id=i,
            content=i,
            found=Found(id=i, content=i, created_us=us, conversation_id=conversation),
            vector_rank=v,
            fts_rank=f,
            cosine=0.5 if v else None,
            bm25=1.0 if f else None,
        )

    cands = [
        turn("a", 0, "c1", v=1, f=1),
        turn("b", 30, "c1", v=5),
        turn("c", 300, "c1", f=3),
        turn("d", 10, "c2", v=2),
    ]
    best, total, size = (feat("q", cands, name) for name in ("session_best", "session_sum", "session_size"))
    assert best[0] == pytest.approx(1 / 15) and best[1] == pytest.approx(1 / 11 + 1 / 11)  # each other's
    assert best[2] == best[3] == 0.0  # five hours later; another conversation
    assert total[1] == best[1] and size[0] == size[1] == pytest.approx(math.log(2)) and size[2] == 0.0


def test_neighbour_features_read_the_turns_logged_just_before_and_after_in_the_sitting() -> None:
    """Turns of one sitting often share a timestamp: the order they were logged in (seq) says which is next."""
    us = int(datetime(2023, 7, 3, 12, tzinfo=UTC).timestamp() * 1_000_000)

    def turn(
        i: str, seq: int, conversation: str = "c1", v: int | None = None, f: int | None = None, created: int = us
    ) -> Candidate:
        return Candidate(
            id=i,
            content=i,
            found=Found(id=i, content=i, created_us=created, conversation_id=conversation, seq=seq),
            vector_rank=v,
            fts_rank=f,
            cosine=0.5 if v else None,
            bm25=1.0 if f else None,
        )

    cands = [
        turn("answer", 30, v=4),
        turn("question", 20, v=1, f=1),
        turn("later", 90, f=2),
        turn("other", 25, conversation="c2", v=3),
        turn("next day", 10, v=5, created=us + 86_400_000_000),
    ]
    before, after = feat("q", cands, "before"), feat("q", cands, "after")
    assert before[0] == pytest.approx(1 / 11 + 1 / 11)  # the question logged just before the answer
    assert after[1] == pytest.approx(1 / 14) and before[1] == 0.0  # the answer after it; nothing before
    assert before[2] == pytest.approx(1 / 14) and after[2] == 0.0  # the nearest before it, however far
    assert before[3] == after[3] == 0.0 and before[4] == after[4] == 0.0  # another conversation; another sitting
    unordered = [
        Candidate(
            id=c.id,
            content=c.content,
            found=replace(c.found, seq=None),
            vector_rank=c.vector_rank,
            fts_rank=c.fts_rank,
            cosine=c.cosine,
            bm25=c.bm25,
        )
        for c in cands
    ]
    assert feat("q", unordered, "before") == feat("q", unordered, "after") == [0.0] * 5  # passages: no log order


def test_questions_about_several_things_weigh_the_sitting_apart() -> None:
    """Present perfect, "how many", "both", a plural object asked of someone: evidence spread over sittings."""
    several = [
        "What books has John read?",
        "Has Caroline ever been to Paris?",
        "How many children does Melanie have?",
        "What do both Joanna and Nate like?",
        "What instruments does Tim play?",
        "Where have they travelled?",
    ]
    single = [
        "What is Caroline's identity?",
        "When did Melanie paint a sunrise?",
        "What does Tim have to do?",
        "Where has the key gone?",
        "What did John say about the game?",
    ]
    assert [q for q in several if not asks_several(q)] == [] and [q for q in single if asks_several(q)] == []
    us = int(datetime(2023, 7, 3, 12, tzinfo=UTC).timestamp() * 1_000_000)
    cands = [
        Candidate(
            id=i,
            content=i,
            found=Found(id=i, content=i, created_us=us, conversation_id="c", seq=n),
            vector_rank=n + 1,
            cosine=0.5,
        )
        for n, i in enumerate("abc")
    ]
    for name in ("best", "sum", "size"):
        assert feat(several[0], cands, f"several_{name}") == feat(several[0], cands, f"session_{name}")
        assert feat(single[0], cands, f"several_{name}") == [0.0, 0.0, 0.0]
    assert feat(several[0], cands, "session_size")[0] > 0


def test_the_legs_return_the_order_turns_were_logged_in(memory: Memory) -> None:
    """Turns logged together share a timestamp; the legs read seq, so an answer knows the question before it."""
    agent = memory.ensure_agent("order").id
    turns = ["Where did you go on holiday?", "We went to Lisbon and ate custard tarts.", "The weather was grand."]
    memory.archive.log_messages(
        agent, [{"role": "user", "content": t, "timestamp": "2023-05-02T10:00:00Z"} for t in turns]
    )
    pool = memory.archive.candidates("messages", agent, "Where did you go on holiday?")
    by_content = {c.content: c for c in pool.candidates}
    seqs = [by_content[t].found.seq for t in turns]
    assert len(by_content) == 3 and all(isinstance(n, int) for n in seqs) and seqs == sorted(seqs)
    rows = dict(
        zip(
            (c.content for c in pool.candidates),
            features(pool.query, pool.candidates, pool.context),
        )
    )
    found = {t: rows[t][0] + rows[t][1] for t in turns}
    assert rows[turns[1]][FEATURES.index("before")] == pytest.approx(found[turns[0]])
    assert rows[turns[1]][FEATURES.index("after")] == pytest.approx(found[turns[2]])
