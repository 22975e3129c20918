"""Second-stage ranking of search candidates: a small linear model over what the two legs found.

Both legs (vector and full-text) return a pool of candidates (40 each for a top-10 search). Each
candidate gets a handful of features that need no model call and no extra read: its rank in each
leg, its normalised BM25 score, how far its cosine similarity to the query is below the pool's best, whether it is itself a
question, its length, and whether the query names the speaker of a speaker-labelled turn
("Caroline: ..."). A weighted sum of those features orders the pool.

The weights are fitted by logistic regression on the LoCoMo dev split (``python -m bench locomo``
fits them, prints them, and reports leave-one-conversation-out figures: weights fitted on four
conversations, scored on the fifth). They are stored here as plain numbers; nothing is learned at
run time. Reciprocal rank fusion is the special case where only the two rank features count
(``Ranker.legs``), which is how the keyword-only and vector-only rankings are expressed.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

FEATURES = ("vector_rrf", "fts_rrf", "bm25", "cosine", "question", "length", "speaker", "date")
RANK_K = 10  # rank features are 1 / (RANK_K + rank), 0 for a candidate the leg did not return

_SPEAKER = re.compile(r"^\s*([A-Z][\w.' -]{0,39}?)\s*:\s")
_WORD = re.compile(r"\w+")
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_DATE = re.compile(r"\b(" + "|".join(_MONTHS) + r")\b(?:\s+\d{1,2}(?:st|nd|rd|th)?\b)?,?\s*(\d{4})?|\b((?:19|20)\d\d)\b", re.I)
_AFTER = timedelta(days=31)  # a month named in a question is often talked about in the weeks after it


@dataclass(frozen=True)
class Candidate:
    """One row found by either leg, with what each leg said about it (ranks are 1-based)."""

    id: str
    content: str
    row: Mapping[str, Any]
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

    def rank(self, query: str, candidates: Sequence[Candidate]) -> list[tuple[Candidate, float]]:
        """Candidates with their scores, best first (ties broken by id, so the order is stable)."""
        rows = features(query, candidates)
        scored = [(c, sum(w * x for w, x in zip(self.weights, row))) for c, row in zip(candidates, rows)]
        scored.sort(key=lambda t: (-t[1], t[0].id))
        return scored


def merge(vector_rows: Sequence[Mapping[str, Any]], fts_rows: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """One candidate per id from the two legs' rows (``_distance`` from the vector leg, ``_score`` from FTS)."""
    found: dict[str, dict[str, Any]] = {}
    for rank, r in enumerate(vector_rows, start=1):
        found[r["id"]] = {"row": r, "vector_rank": rank, "cosine": 1.0 - float(r["_distance"])}
    for rank, r in enumerate(fts_rows, start=1):
        entry = found.setdefault(r["id"], {"row": r})
        entry["fts_rank"] = rank
        entry["bm25"] = float(r["_score"])
    return [Candidate(id=i, content=str(e["row"]["content"]), **e) for i, e in found.items()]


def features(query: str, candidates: Sequence[Candidate]) -> list[list[float]]:
    """The feature rows of ``candidates`` in ``FEATURES`` order (scores are relative to this pool)."""
    if not candidates:
        return []
    best_bm25 = max((c.bm25 for c in candidates if c.bm25 is not None), default=0.0) or 1.0
    cosines = [c.cosine for c in candidates if c.cosine is not None]
    floor = min(cosines) if cosines else 0.0  # a row the vector leg did not return is at most this close
    best = max(cosines) if cosines else 0.0
    words = {w.lower() for w in _WORD.findall(query)}
    periods = query_periods(query)
    out = []
    for c in candidates:
        speaker = speaker_of(c.content)
        named = speaker is not None and all(w.lower() in words for w in _WORD.findall(speaker))
        out.append([
            1.0 / (RANK_K + c.vector_rank) if c.vector_rank else 0.0,
            1.0 / (RANK_K + c.fts_rank) if c.fts_rank else 0.0,
            (c.bm25 or 0.0) / best_bm25,
            (c.cosine if c.cosine is not None else floor) - best,
            1.0 if c.content.rstrip().endswith("?") else 0.0,
            math.log1p(len(c.content.split())),
            1.0 if named else 0.0,
            _date_match(periods, c.row.get("created_us")),
        ])
    return out


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


def query_periods(query: str) -> list[tuple[int | None, int | None]]:
    """Explicit months and years a query names: ``(month, year)``, either may be None ("in June", "in 2023")."""
    out: list[tuple[int | None, int | None]] = []
    for m in _DATE.finditer(query):
        if m.group(1):
            out.append((_MONTHS[m.group(1).lower()], int(m.group(2)) if m.group(2) else None))
        else:
            out.append((None, int(m.group(3))))
    return out


def _date_match(periods: list[tuple[int | None, int | None]], created_us: Any) -> float:
    """1 if the row was written in a period the query names, 0.5 in the month after it, else 0."""
    if not periods or not isinstance(created_us, int):
        return 0.0
    when = datetime.fromtimestamp(created_us / 1_000_000, tz=UTC)
    best = 0.0
    for month, year in periods:
        if month is None:
            best = max(best, float(when.year == year))
            continue
        for y in (year,) if year else (when.year, when.year - 1):
            start = datetime(y, month, 1, tzinfo=UTC)
            end = start + timedelta(days=calendar.monthrange(y, month)[1])
            if start <= when < end:
                return 1.0
            if end <= when < end + _AFTER:
                best = max(best, 0.5)
    return best


# Fitted by `python -m bench locomo` on all five dev conversations (BENCHMARKS.md, "Retrieval quality").
DEFAULT_RANKER = Ranker((30.3457, 17.53, 1.939, 2.5041, -0.7797, 0.7396, 2.6451, 0.4178))
