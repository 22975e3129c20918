"""Second-stage ranking of search candidates: a small linear model over what the two legs found, and the
calibrated relevance of each hit.

Both legs (vector and full-text) return a pool of candidates (40 each for a top-10 search; recall: see ``pool.pooled``). Each candidate gets
features that need no model call and no read besides the agent's sitting index (``sittings``, kept in process): its rank in each leg, its normalised BM25 score, how far its
cosine similarity to the query is below the pool's best, whether it is itself a question, its length, whether the
query names its speaker (the label of a ``"Caroline: ..."`` turn, or the name of the role a turn was logged under:
``Context.speakers``), what the other candidates of its sitting scored (its conversation, within an hour: a topic
is talked over for several turns) and what its nearest neighbours there scored (the candidates logged just before
and just after it: an answer follows its question), the sitting features again when the query asks about several
things over time (``asks_several``: their evidence is spread over sittings, so a strong sitting counts for less),
how the candidate's whole sitting ranks for the query (``sittings``: BM25 over every turn of each sitting, not
only the candidates; 0 for a question about several things; a fact that states its date, ``stated``, has that date
for its sitting: the rank of its date among the pool's dates by BM25 over the pool's facts of each), whether it opens its sitting (the first turn logged
in it: where what is new since the last talk is said; 0 without a sitting index), and three about time (``timeexpr``): whether it was written in a period the query names
("in June 2023", "last week" against the conversation's clock), whether a time it mentions ("yesterday", resolved
against its own timestamp) falls in such a period, and whether it mentions a time at all when the query asks
"when". A weighted sum of those features orders the pool.

The weights are fitted by listwise (softmax) logistic regression on the LoCoMo dev split (``python -m bench locomo`` fits them,
prints them, and reports leave-one-conversation-out figures: weights fitted on four conversations, scored on the
fifth; archival passages that state their dates have their own, ``PASSAGE_RANKER``, fitted the same way by
``python -m bench locomo --archival``). They are stored here as plain numbers; nothing is learned at run time. Reciprocal rank fusion is the
special case where only the two rank features count (``Ranker.legs``), which is how the keyword-only and
vector-only rankings are expressed. ``Calibration`` turns a hit's score into a relevance in [0, 1].

Why this module is long: the features, the ranker and the calibration are one model, with the weights fitted for it
stored beside it (the turns' and the dated passages', one number a line, refitted together); split, a feature would
change in one module and the numbers fitted on it in another.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol

from ...base.records import Found, Hit
from . import timeexpr
from .cjk import lone, word_count
from .keywords import forms, written
from .query import Query, names, speaker_of, subject_of, terms

FEATURES = (
    "vector_rrf",
    "fts_rrf",
    "bm25",
    "cosine",
    "question",
    "length",
    "speaker",
    "date",
    "mentioned",
    "when",
    "session_best",
    "session_sum",
    "session_size",
    "before",
    "after",
    "several_best",
    "several_sum",
    "several_size",
    "sitting",
    "opens",
)
RANK_K = 10  # rank features are 1 / (RANK_K + rank), 0 for a candidate the leg did not return

_AFTER = timedelta(days=31)  # a period named in a question is often talked about in the weeks after it
SITTING_K = 3  # the sitting feature is 1 / (SITTING_K + the rank of the candidate's sitting), 0 for none
STATED_K1, STATED_B = 1.2, 0.75  # the BM25 that ranks a pool's dates (``_stated_ranks``), as the sittings'
STATED_HEAD = 48  # how far into a passage its opening date may reach ("On Wednesday, 13 September 2023:")
SESSION_US = 3_600_000_000  # candidates of one conversation written within an hour of each other: one sitting
# A clear best match by meaning (``clear_match``): the vector leg's first row, ahead of its second by at least
# CLEAR_MARGIN in cosine and by at least CLEAR_SPREAD times the gap between its second and its CLEAR_DEPTH-th row.
CLEAR_MARGIN, CLEAR_SPREAD, CLEAR_DEPTH = 0.1, 3.0, 10


class Sittings(Protocol):
    """Where a turn's sitting ranks for the query (``sittings.SittingRanks``): 1 = best; None if it matched nothing."""

    def rank_of(self, conversation: str | None, created_us: int | None) -> int | None: ...

    def opens(self, conversation: str | None, created_us: int | None, seq: int | None) -> bool:
        """Whether the turn is the first of its sitting (its log order ``seq`` is that sitting's first)."""
        ...

    def position(self, conversation: str | None, created_us: int | None, seq: int | None) -> tuple[int, int] | None:
        """(its sitting, its place in that sitting's log order), or None if not known (``pool.pooled``: a
        row within NEIGHBOURS turns of a pooled one joins the pool)."""
        ...


