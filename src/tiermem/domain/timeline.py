"""One timeline over an agent's memory: recall (its conversation turns), archival passages, file changes and block
history, counted per day, ISO week or month; what one period holds; the terms that rise in a period.

What is read: only the columns a timeline needs (ids, times, and the text when a query, the terms or a period's list
ask for it) of the agent's own rows, through ``Archive.rows.columns_of``; the files of the folders attached to the
agent (created, and modified when their row changed later); the versions of the blocks attached to it. A ``project``
narrows recall and archival rows to that project, exactly as the search tools' ``project`` does; blocks and files
belong to no project and are kept. Nothing of another agent is read.

Dates are the search tools' dates (``archive.parse_bound``: ISO 8601 datetimes, in the agent's time zone when no zone
is given (``Memory.time_zone``; UTC for an agent without one), or a day, ISO week or month without a time: a start is
its first instant, an end its last). A bound left out is the edge of what the memory holds. Periods are days, weeks
and months in the agent's time zone too, and times are shown in it.

A query keeps the items holding every word of it that counts (``search.query.terms``, each word's ``stem``:
"dogs" finds "dog"), in a turn's or passage's text, a file's name, a block version's label and the text it added.
It is a keyword filter, not a ranked search: a timeline counts what matches, so it never counts an unrelated row
the way a nearest-neighbour list fills its places.

The terms that rise in a period (seed 000's "patterns") are ``patterns.rising_terms``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ValidationError
from ..base.projects import named_project
from ..base.records import from_us, to_us
from .archive import parse_bound
from .patterns import Bag, Term, rising, rising_terms, words_of
from .periods import END, MAX_PERIODS, Unit, check_unit, last_periods, parse_period, period_key, periods_between
from .search.query import terms as counted_words
from .search.sittings import stem

if TYPE_CHECKING:
    from .memory import Memory

Kind = Literal["recall", "archival", "files", "blocks"]
KINDS: tuple[Kind, ...] = ("recall", "archival", "files", "blocks")
SHORT = 160  # characters of an item's text shown in a period's list


@dataclass(frozen=True)
class Item:
    """One thing a period holds: a turn, a passage, a file change or a block version."""

    kind: Kind
    id: str
    at: datetime
    text: str  # short: the first SHORT characters
    detail: str  # a turn's role, a passage's tags, "created"/"modified" and the file, a block's label and version

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "time": self.at.isoformat(timespec="seconds"),
            "text": self.text,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Period:
    """One day, ISO week or month: its key ("2024-05-08", "2024-W19", "2024-05"), [start, end) and counts per kind."""

    key: str
    start: datetime
    end: datetime  # exclusive
    counts: dict[str, int]
    rising: tuple[Term, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "period": self.key,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "counts": dict(self.counts),
            "total": self.total,
        }
        if self.rising:
            out["rising"] = [t.as_dict() for t in self.rising]
        return out


@dataclass(frozen=True)
class Timeline:
    """Counts per period by kind over [start, end], the span the periods count (None: nothing to count and no bound
    given)."""

    by: Unit
    start: datetime | None
    end: datetime | None
    query: str | None
    kinds: tuple[Kind, ...]
    periods: list[Period]

    @property
    def totals(self) -> dict[str, int]:
        return {k: sum(p.counts.get(k, 0) for p in self.periods) for k in self.kinds}

    def as_dict(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "from": self.start.isoformat() if self.start else None,
            "to": self.end.isoformat() if self.end else None,
            "query": self.query,
            "kinds": list(self.kinds),
            "totals": self.totals,
            "periods": [p.as_dict() for p in self.periods],
        }


@dataclass(frozen=True)
class PeriodView:
    """What one period holds (newest last, up to ``limit`` items), how many in all, and its rising terms."""

    period: Period
    by: Unit
    items: list[Item]
    total: int
    rising: list[Term] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.period.as_dict(),
            "by": self.by,
            "items": [i.as_dict() for i in self.items],
            "shown": len(self.items),
            "rising": [t.as_dict() for t in self.rising],
        }


@dataclass(frozen=True)
class _Entry:
    kind: Kind
    id: str
    us: int
    text: str  # what a query matches and terms are counted in ("" when texts were not read)
    short: str
    detail: str


# -- dates and periods ------------------------------------------------------------------------------------------------


def parse_range(
    start: str | None, end: str | None, names: tuple[str, str] = ("from", "to"), zone: tzinfo = UTC
) -> tuple[datetime | None, datetime | None]:
    """The bounds as the search tools read them (``archive.parse_bound``, in ``zone``); a start after the end is
    refused."""
    first = parse_bound(start, names[0], end=False, zone=zone)
    last = parse_bound(end, names[1], end=True, zone=zone)
    if first and last and first > last:
        raise ValidationError(
            f"{names[0]} ({first.isoformat()}) is after {names[1]} ({last.isoformat()}); swap them or widen the range."
        )
    return first, last


def check_kinds(kinds: Iterable[str] | None) -> tuple[Kind, ...]:
    """The kinds asked for, in the timeline's order (None or empty: every kind)."""
    if kinds is None:
        return KINDS
    if isinstance(kinds, str):
        kinds = [kinds]
    asked = list(kinds)
    bad = [k for k in asked if k not in KINDS]
    if bad:
        raise ValidationError(f"Unknown kind(s) {bad}; use any of {', '.join(KINDS)}.")
    return tuple(k for k in KINDS if k in asked) or KINDS


