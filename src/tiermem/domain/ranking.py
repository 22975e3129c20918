"""Second-stage ranking of search candidates: a small linear model over what the two legs found, and the
calibrated relevance of each hit.

Both legs (vector and full-text) return a pool of candidates (40 each for a top-10 search; recall: see archive.pooled). Each candidate gets
features that need no model call and no read besides the agent's sitting index (``sittings``, kept in process): its rank in each leg, its normalised BM25 score, how far its
cosine similarity to the query is below the pool's best, whether it is itself a question, its length, whether the
query names its speaker (the label of a ``"Caroline: ..."`` turn, or the name of the role a turn was logged under:
``Context.speakers``), what the other candidates of its sitting scored (its conversation, within an hour: a topic
is talked over for several turns) and what its nearest neighbours there scored (the candidates logged just before
and just after it: an answer follows its question), the sitting features again when the query asks about several
things over time (``asks_several``: their evidence is spread over sittings, so a strong sitting counts for less),
how the candidate's whole sitting ranks for the query (``sittings``: BM25 over every turn of each sitting, not
only the candidates; 0 for a question about several things), whether it opens its sitting (the first turn logged
in it: where what is new since the last talk is said; 0 without a sitting index), and three about time (``timeexpr``): whether it was written in a period the query names
("in June 2023", "last week" against the conversation's clock), whether a time it mentions ("yesterday", resolved
against its own timestamp) falls in such a period, and whether it mentions a time at all when the query asks
"when". A weighted sum of those features orders the pool.

The weights are fitted by listwise (softmax) logistic regression on the LoCoMo dev split (``python -m bench locomo`` fits them,
prints them, and reports leave-one-conversation-out figures: weights fitted on four conversations, scored on the
fifth). They are stored here as plain numbers; nothing is learned at run time. Reciprocal rank fusion is the
special case where only the two rank features count (``Ranker.legs``), which is how the keyword-only and
vector-only rankings are expressed. ``Calibration`` turns a hit's score into a relevance in [0, 1].
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ..base import timeexpr
from ..base.records import Found

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

_SPEAKER = re.compile(r"^\s*([A-Z][\w.' -]{0,39}?)\s*:\s")
_WORD = re.compile(r"\w+")
_AFTER = timedelta(days=31)  # a period named in a question is often talked about in the weeks after it
SITTING_K = 3  # the sitting feature is 1 / (SITTING_K + the rank of the candidate's sitting), 0 for none
SESSION_US = 3_600_000_000  # candidates of one conversation written within an hour of each other: one sitting
# A question about several things over time: the present perfect ("What books has John read?", "Where have
# they been?"), "how many", "both", or a plural object asked of someone ("What instruments does Tim play?").
_SEVERAL = re.compile(
    r"\b(?:[Hh]as|[Hh]ave)\s+(?:[A-Z][\w'-]*|he|she|they|you|I|we)\s+(?!(?:to|a|an|any)\b)(?:ever\s+|been\s+)?[a-z]\w+"
    r"|(?i:\bhow\s+many\b|\bboth\b|^\s*(?:what|which)\s+(?:\w+\s+)?\w+s\s+(?:has|have|does|do|did)\b)"
)


class Sittings(Protocol):
    """Where a turn's sitting ranks for the query (``sittings.SittingRanks``): 1 = best; None if it matched nothing."""

    def rank_of(self, conversation: str | None, created_us: int | None) -> int | None: ...

    def opens(self, conversation: str | None, created_us: int | None, seq: int | None) -> bool:
        """Whether the turn is the first of its sitting (its log order ``seq`` is that sitting's first)."""
        ...

    def position(self, conversation: str | None, created_us: int | None, seq: int | None) -> tuple[int, int] | None:
        """(its sitting, its place in that sitting's log order), or None if not known (``archive.pooled``: a
        row within NEIGHBOURS turns of a pooled one joins the pool)."""
        ...


@dataclass(frozen=True)
class Context:
    """What a search knows besides the query and its candidates.

    ``clock``: the conversation's newest message (relative times in the query, "last week", resolve against it);
    ``speakers``: the names of the roles, for turns logged by role without a name (``{"user": "Caroline"}``);
    ``sittings``: how the query ranks each sitting of the agent's conversations as a whole (recall only).
    """

    clock: datetime | None = None
    speakers: Mapping[str, str] = field(default_factory=dict)
    sittings: Sittings | None = None


@dataclass(frozen=True)
class Candidate:
    """One row found by either leg, with what each leg said about it (ranks are 1-based)."""

    id: str
    content: str
    found: Found
    vector_rank: int | None = None
    fts_rank: int | None = None
    cosine: float | None = None
    bm25: float | None = None