@dataclass(frozen=True)
class Context:
    """What a search knows besides the query (``query.Query``: its clock among it) and its candidates.

    ``speakers``: the names of the roles, for turns logged by role without a name (``{"user": "Caroline"}``);
    ``sittings``: how the query ranks each sitting of the agent's conversations as a whole (recall only);
    ``subjects``: a row without a speaker is about the name it opens with (``query.subject_of``: facts), which the
    ``speaker`` feature then reads.
    """

    speakers: Mapping[str, str] = field(default_factory=dict)
    sittings: Sittings | None = None
    subjects: bool = False


@dataclass(frozen=True)
class Candidate:
    """One row found by either leg, with what each leg said about it (ranks are 1-based). ``stated_us``: the date
    the row says it is about, when it opens with one (``stated``: passages); the ranker then places it in time by
    that date rather than by when it was written."""

    id: str
    content: str
    found: Found
    vector_rank: int | None = None
    fts_rank: int | None = None
    cosine: float | None = None
    bm25: float | None = None
    stated_us: int | None = None

    @property
    def time_us(self) -> int | None:
        """The time the ranker reads: the date the row states, else when it was written."""
        return self.stated_us if self.stated_us is not None else self.found.created_us


def stated_time(content: str, zone: tzinfo = UTC) -> int | None:
    """The date a text opens with, before a colon ("On 8 May 2023: Audrey got new collars for her dogs.",
    "2023-05-08: ..."), in microseconds (its midnight in ``zone``); None if it opens with none."""
    head = content[:STATED_HEAD].split(":", 1)
    if len(head) < 2:
        return None
    dates = timeexpr.full_dates(head[0])
    return int(dates[0].replace(tzinfo=zone).timestamp() * 1_000_000) if dates else None


def stated(candidates: Sequence[Candidate], zone: tzinfo = UTC) -> list[Candidate]:
    """The candidates with the date each states at its start (``stated_time``, a day of ``zone``: the query's), for
    kinds whose rows are facts written with their date (archival passages: a model stores "On 8 May 2023: ..."
    whenever it gets to it)."""
    out = []
    for c in candidates:
        at = stated_time(c.content, zone)
        out.append(c if at is None else replace(c, stated_us=at))
    return out


