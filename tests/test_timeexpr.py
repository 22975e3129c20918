"""Time expressions resolved against a clock: a turn against its own timestamp, a query against the conversation's
clock or the date it names."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from tiermem.base.names import name_in
from tiermem.domain.search.timeexpr import asks_when, full_dates, needs_clock, query_periods, resolve

MONDAY = datetime(2023, 7, 3, 13, 36, tzinfo=UTC)  # a turn written at 1:36 pm on Monday 3 July 2023


def spans(text: str, anchor: datetime = MONDAY) -> list[tuple[str, int]]:
    return [(p.start.date().isoformat(), p.days) for p in resolve(text, anchor)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I signed up for a pottery class yesterday.", [("2023-07-02", 1)]),
        ("the day before yesterday", [("2023-07-01", 1)]),
        ("my school event last week", [("2023-06-26", 7)]),
        ("we went camping last weekend", [("2023-07-01", 2)]),
        ("I passed the interviews last Friday", [("2023-06-30", 1)]),
        ("on Friday we met", [("2023-06-30", 1)]),
        ("a friend made it for my 18th birthday ten years ago", [("2013-01-01", 365)]),
        ("a couple of weeks ago", [("2023-06-16", 7)]),
        ("3 days ago", [("2023-06-30", 1)]),
        ("next month", [("2023-08-01", 31)]),
        ("in two weeks", [("2023-07-14", 7)]),
        ("this summer", [("2023-06-01", 92)]),
        ("last summer", [("2022-06-01", 92)]),
        ("8 May, 2023", [("2023-05-08", 1)]),
        ("May 8th 2023 and 2023-05-09", [("2023-05-08", 1), ("2023-05-09", 1)]),
        ("on the 5th of June", [("2023-06-05", 1)]),
        ("In May we went", [("2023-05-01", 31)]),
        ("in December", [("2022-12-01", 31)]),  # the nearest December before: people mostly talk about what was
        ("in June 2022 and in 2021", [("2022-06-01", 30), ("2021-01-01", 365)]),
        ("summer of 2021", [("2021-06-01", 92)]),
    ],
)
def test_a_turn_is_read_against_its_own_timestamp(text: str, expected: list[tuple[str, int]]) -> None:
    assert spans(text) == expected


@pytest.mark.parametrize(
    "text",
    ["You may go", "I love Fridays", "I scored 2000 points", "Seven years now", "no time here", "room 2023-13-45"],
)
def test_what_is_not_a_time_resolves_to_nothing(text: str) -> None:
    assert resolve(text, MONDAY) == []


def test_a_query_is_read_against_the_date_it_names_else_the_clock() -> None:
    clock = datetime(2023, 10, 1, tzinfo=UTC)

    def days(query: str) -> set[tuple[str, int]]:
        return {(p.start.date().isoformat(), p.days) for p in query_periods(query, clock)}

    assert days("What did Maria do last weekend before April 10, 2023?") == {("2023-04-08", 2), ("2023-04-10", 1)}
    assert ("2023-07-27", 7) in days("What did John do the week before August 3, 2023?")
    assert ("2023-07-28", 14) in days("What is the name of the puppy she got two weeks before August 11, 2023?")
    assert ("2022-10-23", 1) in days("What was shown on the Sunday before October 25, 2022?")
    assert days("What did they do last week?") == {("2023-09-18", 7)}
    assert days("When did Melanie go camping in June?") == {("2023-06-01", 30)}
    assert days("What did Caroline research?") == set()
    assert needs_clock("What did they do last week?") and needs_clock("camping in June?")
    assert not needs_clock("camping in June 2023?") and not needs_clock("last Friday on 23 January, 2022")
    assert not needs_clock("What did Caroline research?")
    assert full_dates("between 1 May 2023 and June 3, 2023") == [
        datetime(2023, 5, 1, tzinfo=UTC),
        datetime(2023, 6, 3, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("query", "when"),
    [
        ("When did Melanie go camping?", True),
        ("How long ago was Caroline's 18th birthday?", True),
        ("What year did John start surfing?", True),
        ("How long has Melanie been practicing art?", True),
        ("In which month did it happen? When was that?", True),
        ("Where did Caroline move from?", False),
        ("What did Melanie paint?", False),
        ("How many children does John have?", False),
    ],
)
def test_asks_when(query: str, when: bool) -> None:
    assert asks_when(query) is when


def test_resolution_is_by_day_in_utc() -> None:
    late = datetime(2023, 7, 3, 23, 59, tzinfo=UTC)
    assert resolve("yesterday", late)[0].start.date() == date(2023, 7, 2)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Name: Caroline", "Caroline"),
        ("The user's name is Caroline.", "Caroline"),
        ("My name is Sam and I like tea", "Sam"),
        ("I am Melanie, a painter.", "Melanie"),
        ("Caroline is a counsellor in training", "Caroline"),
        ("- name: Jon Smith\n- job: dancer", "Jon Smith"),
        ("Call me Ishmael", "Ishmael"),
        ("I'm Nate.", "Nate"),
        ("I am a helpful assistant with a persistent memory.", None),
        ("", None),
        ("The human prefers dark mode", None),
        ("user's name is not known yet", None),
    ],
)
def test_the_name_a_block_gives(text: str, name: str | None) -> None:
    assert name_in(text) == name


def test_a_querys_days_are_the_agents_time_zones() -> None:
    """At 03:00 UTC on 7 December it is 19:00 on the 6th in Los Angeles: "yesterday" there is the 5th, and the days
    a query names start at that zone's midnights (a stated date too)."""
    from zoneinfo import ZoneInfo

    from tiermem.domain.search.ranking import stated_time

    la = ZoneInfo("America/Los_Angeles")
    clock = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
    assert [p.start.isoformat() for p in query_periods("dinner yesterday", clock)] == ["2026-12-06T00:00:00+00:00"]
    (yesterday,) = query_periods("dinner yesterday", clock, la)
    assert (yesterday.start.isoformat(), yesterday.days) == ("2026-12-05T00:00:00-08:00", 1)
    (named,) = query_periods("dinner on December 6", clock, la)
    assert named.start == datetime(2026, 12, 6, tzinfo=la) and named.end == datetime(2026, 12, 7, tzinfo=la)
    (before,) = query_periods("the week before December 6, 2026", clock, la)[1:]
    assert before.start == datetime(2026, 11, 29, tzinfo=la)
    assert [p.start for p in resolve("I cooked yesterday", clock, la)] == [datetime(2026, 12, 5, tzinfo=la)]
    at = stated_time("On 6 December 2026: pizza", la)
    assert at is not None and datetime.fromtimestamp(at / 1e6, tz=la) == datetime(2026, 12, 6, tzinfo=la)
