"""Time expressions in text, resolved against a clock: "yesterday", "last week", "two months ago", "in 2022",
"8 May 2023", "the Sunday before October 25, 2022".

A conversation turn is resolved against its own timestamp ("I went camping last week", written on 27 June 2023,
is about 19-25 June 2023); a query against the conversation's clock (its newest message), or against the full date
it names ("What did Maria do last weekend before April 10, 2023?" is about 8-9 April 2023). Every expression
becomes a ``Period``, a half-open interval of whole days in a time zone (the agent's: ``tiermem agents set NAME
--timezone``; UTC without one), so "yesterday" asked at 8 pm in Los Angeles is that day before in Los Angeles, not in
UTC. Pure functions over text; no I/O.

Scope: English day, week, weekend, month, season and year expressions, relative ("last", "this", "next", "ago",
"in two weeks", weekdays) and absolute (day month year in either order, ISO dates, month names, years 1900-2099).
An expression anchored on an event rather than a date ("two months before the trip") is not resolved.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m and m.lower() != "may"})
_MONTHS["sept"] = 9
_WEEKDAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}  # first month (northern hemisphere)

_MONTH = r"(?P<{}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAYNUM = r"(?P<{}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{}>(?:19|20)\d\d)"
_COUNT = r"(?P<n>\d{1,3}|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>day|week|weekend|month|year)s?"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)\b")),
    (
        "dmy",
        re.compile(
            r"\b"
            + _DAYNUM.format("d")
            + r"(?:\s+of)?\s+"
            + _MONTH.format("m")
            + r"(?:,?\s+"
            + _YEAR.format("y")
            + r")?\b",
            re.I,
        ),
    ),
    (
        "mdy",
        re.compile(
            r"\b"
            + _MONTH.format("m")
            + r"\s+"
            + _DAYNUM.format("d")
            + r"(?!\d|:)(?:,?\s+"
            + _YEAR.format("y")
            + r")?\b",
            re.I,
        ),
    ),
    ("my", re.compile(r"\b" + _MONTH.format("m") + r",?\s+(?:of\s+)?" + _YEAR.format("y") + r"\b", re.I)),
    (
        "season_y",
        re.compile(r"\b(?P<s>spring|summer|fall|autumn|winter)\s+(?:of\s+)?" + _YEAR.format("y") + r"\b", re.I),
    ),
    ("ago", re.compile(r"\b" + _COUNT + r"\s+" + _UNIT + r"\s+(?:ago|back|earlier|before)\b", re.I)),
    ("in_n", re.compile(r"\b(?:in|within)\s+" + _COUNT + r"\s+" + _UNIT + r"\b(?!\s+(?:ago|back|before))", re.I)),
    (
        "rel",
        re.compile(
            r"\b(?P<rel>last|this|next|past|previous|coming|upcoming)\s+(?P<unit>week|weekend|month|year"
            r"|spring|summer|fall|autumn|winter|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
            re.I,
        ),
    ),
    (
        "day",
        re.compile(
            r"\b(?P<word>yesterday|today|tonight|tomorrow|this morning|this afternoon|this evening"
            r"|the other day|the day before yesterday)\b",
            re.I,
        ),
    ),
    (
        "weekday",
        re.compile(
            r"\b(?:on\s+)?(?:the\s+)?(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b", re.I
        ),
    ),
    (
        "month",
        re.compile(
            r"\b(?P<prep>in|during|since|of|by|early|late|mid|until|through|this|last|next)[\s-]+"
            r"(?P<m>january|february|march|april|may|june|july|august|september|october|november|december)\b",
            re.I,
        ),
    ),
    (
        "Month",
        re.compile(r"\b(?P<m>January|February|March|April|June|July|August|September|October|November|December)\b"),
    ),
    (
        "year",
        re.compile(
            r"(?<![\d,.$#-])\b(?P<y>(?:19|20)\d\d)\b(?![\d,.%-]|\s*(?:points?|people|dollars|miles|steps|calories|feet|km|meters)\b)",
            re.I,
        ),
    ),
]
_BEFORE_AFTER = re.compile(
    r"\b(?:(?P<n>\d{1,3}|" + "|".join(map(re.escape, _NUMBERS)) + r")\s+)?(?:the\s+)?"
    r"(?P<unit>day|week|weekend|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?"
    r"\s+(?P<dir>before|after|prior to)\s*$",
    re.I,
)
_WHEN = re.compile(
    r"^\W*(?:when\b|what\s+(?:date|day|year|month|time|week|weekend|season)\b|which\s+(?:date|day|year"
    r"|month|week|weekend|season)\b|how\s+long\b|how\s+(?:many|much)\s+(?:days|weeks|months|years|time)\b"
    r"|since\s+when\b)|\b(?:when\s+(?:did|was|were|is|does|do|will|has|had)|what\s+(?:date|year|month))\b",
    re.I,
)


@dataclass(frozen=True, order=True)
class Period:
    """Whole days ``[start, end)`` (midnights of a time zone: UTC, or the one ``resolve`` is given)."""

    start: datetime
    end: datetime

    def overlaps(self, other: Period) -> bool:
        return self.start < other.end and other.start < self.end

    @property
    def days(self) -> int:
        return (self.end - self.start).days


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _days(first: date, count: int) -> Period:
    return Period(_midnight(first), _midnight(first) + timedelta(days=count))


def _month(year: int, month: int) -> Period:
    return _days(date(year, month, 1), calendar.monthrange(year, month)[1])


def _months(year: int, month: int, count: int) -> Period:
    first, last = _month(year, month), _shift_month(year, month, count - 1)
    return Period(first.start, _month(*last).end)


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    index = year * 12 + month - 1 + by
    return index // 12, index % 12 + 1


def _year(year: int) -> Period:
    return Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def _season(year: int, name: str) -> Period:
    return _months(year, _SEASONS[name.lower()], 3)


def _week_of(day: date) -> Period:
    return _days(day - timedelta(days=day.weekday()), 7)


def _weekend_of(day: date) -> Period:
    """The weekend on or before ``day`` (a Saturday and Sunday)."""
    saturday = day - timedelta(days=(day.weekday() - 5) % 7)
    return _days(saturday, 2)


def _count(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS.get(text, 1)


def _safe_day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _nearest_year(anchor: date, month: int, day: int = 1) -> int:
    """The year that puts ``month``/``day`` nearest ``anchor``, preferring the past (people mostly talk about what was)."""
    for year in (anchor.year, anchor.year - 1):
        when = _safe_day(year, month, min(day, calendar.monthrange(year, month)[1]))
        if when is not None and when <= anchor + timedelta(days=60):
            return year
    return anchor.year


def _ago(anchor: date, n: int, unit: str, sign: int) -> Period:
    unit = unit.lower()
    if unit == "day":
        return _days(anchor + timedelta(days=sign * n), 1)
    if unit in ("week", "weekend"):
        mid = anchor + timedelta(days=sign * 7 * n)
        return _days(mid - timedelta(days=3), 7) if unit == "week" else _weekend_of(mid + timedelta(days=1))
    if unit == "month":
        return _month(*_shift_month(anchor.year, anchor.month, sign * n))
    return _year(anchor.year + sign * n)


def _relative(anchor: date, rel: str, unit: str) -> Period:
    rel, unit = rel.lower(), unit.lower()
    step = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1, "coming": 1, "upcoming": 1}[rel]
    if unit == "week":
        if rel == "past":
            return _days(anchor - timedelta(days=7), 7)
        return _week_of(anchor + timedelta(days=7 * step))
    if unit == "weekend":
        if step < 0:
            return _weekend_of(anchor - timedelta(days=1))
        upcoming = anchor + timedelta(days=(5 - anchor.weekday()) % 7)
        return _days(upcoming + timedelta(days=7 if step > 0 and anchor.weekday() >= 5 else 0), 2)
    if unit == "month":
        if rel == "past":
            return _days(anchor - timedelta(days=30), 30)
        return _month(*_shift_month(anchor.year, anchor.month, step))
    if unit == "year":
        if rel == "past":
            return _days(anchor - timedelta(days=365), 365)
        return _year(anchor.year + step)
    if unit in _SEASONS:
        first = _SEASONS[unit]
        latest = _season(anchor.year if anchor.month >= first else anchor.year - 1, unit)  # the latest begun
        year = latest.start.year
        if step < 0:
            return _season(year - 1 if latest.end > _midnight(anchor) else year, unit)
        return _season(year + step, unit)
    return _weekday(anchor, _WEEKDAYS[unit], step)


def _weekday(anchor: date, weekday: int, step: int) -> Period:
    if step > 0:
        ahead = (weekday - anchor.weekday()) % 7 or 7
        return _days(anchor + timedelta(days=ahead), 1)
    back = (anchor.weekday() - weekday) % 7
    if step < 0 and back == 0:
        back = 7
    return _days(anchor - timedelta(days=back), 1)


_ANY = re.compile(
    r"\d|\b(?:"
    + "|".join(sorted({*_MONTHS, *_WEEKDAYS, *_SEASONS}, key=len, reverse=True))
    + r"|yesterday|today|tonight|tomorrow|morning|afternoon|evening|other day|week|weekend|month|year"
    r"|ago|days)",
    re.I,
)
_ABSOLUTE = {"iso", "my", "season_y", "year"}  # kinds that need no anchor (dmy/mdy only with their year)


def resolve(text: str, anchor: datetime, zone: tzinfo = UTC) -> list[Period]:
    """Every time expression in ``text``, resolved against ``anchor`` (the time the text was written or is asked), as
    whole days of ``zone`` (the day ``anchor`` falls on there, and its midnights)."""
    return [_in_zone(p, zone) for _, p in _scan(text, anchor.astimezone(zone).date())]


def _in_zone(period: Period, zone: tzinfo) -> Period:
    """``period`` (whole days at UTC midnights) as the same days in ``zone``."""
    if zone is UTC:
        return period
    return Period(period.start.replace(tzinfo=zone), period.end.replace(tzinfo=zone))


def needs_clock(query: str) -> bool:
    """Whether ``query_periods`` reads its clock: a relative expression, and no full date to anchor it on."""
    if full_dates(query):
        return False
    return any(not (kind in _ABSOLUTE or kind in ("dmy", "mdy") and m.group("y")) for kind, m in _matches(query))


def _scan(text: str, day: date) -> list[tuple[str, Period]]:
    return [(kind, p) for kind, m in _matches(text) if (p := _period(kind, m, day, text)) is not None]


def _matches(text: str) -> list[tuple[str, re.Match[str]]]:
    """Non-overlapping expressions, in text order (earlier patterns win an overlap: the more specific)."""
    if not _ANY.search(text):
        return []
    found: list[tuple[str, re.Match[str]]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if (
                not any(m.start() < o.end() and o.start() < m.end() for _, o in found)
                and _period(kind, m, date(2000, 6, 15), text) is not None
            ):
                found.append((kind, m))
    return sorted(found, key=lambda t: t[1].start())


def _period(kind: str, m: re.Match[str], day: date, text: str) -> Period | None:
    g = m.groupdict()
    if kind == "iso":
        when = _safe_day(int(g["y"]), int(g["m"]), int(g["d"]))
        return _days(when, 1) if when else None
    if kind in ("dmy", "mdy"):
        month = _MONTHS[g["m"].lower().rstrip(".")]
        if g["m"].lower() == "may" and not g["y"] and not g["m"][0].isupper():
            return None
        number = int(g["d"])
        year = int(g["y"]) if g["y"] else _nearest_year(day, month, number)
        when = _safe_day(year, month, number)
        return _days(when, 1) if when else None
    if kind == "my":
        return _month(int(g["y"]), _MONTHS[g["m"].lower().rstrip(".")])
    if kind == "season_y":
        return _season(int(g["y"]), g["s"])
    if kind == "ago":
        return _ago(day, _count(g["n"]), g["unit"], -1)
    if kind == "in_n":
        return _ago(day, _count(g["n"]), g["unit"], 1)
    if kind == "rel":
        return _relative(day, g["rel"], g["unit"])
    if kind == "day":
        word = " ".join(g["word"].lower().split())
        offset = {"yesterday": -1, "tomorrow": 1, "the day before yesterday": -2}.get(word, 0)
        if word == "the other day":
            return _days(day - timedelta(days=7), 7)
        return _days(day + timedelta(days=offset), 1)
    if kind == "weekday":
        if m.group(0)[-1:].lower() == "s":  # "on Fridays": a habit, not a day
            return None
        return _weekday(day, _WEEKDAYS[g["wd"].lower()], 0)
    if kind in ("month", "Month"):
        month = _MONTHS[g["m"].lower()]
        prep = (g.get("prep") or "").lower()
        if prep == "next":
            return _month(*_shift_month(day.year, month, 0)) if month > day.month else _month(day.year + 1, month)
        year = _nearest_year(day, month)
        if prep == "last" and (year, month) >= (day.year, day.month):
            year -= 1
        return _month(year, month)
    if kind == "year":
        return _year(int(g["y"]))
    return None


def full_dates(text: str) -> list[datetime]:
    """The midnights of the full dates (day, month and year) ``text`` names, in order."""
    out = []
    for kind in ("iso", "dmy", "mdy"):
        pattern = dict(_PATTERNS)[kind]
        for m in pattern.finditer(text):
            if kind == "iso" or m.group("y"):
                period = _period(kind, m, date(2000, 1, 1), text)
                if period is not None:
                    out.append((m.start(), period.start))
    return [when for _, when in sorted(out)]


def query_periods(query: str, clock: datetime, zone: tzinfo = UTC) -> list[Period]:
    """The periods a query is about, as whole days of ``zone``. Relative expressions resolve against the full date the
    query names, if any ("last weekend before April 10, 2023", "the week before August 3, 2023"), else against
    ``clock`` (the conversation's newest message; its day in ``zone``); "N days/weeks before <date>" becomes the span
    before that date."""
    named = full_dates(query)
    day = named[0].date() if named else clock.astimezone(zone).date()
    periods = [_in_zone(p, zone) for _, p in _scan(query, day)]
    for when in named:
        head = query[: _position_of(query, when)]
        m = _BEFORE_AFTER.search(head.rstrip(" ,"))
        if m:
            periods.append(_in_zone(_span(when.date(), m), zone))
    return periods


def _position_of(query: str, when: datetime) -> int:
    for kind in ("iso", "dmy", "mdy"):
        for m in dict(_PATTERNS)[kind].finditer(query):
            if kind == "iso" or m.group("y"):
                p = _period(kind, m, date(2000, 1, 1), query)
                if p is not None and p.start == when:
                    return m.start()
    return len(query)


def _span(day: date, m: re.Match[str]) -> Period:
    """ "two weeks before <day>", "the Sunday before <day>", "the week after <day>"."""
    n = _count(m.group("n")) if m.group("n") else 1
    unit = m.group("unit").lower()
    sign = 1 if m.group("dir").lower() == "after" else -1
    if unit in _WEEKDAYS:
        return _weekday(day, _WEEKDAYS[unit], sign)
    if unit == "weekend":
        return _weekend_of(day - timedelta(days=1)) if sign < 0 else _relative(day, "next", "weekend")
    size = {"day": 1, "week": 7, "month": 30}[unit] * n
    return _days(day - timedelta(days=size), size) if sign < 0 else _days(day + timedelta(days=1), size)


def asks_when(query: str) -> bool:
    """Whether a query asks for a time ("When did ...", "What year ...", "How long ago ...")."""
    return bool(_WHEN.search(query))