@dataclass(frozen=True)
class Ranker:
    """A linear scorer over ``FEATURES``: ``score = sum(weight * feature)``. With ``undated`` (a kind whose rows may
    state their dates: archival passages), a pool where none does (``dated``) is ranked by ``undated`` instead (rows
    written some other way: turns stored as passages, notes without a date), so that weights fitted on dated facts
    never rank rows unlike them."""

    weights: tuple[float, ...]
    undated: Ranker | None = None
    clear_first: bool = False  # a clear best match by meaning is ranked first (``keep_clear_first``)

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a Ranker needs {len(FEATURES)} weights ({', '.join(FEATURES)}), got {len(self.weights)}")

    @classmethod
    def legs(cls, vector: float, fts: float) -> Ranker:
        """Weighted reciprocal rank fusion of the two legs (k = RANK_K): no other feature counts."""
        return cls((vector, fts, *(0.0,) * (len(FEATURES) - 2)))

    def rank(
        self, query: Query, candidates: Sequence[Candidate], context: Context | None = None
    ) -> list[tuple[Candidate, float]]:
        """Candidates with their scores, best first (ties broken by id, so the order is stable)."""
        if self.undated is not None and not dated(candidates):
            return self.undated.rank(query, candidates, context)
        rows = features(query, candidates, context)
        scored = [(c, sum(w * x for w, x in zip(self.weights, row))) for c, row in zip(candidates, rows)]
        scored.sort(key=lambda t: (-t[1], t[0].id))
        return keep_clear_first(candidates, scored, self.unsized(candidates, rows)) if self.clear_first else scored

    def unsized(self, candidates: Sequence[Candidate], rows: Sequence[Sequence[float]]) -> dict[str, float]:
        """Each candidate's score with its ``length`` left out (``keep_clear_first``), by id; ``rows``: its features."""
        at = FEATURES.index("length")
        return {
            c.id: sum(w * x for n, (w, x) in enumerate(zip(self.weights, row)) if n != at)
            for c, row in zip(candidates, rows)
        }


def clear_match(candidates: Sequence[Candidate]) -> Candidate | None:
    """The vector leg's first row when it is a clear best match by meaning, else None: ahead of the leg's second by
    CLEAR_MARGIN in cosine at least, and by CLEAR_SPREAD times the gap between the second and the CLEAR_DEPTH-th at
    least (it stands out from rows that all match about as badly), and not itself a question (a turn asking what the
    query asks is close to it by meaning and rarely the answer). None with fewer than three rows from the leg."""
    found = sorted(
        ((c.vector_rank, c.cosine, c) for c in candidates if c.vector_rank and c.cosine is not None), key=lambda t: t[0]
    )
    if len(found) < 3:
        return None
    (_, first, top), (_, second, _) = found[0], found[1]
    deep = found[min(CLEAR_DEPTH, len(found)) - 1][1]
    margin = first - second
    if margin < CLEAR_MARGIN or margin < CLEAR_SPREAD * (second - deep) or _asks(top.content):
        return None
    return top


def agreed_first(candidates: Sequence[Candidate]) -> Candidate | None:
    """The row both legs rank first (the vector leg's first is the keyword leg's first too), unless it is itself a
    question (as ``clear_match``); else None."""
    top = next((c for c in candidates if c.vector_rank == 1 and c.fts_rank == 1), None)
    return None if top is None or _asks(top.content) else top


def keep_clear_first(
    candidates: Sequence[Candidate], scored: Sequence[tuple[Candidate, float]], unsized: Mapping[str, float]
) -> list[tuple[Candidate, float]]:
    """``scored`` (best first) with the pool's clear best match by meaning (``clear_match``) moved first, else with
    the row both legs rank first (``agreed_first``) moved above every row that outscores it by its length alone (its
    score without the ``length`` feature, ``unsized``, by id, is no higher). Every row keeps its own score (and so its
    calibrated relevance): a row's score may be below the next one's, the order being the ranker's, not the scores'.
    Lists merged from several searches (``tiermem search``, auto-recall) order their rows by relevance, as before.

    The weights are fitted on LoCoMo, where such a row is evidence or is ranked high anyway; in a pool unlike it the
    length and the rank features could put it below rows that match worse: one short fact that alone matches a query
    sharing no word with it, among long rows that all match it about as badly, out of a top 5; a short fact that both
    legs rank first below a long passage that merely mentions the query's words, which both rank second (the leg
    ranks' lead of the first over the second is less than what a few hundred words add). Length breaks near ties
    among rows the legs disagree on; it does not overturn their agreement (what else the ranker reads still may: the
    query naming another row's speaker, the period it names). Measured by ``python -m bench locomo`` (the shipped
    turn ranker's R@5 and R@10 as without the rule, both formats, but a named R@10 of 0.837 for 0.838 in one run of
    two) and ``python -m bench locomo --archival`` (the passage ranker's R@5 0.782-0.789 over two runs, 0.784
    without: within what the benchmark moves from run to run)."""
    out = list(scored)
    top = clear_match(candidates)
    agreed = top is None
    if agreed:
        top = agreed_first(candidates)
    if top is None or not out or out[0][0].id == top.id:
        return out
    at = next((i for i, (c, _) in enumerate(out) if c.id == top.id), None)
    if at is None:
        return out
    to = 0
    if agreed:  # below the last row ahead of it that outscores it without the length feature
        mine = unsized[top.id]
        to = next((i + 1 for i in range(at - 1, -1, -1) if unsized[out[i][0].id] > mine), 0)
    out.insert(to, out.pop(at))
    return out


