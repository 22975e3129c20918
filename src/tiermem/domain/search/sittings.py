"""Sittings: the turns of one conversation logged less than an hour apart, searched as one document.

A question is often answered by a turn whose own words barely match it, in a sitting whose other turns do ("What
did Caroline do after the parade?" and a sitting about the parade). ``SittingIndex`` holds one agent's sittings
as bags of words and ranks them for a query by BM25 (k1 1.2, b 0.75; lower-cased words, ``query.STOPWORDS`` left
out, each cut to its stem by ``stem``: "vacationed" and "vacations" count as "vacation"); the ranker reads the rank
of each candidate's sitting (``Context.sittings``, feature ``sitting``), and the search takes the deeper rows of the
best sittings into its pool (``pool.pooled``). Measured leave-one-conversation-out on the LoCoMo dev split
(``python -m bench locomo``).

The index is built from the stored turns (content, conversation, time, log order) and kept up to date as turns
arrive: ``Archive`` reads only the turns logged after the newest one it holds whenever the table changed, and
rebuilds it whole when the count says rows were deleted or logged out of order. Nothing is stored: a store of any
age gets its index at its first search in a process, or before it: a server builds its agent's in the background
once the archive is open (``Archive.warm_sittings``, ``Memory.warm``). Pure Python, no I/O here.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import cjk
from .query import STOPWORDS  # left out of the words BM25 counts
from .ranking import SESSION_US

K1, B = 1.2, 0.75
GRAMS = 64  # bigrams (``cjk.grams``: Chinese, Thai, ... words) one text counts at most (``stems``)
log = logging.getLogger(__name__)
_VOWEL = re.compile(r"[aeiouy]")


def stem(word: str) -> str:
    """A light English suffix stripper (lower-case input): plural and third-person "s", "ies"/"ied", "ed", "ing"
    (with a doubled final consonant undone: "stopped" -> "stop"), a final "e", and a final "y" after a consonant
    as "i", so that "vacationed" / "vacations" / "vacation", "dancing" / "danced" / "dance" and "studies" /
    "studied" / "study" meet. Words of three letters or fewer, and words with digits, are kept as they are."""
    w = word
    if len(w) <= 3 or not w.isalpha():
        return w
    if w.endswith(("ies", "ied")) and len(w) > 4:
        return w[:-3] + "i"
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and _VOWEL.search(w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    if w.endswith("y") and len(w) > 3 and w[-2] not in "aeiou":
        w = w[:-1] + "i"
    return w


def stems(text: str) -> list[str]:
    """The words BM25 counts: ``query.terms`` (lower-cased, stopwords left out), each as its ``stem``; but of the
    Chinese, Japanese and Korean words, their bigrams each once, and at most ``GRAMS`` of them (the first): a turn of
    200 such characters would otherwise count about 190 words, not the dozen of a turn as long in English. Measured
    on 20,000 Chinese turns of 150 characters (``python -m bench cjk``), the index of every bigram: 1.9 s CPU, 105 MB;
    of at most 64 a turn: 0.85 s, 80 MB (whole runs, before bigrams: 0.4 s, 18 MB, and no Chinese query matched)."""
    out: list[str] = []
    grams: dict[str, None] = {}
    for w in cjk.WORD.findall(text):
        w = w.lower()
        if not cjk.has_grams(w):
            if w not in STOPWORDS:
                out.append(stem(w) if len(w) > 3 else w)
        elif len(grams) < GRAMS:
            for g in cjk.grams(w[: 8 * GRAMS]):
                if g not in STOPWORDS:
                    grams[g if len(g) <= 3 else stem(g)] = None  # (``stem`` keeps a word that short as it is)
    return out + list(grams)[:GRAMS]


@dataclass(eq=False)
class _Sitting:
    number: int  # its index in SittingIndex.sittings
    conversation: str
    start: int
    end: int
    tf: Counter[str] = field(default_factory=Counter)
    length: int = 0
    first_seq: int | None = None  # the log order of the turn that opened it (None: not known)
    seqs: array[int] = field(default_factory=lambda: array("q"))  # its turns' log order, as added (-1: not known)
    ordered: bool = True  # whether ``seqs`` only grows (then a turn's place is found by bisection)
    ids: list[str] = field(default_factory=list)  # its turns' ids, beside ``seqs`` ("": not known)


class SittingIndex:
    """One agent's sittings, in the order rows were added: ``add`` turns oldest first (per conversation)."""

    def __init__(self) -> None:
        self.sittings: list[_Sitting] = []
        self.df: Counter[str] = Counter()
        self.total = 0  # words in all sittings
        self.rows = 0  # turns added
        self.newest_seq: int | None = None
        self.postings: dict[str, list[_Sitting]] = {}  # word -> the sittings that hold it
        self._starts: dict[str, list[int]] = {}  # conversation -> its sittings' start times, in order
        self._ids: dict[str, list[int]] = {}  # conversation -> its sittings' indices, in the same order

    def add(self, rows: Iterable[Mapping[str, Any]]) -> bool:
        """Add turns (``content``, ``conversation_id``, ``created_us``, ``seq``), sorted by time then seq. False
        (nothing half-added: the caller rebuilds) if a turn is older than its conversation's newest sitting."""
        rows = list(rows)
        for row in rows:
            conversation, at = str(row.get("conversation_id") or ""), int(row["created_us"])
            ids = self._ids.get(conversation)
            if ids and at < self.sittings[ids[-1]].start:
                return False
        for row in rows:
            self._add_one(row)
        return True

    def _add_one(self, row: Mapping[str, Any]) -> None:
        conversation, at = str(row.get("conversation_id") or ""), int(row["created_us"])
        ids = self._ids.setdefault(conversation, [])
        last = self.sittings[ids[-1]] if ids else None
        seq = row.get("seq")
        if last is None or at - last.end > SESSION_US:
            last = _Sitting(len(self.sittings), conversation, at, at, first_seq=seq if isinstance(seq, int) else None)
            ids.append(len(self.sittings))
            self._starts.setdefault(conversation, []).append(at)
            self.sittings.append(last)
        last.end = max(last.end, at)
        place = seq if isinstance(seq, int) else -1
        if last.seqs and place <= last.seqs[-1]:
            last.ordered = False
        last.seqs.append(place)
        last.ids.append(str(row.get("id") or ""))
        words = stems(str(row.get("content") or ""))
        for w in set(words):
            if w not in last.tf:  # new to the sitting (not a set of the sitting's words per turn: it grows)
                self.df[w] += 1
                self.postings.setdefault(w, []).append(last)
        last.tf.update(words)
        last.length += len(words)
        self.total += len(words)
        self.rows += 1
        if isinstance(seq, int) and (self.newest_seq is None or seq > self.newest_seq):
            self.newest_seq = seq

    def ranks(self, query: str) -> dict[int, int]:
        """Sitting index -> its rank (1 = best) by BM25 against ``query``; sittings sharing no word are left out."""
        words = set(stems(query))
        if not words or not self.sittings:
            return {}
        n, average = len(self.sittings), max(self.total / len(self.sittings), 1.0)
        idf = {w: math.log(1 + (n - self.df[w] + 0.5) / (self.df[w] + 0.5)) for w in words if self.df[w]}
        scores: dict[int, float] = {}
        for w, weight in idf.items():
            for s in self.postings[w]:
                norm = K1 * (1 - B + B * s.length / average)
                scores[s.number] = scores.get(s.number, 0.0) + weight * s.tf[w] * (K1 + 1) / (s.tf[w] + norm)
        order = sorted((i for i in scores if scores[i] > 0), key=lambda i: (-scores[i], i))
        return {i: r for r, i in enumerate(order, start=1)}

    def sitting_of(self, conversation: str | None, created_us: int) -> int | None:
        """The index of the sitting a turn of ``conversation`` written at ``created_us`` belongs to, if any."""
        key = str(conversation or "")
        starts = self._starts.get(key)
        if not starts:
            return None
        k = bisect.bisect_right(starts, created_us) - 1
        if k < 0:
            return None
        i = self._ids[key][k]
        return i if created_us <= self.sittings[i].end else None

    def opens(self, conversation: str | None, created_us: int, seq: int | None) -> bool:
        """Whether the turn of ``conversation`` written at ``created_us`` and logged as ``seq`` is the first turn of
        its sitting (False when its log order is not known)."""
        i = self.sitting_of(conversation, created_us)
        if i is None or seq is None:
            return False
        sitting = self.sittings[i]
        return sitting.first_seq == seq and sitting.start == created_us

    def position(self, conversation: str | None, created_us: int, seq: int | None) -> tuple[int, int] | None:
        """(the index of its sitting, its place among the sitting's turns) of the turn of ``conversation`` written at
        ``created_us`` and logged as ``seq``; None if the index does not hold it (or its log order is not known). The
        place is in log order, or in time order in a sitting whose turns were logged out of time order."""
        i = self.sitting_of(conversation, created_us)
        if i is None or seq is None:
            return None
        seqs = self.sittings[i].seqs
        if self.sittings[i].ordered:
            k = bisect.bisect_left(seqs, seq)
            return (i, k) if k < len(seqs) and seqs[k] == seq else None
        try:
            return i, seqs.index(seq)
        except ValueError:
            return None

    def neighbours(self, conversation: str | None, created_us: int, seq: int | None, reach: int) -> list[str]:
        """The ids of the turns logged just before and after this one in its sitting, the nearest first (one before,
        one after, two before, ...), at most ``reach`` on each side: a turn's sitting links (``domain.links``). The
        order is the sitting's (``position``): log order, or time order in a sitting logged out of time order."""
        place = self.position(conversation, created_us, seq)
        if place is None:
            return []
        ids, k = self.sittings[place[0]].ids, place[1]
        out = []
        for step in range(1, reach + 1):
            for j in (k - step, k + step):
                if 0 <= j < len(ids) and ids[j]:
                    out.append(ids[j])
        return out


