"""Recall memory (the conversation log) and archival memory (long-term passages).

Both are searched the same way: filters first (agent, roles/tags, dates), then a vector
ranking and a full-text ranking over the filtered rows; the two legs' candidates are ordered by
the linear ranker of search/ranking.py (leg ranks, BM25, cosine, and a few properties of the text). The query is
analysed once (``search.query.Query``) and passed down; what each kind of row (turns, passages, file chunks) does its
own way is its profile (``search.kinds.Kind``).
Searches and writes wait (up to ``Vectors.wait_seconds``) for the embedding model, so a process that
has just started still searches by meaning and stores vectors. Only if the model failed to load,
or did not load in time, does a search run on keywords alone, and its result says so; a row stored
without a vector is embedded by the next process (or thread) that has the model.

``Archive`` is composed of two parts over the same store: ``archive.rows`` (``AgentRows``, archive_rows.py: rows
taken whole for export, deletion, the agent loop and backup) and ``archive.vectors`` (``Vectors``,
archive_vectors.py: rows embedded before they are stored, the backfill of rows stored without vectors).

Why this module is long: what is left here is the one search path recall and archival share (filters, both legs,
ranking) and the writes that shape what it searches, kept in one class so a search reads top to bottom.
"""

from __future__ import annotations

import calendar
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, tzinfo
from datetime import time as dtime
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..base.records import (
    ROLES,
    Found,
    Hit,
    Message,
    Passage,
    check_id,
    check_text,
    from_us,
    is_blank,
    new_id,
    now,
    to_us,
)
from ..store import RESULT_COLUMNS, Filter, Store, message_from_row, passage_from_row
from .archive_files import FileRows
from .archive_links import ManualLinks
from .archive_rows import AgentRows
from .archive_vectors import Vectors
from .links import Link, Neighbourhood, expand
from .periods import date_span
from .search.cjk import keyword_query, keyword_text
from .search.kinds import KINDS, Kind, Table
from .search.pool import Pool, pool_size, pooled
from .search.query import Query, analyse, needs_clock, speaker_of
from .search.ranking import Candidate, Context, merge, said, says, stated
from .search.sittings import SittingCache, SittingIndex, SittingRanks

if TYPE_CHECKING:
    from ..embedding.embedders import BackgroundEmbedder

log = logging.getLogger(__name__)

FILES_SCOPE = "tiermem-files"  # the search scope of file chunks (no agent's: a folder's chunks are filtered by folder)
MAX_LAST_TURNS = 1024  # default bound: conversations whose latest turn is kept in memory (the context of the next one)
MAX_SPEAKERS, MAX_SPEAKER_AGENTS = 256, 1024  # bounds of the per-agent speaker-label cache
# the tables whose searches follow links unless asked otherwise: none, as links won nowhere at the token budget
# (``python -m bench locomo --links``: more hits fill the budget with more evidence than hits and their links)
LINKS_BY_DEFAULT: frozenset[str] = frozenset()
LINK_REACH = 1  # turns on each side of a hit that its sitting links reach
CATCH_UP_ROWS = 256  # rows without vectors a search embeds before ranking (more are left to the backfill)
_TAG = re.compile(r"^[^\x00-\x1f]{1,64}$")
_DATE_START = re.compile(r"^(\d{4})(-?)(\d{2})\2(\d{2})(?![0-9])")  # a date written as ISO 8601, right or not
_MONTH_ONLY = re.compile(r"^(\d{4})-(\d{2})$")
_WEEK_START = re.compile(r"^(\d{4})-?W(\d{2})", re.IGNORECASE)
_seq = itertools.count()


def no_names(agent_id: str) -> Mapping[str, str]:
    """The default speaker names of an archive no ``Memory`` holds: none."""
    return {}


def any_agent(agent_id: str) -> None:
    """The default agent check of an archive no ``Memory`` holds: it knows no agents, so it refuses none."""


@dataclass
class SearchResult:
    hits: list[Hit]
    mode: Literal["hybrid", "fts"]
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


# The roles a search without a roles filter reads: what the user and the agent said. Tool results are asked for by
# name (roles=["tool"]), as Letta's conversation_search leaves them out (their {"status": "OK", ...} boilerplate
# would fill the results); so are system turns (roles=["system"]), which Letta's search does not take: the agent
# loop's summaries of evicted turns, which recall keeps whole (found again through a summary, a turn would come back
# twice).
SEARCHED_ROLES: tuple[str, ...] = ("user", "assistant")