def _asks(content: str) -> bool:
    """Whether a row is itself a question (the ``question`` feature)."""
    return content.rstrip().endswith("?")


def dated(candidates: Sequence[Candidate]) -> bool:
    """Whether some of the pool's rows state the date they are about (``stated``: facts written "On 8 May 2023: ...")."""
    return any(c.stated_us is not None for c in candidates)


def merge(vector: Sequence[Found], fts: Sequence[Found]) -> list[Candidate]:
    """One candidate per id from what the two legs found (best first in each: ranks count from 1). A row with no
    text is none: ranked as if the legs had not found it (``said``)."""
    found: dict[str, dict[str, Any]] = {}
    for rank, f in enumerate(filter(said, vector), start=1):
        found[f.id] = {"found": f, "vector_rank": rank, "cosine": f.cosine}
    for rank, f in enumerate(filter(said, fts), start=1):
        entry = found.setdefault(f.id, {"found": f})
        entry["fts_rank"] = rank
        entry["bm25"] = f.bm25
    return [Candidate(id=i, content=e["found"].content, **e) for i, e in found.items()]


def said(row: Found | Hit) -> bool:
    """Whether a found row is something said: an empty or blank turn (stored before conversation_log refused them,
    imported: a Letta turn that only called tools, or an answer of the agent loop calling conversation_search, whose
    text recall keeps aside: ``agent.llm.recall_content``), a heartbeat (``heartbeat``) and the agent loop's own
    plumbing (``Found.plumbing``: decided when it was written, ``store.query.is_plumbing``) are no result of any
    search. Checked on the rows the legs read, content in hand (a LanceDB clause on ``content`` would read every
    row's text, every search); ``isspace`` stops at the first other character."""
    return says(row.content) and not (isinstance(row, Found) and row.plumbing)


def says(content: str) -> bool:
    """``said`` of a row's content alone: not empty or blank, and no heartbeat."""
    return bool(content) and not content.isspace() and not heartbeat(content)


HEARTBEAT_CHARS = 2000  # the longest text read as a heartbeat: Letta's and the loop's are JSON of some 200 characters
_OBJECT = re.compile(r"\s*\{")


def heartbeat(content: str) -> bool:
    """Whether a turn's text is a heartbeat: a JSON object whose ``type`` is ``"heartbeat"`` (``{"type": "heartbeat",
    "reason": ..., "time": ...}``, the user message the memgpt-style loop writes after a tool asked for one, as Letta
    does). Letta's search leaves them out (``MessageManager._extract_message_text``), and so does every recall search
    here, for rows of any age: the loop's history still holds them. Only short texts opening with ``{`` and naming a
    heartbeat are parsed."""
    if len(content) > HEARTBEAT_CHARS or not _OBJECT.match(content) or "heartbeat" not in content:
        return False
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):  # not JSON (RecursionError: nested too deep): a turn like any other
        return False
    return isinstance(value, dict) and value.get("type") == "heartbeat"