@dataclass(frozen=True)
class Ranker:
    """A linear scorer over ``FEATURES``: ``score = sum(weight * feature)``."""

    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a Ranker needs {len(FEATURES)} weights ({', '.join(FEATURES)}), got {len(self.weights)}")

    @classmethod
    def legs(cls, vector: float, fts: float) -> Ranker:
        """Weighted reciprocal rank fusion of the two legs (k = RANK_K): no other feature counts."""
        return cls((vector, fts, *(0.0,) * (len(FEATURES) - 2)))

    def rank(
        self, query: str, candidates: Sequence[Candidate], context: Context | None = None
    ) -> list[tuple[Candidate, float]]:
        """Candidates with their scores, best first (ties broken by id, so the order is stable)."""
        rows = features(query, candidates, context)
        scored = [(c, sum(w * x for w, x in zip(self.weights, row))) for c, row in zip(candidates, rows)]
        scored.sort(key=lambda t: (-t[1], t[0].id))
        return scored


def merge(vector: Sequence[Found], fts: Sequence[Found]) -> list[Candidate]:
    """One candidate per id from what the two legs found (best first in each: ranks count from 1)."""
    found: dict[str, dict[str, Any]] = {}
    for rank, f in enumerate(vector, start=1):
        found[f.id] = {"found": f, "vector_rank": rank, "cosine": f.cosine}
    for rank, f in enumerate(fts, start=1):
        entry = found.setdefault(f.id, {"found": f})
        entry["fts_rank"] = rank
        entry["bm25"] = f.bm25
    return [Candidate(id=i, content=e["found"].content, **e) for i, e in found.items()]


def features(query: str, candidates: Sequence[Candidate], context: Context | None = None) -> list[list[float]]:
    """The feature rows of ``candidates`` in ``FEATURES`` order (scores are relative to this pool)."""
    if not candidates:
        return []
    context = context or Context()
    best_bm25 = max((c.bm25 for c in candidates if c.bm25 is not None), default=0.0) or 1.0
    cosines = [c.cosine for c in candidates if c.cosine is not None]
    floor = min(cosines) if cosines else 0.0  # a row the vector leg did not return is at most this close
    best = max(cosines) if cosines else 0.0
    words = {w.lower() for w in _WORD.findall(query)}
    periods = timeexpr.query_periods(query, context.clock or datetime.now(UTC))
    asks_when = timeexpr.asks_when(query)
    out = []
    for c in candidates:
        speaker = speaker_of(c.content) or context.speakers.get(str(c.found.role))
        created = c.found.created_us
        when = datetime.fromtimestamp(created / 1_000_000, tz=UTC) if isinstance(created, int) else None
        mentions = timeexpr.resolve(c.content, when) if when is not None and (periods or asks_when) else []
        out.append(
            [
                1.0 / (RANK_K + c.vector_rank) if c.vector_rank else 0.0,
                1.0 / (RANK_K + c.fts_rank) if c.fts_rank else 0.0,
                (c.bm25 or 0.0) / best_bm25,
                (c.cosine if c.cosine is not None else floor) - best,
                1.0 if c.content.rstrip().endswith("?") else 0.0,
                math.log1p(len(c.content.split())),
                1.0 if speaker is not None and names(speaker, words) else 0.0,
                _written_in(periods, when),
                1.0 if any(p.overlaps(m) for p in periods for m in mentions) else 0.0,
                1.0 if asks_when and mentions else 0.0,
            ]
        )
    several = 1.0 if asks_several(query) else 0.0
    for row, session, c in zip(out, _sessions(candidates, [row[0] + row[1] for row in out]), candidates):
        row.extend(session)
        row.extend(several * x for x in session[:3])
        row.append(0.0 if several else _sitting(c, context.sittings))
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


def asks_several(query: str) -> bool:
    """Whether ``query`` asks about several things said over time ("What books has John read?", "How many
    times ...", "both"): their evidence is spread over sittings, so the sitting features count differently."""
    return _SEVERAL.search(query) is not None


def _sessions(candidates: Sequence[Candidate], found: Sequence[float]) -> list[tuple[float, ...]]:
    """What the rest of each candidate's sitting scored: the best and the sum of the other candidates' leg ranks
    (``found``) among those of its conversation written within SESSION_US of it, log(1 + how many there are), and
    the ranks of its nearest neighbours among them (the candidate logged just before it, and just after; 0 for
    none; always 0 for rows without a log order: passages). A topic is talked over for several turns, so a turn
    next to strong matches is likelier the one sought; an answer is found through the question before it."""
    order = sorted(
        range(len(candidates)),
        key=lambda i: (str(candidates[i].found.conversation_id or ""), _time_of(candidates[i]), _seq_of(candidates[i])),
    )
    out: list[tuple[float, ...]] = [(0.0,) * 5] * len(candidates)
    logged = all(c.found.seq is not None for c in candidates)
    for n, i in enumerate(order):
        mine, at = candidates[i].found.conversation_id, _time_of(candidates[i])
        near: list[float] = []
        beside = [0.0, 0.0]
        for side, step in enumerate((-1, 1)):
            k = n + step
            while 0 <= k < len(order):
                j = order[k]
                if candidates[j].found.conversation_id != mine or abs(_time_of(candidates[j]) - at) > SESSION_US:
                    break
                if k == n + step and logged:  # turns logged in a known order (passages have none)
                    beside[side] = found[j]
                near.append(found[j])
                k += step
        out[i] = (max(near, default=0.0), sum(near), math.log1p(len(near)), *beside)
    return out