def parse_bound(value: str | None, name: str, *, end: bool, zone: tzinfo | None = None) -> datetime | None:
    """An ISO 8601 datetime (in ``zone`` when it names no zone of its own; UTC without ``zone``), or a date without a
    time standing for every instant of the days it names in ``zone`` (``periods.date_span``: a day 2024-06-01 or
    20240601, an ISO week 2024-W22, a month 2024-06, a year 2024): a start bound is its first instant, an end bound its last
    (inclusive). A time before 0001-01-01 or after 9999-12-31 in UTC (0001-01-01T00:00+02:00) is the calendar's
    edge: no stored time lies beyond it."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValidationError(f"Invalid {name} format: {value}. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)")
    text = value.strip()
    try:
        if (days := date_span(text)) is not None:
            parsed = datetime.combine(days[1] if end else days[0], dtime.max if end else dtime.min)
        else:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise _not_a_time(value, name, exc) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone or UTC)
    try:
        parsed.astimezone(UTC)
    except OverflowError:  # its zone moves it past the calendar's edge
        return datetime.min.replace(tzinfo=UTC) if parsed.year == 1 else datetime.max.replace(tzinfo=UTC)
    return parsed


def _not_a_time(value: str, name: str, exc: ValueError) -> ValidationError:
    """Why ``value`` is no bound: a date, month or week written right that the calendar lacks (2024-02-30, 2024-13,
    2024-W54), a time out of range (T25:00), or not ISO 8601 at all."""
    text = value.strip()
    if (week := _WEEK_START.match(text)) is not None:
        year, number = int(week.group(1)), int(week.group(2))
        weeks = datetime(year, 12, 28).isocalendar()[1] if year >= 1 else 52  # Dec 28 is in the year's last week
        if not 1 <= number <= weeks:
            return ValidationError(f"{name} {text} is not a week: {year} has ISO weeks W01 to W{weeks}.")
    parts: tuple[int, int, int] | None = None
    if (shape := _DATE_START.match(text)) is not None:
        parts = int(shape.group(1)), int(shape.group(3)), int(shape.group(4))
    elif (shape := _MONTH_ONLY.match(text)) is not None:
        parts = int(shape.group(1)), int(shape.group(2)), 1
    if parts is not None:
        year, month, day = parts
        if not 1 <= month <= 12:
            return ValidationError(f"{name} {text} is not a date: there is no month {month:02d} (01 to 12).")
        if year >= 1 and not 1 <= day <= (days := calendar.monthrange(year, month)[1]):
            month_name = calendar.month_name[month]
            return ValidationError(f"{name} {text} is not a date: {month_name} {year} has {days} days.")
        if "must be in" in str(exc):  # the date is right; its hour, minute or second is not
            return ValidationError(f"{name} {text} is not a valid time: {exc}. Use ISO 8601 (YYYY-MM-DDTHH:MM).")
    return ValidationError(f"Invalid {name} format: {value}. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)")


def _check_range(start: datetime | None, end: datetime | None, names: tuple[str, str]) -> None:
    if start and end and start > end:
        raise ValidationError(
            f"{names[0]} ({start.isoformat()}) is after {names[1]} ({end.isoformat()}); swap them or widen the range."
        )


def _check_count(value: int, name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValidationError(f"{name} must be a whole number from 1 to {most}, got {value!r}.")
    return value


def time_ago(then: datetime, reference: datetime | None = None) -> str:
    """Letta's ``time_ago`` ("5m ago", "3d ago"); a time after ``reference`` (a turn logged with a timestamp ahead
    of the clock) is said as one, "in 5m", not "0s ago"."""
    delta = int(((reference or now()) - then).total_seconds())
    seconds = abs(delta)
    amount = f"{seconds}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            amount = f"{seconds // size}{unit}"
            break
    return f"in {amount}" if delta < 0 else f"{amount} ago"


PREVIOUS_CHARS = 4000  # of the turn before a message, what its keyword text holds (the agent loop's rows run to 10M)


def passes_on(role: str, content: str) -> bool:
    """Whether a turn leaves the next one's context (``context_of``) as it found it: a tool result, or a turn that
    said nothing (``ranking.says``: an answer that only called tools, stored empty; a heartbeat)."""
    return role == "tool" or not says(content)


def context_of(role: str, content: str, before: str) -> str:
    """What the next turn's keyword text holds of the turns before it (``shape_message``'s ``previous``) after a turn
    of ``role`` and ``content``, ``before`` being what that turn's held: its content, or ``before`` when it passes it
    on (``passes_on``). So an answer after a search (user, the answer calling the tool, its result, maybe a heartbeat,
    the answer) holds the last thing said before the search, not every word the search returned (the result is found
    by those itself): the question, when the call said nothing, or the words said with the call ("Let me check.")."""
    return before if passes_on(role, content) else content


def shape_message(content: str, created_at: datetime, previous: str = "") -> str:
    """The keyword-indexed text of a message: its date, its content and the turn before it (``context_of``; its first
    ``PREVIOUS_CHARS`` characters: far more than a conversational turn, LoCoMo's run to a few hundred, while a long
    answer the agent loop stores is not indexed a second time in the next row).

    The vector is made from the content alone. The date lets "when" questions match, the previous
    turn gives a reply the context it answers: on the LoCoMo dev split (``python -m bench locomo``) the keyword leg
    alone scores R@5 0.613 with this text against 0.525 over the content alone. Chinese, Japanese and Korean words
    are written as bigrams too (``cjk.keyword_text``).
    """
    return keyword_text(f"{created_at:%d %B %Y}. {content} {previous[:PREVIOUS_CHARS]}".strip())


class Archive:
    max_last_turns = MAX_LAST_TURNS  # conversations whose latest turn is kept (see _remember_turn)

    def __init__(
        self,
        store: Store,
        embedder: BackgroundEmbedder,
        *,
        token_budget: int = 4000,
        max_content_chars: int = 100_000,
        kinds: Mapping[str, Kind] | None = None,
        wait_seconds: float = 10.0,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.vectors = Vectors(store, embedder, wait_seconds)  # embedding rows, the backfill
        self.rows = AgentRows(store)  # rows taken whole: export, deletion, the agent loop's window, backup
        self.files = FileRows(store, self.vectors)  # folders, their files and the files' chunks
        self.token_budget = token_budget
        self.max_content_chars = max_content_chars
        self.kinds: dict[str, Kind] = dict(kinds or KINDS)  # each searchable kind's profile: its ranker, ...
        # (agent, conversation) -> content of its latest turn; least recently used first, at most MAX_LAST_TURNS
        self._last_turn: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._counts: tuple[tuple[str, int, int], tuple[int, int, list[str]]] | None = None
        self._speakers: dict[str, set[str]] = {}  # agent -> speaker labels seen in its rows ("Name: ...")
        self._speakers_lock = threading.Lock()
        # agent -> {role: name} of turns logged by role (``Memory`` reads them from the agent's blocks)
        self.speaker_names: Callable[[str], Mapping[str, str]] = no_names
        # NotFoundError when an agent is gone (``Memory.check_live``): checked before and after each write of its rows
        self.check_agent: Callable[[str], None] = any_agent
        # whether that check also runs before a write (True where it is a look-up in memory; on object storage a
        # check is a request, and the one after the write is what keeps a deleted agent's rows out)
        self.check_before_write = True
        self._sittings = SittingCache()  # agent -> its sittings, kept up to date with the messages table
        self._sittings_lock = threading.Lock()
        self._clocks: OrderedDict[tuple[str, str], tuple[int, int | None]] = (
            OrderedDict()
        )  # (table, agent) -> (version, newest)
        self.links = ManualLinks(store)  # the links made on purpose (``domain.links``)
        # the kinds (tables) whose searches return each hit with its links unless asked otherwise, and how many
        # turns on each side of a hit its sitting links reach (measured: ``python -m bench locomo --links``)
        self.links_by_default: frozenset[str] = LINKS_BY_DEFAULT
        self.link_reach = LINK_REACH

    # -- counts ------------------------------------------------------------

    def counts(self, agent_id: str) -> tuple[int, int, list[str]]:
        """(messages, passages, tags) of an agent; recomputed only when either table changed."""
        key = (agent_id, self.store.conn.version("messages"), self.store.conn.version("passages"))
        if self._counts is not None and self._counts[0] == key:
            return self._counts[1]
        where = Filter(agent_id=agent_id)
        value = (
            self.store.rows.count("messages", where),
            self.store.rows.count("passages", where),
            self.store.rows.distinct_tags(agent_id),
        )
        self._counts = (key, value)
        return value

    # -- writing -----------------------------------------------------------

    def log_messages(
        self,
        agent_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        max_chars: int | None = None,
        before_agent_row: bool = False,
    ) -> list[Message]:
        """Record conversation turns (role, content, optional timestamp / conversation_id / payload). Refused, writing
        nothing, for an agent that does not exist (``check_agent``), unless ``before_agent_row``: an import writing the
        rows of an agent whose row it writes last."""
        if not messages:
            raise ValidationError("messages is empty: send at least one {role, content}.")
        if not before_agent_row and self.check_before_write:
            self.check_agent(agent_id)
        rows = []
        latest: dict[tuple[str, str], str] = {}  # this batch's newest turn per conversation
        for n, m in enumerate(messages):
            if not isinstance(m, dict):
                raise ValidationError(f"messages[{n}] must be an object with role and content.")
            role = m.get("role")
            if role not in ROLES:
                raise ValidationError(f"messages[{n}].role is {role!r}; use one of {', '.join(ROLES)}.")
            content = check_text(m.get("content"), f"messages[{n}].content", max_chars or self.max_content_chars)
            created = parse_bound(m.get("timestamp"), f"messages[{n}].timestamp", end=False) or now()
            conversation = m.get("conversation_id") or "default"
            self._text(conversation, f"messages[{n}].conversation_id")
            project = m.get("project") or None
            if project is not None:
                self._text(project, f"messages[{n}].project")
            key = (agent_id, conversation)
            previous = latest[key] if key in latest else self._previous_turn(agent_id, conversation)
            latest[key] = context_of(role, content, previous)
            rows.append(
                {
                    # id and seq are only set by importers (the tool's schema has neither)
                    "id": m.get("id") or new_id("message"),
                    "agent_id": agent_id,
                    "conversation_id": conversation,
                    "seq": int(m["seq"]) if m.get("seq") is not None else time.time_ns() + next(_seq) % 1000,
                    "role": role,
                    "content": content,
                    "payload": m.get("payload") or "",
                    "text": shape_message(content, created, previous),
                    "created_us": to_us(created),
                    "vector": None,
                    "project": project,
                }
            )
        self.vectors.embed_rows(rows)
        self.store.rows.add_rows("messages", rows)
        if not before_agent_row:
            self._still_there(agent_id)
        for key, content in latest.items():  # only once stored: a failed write leaves no turn behind
            self._remember_turn(key, content)
        self._sittings.logged(agent_id, rows)  # the next search's sitting refresh need not read them back
        return [message_from_row(r) for r in rows]

    def _previous_turn(self, agent_id: str, conversation: str) -> str:
        key = (agent_id, conversation)
        if key not in self._last_turn:  # first turn this process sees: the newest stored one that does not pass on
            where = Filter(agent_id=agent_id, conversation_id=conversation)
            newest = self.store.rows.newest("messages", where, lambda r: not passes_on(r["role"], r["content"]))
            self._remember_turn(key, newest["content"] if newest else "")
        return self._last_turn[key]

    def forget_turns(self, agent_id: str) -> None:
        """Drop this process's copies of the agent's turns: its latest ones (a forgotten turn must not become the
        keyword text of the next one) and its sitting index (word counts of every turn); both are read from the
        store again."""
        for key in [k for k in self._last_turn if k[0] == agent_id]:
            del self._last_turn[key]
        with self._sittings_lock:  # not while a refresh is under way: it would put back what it read before
            self._sittings.forget(agent_id)

    def _remember_turn(self, key: tuple[str, str], content: str) -> None:
        """Keep the latest turn of a conversation; conversations not written for a while are forgotten
        (their newest turn is read from the store again when one is next written)."""
        self._last_turn[key] = content[:PREVIOUS_CHARS]  # all the next turn's keyword text holds of it
        self._last_turn.move_to_end(key)
        while len(self._last_turn) > self.max_last_turns:
            self._last_turn.popitem(last=False)

    def insert(
        self, agent_id: str, content: str, tags: Sequence[str] | None = None, *, project: str | None = None
    ) -> list[str]:
        """Store a passage (chunked if longer than the model's window); returns the new ids. ``project``: the
        project it belongs to (None: shared by every project)."""
        content = self._text(content, "content")
        if is_blank(content):  # spaces, or only invisible characters such as zero-width spaces
            raise ValidationError("content is empty: send the fact or text to remember.")
        if project is not None:
            self._text(project, "project")
        if self.check_before_write:
            self.check_agent(agent_id)  # a deleted agent's: refused before the embedding work
        rows = self._passage_rows(agent_id, content, tags, project=project or None)
        self.vectors.embed_rows(rows)
        self.store.rows.add_rows("passages", rows)
        self._still_there(agent_id)
        return [r["id"] for r in rows]

    def _still_there(self, agent_id: str) -> None:
        """After a write of the agent's rows: if the agent was deleted meanwhile (its deletion marks it first, then
        deletes its rows: rows stored after that mark would outlive it), delete every row of it and refuse."""
        try:
            self.check_agent(agent_id)
        except NotFoundError:
            self.rows.delete_agent_data(agent_id)  # what its deletion does; harmless twice
            raise

    def insert_many(
        self,
        agent_id: str,
        items: Sequence[tuple[str, Sequence[str]]],
        batch: int = 256,
        *,
        created: Sequence[datetime | None] | None = None,
        projects: Sequence[str | None] | None = None,
        max_chars: int | None = None,
        ids: list[str] | None = None,
        before_agent_row: bool = False,
    ) -> int:
        """Bulk insert (content, tags) pairs with batched embedding (optionally keeping their timestamps and projects,
        one per item); returns rows written. ``ids``, when given, gets each item's passage id (its first chunk's), in order (an import maps the
        links it restores with them). Refused for an agent that does not exist, unless ``before_agent_row`` (as
        ``log_messages``)."""
        if not before_agent_row and self.check_before_write:
            self.check_agent(agent_id)
        written = 0
        for start in range(0, len(items), batch):
            some = items[start : start + batch]
            stamps = list(created[start : start + batch]) if created is not None else [None] * len(some)
            kept = list(projects[start : start + batch]) if projects is not None else [None] * len(some)
            rows = [
                row
                for (content, tags), when, project in zip(some, stamps, kept, strict=True)
                for row in self._passage_rows(
                    agent_id,
                    check_text(content, "content", max_chars or self.max_content_chars),
                    tags,
                    created=when,
                    project=None if project is None else self._text(project, "project"),
                )
            ]
            self.vectors.embed_rows(rows)
            self.store.rows.add_rows("passages", rows)
            if not before_agent_row:
                self._still_there(agent_id)
            written += len(rows)
            if ids is not None:
                ids.extend(r["id"] for r in rows if r["chunk"] == 0)
        return written

    def _passage_rows(
        self,
        agent_id: str,
        content: str,
        tags: Sequence[str] | None,
        *,
        created: datetime | None = None,
        project: str | None = None,
    ) -> list[dict[str, Any]]:
        """One row per chunk; the first chunk's id is the group id, so it names the whole insert."""
        clean_tags = list(self._tags(tags))
        group = new_id("passage")
        created_us = to_us(created or now())
        return [
            {
                "id": group if i == 0 else f"{group}.{i}",
                "agent_id": agent_id,
                "group_id": group,
                "chunk": i,
                "content": chunk,
                "tags": clean_tags,
                "text": keyword_text(chunk),
                "created_us": created_us,
                "vector": None,
                "project": project,
            }
            for i, chunk in enumerate(self.embedder.chunk(content))
        ]

    def delete(self, agent_id: str, passage_id: str) -> int:
        """Delete a passage; the id of a chunked insert's first chunk deletes all its chunks."""
        check_id(passage_id, "passage id")
        removed = self.rows.forget("passages", Filter(agent_id=agent_id, id_or_group=passage_id))  # purged at upkeep
        if not removed:
            raise NotFoundError(
                f"No archival passage with id {passage_id!r}. Ids come from archival_memory_search or archival_memory_list."
            )
        return removed

    def list_passages(
        self, agent_id: str, *, offset: int = 0, limit: int = 20, tags: Sequence[str] | None = None
    ) -> tuple[list[Passage], int]:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(f"offset must be a whole number >= 0, got {offset!r}.")
        _check_count(limit, "limit", 200)
        where = self._passage_where(agent_id, tags, "any", None, None)
        total = self.store.rows.count("passages", where)
        rows = self.store.rows.select("passages", where, limit=limit, offset=offset)
        return [passage_from_row(r) for r in rows], total

    # -- searching ---------------------------------------------------------

    def search(
        self,
        agent_id: str,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tag_match_mode: str = "any",
        top_k: int = 5,
        start_datetime: str | None = None,
        end_datetime: str | None = None,
        projects: Sequence[str | None] | None = None,
        links: bool | None = None,
        zone: tzinfo | None = None,
    ) -> SearchResult:
        """``projects``: only passages of these projects (None in it: passages of no project, shared by all);
        ``links``: each hit followed by the memories it links to, within the token budget (None: ``links_by_default``);
        ``zone``: the agent's time zone (UTC without it): of bounds that name none, and of the days the query's time
        words name ("yesterday", "December 6")."""
        _check_count(top_k, "top_k", 100)
        start = parse_bound(start_datetime, "start_datetime", end=False, zone=zone)
        end = parse_bound(end_datetime, "end_datetime", end=True, zone=zone)
        where = replace(
            self._passage_where(agent_id, tags, tag_match_mode, start, end), projects=self._projects(projects)
        )
        return self._hybrid(self.kinds["passages"], agent_id, query, where, top_k, links, zone)

    def conversation_search(
        self,
        agent_id: str,
        query: str,
        *,
        roles: Sequence[str] | None = None,
        limit: int = 5,
        start_date: str | None = None,
        end_date: str | None = None,
        conversation_id: str | None = None,
        exclude_conversation: str | None = None,
        projects: Sequence[str | None] | None = None,
        links: bool | None = None,
        zone: tzinfo | None = None,
    ) -> SearchResult:
        """``conversation_id``: only that conversation's turns; ``exclude_conversation``: every other conversation's;
        ``projects``: only turns of these projects (None in it: turns of no project, shared by all); ``links``: each
        hit followed by the turns it links to (its sitting's neighbours, links made on purpose), within the token
        budget (None: ``links_by_default``). ``roles`` None: user and assistant turns (``SEARCHED_ROLES``). ``zone``:
        the agent's time zone (UTC without it): of date bounds that name none, and of the days the query's time words
        name."""
        _check_count(limit, "limit", 100)
        start = parse_bound(start_date, "start_date", end=False, zone=zone)
        end = parse_bound(end_date, "end_date", end=True, zone=zone)
        _check_range(start, end, ("start_date", "end_date"))
        if roles:
            if isinstance(roles, str) or not all(isinstance(r, str) for r in roles):
                raise ValidationError('roles must be a list, e.g. ["user", "assistant"].')
            bad = [r for r in roles if r not in ROLES]
            if bad:
                raise ValidationError(f"Unknown role(s) {bad}; use any of {', '.join(ROLES)}.")
        where = Filter(
            agent_id=agent_id,
            start=start,
            end=end,
            roles=tuple(roles) if roles else SEARCHED_ROLES,
            conversation_id=conversation_id or None,
            not_conversation_id=exclude_conversation or None,
            projects=self._projects(projects),
        )
        return self._hybrid(self.kinds["messages"], agent_id, query, where, limit, links, zone)

    def file_search(self, folder_ids: Sequence[str], query: str, *, limit: int = 5) -> SearchResult:
        """The chunks of these folders' files nearest ``query``: the same hybrid search and ranker as archival memory
        (each hit's one tag is its file's id)."""
        _check_count(limit, "limit", 100)
        where = Filter(agent_ids=tuple(folder_ids))
        return self._hybrid(self.kinds["file_chunks"], FILES_SCOPE, query, where, limit)

    def _passage_where(
        self, agent_id: str, tags: Sequence[str] | None, mode: str, start: datetime | None, end: datetime | None
    ) -> Filter:
        _check_range(start, end, ("start_datetime", "end_datetime"))
        if mode not in ("any", "all"):
            raise ValidationError(f"tag_match_mode must be 'any' or 'all', got {mode!r}.")
        clean = self._tags(tags) if tags else None
        return Filter(
            agent_id=agent_id,
            start=start,
            end=end,
            tags_any=clean if mode == "any" else None,
            tags_all=clean if mode == "all" else None,
        )

    def _hybrid(
        self,
        kind: Kind,
        agent_id: str,
        text: str,
        where: Filter,
        limit: int,
        links: bool | None = False,
        zone: tzinfo | None = None,
    ) -> SearchResult:
        text = self._text(text, "query")
        if is_blank(text):  # spaces or invisible characters alone (a zero-width space): nothing to look for
            raise ValidationError("query is empty: say what to look for.")
        query, context = self._analyse(kind, agent_id, text, zone)
        pool = pool_size(limit)
        candidates, mode, notes, query = self._candidates(kind, agent_id, query, where, kind.depth(pool), context)
        context = self._with_sittings(kind, agent_id, query, context)
        candidates = pooled(query, stated(candidates, query.zone) if kind.stated else candidates, pool, context)
        ranked = kind.ranker.rank(query, candidates, context)[:limit]
        relevance = kind.calibration.relevance(query, candidates, ranked, context)
        hits = [self._hit(kind, c, score, p) for (c, score), p in zip(ranked, relevance, strict=True)]
        if links if links is not None else kind.table in self.links_by_default:
            hits, truncated = self._linked(kind, agent_id, [c for c, _ in ranked], hits, where, context, candidates)
        else:
            hits, truncated = self._budget(hits)
        if truncated:
            notes.append(self.budget_note())
        return SearchResult(hits=hits, mode=mode, truncated=truncated, notes=notes)

    def budget_note(self) -> str:
        """The note of a search whose results were cut to ``token_budget`` (``SearchResult.truncated``): the best ones
        are kept, so a lower limit shows the same ones, not the others; what reaches those is said."""
        return (
            f"Results were cut to fit the {self.token_budget}-token budget; to reach the others, narrow the query or "
            "add filters, or raise the search_token_budget setting."
        )

    def _analyse(self, kind: Kind, agent_id: str, text: str, zone: tzinfo | None = None) -> tuple[Query, Context]:
        """The query's analysis, with the clock relative times in it resolve against (read only when it has one: the
        newest row of the agent in this table), as days of ``zone`` (the agent's; UTC without it), and the names the
        agent's blocks give (``speaker_names``: left out of the vector's query); the context: the roles' names of
        turns logged by role (recall only)."""
        people = dict(self.speaker_names(agent_id)) if kind.speakers else {}
        clock = self._clock(kind.table, agent_id) if needs_clock(text) else None
        return analyse(text, clock, people.values(), zone), Context(
            speakers=people if kind.turns else {}, subjects=kind.subjects
        )

    def _with_sittings(self, kind: Kind, agent_id: str, query: Query, context: Context) -> Context:
        """``context`` with how the query (the speakers' names left out: ``Query.focused``) ranks each sitting of the
        agent's turns (recall only; the index is brought up to date with the table first: ``sittings.SittingCache``)."""
        if not kind.turns:
            return context
        with self._sittings_lock:  # a search arriving while the index is built (``warm_sittings``) waits for it
            index = self._sitting_index(agent_id)
            if index is None:
                return context
            ranks = index.ranks(query.focused)
        return replace(context, sittings=SittingRanks(index, ranks))

    def warm_sittings(self, agent_id: str) -> None:
        """Bring the agent's sitting index up to date now, so that its next search does not build it (the first build
        reads every turn: 0.3-0.7 s at 11k turns). A server does this in the background once it knows its agent
        (``Memory.warm``); a search that arrives meanwhile waits for the build and uses it."""
        started = time.perf_counter()
        with self._sittings_lock:
            index = self._sitting_index(agent_id)
        if index is not None:
            log.info(
                "sitting index of agent %s ready: %d turns in %d sittings (%.2f s)",
                agent_id,
                index.rows,
                len(index.sittings),
                time.perf_counter() - started,
            )

    def _sitting_index(self, agent_id: str) -> SittingIndex | None:
        """The agent's sittings, brought up to date with the messages table (``sittings.SittingCache``); call it
        with ``_sittings_lock`` held."""
        where = Filter(agent_id=agent_id)
        return self._sittings.refresh(
            agent_id,
            self.store.conn.version("messages"),
            lambda: self.store.rows.count("messages", where),
            lambda seq: self.store.rows.turns("messages", replace(where, seq_from=seq) if seq is not None else where),
        )

    def _clock(self, table: str, agent_id: str) -> datetime | None:
        """The time of the agent's newest row in ``table`` (remembered per table version, for a bounded set of agents)."""
        key, version = (table, agent_id), self.store.conn.version(table)
        known = self._clocks.get(key)
        if known is None or known[0] != version:
            known = (version, self.store.rows.latest_us(table, Filter(agent_id=agent_id)))
            self._clocks[key] = known
        self._clocks.move_to_end(key)
        while len(self._clocks) > MAX_SPEAKER_AGENTS:
            self._clocks.popitem(last=False)
        return from_us(known[1]) if known[1] is not None else None

    def _candidates(
        self, kind: Kind, agent_id: str, query: Query, where: Filter, pool: int, context: Context
    ) -> tuple[list[Candidate], Literal["hybrid", "fts"], list[str], Query]:
        """Both legs' top ``pool`` rows under ``where``, merged into one candidate per row, and the query's analysis
        with the speakers' names the search knows once the keyword leg has read its rows (``Query.naming``).

        The query's vector leaves out the names of the agent's speakers that it mentions (``Query.focused``):
        the labels of its ``"Name: ..."`` turns and the names of its roles (``context.speakers``).
        Labels are learnt from the keyword leg's rows. Once an agent's are known and the model is loaded, the
        query is embedded first, then both legs and the read of the marks of rows without vectors go to LanceDB's
        loop in one hand-off (the model uses both cores of the machine this was measured on, so a keyword leg run
        beside it slowed it about as much as it hid; one hand-off instead of three: ``python -m bench scale
        --profile DIR --orders``). The first search of an agent in a process, or one waiting for the model, starts the
        keyword leg first and waits for it. While the store's vectors are not of this process's model (a reembed is
        rebuilding them, or switched models since this process opened the store), the keyword leg runs alone.
        """
        notes: list[str] = []
        vector_rows: list[Found] = []
        vec: list[float] | None
        table, text = kind.table, query.text
        legs = _legs_where(kind, where)  # the legs' filter
        words = keyword_query(text)  # the keyword leg's query (Chinese, Japanese and Korean words as bigrams too)
        roles = set(query.names)  # the names the agent's blocks give (``_analyse``)
        known = self._speakers.get(agent_id) if kind.speakers else set()
        focused = query.naming(known | roles).focused if known is not None else None
        unusable = self.store.conn.vectors_unusable()  # before any leg: it reopens tables a reembed replaced
        if unusable is not None:  # the store's vectors are of another model: keywords alone, and the note says why
            notes.append(f"Keyword-only results (search_mode fts): {unusable}")
            vec, marked = None, False
            fts_rows = self.store.search.text_search(table, words, legs, pool)
        elif focused is not None and self.embedder.ready:
            vec = self.vectors.query_vector(focused, notes)
            if vec is None:
                fts_rows, marked = self.store.search.text_search(table, words, legs, pool), False
            else:
                vector_rows, fts_rows, marks = self.store.search.search_legs(table, words, vec, legs, pool)
                marked = self._catch_up(table, where, marks)
                if marked:  # rows just embedded are found by meaning in this very search
                    vector_rows = self.store.search.vector_search(table, vec, legs, pool)
        else:
            fts_future = self.store.search.start_text_search(table, words, legs, pool)
            vec = self.vectors.query_vector(focused or text, notes)
            marked = vec is not None and self._catch_up(table, where, self.store.rows.unembedded_marks(table))
            if vec is not None and focused is not None:
                vector_rows = self.store.search.vector_search(table, vec, legs, pool)
            fts_rows = fts_future.result()
        query = query.naming((self._learn_speakers(agent_id, fts_rows) if kind.speakers else set()) | roles)
        mode: Literal["hybrid", "fts"] = "fts" if vec is None else "hybrid"
        if vec is not None and query.focused != focused:  # first search of this agent, or a new speaker
            focused = query.focused
            vec = self.embedder.embed([focused])[0] if focused != text or known is not None else vec
            vector_rows = self.store.search.vector_search(table, vec, legs, pool)
        missing = self._unembedded(table, where) if mode == "hybrid" and marked else 0
        if missing:
            notes.append(f"{missing} recent item(s) are not embedded yet; they can be found by keywords only.")
        return merge(vector_rows, fts_rows), mode, notes, query

    def candidates(self, table: Table, agent_id: str, query: str, *, limit: int = 10) -> Pool:
        """The query's analysis, the candidates a search of ``limit`` results ranks and the ranker's context,
        unfiltered but for the agent (for fitting and inspecting rankers: ``bench locomo``)."""
        kind = self.kinds[table]
        analysed, context = self._analyse(kind, agent_id, self._text(query, "query"))
        pool = pool_size(limit)
        found, _, _, analysed = self._candidates(
            kind, agent_id, analysed, Filter(agent_id=agent_id), kind.depth(pool), context
        )
        context = self._with_sittings(kind, agent_id, analysed, context)
        return Pool(analysed, pooled(analysed, stated(found) if kind.stated else found, pool, context), context)

    def speakers(self, agent_id: str) -> set[str]:
        """The speaker labels this process has learnt from the agent's ``"Name: ..."`` rows (its searches')."""
        return set(self._speakers.get(agent_id, ()))

    def _catch_up(self, table: str, where: Filter, marks: dict[str, str]) -> bool:
        """Whether some process had announced rows stored without vectors (``marks``: only then are they counted
        after the legs). If so, those of ``where`` are embedded now (up to CATCH_UP_ROWS), so they are found by
        meaning in this very search, and the backfill is started for the rest."""
        if not marks:
            return False
        try:
            self.vectors.embed_missing(table, where, limit=CATCH_UP_ROWS)
        except TiermemError as exc:  # the search still runs; the note counts what is left
            log.error("could not embed rows stored without vectors: %s", exc)
        self.vectors.start_backfill()  # the rest (other filters, or more than a search embeds); it clears the marks
        return True

    def _learn_speakers(self, agent_id: str, rows: Sequence[Found]) -> set[str]:
        """The agent's known speaker labels, with those of ``rows`` added (bounded: names and agents)."""
        with self._speakers_lock:
            names = set(self._speakers.pop(agent_id, ()))  # a new set: readers may hold the old one
            for label in {n for n in map(speaker_of, (r.content for r in rows)) if n}:
                if len(names) < MAX_SPEAKERS:
                    names.add(label)
            self._speakers[agent_id] = names  # most recently searched last
            while len(self._speakers) > MAX_SPEAKER_AGENTS:
                del self._speakers[next(iter(self._speakers))]
            return set(names)

    def _unembedded(self, table: str, where: Filter) -> int:
        """Rows of ``where`` without vectors (counted only while some process has announced such rows)."""
        missing = self.store.rows.count(table, replace(where, missing_vector=True))
        if missing == 0:
            self.store.rows.settle_unembedded(table)
        return missing

    def _hit(self, kind: Kind, c: Candidate, score: float, relevance: float) -> Hit:
        """A result from a ranked candidate (the legs read the columns a result shows)."""
        shown = c.found
        return Hit(
            id=c.id,
            content=c.content,
            created_at=from_us(shown.created_us),
            score=score,
            vector_rank=c.vector_rank,
            fts_rank=c.fts_rank,
            role=shown.role if kind.turns else None,
            tags=shown.tags if not kind.turns else (),
            conversation_id=shown.conversation_id if kind.turns else None,
            relevance=relevance,
        )

    def _linked(
        self,
        kind: Kind,
        agent_id: str,
        ranked: list[Candidate],
        hits: list[Hit],
        where: Filter,
        context: Context,
        pool: Sequence[Candidate] = (),
    ) -> tuple[list[Hit], bool]:
        """The hits, each followed by the memories it links to (``links.expand``), within the token budget: a turn's
        sitting neighbours (``link_reach`` on each side, from the sitting index: no read) and the links made on
        purpose, read in one query per table; only rows of this agent that the search's own filter admits (a row of
        the other table: its project and date bounds, ``_across``). A linked memory already in the search's ``pool``
        (found under the same filter) is taken from it, not read again."""
        near: dict[str, list[str]] = {}
        index = context.sittings.index if isinstance(context.sittings, SittingRanks) else None
        for c in ranked:
            if kind.turns and index is not None and isinstance(c.found.created_us, int):
                near[c.id] = index.neighbours(c.found.conversation_id, c.found.created_us, c.found.seq, self.link_reach)
        made: set[str] = set()  # ids linked on purpose: a turn or a passage (the others are turns)
        if kind.table != "file_chunks":
            for source, links in self.links.of([h.id for h in hits]).items():
                near[source] = [m.target for m in links] + near.get(source, [])
                made |= {m.target for m in links}
        rows: dict[str, Hit] = {}
        pooled_rows = {c.id: c.found for c in pool}
        for table in ("messages", "passages"):
            wanted = {i for ids in near.values() for i in ids} if table == "messages" else made - set(rows)
            if table == kind.table:
                for i in wanted & pooled_rows.keys():
                    if said(pooled_rows[i]):
                        rows[i] = _found_hit(table, pooled_rows[i])
                wanted -= pooled_rows.keys()
            if wanted:
                ids = tuple(sorted(wanted))
                scope = replace(where, ids=ids) if table == kind.table else _across(where, agent_id, ids)
                rows.update(self._linked_rows(table, scope, said_only=True))
        linked = {h: [rows[i] for i in ids if i in rows] for h, ids in near.items()}
        return expand(hits, linked, self.token_budget)

    def find_memory(self, agent_id: str, memory_id: str, *, latest: bool = False) -> tuple[str, Hit, int | None]:
        """The agent's recall turn or archival passage ``memory_id``: (its table, it as a result, a turn's seq).
        ``latest``: read at the tables' newest versions (object storage may otherwise answer from moments ago)."""
        for table in ("messages", "passages"):
            rows = self.store.conn.rows(
                table, Filter(agent_id=agent_id, ids=(memory_id,)), columns=RESULT_COLUMNS[table], latest=latest
            )
            if rows:
                return table, _as_hit(table, rows[0]), rows[0].get("seq")
        raise NotFoundError(
            f"No recall turn or archival passage {memory_id!r} in this agent's memory; search for it first "
            "(conversation_search, archival_memory_search) and use an id the results give.",
            person=f"No recall turn or archival passage {memory_id!r} in this agent's memory; search for it first "
            "(`tiermem search QUERY --json` shows each result's id) and use an id the results give.",
        )

    def memories(self, agent_id: str, ids: Sequence[str]) -> dict[str, Hit]:
        """The agent's turns and passages among ``ids``, by id (ids of neither are left out)."""
        out: dict[str, Hit] = {}
        if ids:
            for table in ("messages", "passages"):
                out.update(self._linked_rows(table, Filter(agent_id=agent_id, ids=tuple(dict.fromkeys(ids)))))
        return out

    def sitting_neighbours(self, agent_id: str, turn: Hit, seq: int | None, reach: int) -> list[str]:
        """The ids of the turns logged just before and after ``turn`` in its sitting (``reach`` on each side)."""
        with self._sittings_lock:
            index = self._sitting_index(agent_id)
        if index is None:
            return []
        return index.neighbours(turn.conversation_id, to_us(turn.created_at), seq, reach)

    def neighbourhood(self, agent_id: str, memory_id: str, reach: int | None = None) -> Neighbourhood:
        """The agent's recall turn or archival passage ``memory_id`` and its links, one hop: its sitting's neighbours
        (turns: ``reach`` on each side, default ``link_reach``) and the links made on purpose."""
        table, center, seq = self.find_memory(agent_id, memory_id)
        pairs: list[Link] = []
        if table == "messages":
            near = self.sitting_neighbours(agent_id, center, seq, self.link_reach if reach is None else reach)
            pairs += [Link(memory_id, other, "sitting") for other in near]
        pairs += self.links.of([memory_id]).get(memory_id, [])
        found = self.memories(agent_id, [link.target for link in pairs])
        return Neighbourhood(center, table, [(link, found[link.target]) for link in pairs if link.target in found])

    def _linked_rows(self, table: str, where: Filter, *, said_only: bool = False) -> dict[str, Hit]:
        """The rows of ``table`` under ``where`` as results, by id; ``said_only``: only those a search returns
        (``ranking.said``: of a message, its ``plumbing`` column tells whether it is the agent loop's plumbing)."""
        if not said_only:
            rows = self.store.conn.rows(table, where, columns=RESULT_COLUMNS[table])
            return {r["id"]: _as_hit(table, r) for r in rows}
        columns = (*RESULT_COLUMNS[table], "plumbing") if table == "messages" else RESULT_COLUMNS[table]
        rows = self.store.conn.rows(table, where, columns=columns)
        return {r["id"]: _as_hit(table, r) for r in rows if says(r["content"]) and not r.get("plumbing")}

    def _budget(self, hits: list[Hit]) -> tuple[list[Hit], bool]:
        from .tokens import fit_to_budget

        kept, truncated = fit_to_budget([h.content for h in hits], self.token_budget)
        return hits[: len(kept)], truncated

    # -- validation --------------------------------------------------------

    def _text(self, value: Any, name: str) -> str:
        return check_text(value, name, self.max_content_chars)

    def _projects(self, projects: Sequence[str | None] | None) -> tuple[str | None, ...] | None:
        if projects is None:
            return None
        if isinstance(projects, str):
            raise ValidationError("projects must be a list of project names.")
        return tuple(p if p is None else self._text(p, "project") for p in projects)

    def _tags(self, tags: Sequence[str] | None) -> tuple[str, ...]:
        if tags is None:
            return ()
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise ValidationError('tags must be a list of strings, e.g. ["project", "preferences"].')
        if len(tags) > 32:
            raise ValidationError(f"At most 32 tags per passage; got {len(tags)}.")
        for t in tags:
            if not _TAG.fullmatch(t) or is_blank(t):
                raise ValidationError(
                    f"Invalid tag {t[:80]!r}: tags are 1-64 characters without control characters, not only spaces "
                    "or invisible characters."
                )
        return tuple(dict.fromkeys(tags))


