"""Whether an archival insert stored in chunks held a text: its text rebuilt from the chunks as the chunker cut it,
each join the chunks leave open decided by cutting the candidates again with the same chunker.

The chunks alone do not tell every join: at a cut that left no overlap (after a word longer than the overlap, or
inside a word cut into slices) the text had whitespace there (a space or a line end, which the chunker prefers to cut
after) or none; where a run repeats past the overlap several overlaps fit; and neighbouring chunks a long word or run
pasted again left alike may share all of it or be a cut. ``held`` lists every join each join may be (``_options``)
and keeps, between joins that are sure (``_Join.anchor``), only the choices whose text the chunker cuts into exactly
these chunks again (``_window``: depth first, ``_Search``; a run of cuts alone as a path of stretches between
whitespace, ``_Cuts``). Texts that differ only at a cut are often cut alike (a long word cut into slices and the
same slices as words, each filling a chunk): then each is looked in, as it is past the budget (``_CHECKS``,
``_CHARS`` for one insert, ``Budget`` for one forget) or for chunks another chunker cut, so forgetting errs toward
forgetting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .chunking import CHUNK_OVERLAP, _borders, _failure, _most_pieces, _step

_SLICE_OVERLAP = 8  # characters: an overlap starting or ending inside a word (slices of a long word) is no shorter
_CHECKS = 200  # the most texts cut again for one insert; past it, the joins left are kept open (looked in each way)
_CHARS = 250_000  # the most characters cut again for one insert, likewise (a cut of 4,000 characters takes ~35 ms)
TOTAL_CHARS = 2_000_000  # the most characters cut again for one forget, over every insert it looks in (``Budget``)
_CUTS = ("", " ", "\n")  # what a cut with no overlap had between its chunks: nothing (inside a word), whitespace
_SPACES_AT_CUT = _CUTS[1:]  # a line end or not: the chunker prefers to cut after one, so both are cut again
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class _Join:
    """What may follow a chunk: each ``tails`` entry is what the next chunk adds to the text (the next chunk after
    its overlap, or after what a cut had between them)."""

    tails: tuple[str, ...]
    anchor: bool  # one overlap of whole words: the chunker's cut is known, and the next chunk starts at a word
    cut: bool  # a cut with no overlap may be the join: whitespace there or none, which the chunks do not keep


@dataclass
class Budget:
    """What the ``held`` calls of one forget may still spend cutting texts again (characters), and what they spent
    (``checks``: texts cut again). Past it, each join left open is looked in every way it may be."""

    chars: int = TOTAL_CHARS
    checks: int = 0


def held(chunks: Sequence[str], text: str, chunk: Callable[[str], list[str]], budget: Budget | None = None) -> bool:
    """Whether the text ``chunk`` cut into ``chunks`` (in order, as stored) holds ``text``, whitespace compared as
    single spaces. Where more than one text fits the chunks, the ones ``chunk`` does not cut into them are dropped;
    if none or several are left (chunks another model's chunker cut, or texts the chunker cuts alike), every one
    left is looked in, so forgetting errs toward forgetting. Cutting again is bounded for this insert (``_CHECKS``,
    ``_CHARS``) and over the calls sharing ``budget`` (one forget's): past either, the joins left stay open."""
    wanted = " ".join(text.split())
    parts = [c for c in chunks if c.strip()]
    if not wanted or not parts:
        return False
    joins = [_options(before, after) for before, after in zip(parts, parts[1:])]
    pieces: list[tuple[str, ...]] = [(parts[0],), *(j.tails for j in joins)]
    if not _found(pieces, wanted):  # no text the chunks may be holds it: nothing to decide
        return False
    if all(len(p) == 1 for p in pieces):
        return True
    cutter = _Cutter(chunk, Budget() if budget is None else budget)
    decided: list[tuple[str, ...]] = [pieces[0]]
    first = 0  # the first chunk of the run of open joins being decided
    for i in range(len(joins) + 1):
        if i < len(joins) and not joins[i].anchor:
            continue
        decided += _window(parts, joins, first, i, cutter)
        if i < len(joins):
            decided.append(joins[i].tails)  # an anchor: its one tail
        first = i + 1
    return _found(decided, wanted)


def _window(
    parts: Sequence[str], joins: Sequence[_Join], first: int, last: int, cutter: _Cutter
) -> list[tuple[str, ...]]:
    """The joins ``first`` .. ``last - 1`` (between chunks ``first`` .. ``last``, a run that starts and ends at a
    word), decided: one piece, the tails of the choices whose text ``chunk`` cuts into those chunks again (each
    choice when none does); or each join's tails left open, one piece each, when that takes more than ``_CHECKS``
    cuts. The choices are tried in order (``_Search``): a text cut again ends at a word, so a choice is checked once
    a later one puts a word's end after it (a cut with whitespace, an overlap of whole words)."""
    options = [joins[j].tails for j in range(first, last)]
    if all(len(o) == 1 for o in options):
        return options
    try:
        if any(joins[j].cut for j in range(first, last)) and all(
            len(joins[j].tails) == (len(_CUTS) if joins[j].cut else 1) for j in range(first, last)
        ):
            return _Cuts(parts, joins, first, last, cutter).decided()
        found = _Search(parts, options, first, cutter).texts(0, "")
    except _TooMany:
        return options
    return [tuple(dict.fromkeys(found))] if found else options


class _TooMany(Exception):
    """More cuts than ``_CHECKS`` to decide a run of joins."""


@dataclass
class _Search:
    """The choices of a run of joins whose text ``chunk`` cuts into its chunks again, depth first."""

    parts: Sequence[str]
    options: Sequence[tuple[str, ...]]
    first: int
    cutter: _Cutter

    def texts(self, j: int, made: str, empty: int = 0) -> list[str]:
        """The tails (joined) of the choices of joins ``j`` .. that fit, after ``made`` (the tails of those before;
        the last ``empty`` of them add nothing)."""
        if j == len(self.options):
            return [made] if self._cuts_into(j, made, empty) else []
        out: list[str] = []
        fits: bool | None = None  # whether the text up to here, ending at a word, is cut the same (checked once)
        for tail in self.options[j]:
            if tail[:1].isspace():  # the chunk ends at a word's end (a cut with whitespace, an overlap of words)
                fits = self._cuts_into(j, made, empty) if fits is None else fits
                if not fits:
                    continue
            out += self.texts(j + 1, made + tail, empty + 1 if tail == "" else 0)
        return out

    def _cuts_into(self, j: int, made: str, empty: int) -> bool:
        """Whether the text of chunks ``first`` .. ``first + j`` (``made``: the tails after the first) is cut into
        exactly them."""
        return self.cutter.alike(self.parts[self.first] + made, self.parts[self.first : self.first + j + 1], empty)


class _Cuts:
    """A run of joins holding cuts with no overlap, decided: which cuts had whitespace (a word ended there) and which
    none (inside a word cut into slices). Between two cuts with whitespace the chunker's steps depend on that stretch
    alone and the next one's first word, so the choices are a path of stretches, each cut again with the next
    (``_fits``); a cut keeps each choice some whole path makes. The other joins of the run must each be known."""

    def __init__(self, parts: Sequence[str], joins: Sequence[_Join], first: int, last: int, cutter: _Cutter) -> None:
        self.parts, self.joins, self.first, self.last, self.cutter = parts, joins, first, last, cutter
        self.cuts = [j for j in range(first, last) if joins[j].cut]
        self.ends = [first - 1, *self.cuts, last]  # where a stretch may end: before the run, each cut, its end
        self._memo: dict[tuple[int, ...], bool] = {}

    def decided(self) -> list[tuple[str, ...]]:
        if any(len(self.joins[j].tails) != len(_CUTS) for j in self.cuts) or any(
            len(self.joins[j].tails) != 1 for j in range(self.first, self.last) if j not in self.cuts
        ):
            raise _TooMany  # an overlap open beside a cut: left open
        n = len(self.ends)
        before: dict[tuple[int, int], set[int]] = {}  # stretch (x, y) -> the stretches (w, x) it may follow
        for y in range(1, n):
            for x in range(y):
                ways = {w for w in range(x) if (w, x) in before and self._fits(w, x, y)}
                if (x == 0 and self._fits(x, y)) or ways:
                    before[(x, y)] = ways | ({-1} if x == 0 else set())
        on: set[tuple[int, int]] = {(x, n - 1) for x in range(n - 1) if (x, n - 1) in before}
        todo = list(on)
        while todo:
            x, y = todo.pop()
            for w in before[(x, y)] - {-1}:
                if (w, x) not in on:
                    on.add((w, x))
                    todo.append((w, x))
        if not on:
            raise _TooMany  # no text the chunker cuts into these chunks (another chunker's): left open
        out: list[tuple[str, ...]] = []
        for j in range(self.first, self.last):
            if j not in self.cuts:
                out.append(self.joins[j].tails)
                continue
            k = self.ends.index(j)
            inside, *spaces = self.joins[j].tails
            kept = [inside] if any(x < k < y for x, y in on) else []
            kept += spaces if any(y == k for _, y in on) else []
            out.append(tuple(kept))
        return out

    def _stretch(self, x: int, y: int) -> str:
        """The text from after end ``x`` to end ``y``, every cut between them inside a word."""
        a, b = self.ends[x] + 1, self.ends[y]
        return self.parts[a] + "".join(self.joins[j].tails[0] for j in range(a, b))

    def _fits(self, *at: int) -> bool:
        """Whether the stretches between the ends ``at`` (one or two stretches), a space or a line end between them, are cut
        into exactly their chunks."""
        if at not in self._memo:
            stretches = [self._stretch(x, y) for x, y in zip(at, at[1:])]
            end = self.ends[at[-1]]
            empty = 0
            while end - empty > self.ends[at[-2]] + 1 and self.joins[end - empty - 1].tails[0] == "":
                empty += 1
            chunks = self.parts[self.ends[at[0]] + 1 : end + 1]
            glues = _SPACES_AT_CUT if len(stretches) > 1 else _SPACES_AT_CUT[:1]  # one stretch: no whitespace
            self._memo[at] = any(self.cutter.alike(glue.join(stretches), chunks, empty) for glue in glues)
        return self._memo[at]


@dataclass
class _Cutter:
    """The embedder's chunker, and what one ``held`` call has spent cutting texts again (``_CHECKS``, ``_CHARS``)
    and what its forget may still spend (``budget``)."""

    chunk: Callable[[str], list[str]]
    budget: Budget
    checks: int = 0
    chars: int = 0

    def alike(self, text: str, chunks: Sequence[str], empty: int = 0) -> bool:
        """Whether ``text`` is cut into ``chunks``; its last ``empty`` chunks add nothing to the one before (the
        chunker makes them only when more text follows), so they are not looked for. Past the budget: ``_TooMany``."""
        if self.checks >= _CHECKS or self.chars + len(text) > _CHARS or len(text) > self.budget.chars:
            raise _TooMany
        self.checks += 1
        self.chars += len(text)
        self.budget.chars -= len(text)
        self.budget.checks += 1
        return self.chunk(text) == list(chunks[: len(chunks) - empty])


def _options(before: str, after: str) -> _Join:
    """Every tail ``after`` may add to a text ending with ``before`` (consecutive chunks as stored): after each run
    ``after`` starts with and ``before`` ends with that the chunker may have kept as their overlap; after a cut with
    no overlap (``_CUTS``), when ``before``'s last word may hold more pieces than the overlap or it is one word."""
    overlaps = [k for k in _borders(before, after) if _may_overlap(before, after, k)]
    if after == before:  # the same chunk again (a long word left its start no room to move on), or a repeated run
        overlaps.append(len(after))
    tails = [after[k:] for k in overlaps]
    words = before.split()
    # a cut whenever ``before``'s last word may be longer than the overlap, overlaps or not: neighbouring chunks a
    # repeated long word or run left alike share all of it, yet the chunker may have cut between them (re-chunking
    # decides which)
    cut = len(words) < 2 or _most_pieces(words[-1]) > CHUNK_OVERLAP
    if cut:
        tails += [glue + after for glue in _CUTS]
    anchor = (
        len(tails) == 1
        and len(overlaps) == 1
        and before[len(before) - overlaps[0] - 1].isspace()
        and after[overlaps[0] : overlaps[0] + 1].isspace()
    )
    return _Join(tuple(dict.fromkeys(tails)), anchor, cut)


def _may_overlap(before: str, after: str, k: int) -> bool:
    """Whether ``after[:k]`` (which ``before`` ends with) may be the overlap the chunker kept (all of ``after`` too:
    a chunk that adds nothing, made where a long word left no room), starts and ends at words unless it is as long as
    a slice's overlap is, and is not too short to be all of it (the word before it would have fitted: a word, with
    the whitespace after it, is at most its UTF-8 bytes + 2 pieces, ``chunking._most_pieces``)."""
    at = len(before) - k
    if k > len(after) or at < 1:
        return False
    inside = not before[at - 1].isspace() or (k < len(after) and not after[k].isspace())
    if inside and k < _SLICE_OVERLAP:
        return False
    head = before[:at].rstrip() if before[at - 1].isspace() else before[:at]  # up to the end of the word before
    words = head.split()
    if len(words) < 2:  # that word may be the chunk's first, which the overlap always leaves out
        return True
    overlap = " ".join(before[at:].split())
    return _most_pieces(overlap) + _most_pieces(words[-1]) > CHUNK_OVERLAP


_Moves = dict[tuple[frozenset[int], str], frozenset[int]]


def _found(pieces: Sequence[tuple[str, ...]], wanted: str) -> bool:
    """Whether some text made of one choice of each piece (in order) holds ``wanted``: within a choice with ``in``,
    and across pieces with a Knuth-Morris-Pratt matcher carried over every choice at once, over the ``len(wanted)``
    characters at each end of a choice only."""
    fail = _failure(wanted)
    size = len(wanted)
    moves: _Moves = {}  # the sets of states read before: a character read from one is looked up, not worked out again
    start: frozenset[int] = frozenset((0,))
    states = start
    for piece in pieces:
        after: set[int] = set()
        for choice in piece:
            flat = _SPACES.sub(" ", choice)
            if wanted in flat:
                return True
            matched, end = _run(wanted, fail, states, flat[:size], moves)
            if matched:
                return True
            if len(flat) > size:  # the state after a long choice depends only on its end
                matched, end = _run(wanted, fail, start, flat[-size:], moves)
            after |= end
        states = frozenset(after | {0})
    return False


def _run(wanted: str, fail: list[int], states: frozenset[int], text: str, moves: _Moves) -> tuple[bool, frozenset[int]]:
    """Read ``text`` from each of ``states``: whether ``wanted`` was completed, and the states after it (each move
    from a set of states worked out once per ``moves``)."""
    done = len(wanted)
    for ch in text:
        key = (states, ch)
        following = moves.get(key)
        if following is None:
            following = moves[key] = frozenset(_step(wanted, fail, q, ch) for q in states)
        states = following
        if done in states:
            return True, states
    return False, states
