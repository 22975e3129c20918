"""The timeline's calendar: days, ISO weeks (Monday to Sunday) and months, in UTC or an agent's time zone, each
named by a key ("2024-05-08", "2024-W19", "2024-05") that says its own unit; the days a date written without a time names, which the
search tools' date bounds read (``date_span``), in an agent's time zone when it has one (``time_zone``). Pure
functions; no I/O but the zone database's.

The calendar runs from 0001-01-01 to 9999-12-31 (Python's): the last period of 9999 ends at ``END``, the last
instant a time can name, rather than at a 10000-01-01 no date can hold."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..base.errors import ValidationError

Unit = Literal["day", "week", "month"]
UNITS: tuple[Unit, ...] = ("day", "week", "month")
MAX_PERIODS = 2000  # periods one answer may hold (ten years of weeks; a day-by-day span longer asks for weeks)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_BASIC_DAY = re.compile(r"^\d{8}$")  # 20240601
_ANY_WEEK = re.compile(r"^(\d{4})-?W(\d{2})$")  # 2024-W22, 2024W22
_WEEK_DAY = re.compile(r"^\d{4}-?W\d{2}-?\d$")  # 2024-W22-6, 2024W226
_YEAR = re.compile(r"^(\d{4})$")  # 2024 (ISO 8601's reduced precision: the whole year)
END = datetime.max.replace(tzinfo=UTC)  # where the calendar's last day, week and month end


NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})  # files of the zone database that name no place's time


def time_zone(name: object) -> ZoneInfo | None:
    """The IANA time zone ``name`` names (``Europe/Paris``), None when it names none (an agent's ``timezone``).
    ``localtime`` (this machine's zone: an agent's days would change when its memory moves to another machine),
    ``posixrules`` and ``Factory`` open as zones but name none."""
    if not isinstance(name, str) or not name.strip() or name.strip() in NOT_ZONES:
        return None
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):  # not a zone, or not a zone's name at all ("../x", "a b")
        return None


def check_unit(by: str) -> Unit:
    for unit in UNITS:
        if by == unit:
            return unit
    raise ValidationError(f"by must be one of {', '.join(UNITS)}, got {by!r}.")


def period_key(when: datetime, by: Unit, zone: tzinfo = UTC) -> str:
    """The key of the period holding ``when``, its days counted in ``zone``."""
    try:
        day = when.astimezone(zone).date()
    except OverflowError:  # the zone moves the calendar's first or last instant past its edge
        day = when.astimezone(UTC).date()
    if by == "day":
        return day.isoformat()
    if by == "week":
        year, week, _ = day.isocalendar()
        return f"{year:04d}-W{week:02d}"
    return f"{day.year:04d}-{day.month:02d}"


def parse_period(text: str, zone: tzinfo = UTC) -> tuple[Unit, datetime, datetime]:
    """A period's key as the timeline names it: a day (2024-05-08), an ISO week (2024-W19) or a month (2024-05);
    its unit and [start, end), from midnight to midnight in ``zone``."""
    if not isinstance(text, str):
        raise ValidationError("period must be text, e.g. 2024-05, 2024-W19 or 2024-05-08.")
    key = text.strip()
    try:
        if _DAY.fullmatch(key):
            first = date.fromisoformat(key)
            return "day", _midnight(first, zone), _after(first, zone)
        if m := _WEEK.fullmatch(key):
            first = date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
            return "week", _midnight(first, zone), _after(_sunday(first), zone)
        if m := _MONTH.fullmatch(key):
            first, last = _month(int(m.group(1)), int(m.group(2)))
            return "month", _midnight(first, zone), _after(last, zone)
    except ValueError:
        pass
    raise ValidationError(
        f"period {text!r} is not a day (2024-05-08), an ISO week (2024-W19) or a month (2024-05); "
        "the timeline's own list names each one."
    )


def date_span(text: str) -> tuple[date, date] | None:
    """The first and last day a date written without a time names: a day (2024-06-01, 20240601, 2024-W22-6), an ISO
    week (2024-W22, 2024W22), a month (2024-06) or a year (2024); None when ``text`` is none of these forms (a time,
    or no date). ``ValueError`` when it has such a form but the calendar lacks it (2024-02-30, 2024-W54, 2024-13,
    0000)."""
    key = text.strip().upper()
    if _DAY.fullmatch(key) or _BASIC_DAY.fullmatch(key) or _WEEK_DAY.fullmatch(key):
        day = date.fromisoformat(key)
        return day, day
    if m := _ANY_WEEK.fullmatch(key):
        first = date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
        return first, _sunday(first)
    if m := _MONTH.fullmatch(key):
        return _month(int(m.group(1)), int(m.group(2)))
    if m := _YEAR.fullmatch(key):
        return date(int(m.group(1)), 1, 1), date(int(m.group(1)), 12, 31)
    return None


def _month(year: int, month: int) -> tuple[date, date]:
    """The first and last day of a month (``ValueError`` for a month the calendar lacks)."""
    first = date(year, month, 1)
    return first, date(year, month, calendar.monthrange(year, month)[1])


def _sunday(monday: date) -> date:
    """The last day of the ISO week that starts on ``monday`` (9999-12-31 for the calendar's last week)."""
    return date.max if monday > date.max - timedelta(days=6) else monday + timedelta(days=6)


def _midnight(day: date, zone: tzinfo = UTC) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def _after(day: date, zone: tzinfo = UTC) -> datetime:
    """The exclusive end of a period whose last day is ``day``: the next midnight, or ``END`` after 9999-12-31."""
    return END if day == date.max else _midnight(day + timedelta(days=1), zone)


def periods_between(
    first: datetime, last: datetime, by: Unit, zone: tzinfo = UTC
) -> list[tuple[str, datetime, datetime]]:
    """Every period from the one holding ``first`` to the one holding ``last``, empty ones included (days in
    ``zone``)."""
    out: list[tuple[str, datetime, datetime]] = []
    key = period_key(first, by, zone)
    final = period_key(last, by, zone)
    while True:
        _, start, end = parse_period(key, zone)
        out.append((key, start, end))
        if key == final:
            return out
        if len(out) >= MAX_PERIODS:
            raise ValidationError(f"The range holds more than {MAX_PERIODS} {by}s; narrow it (from/to){_longer(by)}.")
        key = period_key(end, by, zone)


def _longer(by: Unit) -> str:
    """The advice to count by a longer unit, when there is one."""
    longer = UNITS[UNITS.index(by) + 1 :]
    return f" or count by {' or '.join(longer)}" if longer else ""


def last_periods(
    first: datetime, last: datetime, by: Unit, count: int, zone: tzinfo = UTC
) -> list[tuple[str, datetime, datetime]]:
    """The last ``count`` periods up to the one holding ``last``, none before the one holding ``first`` (days in
    ``zone``)."""
    out: list[tuple[str, datetime, datetime]] = []
    key = period_key(last, by, zone)
    stop = period_key(first, by, zone)
    while len(out) < count:
        _, start, end = parse_period(key, zone)
        out.append((key, start, end))
        if key == stop:
            break
        key = period_key(start - timedelta(microseconds=1), by, zone)
    return out[::-1]