def features(query: Query, candidates: Sequence[Candidate], context: Context | None = None) -> list[list[float]]:
    """The feature rows of ``candidates`` in ``FEATURES`` order (scores are relative to this pool)."""
    if not candidates:
        return []
    context = context or Context()
    best_bm25 = max((c.bm25 for c in candidates if c.bm25 is not None), default=0.0) or 1.0
    cosines = [c.cosine for c in candidates if c.cosine is not None]
    floor = min(cosines) if cosines else 0.0  # a row the vector leg did not return is at most this close
    best = max(cosines) if cosines else 0.0
    words, periods, asks_when = query.words, query.periods, query.asks_when
    out = []
    for c in candidates:
        speaker = speaker_of(c.content) or context.speakers.get(str(c.found.role))
        if speaker is None and context.subjects:
            speaker = subject_of(c.content)
        created = c.time_us
        when = datetime.fromtimestamp(created / 1_000_000, tz=UTC) if isinstance(created, int) else None
        mentions = timeexpr.resolve(c.content, when, query.zone) if when is not None and (periods or asks_when) else []
        out.append(
            [
                1.0 / (RANK_K + c.vector_rank) if c.vector_rank else 0.0,
                1.0 / (RANK_K + c.fts_rank) if c.fts_rank else 0.0,
                (c.bm25 or 0.0) / best_bm25,
                (c.cosine if c.cosine is not None else floor) - best,
                1.0 if _asks(c.content) else 0.0,
                math.log1p(word_count(c.content)),
                1.0 if speaker is not None and names(speaker, words) else 0.0,
                _written_in(periods, when),
                1.0 if any(p.overlaps(m) for p in periods for m in mentions) else 0.0,
                1.0 if asks_when and mentions else 0.0,
            ]
        )
    several = 1.0 if query.asks_several else 0.0
    dates = _stated_ranks(query, candidates) if context.sittings is None and not several else None
    for row, session, c in zip(out, _sessions(candidates, [row[0] + row[1] for row in out]), candidates):
        row.extend(session)
        row.extend(several * x for x in session[:3])
        row.append(0.0 if several else _sitting(c, context.sittings) if dates is None else _stated_sitting(c, dates))
        row.append(
            1.0
            if context.sittings is not None
            and context.sittings.opens(c.found.conversation_id, c.found.created_us, c.found.seq)
            else 0.0
        )
    return out


def _sitting(c: Candidate, sittings: Sittings | None) -> float:
    """1 / (SITTING_K + the rank of the candidate's sitting), 0 if its sitting matched nothing. Without a sitting
    index (archival passages; an agent too large to index) every row gets the value of the best sitting: the same
    for all, so it leaves their order alone, and a passage's score (so its relevance) stays on the scale the
    calibration was fitted on, where the best hits sit in well-ranked sittings."""
    if sittings is None:
        return 1.0 / (SITTING_K + 1)
    rank = sittings.rank_of(c.found.conversation_id, c.found.created_us)
    return 0.0 if rank is None else 1.0 / (SITTING_K + rank)


def _stated_ranks(query: Query, candidates: Sequence[Candidate]) -> dict[int | str, int] | None:
    """For rows placed in time by the date they state (``stated``: archival facts), the sitting of a row is its date:
    the pool's candidates grouped by the date each states (one without a date is a group of its own), each group
    ranked by BM25 of the query over its candidates' words (``query.terms``; k1 1.2, b 0.75, the idf over the
    pool's groups): group key -> rank (1 = best; groups sharing no word with the query left out). None when no
    candidate states a date (the rows are not placed in time so: ``_sitting``'s constant applies). Only the pool is
    read (measured by ``python -m bench locomo --archival``: as good as BM25 over every fact of each date)."""
    if not dated(candidates):
        return None
    words: dict[int | str, list[str]] = {}
    for c in candidates:
        words.setdefault(_stated_key(c), []).extend(terms(c.content))
    asked = set(terms(query.text))
    if not asked:
        return {}
    bags = {key: Counter(ws) for key, ws in words.items()}
    average = max(sum(len(ws) for ws in words.values()) / len(words), 1.0)
    df = Counter(w for bag in bags.values() for w in asked & bag.keys())
    n = len(bags)
    scores: dict[int | str, float] = {}
    for key, bag in bags.items():
        norm = STATED_K1 * (1 - STATED_B + STATED_B * len(words[key]) / average)
        score = sum(
            math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * bag[w] * (STATED_K1 + 1) / (bag[w] + norm)
            for w in asked
            if w in bag
        )
        if score > 0:
            scores[key] = score
    order = sorted(scores, key=lambda k: (-scores[k], str(k)))
    return {key: rank for rank, key in enumerate(order, start=1)}