# -- reading ----------------------------------------------------------------------------------------------------------


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHORT else flat[: SHORT - 1] + "…"


def _entries(
    memory: Memory,
    agent_id: str,
    kinds: Sequence[Kind],
    start: datetime | None,
    end: datetime | None,
    project: str | None,
    *,
    texts: bool,
) -> list[_Entry]:
    """The agent's items of ``kinds`` within [start, end]; their texts only when ``texts``."""
    named = named_project(project)
    projects = None if named is None else (named,)
    out: list[_Entry] = []
    rows = memory.archive.rows
    if "recall" in kinds:
        cols = ["id", "created_us"] + (["role", "content"] if texts else [])
        for r in rows.columns_of("messages", agent_id, cols, start=start, end=end, projects=projects):
            content = str(r.get("content") or "")
            out.append(
                _Entry("recall", r["id"], int(r["created_us"]), content, _short(content), str(r.get("role") or ""))
            )
    if "archival" in kinds:
        cols = ["id", "group_id", "chunk", "created_us"] + (["content", "tags"] if texts else [])
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in rows.columns_of("passages", agent_id, cols, start=start, end=end, projects=projects):
            groups.setdefault(str(r.get("group_id") or r["id"]), []).append(r)
        for group, chunks in groups.items():  # one passage per insert, however many chunks it was cut into
            chunks.sort(key=lambda r: int(r.get("chunk") or 0))
            content = " ".join(str(c.get("content") or "") for c in chunks)
            tags = ", ".join(chunks[0].get("tags") or [])
            out.append(_Entry("archival", group, int(chunks[0]["created_us"]), content, _short(content), tags))
    if "files" in kinds:
        out += _file_entries(memory, agent_id, start, end)
    if "blocks" in kinds:
        out += _block_entries(memory, agent_id, start, end)
    return out


def _within(us: int, start: datetime | None, end: datetime | None) -> bool:
    return (start is None or us >= to_us(start)) and (end is None or us <= to_us(end))


def _file_entries(memory: Memory, agent_id: str, start: datetime | None, end: datetime | None) -> list[_Entry]:
    """A file's creation, and its last change when its row changed later (the files table keeps no more)."""
    seen = memory.files.seen(agent_id)
    folders = {f["id"]: f["name"] for f in seen.folders}
    if not folders:
        return []
    out = []
    for f in memory.archive.files.files(list(folders)):
        name = f"{folders.get(f.folder_id, f.folder_id)}/{f.name}"
        created, updated = to_us(f.created_at), to_us(f.updated_at)
        if _within(created, start, end):
            out.append(_Entry("files", f.id, created, name.replace("/", " "), name, "created"))
        if updated - created >= 1_000_000 and _within(updated, start, end):
            out.append(_Entry("files", f.id, updated, name.replace("/", " "), name, "modified"))
    return out


def _block_entries(memory: Memory, agent_id: str, start: datetime | None, end: datetime | None) -> list[_Entry]:
    """Each version of the agent's blocks: its text is what it added to the version before (prefix and suffix kept)."""
    out = []
    for block in memory.blocks(agent_id):
        before = ""
        for v in sorted(memory.core.history(block.id), key=lambda v: v.version):
            added = _added(before, v.value)
            before = v.value
            us = to_us(v.created_at)
            if not _within(us, start, end):
                continue
            what = f"{v.label} v{v.version} · {v.operation} by {v.actor}"
            gone = "(empty)" if v.version == 1 else "(text removed)"
            out.append(_Entry("blocks", block.id, us, f"{v.label} {added}", _short(added) or gone, what))
    return out


def _added(old: str, new: str) -> str:
    """The span of ``new`` that is not ``old``'s common prefix and suffix."""
    prefix = 0
    most = min(len(old), len(new))
    while prefix < most and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < most - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return new[prefix : len(new) - suffix]


# -- queries and terms ------------------------------------------------------------------------------------------------


def _query_stems(query: str | None) -> frozenset[str] | None:
    if query is None or not query.strip():
        return None
    found = frozenset(stem(w) for w in counted_words(query))
    if not found:
        raise ValidationError(f"query {query!r} has no word that counts (only words like 'the'); name what to find.")
    return found


def _matching(entries: list[_Entry], wanted: frozenset[str] | None) -> list[_Entry]:
    if wanted is None:
        return entries
    return [e for e in entries if wanted <= {stem(w) for w in counted_words(e.text)}]


# -- the operations ---------------------------------------------------------------------------------------------------