def _time_of(c: Candidate) -> int:
    created = c.found.created_us
    return created if isinstance(created, int) else 0


def _seq_of(c: Candidate) -> int:
    """The order a turn was logged in (turns of one sitting often share a timestamp); 0 where there is none."""
    return c.found.seq if c.found.seq is not None else 0


def names(speaker: str, query_words: Collection[str]) -> bool:
    """Whether a query (its lower-cased words) names ``speaker``: every word of the name, or its first name."""
    parts = [w.lower() for w in _WORD.findall(speaker)]
    return bool(parts) and (all(w in query_words for w in parts) or len(parts[0]) > 2 and parts[0] in query_words)


def speaker_of(content: str) -> str | None:
    """The speaker label of a turn written as ``"Name: text"``, else None."""
    m = _SPEAKER.match(content)
    return m.group(1) if m else None


def without_names(query: str, names: Collection[str]) -> str:
    """``query`` with the speaker names it mentions removed (``"Caroline's"`` too), for the vector leg.

    Every turn of a speaker carries the speaker's name, so a short question that names one ("What did
    Caroline research?") is pulled towards any turn by or about that speaker; without the name the query
    is about what was asked. Names match case-sensitively as whole words; a query that is only a name is kept.
    """
    out = query
    for name in sorted(set(names), key=len, reverse=True):
        out = re.sub(rf"(?<!\w){re.escape(name)}(?:'s|s')?(?!\w)", " ", out)
    out = re.sub(r"\s+", " ", out).strip()
    return out if _WORD.search(out) else query


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
    )
)


CALIBRATION_FEATURES = ("score", "cosine", "best_cosine", "coverage")

# Words that say little about what a query looks for; left out of the query's words ``coverage`` counts.
STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with about from into over after before under
between is are was were be been being am do does did done have has had having i me my mine we us our you your he him
his she her it its they them their this that these those what which who whom whose when where why how not no yes so
than too very can could will would shall should may might must there here also just any some all each both few more
most other such only own same s t don doesn didn ll ve re d m o""".split()
)


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

    def __post_init__(self) -> None:
        if len(self.weights) != len(CALIBRATION_FEATURES):
            raise ValueError(
                f"a Calibration needs {len(CALIBRATION_FEATURES)} weights "
                f"({', '.join(CALIBRATION_FEATURES)}), got {len(self.weights)}"
            )

    def relevance(
        self,
        query: str,
        candidates: Sequence[Candidate],
        scored: Sequence[tuple[Candidate, float]],
        context: Context | None = None,
    ) -> list[float]:
        """The relevance in [0, 1] of each ``(candidate, score)`` ranked from ``candidates`` (the whole pool)."""
        rows = calibration_features(query, candidates, scored, context)
        return [
            1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))
            for z in (sum(w * x for w, x in zip(self.weights, row)) + self.bias for row in rows)
        ]


def calibration_features(
    query: str,
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


def coverage(query: str, candidate: Candidate, context: Context) -> float:
    """The share of the query's words (stopwords left out) that the candidate contains. A speaker's name counts as
    contained when the candidate is that speaker's turn, and is left out of the query when it is not (whether the
    query names the right speaker is the ranker's ``speaker`` feature; a turn logged by role does not carry it)."""
    asked = _words(query)
    names: set[str] = set()
    for name in context.speakers.values():
        names |= _words(name)
    said = _words(candidate.content)
    speaker = speaker_of(candidate.content) or context.speakers.get(str(candidate.found.role))
    if speaker:
        said |= _words(speaker)
    asked -= names - said
    return len(asked & said) / len(asked) if asked else 0.0


def terms(text: str) -> list[str]:
    """The words of ``text`` that count, in order with repeats: lower-cased, ``STOPWORDS`` left out."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in STOPWORDS]


def _words(text: str) -> set[str]:
    return set(terms(text))


# Fitted by `python -m bench locomo` with DEFAULT_RANKER's scores (its calibration fit, leave-one-conversation-out).
DEFAULT_CALIBRATION = Calibration((0.355, 3.0943, -0.3384, 2.381), -7.7025)