def _stated_key(c: Candidate) -> int | str:
    return c.stated_us if c.stated_us is not None else c.id


def _stated_sitting(c: Candidate, ranks: Mapping[int | str, int]) -> float:
    """The sitting feature of a row grouped by the date it states (``_stated_ranks``): 1 / (SITTING_K + its date's
    rank), 0 if its date's group shares no word with the query."""
    rank = ranks.get(_stated_key(c))
    return 0.0 if rank is None else 1.0 / (SITTING_K + rank)


def _sessions(candidates: Sequence[Candidate], found: Sequence[float]) -> list[tuple[float, ...]]:
    """What the rest of each candidate's sitting scored: the best and the sum of the other candidates' leg ranks
    (``found``) among those of its conversation written within SESSION_US of it, log(1 + how many there are), and
    the ranks of its nearest neighbours among them (the candidate logged just before it, and just after; 0 for
    none; always 0 for rows without a log order: passages). A topic is talked over for several turns, so a turn
    next to strong matches is likelier the one sought; an answer is found through the question before it."""
    times = [_time_of(c) for c in candidates]
    order = sorted(
        range(len(candidates)),
        key=lambda i: (str(candidates[i].found.conversation_id or ""), times[i], _seq_of(candidates[i])),
    )
    out: list[tuple[float, ...]] = [(0.0,) * 5] * len(candidates)
    logged = all(c.found.seq is not None for c in candidates)
    start = 0
    while start < len(order):  # one run of candidates of the same conversation at a time (times ascending in it)
        mine = candidates[order[start]].found.conversation_id
        end = start + 1
        while end < len(order) and candidates[order[end]].found.conversation_id == mine:
            end += 1
        run = order[start:end]
        at_run = [times[i] for i in run]
        scores = [found[i] for i in run]
        for n, i in enumerate(run):  # the candidates within SESSION_US of this one: one stretch of the run
            at = at_run[n]
            lo = bisect.bisect_left(at_run, at - SESSION_US, 0, n)
            hi = bisect.bisect_right(at_run, at + SESSION_US, n + 1)
            before, after = scores[lo:n], scores[n + 1 : hi]
            before.reverse()  # nearest first, as they are summed
            near = before + after
            beside = (before[0] if before else 0.0, after[0] if after else 0.0) if logged else (0.0, 0.0)
            out[i] = (max(near, default=0.0), sum(near), math.log1p(len(near)), *beside)
        start = end
    return out


def _time_of(c: Candidate) -> int:
    created = c.time_us
    return created if isinstance(created, int) else 0


def _seq_of(c: Candidate) -> int:
    """The order a turn was logged in (turns of one sitting often share a timestamp); 0 where there is none."""
    return c.found.seq if c.found.seq is not None else 0


def _written_in(periods: Sequence[timeexpr.Period], when: datetime | None) -> float:
    """1 if the row was written in a period the query names, 0.5 in the month after it, else 0."""
    if when is None:
        return 0.0
    best = 0.0
    for p in periods:
        if p.start <= when < p.end:
            return 1.0
        if p.end <= when < p.end + _AFTER:
            best = 0.5
    return best