def timeline(
    memory: Memory,
    agent_id: str,
    *,
    start: str | None = None,
    end: str | None = None,
    by: str = "month",
    query: str | None = None,
    kinds: Iterable[str] | None = None,
    project: str | None = None,
    terms: int = 0,
    last: int | None = None,
) -> Timeline:
    """Counts per ``by`` (day, ISO week, month) of each kind of the agent's memory within [start, end], every
    period from the first to the last included (empty ones too); ``terms``: each period's rising terms, that many;
    ``last``: only the last that many periods (their terms still measured against the whole range)."""
    zone = memory.time_zone(agent_id) or UTC
    first, final = parse_range(start, end, zone=zone)
    unit = check_unit(by)
    chosen = check_kinds(kinds)
    wanted = _query_stems(query)
    _check_count(terms, "terms", 0, 50)
    if last is not None:
        _check_count(last, "last", 1, MAX_PERIODS)
    entries = _matching(
        _entries(memory, agent_id, chosen, first, final, project, texts=wanted is not None or terms > 0), wanted
    )
    span = _span(entries, first, final, zone)
    if span is None:
        return Timeline(unit, first, final, query, chosen, [])
    keys = periods_between(*span, unit, zone) if last is None else last_periods(*span, unit, last, zone)
    counts: dict[str, Counter[str]] = {k: Counter() for k, _, _ in keys}
    bags: dict[str, Bag] = {}  # each period's words (every period of the range: the others are what one rises against)
    for e in entries:
        key = period_key(from_us(e.us), unit, zone)
        if key in counts:
            counts[key][e.kind] += 1
        if terms:
            bags.setdefault(key, Bag()).add(words_of(e.text))
    everything: Counter[str] = sum((b.counts for b in bags.values()), Counter())
    periods = []
    for key, s, t in keys:
        rising_here: tuple[Term, ...] = ()
        if key in bags:
            rising_here = tuple(rising(bags[key], everything - bags[key].counts, terms))
        periods.append(Period(key, s, t, {k: counts[key].get(k, 0) for k in chosen}, rising_here))
    counted = span if last is None else (max(span[0], keys[0][1]), span[1])  # what the periods kept cover
    return Timeline(unit, counted[0], counted[1], query, chosen, periods)


def period(
    memory: Memory,
    agent_id: str,
    key: str,
    *,
    query: str | None = None,
    kinds: Iterable[str] | None = None,
    project: str | None = None,
    limit: int = 100,
    terms: int = 10,
    start: str | None = None,
    end: str | None = None,
) -> PeriodView:
    """What one period (``key``: 2024-05-08, 2024-W19 or 2024-05) holds, oldest first, up to ``limit`` items; its
    rising terms measured against the whole range [start, end] (left out: everything the memory holds)."""
    zone = memory.time_zone(agent_id) or UTC
    unit, p_start, p_end = parse_period(key, zone)
    first, final = parse_range(start, end, zone=zone)
    chosen = check_kinds(kinds)
    wanted = _query_stems(query)
    _check_count(limit, "limit", 1, 1000)
    _check_count(terms, "terms", 0, 50)
    if terms:  # the whole range is read to measure the period against it
        everything = _matching(_entries(memory, agent_id, chosen, first, final, project, texts=True), wanted)
    else:
        inner = (max(p_start, first) if first else p_start, min(p_end, final) if final else p_end)
        everything = _matching(_entries(memory, agent_id, chosen, inner[0], inner[1], project, texts=True), wanted)
    lo, hi = to_us(p_start), to_us(p_end) + (1 if p_end == END else 0)  # END itself is in the last period
    inside = sorted((e for e in everything if lo <= e.us < hi), key=lambda e: (e.us, e.kind, e.id))
    outside = [e for e in everything if not lo <= e.us < hi]
    counts = Counter(e.kind for e in inside)
    rising = rising_terms([words_of(e.text) for e in inside], [words_of(e.text) for e in outside], terms)
    items = [Item(e.kind, e.id, _shown_at(e.us, zone), e.short, e.detail) for e in inside[:limit]]
    view = Period(key.strip(), p_start, p_end, {k: counts.get(k, 0) for k in chosen})
    return PeriodView(view, unit, items, len(inside), rising)


def _span(
    entries: Sequence[_Entry], first: datetime | None, final: datetime | None, zone: tzinfo
) -> tuple[datetime, datetime] | None:
    """The range the periods cover: the bounds given, a missing one the edge of what was found (shown in ``zone``)."""
    times = [e.us for e in entries]
    lo = first or (_shown_at(min(times), zone) if times else final)
    hi = final or (_shown_at(max(times), zone) if times else first)
    if lo is None or hi is None:
        return None
    return lo, max(lo, hi)


def _shown_at(us: int, zone: tzinfo) -> datetime:
    """A stored time in ``zone`` (the agent's), as UTC where the zone would move it past the calendar's edge."""
    when = from_us(us)
    try:
        return when.astimezone(zone)
    except OverflowError:
        return when


def _check_count(value: int, name: str, least: int, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValidationError(f"{name} must be a whole number from {least} to {most}, got {value!r}.")