def _across(where: Filter, agent_id: str, ids: tuple[str, ...]) -> Filter:
    """The rows ``ids`` of the other table (a passage linked from a turn, a turn from a passage) that a search's
    filter admits: its projects and its date bounds, the columns both tables have; its roles, conversations and tags
    name columns only one table has, so they narrow that table's rows alone."""
    return Filter(agent_id=agent_id, ids=ids, start=where.start, end=where.end, projects=where.projects)


def _found_hit(table: str, f: Found) -> Hit:
    """A candidate of the search's pool shown as a linked memory (as ``_as_hit`` shows a row read for it)."""
    return _as_hit(
        table,
        {
            "id": f.id,
            "content": f.content,
            "created_us": f.created_us,
            "role": f.role,
            "tags": f.tags,
            "conversation_id": f.conversation_id,
        },
    )


def _legs_where(kind: Kind, where: Filter) -> Filter:
    """The filter of a search's legs: ``where``, and of a search reading tool results, none of the agent loop's
    plumbing (``store.query.TOOL_PLUMBING``, in the store: hundreds of send_message results would otherwise fill the
    legs' depth, and the real results past it be lost). Only then: a search of what was said meets few of the loop's
    answers (``Found.plumbing`` leaves those out of what the legs read)."""
    if kind.table != "messages" or where.roles is None or "tool" not in where.roles:
        return where
    return replace(where, plumbing_results=False)


def _as_hit(table: str, r: dict[str, Any]) -> Hit:
    """A stored turn or passage shown as a result that no ranking placed (a linked memory)."""
    turn = table == "messages"
    return Hit(
        id=r["id"],
        content=r["content"],
        created_at=from_us(r["created_us"]),
        score=0.0,
        vector_rank=None,
        fts_rank=None,
        role=r.get("role") if turn else None,
        tags=() if turn else tuple(r.get("tags") or ()),
        conversation_id=r.get("conversation_id") if turn else None,
    )
