"""The timeline's calendar: days, ISO weeks (Monday to Sunday) and months in UTC, each named by a key
("2024-05-08", "2024-W19", "2024-05") that says its own unit. Pure functions; no I/O."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from ..base.errors import ValidationError

Unit = Literal["day", "week", "month"]
UNITS: tuple[Unit, ...] = ("day", "week", "month")
MAX_PERIODS = 2000  # periods one answer may hold (ten years of weeks; a day-by-day span longer asks for weeks)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def check_unit(by: str) -> Unit:
    for unit in UNITS:
        if by == unit:
            return unit
    raise ValidationError(f"by must be one of {', '.join(UNITS)}, got {by!r}.")


def period_key(when: datetime, by: Unit) -> str:
    day = when.astimezone(UTC).date()
    if by == "day":
        return day.isoformat()
    if by == "week":
        year, week, _ = day.isocalendar()
        return f"{year}-W{week:02d}"
    return f"{day.year}-{day.month:02d}"


def parse_period(text: str) -> tuple[Unit, datetime, datetime]:
    """A period's key as the timeline names it: a day (2024-05-08), an ISO week (2024-W19) or a month (2024-05);
    its unit and [start, end)."""
    if not isinstance(text, str):
        raise ValidationError("period must be text, e.g. 2024-05, 2024-W19 or 2024-05-08.")
    key = text.strip()
    try:
        if _DAY.fullmatch(key):
            first = date.fromisoformat(key)
            return "day", _midnight(first), _midnight(first + timedelta(days=1))
        if m := _WEEK.fullmatch(key):
            first = date.fromisocalendar(int(m.group(1)), int(m.group(2)), 1)
            return "week", _midnight(first), _midnight(first + timedelta(days=7))
        if m := _MONTH.fullmatch(key):
            year, month = int(m.group(1)), int(m.group(2))
            following = date(year + month // 12, month % 12 + 1, 1)
            return "month", _midnight(date(year, month, 1)), _midnight(following)
    except ValueError:
        pass
    raise ValidationError(
        f"period {text!r} is not a day (2024-05-08), an ISO week (2024-W19) or a month (2024-05); "
        "the timeline's own list names each one."
    )


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def periods_between(first: datetime, last: datetime, by: Unit) -> list[tuple[str, datetime, datetime]]:
    """Every period from the one holding ``first`` to the one holding ``last``, empty ones included."""
    out: list[tuple[str, datetime, datetime]] = []
    key = period_key(first, by)
    final = period_key(last, by)
    while True:
        _, start, end = parse_period(key)
        out.append((key, start, end))
        if key == final:
            return out
        if len(out) >= MAX_PERIODS:
            raise ValidationError(
                f"The range holds more than {MAX_PERIODS} {by}s; narrow it (from/to) or count by a longer period."
            )
        key = period_key(end, by)


def last_periods(first: datetime, last: datetime, by: Unit, count: int) -> list[tuple[str, datetime, datetime]]:
    """The last ``count`` periods up to the one holding ``last``, none before the one holding ``first``."""
    out: list[tuple[str, datetime, datetime]] = []
    key = period_key(last, by)
    stop = period_key(first, by)
    while len(out) < count:
        _, start, end = parse_period(key)
        out.append((key, start, end))
        if key == stop:
            break
        key = period_key(start - timedelta(microseconds=1), by)
    return out[::-1]
