"""The turn before each message, as its keyword text holds it, made right in rows an earlier tiermem logged.

A message's keyword text holds the turn before it (``archive.shape_message``), where a turn that passes the context on
(a tool result, a turn that said nothing: ``archive.passes_on``) gives the next the last thing said before it
(``archive.context_of``). tiermem before schema version 3 gave it the turn just before, whatever it was: an answer
after a tool search held up to 4,000 characters of what the search returned, and was found for words only the result
held. ``recontext`` (run by ``tiermem optimize``) writes anew the keyword text of each message that follows a turn
passing the context on, from its conversation's turns as they are stored; a row already right is not written (its
date is kept as it was written: ``log_messages`` writes it in the timestamp's own offset, which the store does not
keep), and a store once done is marked (``schemas.KEYWORD_CONTEXT``; new stores are created marked), so later runs
read nothing. An older tiermem cannot open a store of schema version 3, but one that opened it before its migration
and still runs (a server) may write such rows after the mark: its rows come without the ``plumbing`` column, and
``tiermem optimize`` or a server's background upkeep, deciding them (``Rows.settle_plumbing``,
``Rows.settle_plumbing_round``), unmarks the store so that this runs again; a run under way when that happens does
not mark the store (``AgentRows.unmarked``).

Forgetting rewrites the keyword texts of the turns after a forgotten one; this must never write back what it took
out. Each batch is written under the lock forgetting holds (``AgentRows.rewriting_texts``) after the turns it was made
from are read again there: a row whose turns were forgotten or changed since the first read is left as it is (the
forget wrote it), and the store is not marked, so the next run looks at it again. What a batch reads again is linear in
its rows however long a run: its own turns, the turn its run's contexts are made from, and the turns of the run it
did not check in an earlier batch (``Checked``). Those checked before are read again only when a message was deleted
or edited in place since (``AgentRows.changing_turns``, which every forget and redaction holds the lock with: the
store's ``TURNS_CHANGED``); reading the run so far at each batch was quadratic (a run of 40,000 tool results in
batches of 1,000: 820,080 turns read again).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, overload

from ..base.records import from_us
from .archive import PREVIOUS_CHARS, passes_on, shape_message
from .search.cjk import base_of

if TYPE_CHECKING:
    from .archive import Archive

BATCH = 1000  # rows written under one hold of the lock forgetting takes
_DATE = re.compile(r"(\d{2} [^\W\d_]+ \d{4})\.")  # the date ``shape_message`` starts a keyword text with


class Turns:
    """The ids ``order[start:stop]`` of one conversation's turns in their order, not copied: the turns after one run
    of turns passing the context on share its ``order``, so ``contexts`` is linear in the turns however long a run
    (each turn holding its own tuple of the run so far was quadratic: 7 GB for a run of 40,000 tool results). Equal
    to a tuple of the same ids, or another ``Turns``; a sequence by its own methods (no base class)."""

    __slots__ = ("order", "start", "stop")

    def __init__(self, order: Sequence[str], start: int, stop: int) -> None:
        self.order, self.start, self.stop = order, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        places = range(self.start, self.stop)[index]
        return self.order[places] if isinstance(places, int) else tuple(self.order[i] for i in places)

    def __iter__(self) -> Iterator[str]:
        return (self.order[i] for i in range(self.start, self.stop))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Turns, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Turns({tuple(self)!r})"


@dataclass(frozen=True)
class Context:
    """What a turn's keyword text holds of the turns before it (``text``), and the turns it was made from (``turns``:
    from the last one that said something up to the turn before this one, by id)."""

    text: str
    turns: Turns


Place = tuple[int, int, str, bool]  # a turn's seq, created_us and id, and whether it passes the context on


def contexts(turns: Sequence[dict[str, Any]]) -> dict[str, Context]:
    """The context (``shape_message``'s ``previous``) of each of ``turns`` (``AgentRows.turns``) that follows a turn
    passing the context on, by id: its conversation's turns in their order (seq, then time), as forgetting reads them
    (``forgetting._messages``). The other turns' keyword texts hold the turn just before them, as they always did.
    Linear in time and memory: the turns after one run share its conversation's ids (``Turns``)."""
    conversations: dict[tuple[str, str], list[Place]] = {}
    _place_all(conversations, turns)
    content = {r["id"]: r["content"] for r in turns}
    return {
        t: Context("" if said is None else content[said], span) for t, (span, said) in _spans(conversations).items()
    }


def _place_all(conversations: dict[tuple[str, str], list[Place]], turns: Sequence[dict[str, Any]]) -> None:
    """Add each of ``turns`` to its conversation's places (``Place``), by (agent, conversation)."""
    for r in turns:
        place = (r["seq"], r["created_us"], r["id"], passes_on(r["role"], r["content"]))
        conversations.setdefault((r["agent_id"], r["conversation_id"]), []).append(place)


def _spans(conversations: dict[tuple[str, str], list[Place]]) -> dict[str, tuple[Turns, str | None]]:
    """Of each turn that follows one passing the context on, by id: the turns its context is made from (``Turns``),
    and the one whose content that context is (the last that said something before it; None: none did, the context
    is empty). ``conversations``: each conversation's turns, by (agent, conversation), in no order."""
    out: dict[str, tuple[Turns, str | None]] = {}
    for places in conversations.values():
        places.sort(key=lambda p: (p[0], p[1]))  # by seq, then time (turns of one place: in the order read)
        order = tuple(p[2] for p in places)
        passing, first, said = False, 0, None  # first: where the turns the next context is made from start
        for n, (_seq, _us, turn, passes) in enumerate(places):
            if passing:
                out[turn] = (Turns(order, first, n), said)
            passing = passes
            if not passes:
                first, said = n, turn
    return out


def written_on(row: dict[str, Any]) -> datetime:
    """The day ``row``'s keyword text was written with (its first words), else its time in UTC."""
    found = _DATE.match(base_of(row.get("text") or ""))
    day = _day(found.group(1)) if found else None
    return day if day is not None else from_us(row["created_us"])


@lru_cache(maxsize=4096)
def _day(text: str) -> datetime | None:
    """The day ``text`` (``shape_message``'s "%d %B %Y") names, in UTC; None: not a date this process writes
    (another locale's month name). Kept: the rows of one store were written on a few thousand days at most, and
    ``strptime`` was a third of ``tiermem doctor``'s look at 42,000 messages."""
    try:
        return datetime.strptime(text, "%d %B %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def recontext(archive: Archive) -> int:
    """Write anew the keyword text of the messages whose context ``contexts`` gives, where it differs from what is
    stored; then mark the store, unless a row was left because a turn it is made from was forgotten or changed
    meanwhile. Returns the rows written (none once the store is marked)."""
    rows = archive.rows
    if rows.keyword_contexts_settled():
        return 0
    unmarked = rows.unmarked()  # before the rows are read: a server's upkeep may unmark the store meanwhile
    first = {r["id"]: r for r in rows.turns()}
    wanted = contexts(list(first.values()))
    ids, written, left = list(wanted), 0, 0
    checked: Checked = {}  # by run: its turns found as first read since the store's TURNS_CHANGED was ``changed``
    changed = None

    def text_of(row: dict[str, Any]) -> str:
        return shape_message(row["content"], written_on(row), wanted[row["id"]].text)

    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        runs = _runs([wanted[t].turns for t in batch])
        with rows.rewriting_texts():
            if (now_changed := rows.turns_changed()) != changed:  # a message deleted or edited: check every turn again
                checked.clear()
                changed = now_changed
            now = {r["id"]: r for r in rows.turns_now(_to_read(batch, runs, checked))}
            same = _unchanged(batch, wanted, runs, first, now, checked)
            left += len(batch) - len(same)
            written += rows.set_keyword_texts(same, text_of)
    if not left:
        with rows.rewriting_texts():  # the upkeep unmarks the store under it too (``Rows.settle_plumbing_round``)
            rows.settle_keyword_contexts(unmarked)
    return written


def unrebuilt(archive: Archive) -> int:
    """How many messages' keyword texts ``recontext`` would write anew (``tiermem doctor``). A store marked
    (``KEYWORD_CONTEXT``) with no message an older tiermem wrote undecided (``plumbing`` null: rows written since the
    mark) costs a meta read and a count: none. Otherwise three scans of the messages, a batch at a time
    (``AgentRows.message_batches``; never a payload or vector), each keeping little of a row: the turns' places and
    whether each passes the context on (never its content); then the first ``PREVIOUS_CHARS`` characters of each
    turn a context is (one a run of turns passing it on); then each keyword text of a turn following such a run,
    compared with what ``recontext`` would write. Memory: a few small values a turn, a context a run and one batch
    of rows, however long the turns (tool results of thousands of characters); no read by ids (at 42,000 messages
    the 21 reads of 1,000 ids each were most of the time)."""
    rows = archive.rows
    if rows.keyword_contexts_settled() and not rows.undecided_plumbing():
        return 0
    conversations: dict[tuple[str, str], list[Place]] = {}
    for batch in rows.message_batches():
        _place_all(conversations, batch)
    said = {t: source for t, (_span, source) in _spans(conversations).items()}
    del conversations
    sources = set(said.values())
    contexts_of = {
        r["id"]: r["content"][:PREVIOUS_CHARS]
        for batch in rows.message_batches(("id", "content"))
        for r in batch
        if r["id"] in sources
    }
    stale = 0
    for batch in rows.message_batches(("id", "content", "text", "created_us")):
        for r in batch:
            if r["id"] not in said:
                continue
            source = said[r["id"]]
            previous = "" if source is None else contexts_of.get(source)
            if previous is not None:  # None: the turn it is made from was forgotten since the first scan
                stale += r["text"] != shape_message(r["content"], written_on(r), previous)
    return stale


def check_contexts(memory: Any, check: Any) -> None:
    """Messages whose keyword text still holds a tool's result (written so by a tiermem before schema 3, or by one
    still running after the upgrade), which only ``tiermem optimize`` writes anew (``unrebuilt``: a
    meta read and a count once the store is marked; else a read of the turns' content and of those rows' texts)."""
    stale = unrebuilt(memory.archive)
    if not stale:
        check("keyword context", True, "no message is indexed with the words of a tool's result before it")
        return
    check(
        "keyword context",
        False,
        f"{stale} message(s) stored by an older tiermem have a keyword text made from the turn just before them (a "
        "tool's result, a turn that said nothing), not the last thing said: a keyword search finds them for words "
        "only a tool's result held",
        "run `tiermem optimize` (it writes their keyword text anew)",
    )


def _runs(spans: Sequence[Turns]) -> dict[tuple[int, int], Turns]:
    """The longest of ``spans`` of each run (the turns after one run are made from a start of its turns), by run."""
    longest: dict[tuple[int, int], Turns] = {}
    for span in spans:
        key = (id(span.order), span.start)
        if key not in longest or len(span) > len(longest[key]):
            longest[key] = span
    return longest


# By run (``_runs``' key): how many of its turns, from its start, were found as first read under the lock, and whether
# the one after them was not (then no longer span of the run is written). Kept from batch to batch while no message
# is deleted or edited in place (the store's ``TURNS_CHANGED``), so each batch reads again only the turns it adds.
Checked = dict[tuple[int, int], tuple[int, bool]]


def _to_read(batch: Sequence[str], runs: dict[tuple[int, int], Turns], checked: Checked) -> list[str]:
    """The turns to read again for ``batch``: its own, and of each run its first (the turn its contexts are made
    from, read at every batch) and those not ``checked`` yet up to the batch's longest span (none once one differs)."""
    out = dict.fromkeys(batch)
    for key, run in runs.items():
        upto, differs = checked.get(key, (0, False))
        out.update(dict.fromkeys(run[:1] if differs else (run[0], *run[upto:])))
    return list(out)


def _unchanged(
    batch: Sequence[str],
    wanted: dict[str, Context],
    runs: dict[tuple[int, int], Turns],
    first: dict[str, dict[str, Any]],
    now: dict[str, dict[str, Any]],
    checked: Checked | None = None,
) -> list[str]:
    """Those of ``batch`` whose turn and the turns its context is made from are as first read (``_same``; ``now``:
    the turns ``_to_read`` gives, read again): each run's turns compared once, a turn's being a start of its run's
    (linear in the turns, however long a run), those ``checked`` in an earlier batch taken as they were found then,
    but the run's first. ``checked`` is brought up to date."""
    checked = {} if checked is None else checked
    for key, run in runs.items():
        upto, differs = checked.get(key, (0, False))
        if not _same(first[run[0]], now.get(run[0])):
            upto, differs = 0, True
        elif not differs:
            upto = next(
                (n for n in range(upto, len(run)) if not _same(first[run[n]], now.get(run[n]))), max(upto, len(run))
            )
            differs = upto < len(run)
        checked[key] = (upto, differs)
    out = []
    for t in batch:
        span = wanted[t].turns
        if _same(first[t], now.get(t)) and len(span) <= checked[(id(span.order), span.start)][0]:
            out.append(t)
    return out


def _same(before: dict[str, Any], now: dict[str, Any] | None) -> bool:
    """Whether a turn read again (None: gone) is as it was read first."""
    return now is not None and all(before[k] == now[k] for k in ("role", "content", "seq", "conversation_id"))