# Fitted by `python -m bench locomo` on all five dev conversations (its "fitted on all five" weights).
DEFAULT_RANKER = Ranker(
    (
        21.9038,
        14.0437,
        1.1097,
        1.663,
        -0.715,
        0.6216,
        2.7478,
        4.0622,
        1.5248,
        2.071,
        14.0552,
        -0.6506,
        -0.2206,
        6.6992,
        3.6458,
        -15.9259,
        0.7551,
        0.209,
        8.3069,
        0.683,
    ),
    clear_first=True,
)


# Archival passages (facts a model writes, "On 8 May 2023: ..."; ``kinds.PASSAGES``): fitted by
# `python -m bench locomo --archival` on all five dev conversations (its "fitted on all" weights), with the ``sitting``
# feature read as the rank of a fact's date among the pool's dates (``_stated_ranks``); held out (leave one
# conversation out) it finds more evidence in the top 5 than the turn ranker (BENCHMARKS.md). A pool of passages that
# state no date is ranked by the turn ranker, as before (``Ranker.undated``; turns stored as passages: `python -m bench
# locomo --archival-turns`, where these weights did worse).
PASSAGE_RANKER = Ranker(
    (
        16.6913,
        -2.1562,
        2.0085,
        7.7018,
        0.0,
        0.8753,
        1.9654,
        3.8662,
        -0.4073,
        0.0,
        8.1701,
        0.1847,
        -0.649,
        0.0,
        0.0,
        -5.7898,
        1.5472,
        -0.1681,
        9.5579,
        0.0,
    ),
    undated=DEFAULT_RANKER,
    clear_first=True,
)

CALIBRATION_FEATURES = ("score", "cosine", "best_cosine", "coverage")


@dataclass(frozen=True)
class Calibration:
    """The probability that a ranked hit is what the query looks for: logistic over its ranker score and what
    is absolute about it (its cosine to the query, the best cosine in the pool: how well this memory matches the
    query at all, and ``coverage``: the share of the query's words the hit contains). Scores are relative to their
    pool; relevance is comparable across queries and memories, and across stores of any size: nothing here grows
    with the number of rows (a raw BM25 score would, through its IDF, so a lone match in a small store would seem
    weak). Fitted together with the ranker's weights (``bench locomo``); refit both together."""

    weights: tuple[float, ...]
    bias: float
    undated: Calibration | None = None  # for a pool where no row states its date (``Ranker.undated`` ranked it)

    def __post_init__(self) -> None:
        if len(self.weights) != len(CALIBRATION_FEATURES):
            raise ValueError(
                f"a Calibration needs {len(CALIBRATION_FEATURES)} weights "
                f"({', '.join(CALIBRATION_FEATURES)}), got {len(self.weights)}"
            )

    def relevance(
        self,
        query: Query,
        candidates: Sequence[Candidate],
        scored: Sequence[tuple[Candidate, float]],
        context: Context | None = None,
    ) -> list[float]:
        """The relevance in [0, 1] of each ``(candidate, score)`` ranked from ``candidates`` (the whole pool)."""
        if self.undated is not None and not dated(candidates):
            return self.undated.relevance(query, candidates, scored, context)
        rows = calibration_features(query, candidates, scored, context)
        return [
            1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))
            for z in (sum(w * x for w, x in zip(self.weights, row)) + self.bias for row in rows)
        ]


def calibration_features(
    query: Query,
    candidates: Sequence[Candidate],
    scored: Sequence[tuple[Candidate, float]],
    context: Context | None = None,
) -> list[list[float]]:
    """The rows ``Calibration`` weighs, in ``CALIBRATION_FEATURES`` order."""
    context = context or Context()
    cosines = [c.cosine for c in candidates if c.cosine is not None]
    floor = min(cosines) if cosines else 0.0
    best = max(cosines) if cosines else 0.0
    return [
        [score, c.cosine if c.cosine is not None else floor, best, coverage(query, c, context)] for c, score in scored
    ]


