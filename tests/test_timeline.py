"""The timeline (``domain/timeline.py``): counts per day, ISO week and month over recall, archival passages, file
changes and block versions, on a real store filled at chosen times; the agent and project boundaries; the terms that
rise in a period; ``tiermem timeline`` as a user runs it (bad input refused, nothing opened); the
``memory://timeline`` resources through a real MCP client in process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ValidationError
from tiermem.cli.main import main
from tiermem.domain import timeline as tl
from tiermem.domain.archive import parse_bound
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import TIMEZONE_KEY, Memory
from tiermem.domain.patterns import rising_terms, words_of
from tiermem.domain.periods import END, parse_period, period_key

from .conftest import serve_in_process

RECALL = [  # (time, text): 2024-05-03 and -04 are ISO week 18, -13 week 20, June 10 and 12 week 24
    ("2024-05-03T10:00:00", "Caroline: I adopted two dogs from the shelter"),
    ("2024-05-04T09:30:00", "Melanie: the dogs must be a handful"),
    ("2024-05-13T18:00:00", "Caroline: the dogs chewed my sneakers"),
    ("2024-06-10T08:00:00", "Caroline: we went camping near the lake"),
    ("2024-06-12T20:00:00", "Melanie: camping again? the lake was freezing"),
]
PASSAGES = [
    (datetime(2024, 5, 20, 12, tzinfo=UTC), "Caroline has two rescue dogs"),
    (datetime(2024, 6, 11, tzinfo=UTC), "Caroline camps at Lake Tahoe"),
]


def fill(memory: Memory, agent: str = "work") -> str:
    agent_id = memory.ensure_agent(agent).id
    memory.archive.log_messages(agent_id, [{"role": "user", "content": c, "timestamp": t} for t, c in RECALL])
    memory.archive.insert_many(agent_id, [(c, ["life"]) for _, c in PASSAGES], created=[t for t, _ in PASSAGES])
    return agent_id


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Memory, str, str]:
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    work = fill(memory)
    other = memory.ensure_agent("other").id  # its rows sit in the same months: never counted for work
    memory.archive.log_messages(
        other, [{"role": "user", "content": "other agent's dogs", "timestamp": "2024-05-03T11:00:00"}] * 3
    )
    return memory, work, other


MAY_JUNE = {"start": "2024-05-01", "end": "2024-06-30"}


def counts(found: tl.Timeline, kind: str) -> dict[str, int]:
    return {p.key: p.counts[kind] for p in found.periods}


def test_counts_per_month_week_and_day_across_kinds(filled: tuple[Memory, str, str]) -> None:
    memory, work, _ = filled
    month = tl.timeline(memory, work, by="month", **MAY_JUNE)
    assert counts(month, "recall") == {"2024-05": 3, "2024-06": 2}
    assert counts(month, "archival") == {"2024-05": 1, "2024-06": 1}
    assert counts(month, "blocks") == {"2024-05": 0, "2024-06": 0}  # the blocks' versions were written today
    assert month.totals == {"recall": 5, "archival": 2, "files": 0, "blocks": 0}

    week = tl.timeline(memory, work, by="week", **MAY_JUNE)
    assert [p.key for p in week.periods][:2] == ["2024-W18", "2024-W19"]  # every week, empty ones too
    assert len(week.periods) == 9  # W18 (May 1 is a Wednesday) to W26 (June 30 is a Sunday)
    assert {k: v for k, v in counts(week, "recall").items() if v} == {"2024-W18": 2, "2024-W20": 1, "2024-W24": 2}
    assert {k: v for k, v in counts(week, "archival").items() if v} == {"2024-W21": 1, "2024-W24": 1}

    day = tl.timeline(memory, work, by="day", start="2024-06-10", end="2024-06-12")
    assert [(p.key, p.total) for p in day.periods] == [("2024-06-10", 1), ("2024-06-11", 1), ("2024-06-12", 1)]

    # a bound left out is the edge of what memory holds: today's block versions end the range
    everything = tl.timeline(memory, work, by="month", kinds=["recall", "blocks"])
    assert everything.periods[0].key == "2024-05" and everything.periods[-1].total == 2  # persona and human, v1
    assert everything.kinds == ("recall", "blocks") and set(everything.periods[0].counts) == {"recall", "blocks"}


def test_the_agent_and_the_project_bound_what_is_counted(filled: tuple[Memory, str, str]) -> None:
    memory, work, other = filled
    assert tl.timeline(memory, other, by="month", **MAY_JUNE).totals["recall"] == 3
    assert tl.timeline(memory, work, by="month", **MAY_JUNE).totals["recall"] == 5
    view = tl.period(memory, work, "2024-05-03", terms=0)
    assert [i.text for i in view.items] == ["Caroline: I adopted two dogs from the shelter"]  # not the other agent's
    memory.archive.log_messages(
        work, [{"role": "user", "content": "dogs at work", "timestamp": "2024-05-05T10:00:00", "project": "acme"}]
    )
    assert tl.timeline(memory, work, by="month", project="acme", kinds=["recall"], **MAY_JUNE).totals == {"recall": 1}
    assert tl.timeline(memory, work, by="month", kinds=["recall"], **MAY_JUNE).totals == {"recall": 6}


def test_a_query_counts_only_the_items_holding_its_words(filled: tuple[Memory, str, str]) -> None:
    memory, work, _ = filled
    dogs = tl.timeline(memory, work, by="month", query="dog", **MAY_JUNE)  # "dogs" holds "dog"
    assert counts(dogs, "recall") == {"2024-05": 3, "2024-06": 0}
    assert counts(dogs, "archival") == {"2024-05": 1, "2024-06": 0}
    assert tl.timeline(memory, work, by="month", query="camping lake", **MAY_JUNE).totals["recall"] == 2
    with pytest.raises(ValidationError, match="no word that counts"):
        tl.timeline(memory, work, query="the of")


def test_a_period_lists_what_it_holds_and_its_rising_terms(filled: tuple[Memory, str, str]) -> None:
    memory, work, _ = filled
    june = tl.period(memory, work, "2024-06", **MAY_JUNE)
    assert june.by == "month" and june.total == 3
    assert [(i.kind, i.at.day) for i in june.items] == [("recall", 10), ("archival", 11), ("recall", 12)]
    assert june.items[1].detail == "life" and june.items[0].detail == "user"
    rising = [t.term for t in june.rising]
    assert {"camping", "lake"} <= set(rising[:3]) and "dogs" not in rising and "Caroline" not in rising[:2]
    week = tl.period(memory, work, "2024-W18", limit=1, **MAY_JUNE)
    assert week.total == 2 and len(week.items) == 1 and week.as_dict()["shown"] == 1
    overview = tl.timeline(memory, work, by="month", terms=3, **MAY_JUNE)
    assert overview.periods[0].rising[0].term == "dogs"
    assert overview.as_dict()["periods"][1]["rising"][0]["term"] in ("camping", "lake")


def test_file_changes_and_block_versions_are_counted_when_they_happen(tmp_path: Path) -> None:
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    agent = memory.ensure_agent("work").id
    memory.files.create_folder("notes")
    memory.files.upload_many("notes", [("trip.md", b"# Trip\nLake Tahoe in June\n", "")])
    memory.files.attach(agent, "notes")
    memory.edit(agent, "human", Rethink("Name: Caroline\nHas two dogs"))
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    view = tl.period(memory, agent, today, kinds=["files", "blocks"])
    files = [i for i in view.items if i.kind == "files"]
    assert [(i.text, i.detail) for i in files] == [("notes/trip.md", "created")]
    human = [i for i in view.items if i.kind == "blocks" and i.detail.startswith("human v2")]
    assert human and "Has two dogs" in human[0].text and "by" in human[0].detail
    assert tl.timeline(memory, agent, by="day", query="tahoe").totals["files"] == 0  # a file matches by its name
    assert tl.timeline(memory, agent, by="day", query="trip").totals["files"] == 1
    other = memory.ensure_agent("other").id  # the folder is not attached to it, and its blocks are its own
    assert tl.timeline(memory, other, by="day", kinds=["files"]).totals == {"files": 0}


def test_a_file_is_modified_only_when_its_content_changes(tmp_path: Path) -> None:
    """Storing a file (chunking, embedding: seconds for a big one) is not a change: the timeline says "modified"
    only when the content changed. A file imported with its dates (2021) shows its creation then, nothing today."""
    from dataclasses import replace

    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    agent = memory.ensure_agent("work").id
    folder = memory.files.create_folder("notes")
    memory.files.attach(agent, "notes")
    (done,) = memory.files.upload_many("notes", [("trip.md", b"# Trip\nLake Tahoe in June\n", "")])
    assert done.file is not None
    old = datetime(2021, 3, 4, 5, 6, 7, tzinfo=UTC)
    memory.files.import_file(folder.id, replace(done.file, created_at=old, updated_at=old), "# Trip\nTahoe\n")
    (stored,) = memory.files.files("notes")
    assert (stored.status, stored.created_at, stored.updated_at) == ("completed", old, old)
    every = tl.timeline(memory, agent, by="month", kinds=["files"], start="2021-01-01")
    assert every.totals == {"files": 1}
    assert [(i.text, i.detail) for i in tl.period(memory, agent, "2021-03", kinds=["files"]).items] == [
        ("notes/trip.md", "created")
    ]
    memory.files.upload("notes", "trip.md", b"# Trip\nLake Tahoe in July\n")  # a change: modified today
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert [i.detail for i in tl.period(memory, agent, today, kinds=["files"]).items] == ["modified"]


def test_bad_ranges_units_kinds_and_periods_are_refused(filled: tuple[Memory, str, str]) -> None:
    memory, work, _ = filled
    with pytest.raises(ValidationError, match=r"from \(2024-06-01.*is after to"):
        tl.timeline(memory, work, start="2024-06-01", end="2024-05-01")
    with pytest.raises(ValidationError, match="Invalid from format"):
        tl.timeline(memory, work, start="May 2024")
    with pytest.raises(ValidationError, match="by must be one of day, week, month"):
        tl.timeline(memory, work, by="year")
    with pytest.raises(ValidationError, match="Unknown kind"):
        tl.timeline(memory, work, kinds=["passages"])
    with pytest.raises(ValidationError, match="more than 2000 days"):
        tl.timeline(memory, work, by="day", start="2000-01-01", end="2024-01-01")
    for bad in ("2024-13", "2024-W54", "2024-02-30", "last week"):
        with pytest.raises(ValidationError, match="is not a day"):
            tl.period(memory, work, bad)


def test_periods_are_named_by_their_keys() -> None:
    assert period_key(datetime(2021, 1, 3, tzinfo=UTC), "week") == "2020-W53"  # ISO: the year of the week's Thursday
    assert parse_period("2020-W53")[1:] == (datetime(2020, 12, 28, tzinfo=UTC), datetime(2021, 1, 4, tzinfo=UTC))
    assert parse_period("2024-12")[2] == datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_period("2024-02-29")[0] == "day"


def test_the_calendars_first_and_last_periods_are_counted(filled: tuple[Memory, str, str]) -> None:
    """Years 1 and 9999 are the calendar's edges (as the search tools take them): their periods are named with four
    digits and counted; the last one ends at the last instant a time can name."""
    memory, work, _ = filled
    memory.archive.log_messages(work, [{"role": "user", "content": "a far future", "timestamp": "9999-12-31T12:00"}])
    last = {"start": "9999-12-01", "end": "9999-12-31"}
    days = tl.timeline(memory, work, by="day", **last)
    assert len(days.periods) == 31 and (days.periods[-1].key, days.periods[-1].total) == ("9999-12-31", 1)
    assert days.periods[-1].end == END
    assert [(p.key, p.total) for p in tl.timeline(memory, work, **last).periods] == [("9999-12", 1)]
    weeks = tl.timeline(memory, work, by="week", **last)
    assert [p.key for p in weeks.periods] == ["9999-W48", "9999-W49", "9999-W50", "9999-W51", "9999-W52"]
    assert weeks.periods[-1].total == 1 and weeks.periods[-1].end == END
    for key in ("9999-12", "9999-W52", "9999-12-31"):
        assert tl.period(memory, work, key).total == 1
    first = tl.timeline(memory, work, start="0001-01-01T00:00+02:00", end="0001-03-01")  # before year 1 in UTC
    assert [p.key for p in first.periods] == ["0001-01", "0001-02", "0001-03"] and first.totals["recall"] == 0
    assert period_key(datetime(1, 1, 1, tzinfo=UTC), "week") == "0001-W01"
    assert parse_period("0001-01")[1] == datetime(1, 1, 1, tzinfo=UTC)
    with pytest.raises(ValidationError, match=r"more than 2000 months; narrow it \(from/to\)\.$"):
        tl.timeline(memory, work, start="1900-01-01", end="2099-12-31")  # no longer unit to suggest
    with pytest.raises(ValidationError, match=r"more than 2000 weeks; narrow it \(from/to\) or count by month\.$"):
        tl.timeline(memory, work, by="week", start="1900-01-01", end="2099-12-31")


def test_a_date_without_a_time_bounds_all_it_names() -> None:
    """A day (extended or basic), an ISO week, a month and a year: a start is the first instant, an end the last."""

    def both(text: str) -> tuple[str, str]:
        start, end = parse_bound(text, "x", end=False), parse_bound(text, "x", end=True)
        assert start is not None and end is not None
        return start.isoformat(), end.isoformat()

    june_1 = ("2024-06-01T00:00:00+00:00", "2024-06-01T23:59:59.999999+00:00")
    assert both("2024-06-01") == both("20240601") == both("2024-W22-6") == both("2024W226") == june_1
    assert both("2024-W22") == both("2024w22") == ("2024-05-27T00:00:00+00:00", "2024-06-02T23:59:59.999999+00:00")
    assert both("2024-06") == ("2024-06-01T00:00:00+00:00", "2024-06-30T23:59:59.999999+00:00")
    assert both("2024") == ("2024-01-01T00:00:00+00:00", "2024-12-31T23:59:59.999999+00:00")  # reduced precision
    assert both("9999-W52")[1] == both("9999-12")[1] == END.isoformat()
    assert both("0001-01-01T00:00+02:00")[0] == "0001-01-01T00:00:00+00:00"  # the calendar's edge, not an overflow
    for bad, why in (
        ("2024-13", "there is no month 13"),
        ("2024-W54", "2024 has ISO weeks W01 to W52"),
        ("2020W54", "2020 has ISO weeks W01 to W53"),
        ("20240230", "February 2024 has 29 days"),
        ("0000", "Invalid x format"),
        ("20245", "Invalid x format"),
    ):
        with pytest.raises(ValidationError, match=why):
            parse_bound(bad, "x", end=False)


def test_the_timeline_reads_the_dates_that_way(filled: tuple[Memory, str, str]) -> None:
    memory, work, _ = filled
    assert tl.timeline(memory, work, start="20240510", end="20240513", kinds=["recall"]).totals == {"recall": 1}
    assert tl.timeline(memory, work, start="2024-W18", end="2024-W18", by="week").totals["recall"] == 2
    june = tl.timeline(memory, work, start="2024-06", end="2024-06")
    assert [p.key for p in june.periods] == ["2024-06"] and june.totals == {**june.totals, "recall": 2, "archival": 1}


def test_the_last_periods_say_what_they_count(filled: tuple[Memory, str, str]) -> None:
    """``last``: only the last periods are listed, and ``from`` is where the first of them starts."""
    memory, work, _ = filled
    kinds = ["recall", "archival"]  # the blocks' versions were written today
    found = tl.timeline(memory, work, by="week", kinds=kinds, last=2)
    assert [p.key for p in found.periods] == ["2024-W23", "2024-W24"]
    assert found.start == found.periods[0].start and found.totals["recall"] == 2
    assert tl.timeline(memory, work, kinds=kinds, last=12).start == datetime(2024, 5, 3, 10, tzinfo=UTC)  # the first


def test_an_agents_time_zone_names_its_days_and_reads_its_dates(filled: tuple[Memory, str, str]) -> None:
    """An agent in Pacific/Auckland (UTC+12 in May): a turn logged at 2024-05-13T18:00Z happened on the 14th there,
    dates without a zone are its local days, and the times listed are shown in its zone."""
    memory, work, _ = filled
    recall = ["recall"]
    assert "2024-05-13" in {p.key for p in tl.timeline(memory, work, by="day", kinds=recall, **MAY_JUNE).periods}
    memory.set_agent_metadata(work, {TIMEZONE_KEY: "Pacific/Auckland"})
    days = tl.timeline(memory, work, by="day", kinds=recall, start="2024-05-13", end="2024-05-14")
    assert [(p.key, p.counts["recall"]) for p in days.periods] == [("2024-05-13", 0), ("2024-05-14", 1)]
    assert days.periods[1].start.isoformat() == "2024-05-14T00:00:00+12:00"
    view = tl.period(memory, work, "2024-05-14", kinds=recall)
    assert view.total == 1 and view.items[0].as_dict()["time"] == "2024-05-14T06:00:00+12:00"
    assert tl.period(memory, work, "2024-05-13", kinds=recall).total == 0
    sneakers = view.items[0].id
    assert memory.neighbourhood(work, sneakers).center.created_at.isoformat() == "2024-05-14T06:00:00+12:00"
    memory.set_agent_metadata(work, {TIMEZONE_KEY: ""})  # back to UTC
    assert tl.period(memory, work, "2024-05-13", kinds=recall).total == 1
    assert memory.neighbourhood(work, sneakers).center.created_at.isoformat() == "2024-05-13T18:00:00+00:00"


def test_agents_set_timezone_checks_the_zone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = data_args(tmp_path)[:-2]  # no --agent: `agents` names its agent itself
    assert main([*args, "agents", "create", "work"]) == 0
    for not_a_zone in ("Mars/Olympus", "localtime", "posixrules", "Factory"):  # the last three open, naming no place
        assert main([*args, "agents", "set", "work", "--timezone", not_a_zone]) == 1
        assert "not an IANA time zone" in capsys.readouterr().err
    assert main([*args, "agents", "set", "work", "--timezone", "Europe/Paris"]) == 0
    assert "timezone=Europe/Paris (was unset)" in capsys.readouterr().out
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    assert memory.time_zone(memory.named_agent("work").id) is not None
    fill(memory)
    del memory
    assert main([*args, "--agent", "work", "search", "sneakers", "--recall", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["time"] == "2024-05-13T20:00:00+02:00"  # shown in the agent's zone
    # 01:30 in Paris is before 00:15 UTC: a range the command must not refuse by reading --from as UTC
    paris_range = ["--from", "2024-05-13T19:30", "--to", "2024-05-13T18:15:00Z", "--by", "day", "--json"]
    assert main([*args, "--agent", "work", "timeline", *paris_range]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["recall"] == 1
    assert main([*args, "agents", "set", "work", "--timezone", "utc"]) == 0
    assert "timezone=unset (was Europe/Paris)" in capsys.readouterr().out
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    assert memory.time_zone(memory.named_agent("work").id) is None
    del memory


def test_rising_terms_on_a_crafted_example() -> None:
    """A word every period uses does not rise; one a period holds often, and the rest seldom, does; names keep their
    capital; stopwords and conversational filler never rise."""
    inside = [
        words_of(t)
        for t in ("We hiked with Luna today", "Luna loved the hike", "hiking again with Luna", "I really like pizza")
    ]
    outside = [
        words_of(t) for t in ("pizza night", "pizza again", "more pizza with friends", "Luna slept", "work work")
    ]
    terms = rising_terms(inside, outside, 5)
    assert [t.term for t in terms][:1] == ["Luna"] and terms[0].count == 3
    assert "pizza" not in [t.term for t in terms] and "really" not in words_of("I really like pizza")
    assert all(t.score > 0 for t in terms)
    assert rising_terms(inside, [], 2)[0].term == "Luna"  # nothing to compare with: the commonest words


# -- the command ------------------------------------------------------------------------------------------------------


def data_args(tmp_path: Path) -> list[str]:
    return ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "work"]


def test_the_command_prints_periods_with_bars_and_lists_a_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing")))
    args = [*data_args(tmp_path), "--from", "2024-05-01", "--to", "2024-06-30"]
    assert main(["timeline", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["period", "recall", "archival", "files", "blocks", "total"]
    may = lines[1].split()
    assert may[:6] == ["2024-05", "3", "1", "0", "0", "4"] and may[6] == "#" * 30  # the fullest period's bar
    assert lines[2].split()[:6] == ["2024-06", "2", "1", "0", "0", "3"] and lines[2].split()[6] == "#" * 22
    assert lines[-1].split() == ["all", "5", "2", "0", "0", "7"]

    assert main(["timeline", *args, "--by", "week", "--kind", "recall", "--query", "dogs", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kinds"] == ["recall"] and data["totals"] == {"recall": 3} and data["by"] == "week"

    assert main(["timeline", *args, "--period", "2024-06"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2024-06 (month): 2 recall, 1 archival") and "rising: " in out
    assert "recall    user: Caroline: we went camping near the lake" in out
    assert main(["timeline", *args, "--period", "2024-06", "--terms", "0", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "rising: " not in out and out.count("\n") == 3  # the counts, one item, "... and 2 more"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--period", "2024-06", "--by", "day"], "--by counts the range by a unit; --period 2024-06 names its own"),
        (["--limit", "5"], "--limit caps the items --period P lists"),
    ],
)
def test_flags_that_would_do_nothing_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["timeline", *data_args(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--from", "2024-06-01", "--to", "2024-05-01"], "--from (2024-06-01T00:00:00+00:00) is after --to"),
        (["--from", "yesterday"], "Invalid --from format: yesterday"),
        (["--from", "2024-02-30"], "--from 2024-02-30 is not a date: February 2024 has 29 days."),
        (["--to", "2024-01-01T25:00"], "--to 2024-01-01T25:00 is not a valid time: hour must be in 0..23"),
        (["--period", "2024-W99"], "is not a day (2024-05-08), an ISO week (2024-W19) or a month"),
    ],
)
def test_the_command_refuses_bad_input_before_opening_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["timeline", *data_args(tmp_path), *extra]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # not even the data directory was made


def test_an_unknown_kind_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse names the choices and exits 2, as docs/cli.md says of usage errors; nothing is made."""
    with pytest.raises(SystemExit) as exited:
        main(["timeline", *data_args(tmp_path), "--kind", "foo"])
    assert exited.value.code == 2 and "recall" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


