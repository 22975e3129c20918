"""The query's analysis, made once per search and passed down: ``Query``.

Everything the search reads from the query string is here: its words, the speakers' names it mentions and the text
without them (the vector leg's and the sittings' query: ``without_names``), the periods it names (``timeexpr``,
against the conversation's clock), and what it asks: a time ("When did ...": ``timeexpr.asks_when``) or several things
said over time (``asks_several``). The names are known only once the keyword leg has read the agent's rows (its
``"Name: ..."`` labels): ``Query.naming`` returns the analysis with them. Pure functions over text; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo

from . import cjk, timeexpr

_WORD = re.compile(r"\w+")
_SPEAKER = re.compile(r"^\s*([A-Z][\w.' -]{0,39}?)\s*:\s")
_SUBJECT = re.compile(r"^\s*(?:On [^:\n]{6,40}:\s*)?([A-Z][a-z]+)\b(?!-)")
# A question about several things over time: the present perfect ("What books has John read?", "Where have
# they been?"), "how many", "both", or a plural object asked of someone ("What instruments does Tim play?").
_SEVERAL = re.compile(
    r"\b(?:[Hh]as|[Hh]ave)\s+(?:[A-Z][\w'-]*|he|she|they|you|I|we)\s+(?!(?:to|a|an|any)\b)(?:ever\s+|been\s+)?[a-z]\w+"
    r"|(?i:\bhow\s+many\b|\bboth\b|^\s*(?:what|which)\s+(?:\w+\s+)?\w+s\s+(?:has|have|does|do|did)\b)"
)

# Words that say little about what a query looks for; left out of the query's words ``coverage`` counts and of the
# words the sittings' BM25 counts.
STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with about from into over after before under
between is are was were be been being am do does did done have has had having i me my mine we us our you your he him
his she her it its they them their this that these those what which who whom whose when where why how not no yes so
than too very can could will would shall should may might must there here also just any some all each both few more
most other such only own same s t don doesn didn ll ve re d m o""".split()
)


@dataclass(frozen=True)
class Query:
    """One search's query, analysed once.

    ``text``: as asked; ``clock``: the conversation's newest row, what relative times resolve against (None when the
    query has none to resolve); ``names``: the speakers' names known to the search; ``focused``: the text without
    the names it mentions; ``words``: its lower-cased words; ``terms``: those that count (``STOPWORDS`` left out);
    ``periods``: the periods it names; ``asks_when``: it asks for a time; ``asks_several``: it asks about several
    things said over time (their evidence is spread over sittings); ``zone``: the time zone whose days the periods are
    (the agent's), and the days of what a candidate says (``timeexpr.resolve``)."""

    text: str
    clock: datetime | None
    names: frozenset[str]
    focused: str
    words: frozenset[str]
    terms: frozenset[str]
    periods: tuple[timeexpr.Period, ...]
    asks_when: bool
    asks_several: bool
    zone: tzinfo = UTC

    def naming(self, names: Iterable[str]) -> Query:
        """This analysis with the speakers' names ``names`` (``focused`` leaves out those the text mentions)."""
        known = frozenset(names)
        if known == self.names:
            return self
        return replace(self, names=known, focused=without_names(self.text, known))


def analyse(text: str, clock: datetime | None = None, names: Collection[str] = (), zone: tzinfo | None = None) -> Query:
    """The analysis of ``text``; relative times resolve against ``clock`` (now when None), as days of ``zone`` (UTC
    when None)."""
    zone = zone or UTC
    return Query(
        text=text,
        clock=clock,
        names=frozenset(names),
        focused=without_names(text, names),
        words=frozenset(w.lower() for w in _WORD.findall(text)),
        terms=frozenset(terms(text)),
        periods=tuple(timeexpr.query_periods(text, clock or datetime.now(UTC), zone)),
        asks_when=timeexpr.asks_when(text),
        asks_several=asks_several(text),
        zone=zone,
    )


def asks_several(query: str) -> bool:
    """Whether ``query`` asks about several things said over time ("What books has John read?", "How many
    times ...", "both"): their evidence is spread over sittings, so the sitting features count differently."""
    return _SEVERAL.search(query) is not None


def needs_clock(query: str) -> bool:
    """Whether the analysis of ``query`` reads the conversation's clock (``timeexpr.needs_clock``)."""
    return timeexpr.needs_clock(query)


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


def names(speaker: str, query_words: Collection[str]) -> bool:
    """Whether a query (its lower-cased words) names ``speaker``: every word of the name, or its first name."""
    parts = [w.lower() for w in _WORD.findall(speaker)]
    return bool(parts) and (all(w in query_words for w in parts) or len(parts[0]) > 2 and parts[0] in query_words)


def speaker_of(content: str) -> str | None:
    """The speaker label of a turn written as ``"Name: text"``, else None (a date before the colon, as a fact opens
    with, "On 8 May 2023: ...", is no speaker)."""
    m = _SPEAKER.match(content)
    return m.group(1) if m and not timeexpr.full_dates(m.group(1)) else None


def subject_of(content: str) -> str | None:
    """Whom a fact is about: the name it opens with, after the date it may open with ("On 8 May 2023: John's
    favourite book is ..." -> "John"); None when it opens with no capitalised word that counts (``STOPWORDS``)."""
    m = _SUBJECT.match(content)
    return m.group(1) if m and m.group(1).lower() not in STOPWORDS else None


def terms(text: str) -> list[str]:
    """The words of ``text`` that count, in order with repeats: lower-cased, ``STOPWORDS`` left out; a word holding
    Chinese, Japanese, Korean, Thai, Lao, Burmese or Khmer characters as its bigrams (``cjk.grams``: those scripts
    write no space between words), in the first ``cjk.MAX_CHARS`` characters (and the word across them); after them
    every word as it is. A word: ``cjk.WORD``."""
    head, tail = text[: cjk.MAX_CHARS], text[cjk.MAX_CHARS :]
    if tail:
        across = cjk.WORD_START.match(tail)  # always matches
        cut = across.end() if across else 0
        head, tail = head + tail[:cut], tail[cut:]
    words = (m.lower() for m in cjk.WORD.findall(head))
    out = [g for w in words for g in (cjk.grams(w) if cjk.has_grams(w) else (w,)) if g not in STOPWORDS]
    if tail:
        out += [w for w in (m.lower() for m in cjk.WORD.findall(tail)) if w not in STOPWORDS]
    return out