STEM_MATCH = 0.5  # what a query's word found in a hit only in another inflection counts for in ``coverage``


def coverage(query: Query, candidate: Candidate, context: Context) -> float:
    """The share of the query's words (stopwords left out) that the candidate contains: a word written as in the query
    counts 1 (accents and underscores aside: ``keywords.written``), one found only in another inflection, as the
    keyword index matches it ("peanut" in "I am allergic to peanuts", "cat's name" in "cats are named":
    ``keywords.forms``), STEM_MATCH. A speaker's name counts as contained when the candidate is that speaker's turn,
    and is left out of the query when it is not (whether the query names the right speaker is the ranker's
    ``speaker`` feature; a turn logged by role does not carry it).

    Counted whole, an inflected match let through more hits of questions asked of the wrong memory: on LoCoMo (``python
    -m bench locomo``, the calibration refitted leave-one-conversation-out) the precision of "relevance >= 0.2" for
    questions that name nobody fell from 0.93-0.95 to 0.89-0.91; counted half, it stays 0.93 and more evidence passes."""
    asked = set(query.terms)
    named: set[str] = set()
    for name in context.speakers.values():
        named |= set(terms(name))
    said = set(terms(candidate.content))
    speaker = speaker_of(candidate.content) or context.speakers.get(str(candidate.found.role))
    if speaker:
        said |= set(terms(speaker))
    asked -= named - said
    if not asked:
        return 0.0
    as_written, as_stemmed = written(said), forms(said)
    found = 0.0
    for word in asked:
        if word in said or lone(word) and word in candidate.content:  # "猫" in "我家有一只猫", as the keyword leg
            found += 1.0
        elif (mine := written((word,))) and mine <= as_written:
            found += 1.0
        elif (stems := forms((word,))) and stems <= as_stemmed:
            found += STEM_MATCH
    return found / len(asked)


# Fitted by `python -m bench locomo` with DEFAULT_RANKER's scores (its calibration fit, leave-one-conversation-out).
DEFAULT_CALIBRATION = Calibration((0.3534, 2.6714, -0.3659, 2.8619), -7.771)

# Archival passages that state no date, ranked by DEFAULT_RANKER (``PASSAGE_RANKER.undated``, so
# ``PASSAGE_CALIBRATION.undated``): fitted by `python -m bench locomo --archival` with DEFAULT_RANKER's scores, on all
# five dev conversations (its "undated calibration" line: the plain fit, l2 1e-3). At auto_recall_threshold the turn
# calibration let 126 hits about other people's facts through (precision 0.808); this one's fit, judged
# leave-one-conversation-out, 44 (0.921; 0.883 before ``coverage`` counted inflected words).
UNDATED_PASSAGE_CALIBRATION = Calibration((0.1456, 8.5557, -7.4385, 4.6683), -5.7469)

# Archival passages (facts a model writes, "On 8 May 2023: ..."), with PASSAGE_RANKER's scores (``kinds.PASSAGES``):
# fitted by `python -m bench locomo --archival` on all five dev conversations (its "calibration fitted" line), with the
# l2 (1e-1) and bias shift (0) chosen on those five by leave-one-out: the most evidence kept at auto_recall_threshold
# with precision >= 0.9 (``bench.locomo_facts.Calibrator``). The procedure judged leave-one-conversation-out (the choice
# made on the other four each time): precision 0.914 at auto_recall_threshold, 529 evidence facts kept (0.906 and 511
# before ``coverage`` counted inflected words, when the plain fit, l2 1e-3, had 0.870); flatter, so fewer hits reach a
# high relevance.
PASSAGE_CALIBRATION = Calibration((0.1737, 1.8649, 0.3485, 1.6853), -5.3052, undated=UNDATED_PASSAGE_CALIBRATION)