# -- the resources ----------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_timeline_resources_through_a_client(settings: Settings) -> None:
    memory = open_memory(settings)
    fill(memory, settings.agent)
    async with Client(serve_in_process(settings), cache=None) as c:
        listed = {str(r.uri) for r in (await c.list_resources()).resources}
        templates = [t.uri_template for t in (await c.list_resource_templates()).resource_templates]
        assert "memory://timeline" in listed and "memory://timeline/{period}" in templates

        overview = json.loads((await c.read_resource("memory://timeline")).contents[0].text)
        assert overview["by"] == "month" and len(overview["periods"]) <= 12
        assert overview["from"] >= overview["periods"][0]["start"]  # what the periods count, not the first memory
        assert overview["periods"][-1]["counts"]["blocks"] >= 2  # the blocks' first versions, this month
        months = json.loads((await c.read_resource("memory://timeline/month")).contents[0].text)
        assert months == overview
        weeks = json.loads((await c.read_resource("memory://timeline/week")).contents[0].text)
        assert weeks["by"] == "week" and len(weeks["periods"]) == 12

        june = json.loads((await c.read_resource("memory://timeline/2024-06")).contents[0].text)
        assert june["total"] == 3 and [i["kind"] for i in june["items"]] == ["recall", "archival", "recall"]
        assert june["items"][0]["text"] == "Caroline: we went camping near the lake"
        assert {"camping", "lake"} & {t["term"] for t in june["rising"]}
        with pytest.raises(MCPError, match="is not a day") as bad:
            await c.read_resource("memory://timeline/june")
        assert bad.value.error.code == INVALID_PARAMS  # the caller's mistake, as a bad block label is