@dataclass(frozen=True)
class SittingRanks:
    """What the ranker reads: the rank of each sitting for this query, and where each turn's sitting is."""

    index: SittingIndex
    ranks: Mapping[int, int]

    def rank_of(self, conversation: str | None, created_us: int | None) -> int | None:
        if not isinstance(created_us, int):
            return None
        i = self.index.sitting_of(conversation, created_us)
        return self.ranks.get(i) if i is not None else None

    def opens(self, conversation: str | None, created_us: int | None, seq: int | None) -> bool:
        return isinstance(created_us, int) and self.index.opens(conversation, created_us, seq)

    def position(self, conversation: str | None, created_us: int | None, seq: int | None) -> tuple[int, int] | None:
        return self.index.position(conversation, created_us, seq) if isinstance(created_us, int) else None


MAX_AGENTS = 64  # agents whose sittings a process keeps
MAX_ROWS = 200_000  # an agent with more turns gets no sitting feature (its words would take too much memory)
MAX_LOGGED = 10_000  # turns logged by this process a SittingCache keeps per agent until a refresh takes them
TURN_COLUMNS = ("id", "content", "conversation_id", "created_us", "seq")  # what a sitting needs of a turn


class SittingCache:
    """The sittings of the agents searched most recently, each brought up to date with the table before use.

    ``refresh(agent, version, count, read)``: ``version`` is the messages table's version (nothing is read while
    it is unchanged), ``count()`` the agent's turns now, ``read(seq_from)`` its turns with ``seq >= seq_from``
    (``None``: all), sorted by time then seq. Turns logged since the last refresh are added; a count that does not
    add up (turns deleted, or logged with an older seq by another process) rebuilds the index from every turn.

    ``logged(agent, rows)``: turns this process has just stored. A refresh takes the turns it misses from these
    when they are exactly what the table gained (the count adds up), and reads the table only otherwise: a search
    right after a turn is logged (what a host's hooks do every prompt) reads nothing but the count. A table that
    changed with nothing logged here is read as before. Turns forgotten by this process drop the agent's index
    (``forget``). (Left undetected: another process deleting as many of the agent's turns as it logged since the last
    refresh; the index then ranks with a few stale turns' word counts until its next rebuild. It holds no text a
    search returns: hits and linked turns are read from the table.) Only the newest ``MAX_LOGGED`` per agent are
    kept; a refresh that misses older ones reads them.
    """

    def __init__(self) -> None:
        self._agents: dict[str, tuple[object, SittingIndex | None]] = {}
        self._logged: dict[str, list[dict[str, Any]]] = {}
        self._logged_lock = threading.Lock()  # ``logged`` comes from writing threads, ``refresh`` from searching ones

    def logged(self, agent: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """``rows`` (id, content, conversation_id, created_us, seq) are stored in the messages table."""
        kept = [{k: r.get(k) for k in TURN_COLUMNS} for r in rows]
        with self._logged_lock:
            mine = self._logged.setdefault(agent, [])
            mine.extend(kept)
            del mine[:-MAX_LOGGED]

    def forget(self, agent: str) -> None:
        """Drop everything kept of ``agent``: the turns logged here and its index, whose word counts would still hold
        the forgotten turns' words (the next refresh rebuilds it from what the table still holds)."""
        with self._logged_lock:
            self._logged.pop(agent, None)
        self._agents.pop(agent, None)

    def _logged_since(self, agent: str, seq_from: int) -> list[dict[str, Any]]:
        """The turns logged here with ``seq >= seq_from``, by time then seq (older ones are dropped: indexed)."""
        with self._logged_lock:
            mine = [r for r in self._logged.get(agent, ()) if isinstance(r["seq"], int) and r["seq"] >= seq_from]
            if mine:
                self._logged[agent] = mine
            else:
                self._logged.pop(agent, None)
        return sorted(mine, key=lambda r: (r["created_us"], r["seq"]))

    def refresh(
        self, agent: str, version: object, count: Callable[[], int], read: Callable[[int | None], list[dict[str, Any]]]
    ) -> SittingIndex | None:
        known = self._agents.pop(agent, None)
        if known is not None and known[0] == version:
            self._agents[agent] = known
            return known[1]
        index = known[1] if known is not None else None
        total = int(count())
        if total > MAX_ROWS:
            index = None
        elif index is None or index.rows > total:
            index = self._build(agent, read(None))
        else:
            since = None if index.newest_seq is None else index.newest_seq + 1
            newer = self._logged_since(agent, since) if since is not None else []
            if not newer or index.rows + len(newer) != total:  # not only this process's turns: read what it gained
                newer = read(since)
            if index.rows + len(newer) != total or not index.add(newer):
                index = self._build(agent, read(None))
        self._agents[agent] = (version, index)
        while len(self._agents) > MAX_AGENTS:
            del self._agents[next(iter(self._agents))]
        return index

    @staticmethod
    def _build(agent: str, rows: list[dict[str, Any]]) -> SittingIndex:
        index = SittingIndex()
        index.add(rows)  # sorted by time: every turn is at or after its conversation's sittings
        log.debug("built the sittings of agent %s from %d turns", agent, index.rows)
        return index
